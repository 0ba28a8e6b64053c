"""What the sandbox (--sandbox, abdiff/launchers/sandbox.py) costs a worker start.

Starts a trivial command through guard.py N times without and with the sandbox of a real
measurement's plan (this repository as the benchmark's, a scratch cache and state folder),
as a round's worker (its round's folder and its side's folders bound writable),
and as a job narrowing a process started ahead (one more user and mount namespace,
guard.narrow, timed against the same command without it); and times the trial start
abdiff makes once per command. Prints a table of medians.

    python lab/sandbox_cost.py [--starts 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from abdiff.launchers import sandbox
from abdiff.launchers.guard import Confinement
from abdiff.store.sides import SideFolders, WorkerFolders

NARROW = ("import sys; from abdiff.launchers.guard import Confinement, narrow; "
          "sys.argv[1] and narrow(Confinement.decode(sys.argv[1]))")


def start_times(options: list[str], starts: int, command: tuple[str, ...] = ("pass",)
                ) -> list[float]:
    """Wall seconds of `guard.py ... -- python -S -c COMMAND...`, started `starts` times."""
    argv = [sys.executable, "-S", str(sandbox.GUARD), str(os.getpid()), "0", *options, "--",
            sys.executable, "-S", "-c", *command]
    times = []
    for _ in range(starts):
        began = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        times.append(time.perf_counter() - began)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=30)
    args = parser.parse_args()
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as scratch:
        cache, state = Path(scratch, "cache"), Path(scratch, "state")
        (cache / "checkouts").mkdir(parents=True)
        state.mkdir()
        plan = sandbox.plan(repo, repo / ".git", cache, state)
        side = SideFolders.of(cache, "0" * 40, {})
        side.make()
        round_dir = cache / "runs" / "k" / "logs" / "A" / "r0"
        round_dir.mkdir(parents=True)
        worker = WorkerFolders(side, round_dir).writable()
        ahead = tuple(str(p) for p in sandbox.worker_folders_root(cache))
        narrowed = Confinement(read_only=ahead, writable=worker, own_proc=False).encode()
        trial_s = []
        for _ in range(args.starts):
            began = time.perf_counter()
            why = sandbox.trial(plan)
            trial_s.append(time.perf_counter() - began)
            if why is not None:
                print(f"sandbox_cost: no sandbox here: {why}", file=sys.stderr)
                return 3
        rows = [("guard.py, no sandbox", start_times([], args.starts)),
                ("guard.py, pid namespace and mounts",
                 start_times(sandbox.guard_options(plan), args.starts)),
                ("guard.py, mounts only",
                 start_times(sandbox.guard_options(Confinement(
                     plan.hidden, plan.read_only, plan.writable, own_proc=False)),
                     args.starts)),
                ("guard.py, a round's worker (2 binds)",
                 start_times(sandbox.guard_options(plan, worker), args.starts)),
                ("started ahead, job not narrowed",
                 start_times(sandbox.guard_options(plan, ahead), args.starts,
                             (NARROW, ""))),
                ("started ahead, job narrowed",
                 start_times(sandbox.guard_options(plan, ahead), args.starts,
                             (NARROW, narrowed))),
                ("trial start (once per command)", trial_s)]
    print(f"{len(plan.hidden)} hidden, {len(plan.read_only)} read-only, "
          f"{len(plan.writable)} writable-again paths; {args.starts} starts each")
    print(f"{'start':38} {'median ms':>10} {'p90 ms':>8}")
    for name, times in rows:
        p90 = sorted(times)[int(0.9 * (len(times) - 1))]
        print(f"{name:38} {statistics.median(times) * 1e3:10.1f} {p90 * 1e3:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
