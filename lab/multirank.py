"""Wall time of `abdiff main..pr --configs SUITE` with 1 rank and with 2 ranks, and what a
launcher costs per round.

For each launcher (local = 1 rank; mpirun, torchrun, srun = `--np 2`) the
command runs once in a fresh demo repository and cache; its wall time and
exit code are printed. The launcher's own overhead per launch is measured
apart from the benchmark: the median time for the launcher to start 2 ranks of
a Python one-liner and see them exit (`abdiff doctor --launcher`'s hello),
minus the same one-liner started alone. Each round of a side is at least one
launch, so that is the overhead per round. srun needs a Slurm allocation
(run this script under `salloc -n 2`); a launcher that cannot start here is
reported, not measured.

    python benchmarks/multirank.py [--suite mtp] [--launchers local,mpirun,torchrun]
        [--rounds N] [--hellos 5] [--overhead-only]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from abdiff.demo.builder import build_demo_repo
from abdiff.errors import InfrastructureError
from abdiff.launchers import HELLO, launcher_hello


def diff_wall_time(launcher: str, suite: str, rounds: int | None) -> tuple[int, float]:
    """(exit code, seconds) of `abdiff main..pr --configs SUITE` in a fresh demo and cache."""
    with tempfile.TemporaryDirectory(prefix="abdiff-multirank-") as tmp:
        repo, cache = Path(tmp) / "demo", Path(tmp) / "cache"
        build_demo_repo(repo)
        ranks = [] if launcher == "local" else ["--launcher", launcher, "--np", "2"]
        extra = ["--rounds", str(rounds), "--max-rounds", str(rounds)] if rounds else []
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "abdiff.cli", "main..pr", "--configs", suite, "--repo",
             str(repo), "--cache-dir", str(cache), "--quiet", *ranks, *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        return done.returncode, time.perf_counter() - start


def launch_seconds(launcher: str | None, count: int) -> float:
    """Median seconds to start and end the hello: 2 ranks through `launcher`, or 1 alone."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        if launcher is None:
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run([sys.executable, "-c", HELLO, tmp], check=True)
        else:
            launcher_hello(launcher)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="mtp")
    parser.add_argument("--launchers", default="local,mpirun,torchrun")
    parser.add_argument("--rounds", type=int, default=None,
                        help="fixed rounds per side (--rounds N --max-rounds N; default: adaptive)")
    parser.add_argument("--hellos", type=int, default=5, help="hello launches per launcher")
    parser.add_argument("--overhead-only", action="store_true", help="skip the abdiff runs")
    args = parser.parse_args()
    alone = launch_seconds(None, args.hellos)
    rows = []
    for launcher in args.launchers.split(","):
        overhead = "-"
        if launcher != "local":
            try:
                overhead = f"{launch_seconds(launcher, args.hellos) - alone:.2f}"
            except InfrastructureError as exc:
                rows.append([launcher, "-", "-", f"cannot start: {exc}"])
                continue
        ranks = 1 if launcher == "local" else 2
        wall = "-"
        if not args.overhead_only:
            code, seconds = diff_wall_time(launcher, args.suite, args.rounds)
            wall = f"{seconds:.1f} (exit {code})"
        rows.append([launcher, ranks, wall, overhead])
    print(tabulate(rows, headers=["launcher", "ranks", f"main..pr --configs {args.suite} (s)",
                                  "launch overhead per round (s)"]))
    print(f"(one Python process alone: {alone:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
