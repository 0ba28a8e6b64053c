"""Wall time of `abdiff main..pr --configs mtp` on the demo, and where it goes.

Runs the command twice with default settings in a fresh demo repository and
cache, then reads the worker logs (each event carries a wall-clock stamp) to
split the first run's time into: checkouts, worker start (Python + torch
import), per-config set-up/warm-up/profiling, timed iterations, and the rest
(abdiff's own scheduling, statistics, reports). The second run must create no
new checkout. Prints a table; numbers go to docs/performance.md.

    python benchmarks/pipeline.py [--range main..pr] [--suite mtp] [--keep DIR]
    python benchmarks/pipeline.py --state STATE_DIR --wall SECONDS   # a recorded run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from abdiff.demo.builder import build_demo_repo


def run_abdiff(repo: Path, cache: Path, rev_range: str, suite: str, extra: list[str]) -> tuple[
        int, float]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "abdiff.cli", rev_range, "--configs", suite, "--repo", str(repo),
         "--cache-dir", str(cache), "--json", str(cache / "result.json"), "--quiet", *extra],
        stdout=subprocess.DEVNULL, check=False)
    return done.returncode, time.perf_counter() - start


def breakdown(state: Path) -> dict[str, float]:
    """Seconds spent in each part of the workers' lives, summed over all workers."""
    parts = {"worker start (python + torch import)": 0.0, "config set-up, warm-up, profiling": 0.0,
             "timed iterations": 0.0, "workers": 0}
    for job in sorted(state.glob("logs/*/worker*/job.json")):
        spawned = job.stat().st_mtime
        events = [json.loads(line) for line in (job.parent / "records.jsonl").read_text()
                  .splitlines() if line.strip()]
        parts["workers"] += 1
        env = next((e for e in events if e["event"] == "env"), None)
        if env is None:
            continue
        parts["worker start (python + torch import)"] += env["t"] - spawned
        starts = {e["id"]: e["t"] for e in events if e["event"] == "start"}
        for event in events:
            if event["event"] == "done" and event["id"] in starts:
                timed = sum(event["record"]["latency_us"]) / 1e6
                parts["timed iterations"] += timed
                parts["config set-up, warm-up, profiling"] += event["t"] - starts[event["id"]] \
                    - timed
    return parts


def breakdown_table(parts: dict[str, float], wall: float) -> str:
    """`breakdown` as shares of the run's wall time; the rest is abdiff's own."""
    parts = dict(parts)
    workers = int(parts.pop("workers"))
    rest = wall - sum(parts.values())
    rows = [[name, f"{seconds:.1f}", f"{100 * seconds / wall:.0f}%"]
            for name, seconds in [*parts.items(), ("abdiff itself, checkouts, waits", rest)]]
    return (f"{workers} worker processes, {wall:.1f} s wall\n"
            + tabulate(rows, headers=["part of the run", "seconds", "share"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--range", default="main..pr")
    parser.add_argument("--suite", default="mtp")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    parser.add_argument("--state", type=Path,
                        help="only split the wall time of this recorded run's state folder")
    parser.add_argument("--wall", type=float, help="that run's wall time in seconds")
    parser.add_argument("abdiff_args", nargs="*", help="extra abdiff options (after --)")
    args = parser.parse_args()
    if args.state:
        if args.wall is None:
            parser.error("--state needs --wall SECONDS (the run's wall time)")
        print(breakdown_table(breakdown(args.state), args.wall))
        return 0
    work = args.keep or Path(tempfile.mkdtemp(prefix="abdiff-bench-"))
    repo, cache = work / "demo", work / "cache"
    build_demo_repo(repo)

    code, first = run_abdiff(repo, cache, args.range, args.suite, args.abdiff_args)
    checkouts = sorted(p.name for p in (cache / "checkouts").glob("*/*") if p.is_dir())
    state = next((cache / "runs").iterdir())
    parts = breakdown(state)
    result = json.loads((cache / "result.json").read_text())
    rounds = [max(c["latency"]["rounds_a"], c["latency"]["rounds_b"]) for c in result["configs"]]

    code2, second = run_abdiff(repo, cache, args.range, args.suite, args.abdiff_args)
    checkouts2 = sorted(p.name for p in (cache / "checkouts").glob("*/*") if p.is_dir())

    print(f"abdiff {args.range} --configs {args.suite}: exit {code}, {first:.1f} s wall, "
          f"rounds per config {min(rounds)}..{max(rounds)}, verdicts {result['summary']}")
    print(breakdown_table(parts, first))
    print(f"second run: exit {code2}, {second:.1f} s; checkouts before {len(checkouts)}, "
          f"after {len(checkouts2)} (new: {sorted(set(checkouts2) - set(checkouts))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
