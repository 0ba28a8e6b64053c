"""Wall time of `abdiff main..pr --configs mtp` on the demo, and where it goes.

Runs the command twice with default settings in a fresh demo repository and
cache, then reads the worker logs (each event carries a wall-clock stamp) to
split each run's time into: worker start (Python + torch import), per-config
set-up (run pack, facts, graph capture), warm-up, timed iterations, the kernel
capture pass, the time between one worker's last event and the next worker's
job (its exit, abdiff reading its records and handing over the next job), and
the rest (abdiff's own scheduling, statistics, reports,
checkouts). The timed share of the wall time is printed for every run. The
second run must create no new checkout. Numbers go to docs/performance.md.

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


START = "worker start (python + torch import)"
SET_UP = "config set-up (run pack, facts, graph capture)"
WARM_UP = "warm-up"
TIMED = "timed iterations"
CAPTURE = "kernel capture pass"
BETWEEN = "between workers (exit, next job handed over)"


def breakdown(state: Path) -> dict[str, float]:
    """Seconds spent in each part of the workers' lives, summed over all workers."""
    parts = dict.fromkeys((START, SET_UP, WARM_UP, TIMED, CAPTURE, BETWEEN), 0.0)
    parts["workers"] = 0
    jobs = sorted(state.glob("logs/*/*/worker*/job.json"), key=lambda p: p.stat().st_mtime)
    last_event = None  # the previous worker's last logged event: from then on it only exits
    for job in jobs:
        spawned = job.stat().st_mtime
        if last_event is not None:
            parts[BETWEEN] += max(0.0, spawned - last_event)
        events = [json.loads(line) for line in (job.parent / "records.jsonl").read_text()
                  .splitlines() if line.strip()]
        parts["workers"] += 1
        last_event = max((e["t"] for e in events), default=None)
        env = next((e for e in events if e["event"] == "env"), None)
        if env is None:
            continue
        parts[START] += env["t"] - spawned
        starts = {e["id"]: e["t"] for e in events if e["event"] == "start"}
        done_at = env["t"]
        for event in events:
            if event["event"] == "done" and event["id"] in starts:
                record = event["record"]
                timed = sum(record["latency_us"]) / 1e6
                warmup = (record.get("warmup") or {}).get("seconds", 0.0)
                parts[TIMED] += timed
                parts[WARM_UP] += warmup
                parts[SET_UP] += event["t"] - starts[event["id"]] - timed - warmup
                done_at = event["t"]
        captures = [e["t"] for e in events if e["event"] == "kernels"]
        if captures:  # the pass starts after the last timed config (or the env line)
            parts[CAPTURE] += max(captures) - done_at
    return parts


def breakdown_table(parts: dict[str, float], wall: float) -> str:
    """`breakdown` as shares of the run's wall time; the rest is abdiff's own."""
    parts = dict(parts)
    workers = int(parts.pop("workers"))
    rest = wall - sum(parts.values())
    rows = [[name, f"{seconds:.1f}", f"{100 * seconds / wall:.1f}%"]
            for name, seconds in [*parts.items(), ("abdiff itself, checkouts, waits", rest)]]
    return (f"{workers} worker processes, {wall:.1f} s wall, timed share "
            f"{100 * parts[TIMED] / wall:.1f}%\n"
            + tabulate(rows, headers=["part of the run", "seconds", "share"]))


def run_summary(label: str, code: int, wall: float, result_path: Path) -> str:
    result = json.loads(result_path.read_text())
    rounds = [max(c["latency"]["rounds_a"], c["latency"]["rounds_b"]) for c in result["configs"]]
    return (f"{label}: exit {code}, {wall:.1f} s wall, rounds per config "
            f"{min(rounds, default=0)}..{max(rounds, default=0)}, timing "
            f"{result['summary'].get('timing')}, verdicts {result['summary']}")


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
    states = sorted((cache / "runs").glob("*/state.json"))
    if not states or not (cache / "result.json").exists():
        print(f"abdiff {args.range} exit {code} after {first:.1f} s measured nothing; "
              f"nothing to split", file=sys.stderr)
        return 3
    state = states[0].parent
    print(run_summary(f"abdiff {args.range} --configs {args.suite}", code, first,
                      cache / "result.json"))
    print(breakdown_table(breakdown(state), first))

    code2, second = run_abdiff(repo, cache, args.range, args.suite, args.abdiff_args)
    checkouts2 = sorted(p.name for p in (cache / "checkouts").glob("*/*") if p.is_dir())
    print(run_summary("second run", code2, second, cache / "result.json"))
    print(breakdown_table(breakdown(state), second))  # the same state folder, measured again
    print(f"checkouts before the second run {len(checkouts)}, after {len(checkouts2)} "
          f"(new: {sorted(set(checkouts2) - set(checkouts))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
