"""Whether a side's workers share an offset that fresh processes would not: A/A runs of
the demo with each way of starting workers, and how far apart the two sides' rounds
lie against their own spread.

If every worker process were an independent draw, the Welch t of a config's two sides
(log round latencies, A against B, in an A/A or in configs a change leaves alone) would
fall below p = 0.05 in 5% of config-runs and below 0.01 in 1%. Workers forked from one
server per side share its address layout, hash seed and heap: an effect of that state
is the same in all of a side's rounds and shows as too many small p's, and as a spread
of the side means larger than their rounds allow (the ratio of the variance of the side
difference to its expected variance, `dispersion`: 1 for independent processes).

    python lab/side_effect.py --runs 10 --modes fork,off     # about 12 minutes, 2-core VM
    python lab/side_effect.py --runs 10 --range main..pr --configs lab/data/trtllm-mtp.yaml
    python lab/side_effect.py --runs 2 --rounds 4 --configs lab/data/small-mtp.yaml

Modes are values of `--prestart`; runs alternate between them (fork, off, fork, ...),
each with its own seed. Prints one line per mode: config-runs, share of p < 0.05 and
< 0.01, dispersion, wall per run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats
from tabulate import tabulate

from abdiff.store.records import load_run_file
from abdiff.verdict import stats


def side_rounds(path: Path) -> dict[str, np.ndarray]:
    """Log round latencies per config of one side's run file."""
    out = {}
    for config in load_run_file(path).configs:
        medians = [stats.round_summary(r.latency_us) for r in config.rounds
                   if r.status == "ok" and r.latency_us]
        if len(medians) >= 3:
            out[config.id] = np.log(np.asarray(medians))
    return out


def welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(p, squared difference over its expected variance) of two sides' log rounds."""
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = b.mean() - a.mean()
    t = diff / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return float(2 * scipy_stats.t.sf(abs(t), df)), float(t * t * (df - 2) / df)


def one_run(repo: Path, cache: Path, mode: str, seed: int, args: argparse.Namespace
            ) -> tuple[list[tuple[float, float]], float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "abdiff.cli", args.range, "--repo", str(repo), "--configs",
         args.configs, "--rounds", str(args.rounds), "--max-rounds", str(args.rounds),
         "--prestart", mode, "--seed", str(seed), "--cache-dir", str(cache), "--quiet",
         "--format", "markdown", "--output", str(cache / "report.md")],
        capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"side_effect.py: abdiff exited {proc.returncode}: {proc.stderr[-500:]}")
    folder = max((cache / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    a, b = side_rounds(folder / "a.json"), side_rounds(folder / "b.json")
    return [welch(a[c], b[c]) for c in sorted(a.keys() & b.keys())], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="A/A runs per mode")
    parser.add_argument("--rounds", type=int, default=8, help="rounds per side (fixed)")
    parser.add_argument("--modes", default="fork,off", help="--prestart values, comma-separated")
    parser.add_argument("--configs", default="mtp")
    parser.add_argument("--range", default="pr..pr",
                        help="A..B; main..pr with --configs lab/data/trtllm-mtp.yaml: the "
                             "configs the demo's change leaves alone")
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()
    modes = args.modes.split(",")
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    walls: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        repo, cache = Path(tmp) / "demo", Path(tmp) / "cache"
        subprocess.run([sys.executable, "-m", "abdiff.cli", "demo", "init", str(repo)],
                       check=True, capture_output=True)
        cache.mkdir()
        for i in range(args.runs):
            for mode in modes:
                rows, wall = one_run(repo, cache, mode, args.seed + i, args)
                results[mode] += rows
                walls[mode].append(wall)
                small = sum(p < 0.01 for p, _ in rows)
                print(f"run {i} {mode}: {wall:.1f} s, p<0.01 in {small} of {len(rows)}",
                      flush=True)
    table = []
    for mode in modes:
        p = np.array([r[0] for r in results[mode]])
        ratio = np.array([r[1] for r in results[mode]])
        table.append([mode, len(p), f"{np.mean(p < 0.05):.1%}", f"{np.mean(p < 0.01):.1%}",
                      f"{np.mean(ratio):.2f}", f"{np.median(walls[mode]):.1f}"])
    print(tabulate(table, headers=["--prestart", "config-runs", "p < 0.05", "p < 0.01",
                                   "dispersion", "wall/run s"]))


if __name__ == "__main__":
    main()
