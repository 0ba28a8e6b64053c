"""What one measuring command holds open while benchmark processes run, released on its
exit: the `Runtime`.

The command that measures makes one (run/session.py: `prepare_bench`, which hands it to
the launcher: `Launcher.runtime`) and closes it on every exit path, an error, Ctrl-C and
SIGTERM (cli.py's `Interrupted`) included. It owns

- the sandbox the workers start in (launchers/sandbox.py: `Sandbox`);
- the processes abdiff started and the leftovers it adopts (`Leftovers`);
- the warm pool of `--prestart` (launchers/warm.py: `pooled`), one per lane of
  `--devices` (`lane`);
- the limits the processes it starts ahead get (`--pass-env`, `--max-memory`);
- the locks that mark folders in use while it measures (`hold`: the side caches, which
  `cache clean` then leaves alone).

`close()` ends the pools, kills every leftover, stops adopting and lets the locks go.
Without a runtime (a process of abdiff's own outside a measurement: `abdiff doctor`'s
hello) a process starts outside any sandbox and nothing is adopted.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from abdiff.host import procfs
from abdiff.launchers.pool import WorkerPool, signal_each
from abdiff.launchers.sandbox import NO_SANDBOX, Sandbox

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def _start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot), None if it is gone."""
    stat = procfs.read_stat(pid)
    try:
        return stat.start_ticks if stat else None
    except (IndexError, ValueError):
        return None


@dataclass
class Leftovers:
    """The processes a benchmark leaves running, ended with the rounds: abdiff adopts them
    (`adopt`), ends them after each round (`end`) and, with every process it started, when
    the command ends (`close`). `started`: the processes abdiff started itself
    (process.start_process), which are not leftovers while they run, each pid with its
    start time: a pid the kernel gives a leftover after abdiff's process of that pid ended
    is the leftover's."""

    started: dict[int, int | None] = field(default_factory=dict)  # pid -> its start ticks
    adopted_at: int | None = None  # when adopting began (clock ticks since boot)

    def record(self, pid: int) -> None:
        """A process abdiff started itself."""
        self.started[pid] = _start_ticks(pid)

    def started_here(self, pid: int) -> bool:
        """Whether `pid` is a process abdiff started (the same pid and start time)."""
        return pid in self.started and self.started[pid] == _start_ticks(pid)

    def adopt(self) -> None:
        """Make abdiff the parent of every process its benchmark leaves behind.

        A benchmark can double-fork and `setsid` a process that outlives its worker (and
        abdiff): it could rewrite the stored rounds, move a branch or read the next step's
        environment. As a child subreaper, abdiff receives such leftovers instead of init.
        Called by a measuring command before its first worker (session.py), not by the
        library: a test process must not adopt its fixtures' daemons. Linux only;
        idempotent."""
        if self.adopted_at is not None or not sys.platform.startswith("linux"):
            return
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # now, in the clock ticks since boot that /proc/PID/stat counts start times in
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        self.adopted_at = int(uptime * os.sysconf("SC_CLK_TCK")) - 1

    def end(self) -> list[int]:
        """SIGKILL the children abdiff did not start and what runs below them: processes of
        the benchmark that outlived their worker and came to abdiff as its subreaper, or to
        the first process of a sandbox's pid namespace. Called after every round, before
        the rounds are stored and signed, so that none is left to rewrite them; returns
        their pids."""
        if self.adopted_at is None:
            return []
        table = procfs.children()
        ours = table.get(os.getpid(), [])
        adopted = [pid for pid in ours if not self.started_here(pid)]
        # in a sandbox's pid namespace leftovers come to its first process (guard.py), or,
        # made with clone(CLONE_PARENT), to the command (process 2 there, a fork server
        # between its workers): everything in the namespace but those two is a leftover
        # (of the processes abdiff started that are still its children: a pid reused since
        # is another's)
        inits = [child for pid in ours if self.started_here(pid) for child in table.get(pid, [])
                 if procfs.namespace_pid(child) == 1]
        inside = [pid for init in inits for pid in procfs.below(table.get(init, []), table)
                  if procfs.namespace_pid(pid) != 2]
        killed = signal_each(procfs.below(adopted + inside, table), signal.SIGKILL)
        for pid in adopted:  # abdiff's children now: reaped here, or they stay zombies
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        return killed

    def close(self) -> list[int]:
        """SIGKILL every descendant of abdiff started since `adopt` (a leftover, or a worker
        still running), and stop adopting; returns their pids."""
        if self.adopted_at is None:
            return []
        since, self.adopted_at = self.adopted_at, None
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        ours = os.getpid()
        return signal_each([pid for pid in procfs.below([ours], procfs.children())
                            if pid != ours and (_start_ticks(pid) or -1) >= since],
                           signal.SIGKILL)


@dataclass
class Runtime:
    """What a measuring command holds open (module docstring); a context manager that
    closes it."""

    sandbox: Sandbox = NO_SANDBOX
    pass_env: list[str] | None = None  # --pass-env: what reaches the processes it starts
    max_memory_bytes: int | None = None  # --max-memory of each process it starts
    leftovers: Leftovers = field(default_factory=Leftovers)
    pool: WorkerPool | None = None  # the warm pool in use (launchers/warm.py)
    lanes: list[Runtime] = field(default_factory=list)  # one a device beside the first
    held: list[int] = field(default_factory=list)  # descriptors of in-use locks (`hold`)

    def lane(self) -> Runtime:
        """A runtime for one more lane of `--devices`: this sandbox, limits and leftovers,
        a warm pool of its own; closed with this one."""
        lane = Runtime(self.sandbox, self.pass_env, self.max_memory_bytes, self.leftovers)
        self.lanes.append(lane)
        return lane

    def hold(self, descriptor: int) -> None:
        """Keep `descriptor` (an in-use lock, files.hold_in_use) open until `close`."""
        self.held.append(descriptor)

    def close(self) -> None:
        """End the pools (a lane's too), then every leftover; stop adopting; let the locks
        go. Idempotent."""
        try:
            for runtime in (self, *self.lanes):
                pool, runtime.pool = runtime.pool, None
                if pool is not None:
                    pool.close()
        finally:
            self.lanes = []
            self.leftovers.close()
            held, self.held = self.held, []
            for descriptor in held:
                os.close(descriptor)

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
