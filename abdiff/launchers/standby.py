"""Workers started ahead of their job (`--prestart`), so that the next worker's Python
start and torch import overlap the current worker's measurement.

A run starts dozens of worker processes one after the other, and on an H200
their start was 44% of the wall time. The pool keeps one process waiting
(launchers/standby_worker.py): when a job comes, the waiting process takes it
and the next one starts at once. The waiting process imports nothing of either
checkout, so it serves A and B alike. A job it cannot take (not `python -m`,
another environment) starts cold, as without the pool; a waiting process that
died is reported once and the run goes on starting workers cold.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from abdiff.launchers.base import Launcher
from abdiff.launchers.process import StartedProcess, start_process
from abdiff.targets.base import LaunchSpec

STANDBY_MODULE = "abdiff.launchers.standby_worker"


class StandbyPool:
    """At most one worker process waiting for its job, started from `folder`."""

    def __init__(self, folder: Path, pass_env: list[str] | None = None,
                 max_memory_bytes: int | None = None, own_folder: bool = False) -> None:
        self.folder = Path(folder)
        self.pass_env = pass_env
        self.max_memory_bytes = max_memory_bytes
        self.waiting: StartedProcess | None = None
        self.waiting_env: dict[str, str] = {}
        self.started = 0  # processes started ahead
        self.taken = 0  # of those, how many ran a job
        self.broken = False
        self.own_folder = own_folder  # made for this pool alone (`prime`): removed with it

    @staticmethod
    def fits(spec: LaunchSpec) -> bool:
        """Whether a waiting process can become `spec`: `python -m MODULE ...` of this Python."""
        return len(spec.argv) >= 3 and spec.argv[0] == sys.executable and spec.argv[1] == "-m"

    def take(self, spec: LaunchSpec, stdout: Path, stderr: Path) -> StartedProcess | None:
        """The waiting process, running `spec` with these output files, or None: start it
        cold. Either way the next process starts waiting."""
        if self.broken or not self.fits(spec):
            return None
        ready, self.waiting = self.waiting, None
        if ready is not None and not self._hand_over(ready, spec, stdout, stderr):
            ready.close()
            ready = None
        if not self.broken:
            self._start_next(spec)
        return ready

    def close(self) -> None:
        """End the waiting process (the run needs no more workers); a folder of its own
        (`prime`) goes with it, unless a waiting process died (its output is there)."""
        if self.waiting is not None:
            self.waiting.close()
            self.waiting = None
        if self.own_folder and not self.broken:
            shutil.rmtree(self.folder, ignore_errors=True)

    def start_waiting(self, env: dict[str, str]) -> None:
        """Start a process waiting now, for jobs with `env`: the run's first worker can
        then be warm too, when this is called before the run's own set-up (its checks,
        checkouts) rather than with its first job."""
        if self.waiting is None and not self.broken:
            self._start_next(LaunchSpec([sys.executable], self.folder, env))

    def _hand_over(self, ready: StartedProcess, spec: LaunchSpec, stdout: Path,
                   stderr: Path) -> bool:
        if ready.proc.poll() is not None:
            self.broken = True
            print(f"abdiff: a pre-started worker ended before its job (exit "
                  f"{ready.proc.returncode}; its output is in {self.folder}); starting the "
                  "rest cold", file=sys.stderr, flush=True)
            return False
        if self.waiting_env != spec.env:
            return False
        job = {"cwd": str(spec.cwd), "argv": spec.argv, "stdout": str(stdout),
               "stderr": str(stderr)}
        try:
            ready.proc.stdin.write((json.dumps(job) + "\n").encode())
            ready.proc.stdin.close()
        except BrokenPipeError:
            return False
        self.taken += 1
        return True

    def _start_next(self, spec: LaunchSpec) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"standby{self.started}"
        standby = LaunchSpec([sys.executable, "-m", STANDBY_MODULE], self.folder,
                             dict(spec.env))
        self.waiting = start_process(standby, self.folder / f"{name}.stdout.txt",
                                     self.folder / f"{name}.stderr.txt", self.pass_env,
                                     self.max_memory_bytes, stdin=subprocess.PIPE)
        self.waiting_env = dict(spec.env)
        self.started += 1


@contextlib.contextmanager
def standing_by(launcher: Launcher, enabled: bool, folder: Path,
                pass_env: list[str] | None, max_memory_bytes: int | None
                ) -> Iterator[StandbyPool | None]:
    """Give `launcher` a pool for the duration of a measurement (where asked and it can);
    a pool the launcher already holds (`prime`) is used and ended with it."""
    if not (enabled and launcher.can_prestart):
        yield None
        return
    pool = launcher.standby or StandbyPool(folder, pass_env, max_memory_bytes)
    launcher.standby = pool
    try:
        yield pool
    finally:
        launcher.standby = None
        pool.close()


def prime(launcher: Launcher, enabled: bool, under: Path, env: dict[str, str] | None,
          pass_env: list[str] | None, max_memory_bytes: int | None) -> None:
    """Start the first waiting worker now, before the run's checks and checkouts, so that
    its torch import overlaps them (where prestart is on and the target's worker
    environment is known), in a folder of its own under `under`; the first
    measurement's `standing_by` takes the pool over and ends it."""
    if enabled and launcher.can_prestart and env is not None and launcher.standby is None:
        under.mkdir(parents=True, exist_ok=True)
        pool = StandbyPool(Path(tempfile.mkdtemp(prefix="standby-", dir=under)), pass_env,
                           max_memory_bytes, own_folder=True)
        pool.start_waiting(env)
        launcher.standby = pool
        atexit.register(pool.close)  # a run that stops before measuring leaves nothing


def unprime(launcher: Launcher) -> None:
    """End a pool that `prime` started and no measurement took over (the run stopped)."""
    if launcher.standby is not None:
        launcher.standby.close()
        launcher.standby = None
