"""The warm-start interface (`--prestart`): what run_process asks of a pool of workers
started ahead of their jobs, and what a pool hands back.

The arrows point here and to process.py, never between the pools: standby.py
("standby") and forkserver.py ("fork") each implement `WorkerPool` and do not know
each other; warm.py is the only module that knows both (it picks one by name);
process.py and base.py know only this interface.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from abdiff.launchers.spec import LaunchSpec
from abdiff.store.sides import WorkerFolders


class WorkerProcess(Protocol):
    """What run_process needs of a started worker: a Popen, or a worker forked by the fork
    server (not abdiff's child, seen through the server's messages)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def signal_each(pids: list[int], number: int) -> list[int]:
    """Send signal `number` to each of `pids` that is still there (and still one this user
    may signal: a pid reused since is another's); returns `pids`."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, number)
    return pids


def signal_group(pid: int, number: int) -> None:
    """Send signal `number` to the process group led by `pid`, if it is still there (a pid
    below 1 is a worker whose pid is unknown because it has ended: nothing to signal)."""
    if pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, number)


ProcessT = TypeVar("ProcessT", bound=WorkerProcess, covariant=True)


@dataclass(frozen=True)
class StartedProcess(Generic[ProcessT]):
    """A worker process in its own session (or, forked, its own process group), with the
    temporary HOME it owns (None: a round's worker, whose HOME is its side's, kept)."""

    proc: ProcessT
    home: tempfile.TemporaryDirectory[str] | None

    def close(self) -> None:
        """Kill whatever is left of its process group; remove its temporary HOME."""
        signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        if self.home is not None:
            self.home.cleanup()


class WorkerPool(Protocol):
    """Workers started ahead of their jobs. `take` gives a started process running `spec`
    with these output files, or None: start that job cold."""

    words: str  # what the run's summary calls its workers ("started ahead", ...)

    @property
    def taken(self) -> int:
        """Jobs it ran."""

    @property
    def failure(self) -> str | None:
        """Why it stopped (the run goes on cold); the summary says it."""

    def take(self, spec: LaunchSpec, stdout: Path,
             stderr: Path) -> StartedProcess[WorkerProcess] | None: ...

    def start_waiting(self, env: dict[str, str]) -> None:
        """Start a process waiting now, for jobs with `env`."""

    def prepare(self, checkouts: list[Path], env: dict[str, str],
                preimport: tuple[str, ...],
                folders: dict[Path, WorkerFolders] | None = None) -> None:
        """Before the first round: get ready for the jobs of these checkouts (with `env`),
        importing `preimport` from each ahead where the pool can; a process that imports a
        checkout's code may write only that checkout's `folders` from then on."""

    def preimported(self, cwd: Path) -> str | None:
        """What became of checkout `cwd`'s preimport, in words (None: nothing asked)."""

    def sweep(self) -> None:
        """Between rounds: end what the benchmark left running where the pool's processes
        live (a fork server's sandbox)."""

    def close(self) -> None:
        """End what waits (the run needs no more workers)."""


def python_module_job(spec: LaunchSpec) -> bool:
    """Whether a warm process can become `spec`: `python -m MODULE ...` of this Python."""
    return len(spec.argv) >= 3 and spec.argv[0] == sys.executable and spec.argv[1] == "-m"
