"""The variance split per config (within a worker process, between processes), and the
demo's wall time before and after the plan of timed iterations per round.

`split` reads run files (a state folder's a.json and b.json, or any run files) and prints
per config what abdiff.run.iterations estimates from all their ok rounds pooled: the
within-process SD of one iteration (as it enters a round's median), the process-to-
process SD beyond it, the rounds, the median latency, and the count each round timed
(and the plan's count, where the run file has one).

`compare` builds the demo repository (abdiff.demo.builder) and runs `abdiff main..pr
--configs mtp` alternately with the abdiff of an old commit (its abdiff/ exported with
`git archive` and put first on PYTHONPATH: the parent's plan, looks and statistics are
that commit's) and with this checkout's, `--runs` times each, one cache shared (the
checkouts are made once); prints each run's wall time, rounds per side, worker
processes and verdicts.

    python lab/iterations.py split ~/.cache/abdiff/runs/KEY
    python lab/iterations.py compare --old baeee89 --runs 3      # quiet machine
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from abdiff.demo.builder import build_demo_repo
from abdiff.run.iterations import MEDIAN_EFFICIENCY, variance_split
from abdiff.store.records import load_run_file

HERE = Path(__file__).resolve().parent


def run_files(paths: list[Path]) -> list[Path]:
    return [f for p in paths for f in (sorted(p.glob("[ab].json")) if p.is_dir() else [p])]


def split(paths: list[Path]) -> None:
    runs = [load_run_file(p) for p in run_files(paths)]
    plan = next((r.iterations for r in runs if r.iterations), None)
    print(f"{'config':32} {'rounds':>6} {'median us':>10} {'within/it':>9} {'between':>8} "
          f"{'counts':>14} {'planned':>7}")
    for config in runs[0].configs:
        sides = [c for run in runs if (c := run.config(config.id)) is not None]
        rounds = [r for c in sides for r in c.rounds if r.status == "ok" and r.latency_us]
        found = variance_split([[r.latency_us for r in c.rounds if r.status == "ok"]
                                for c in sides])
        if found is None:
            print(f"{config.id:32} {len(rounds):6d}  too few rounds")
            continue
        counts = Counter(len(r.latency_us) for r in rounds)
        shown = ",".join(f"{n}x{k}" for n, k in sorted(counts.items()))
        planned = plan.configs.get(config.id) if plan else None
        median = float(np.median([v for r in rounds for v in r.latency_us]))
        print(f"{config.id:32} {found.rounds:6d} {median:10.1f} "
              f"{math.sqrt(found.within / MEDIAN_EFFICIENCY):9.2%} "
              f"{math.sqrt(found.between):8.2%} {shown:>14} "
              f"{planned.run_times if planned else '-':>7}")
    if plan:
        print(f"plan: from round {plan.from_round + 1}, the suite's {plan.suite_run_times}")


def old_abdiff(rev: str, folder: Path) -> Path:
    """abdiff/ of commit `rev`, exported into `folder` (first on PYTHONPATH)."""
    archive = folder / "old.tar"
    subprocess.run(["git", "archive", "-o", str(archive), rev, "abdiff"], cwd=HERE.parent,
                   check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "old", filter="data")
    return folder / "old"


def one_run(repo: Path, cache: Path, pythonpath: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = cache / "result.json"
    started = time.perf_counter()
    # run from the cache's folder: `python -m` puts its working folder first on sys.path
    done = subprocess.run([sys.executable, "-m", "abdiff.cli", "main..pr", "--configs", "mtp",
                           "--repo", str(repo), "--cache-dir", str(cache), "--json", str(out),
                           "--quiet"], env=env, capture_output=True, text=True, check=False,
                          cwd=cache.parent)
    wall = time.perf_counter() - started
    result = json.loads(out.read_text()) if out.exists() else {}
    verdicts = Counter(f"{c['verdict']}/{c['latency']['verdict']}"
                       for c in result.get("configs", []))
    rounds = Counter(c["latency"]["rounds_b"] for c in result.get("configs", []))
    planned = Counter(c["iterations"]["run_times"] for c in result.get("configs", [])
                      if c.get("iterations"))
    time_split = result.get("time") or {}
    workers = sum(s.get("workers", 0) for s in (time_split.get("sides") or {}).values())
    where = subprocess.run([sys.executable, "-c", "import abdiff; print(abdiff.__file__)"],
                           env=env, capture_output=True, text=True, cwd=cache.parent)
    return {"abdiff_from": where.stdout.strip(), "exit": done.returncode,
            "wall_s": round(wall, 1), "workers": workers,
            "rounds_b": dict(sorted(rounds.items())), "verdicts": dict(sorted(verdicts.items())),
            "planned": dict(sorted(planned.items())),
            "error": done.stderr.strip().splitlines()[-1:] if done.returncode > 1 else []}


def compare(old: str, runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="abdiff-iterations-") as tmp:
        folder = Path(tmp)
        repo = folder / "demo"
        build_demo_repo(repo)
        exported = old_abdiff(old, folder)
        for n in range(runs):
            for name, path in ((f"old {old}", exported), ("new", None)):
                row = one_run(repo, folder / "cache", path)
                print(json.dumps({"run": n, "abdiff": name, **row}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    reading = sub.add_parser("split", help="the variance split per config of run files")
    reading.add_argument("paths", nargs="+", type=Path, help="state folders or run files")
    timing = sub.add_parser("compare", help="the demo's wall time, old abdiff against this")
    timing.add_argument("--old", required=True, help="the commit of the old abdiff")
    timing.add_argument("--runs", type=int, default=3, help="runs of each, alternating")
    args = parser.parse_args()
    if args.command == "split":
        split(args.paths)
    else:
        compare(args.old, args.runs)


if __name__ == "__main__":
    main()
