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

import json
import shutil
import subprocess
import sys
from pathlib import Path

from abdiff.launchers.pool import StartedProcess, python_module_job
from abdiff.launchers.process import pipe, start_process, worker_environment
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.spec import LaunchSpec
from abdiff.store.sides import WorkerFolders

STANDBY_MODULE = "abdiff.launchers.standby_worker"


class StandbyPool:
    """At most one worker process waiting for its job, started from `folder`."""

    words = "started ahead"  # how the run's summary names these workers

    def __init__(self, folder: Path, runtime: Runtime | None = None,
                 own_folder: bool = False) -> None:
        self.folder = Path(folder)
        # the sandbox, limits and leftovers it starts its processes with (none: no sandbox)
        self.runtime = runtime or Runtime()
        self.waiting: StartedProcess[subprocess.Popen[bytes]] | None = None
        self.waiting_env: dict[str, str] = {}
        self.started = 0  # processes started ahead
        self.taken = 0  # of those, how many ran a job
        self.failure: str | None = None  # why the pool stopped: the run's summary says it
        self.own_folder = own_folder  # made for this pool alone (`prime`): removed with it

    def take(self, spec: LaunchSpec, stdout: Path,
             stderr: Path) -> StartedProcess[subprocess.Popen[bytes]] | None:
        """The waiting process, running `spec` with these output files, or None: start it
        cold. Either way the next process starts waiting."""
        if self.failure or not python_module_job(spec) or spec.cpus:
            return None  # (a CPU set of --devices: started cold, pinned from its start)
        ready, self.waiting = self.waiting, None
        if ready is not None and not self._hand_over(ready, spec, stdout, stderr):
            ready.close()
            ready = None
        if not self.failure:
            self._start_next(spec)
        return ready

    def prepare(self, checkouts: list[Path], env: dict[str, str],
                preimport: tuple[str, ...],
                folders: dict[Path, WorkerFolders] | None = None) -> None:
        """Nothing to do: a worker started ahead imports nothing of a checkout before its
        job names one."""

    def preimported(self, cwd: Path) -> str | None:
        return None

    def sweep(self) -> None:
        """Nothing to do: each worker started ahead is a sandbox of its own, which ends with
        its job."""

    def close(self) -> None:
        """End the waiting process (the run needs no more workers); a folder of its own
        (`prime`) goes with it, unless a waiting process died (its output is there)."""
        if self.waiting is not None:
            self.waiting.close()
            self.waiting = None
        if self.own_folder and not self.failure:
            shutil.rmtree(self.folder, ignore_errors=True)

    def start_waiting(self, env: dict[str, str]) -> None:
        """Start a process waiting now, for jobs with `env`: the run's first worker can
        then be warm too, when this is called before the run's own set-up (its checks,
        checkouts) rather than with its first job."""
        if self.waiting is None and not self.failure:
            self._start_next(LaunchSpec([sys.executable], self.folder, env))

    def _hand_over(self, ready: StartedProcess[subprocess.Popen[bytes]], spec: LaunchSpec,
                   stdout: Path, stderr: Path) -> bool:
        if ready.proc.poll() is not None:
            self.failure = (f"a worker started ahead ended before its job (exit "
                            f"{ready.proc.returncode}; its output is in {self.folder})")
            return False
        if self.waiting_env != spec.env:
            return False
        job: dict[str, object] = {
            "cwd": str(spec.cwd), "argv": spec.argv, "stdout": str(stdout), "stderr": str(stderr),
            "confine": self.runtime.sandbox.narrowing(
                spec.folders.writable() if spec.folders else ())}
        if spec.folders:  # its side's HOME and caches, not the temporary HOME it started with
            job["env"] = worker_environment(spec.env, self.runtime.pass_env, None,
                                            spec.folders)
        try:
            job_pipe = pipe(ready.proc.stdin, ready.proc.pid)
            job_pipe.write((json.dumps(job) + "\n").encode())
            job_pipe.close()
        except BrokenPipeError:
            return False
        self.taken += 1
        return True

    def _start_next(self, spec: LaunchSpec) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"standby{self.started}"
        # -P: its folder, writable to the benchmark, is not on its import path
        standby = LaunchSpec([sys.executable, "-P", "-m", STANDBY_MODULE], self.folder,
                             dict(spec.env))
        self.waiting = start_process(standby, self.folder / f"{name}.stdout.txt",
                                     self.folder / f"{name}.stderr.txt", self.runtime.pass_env,
                                     self.runtime.max_memory_bytes, stdin=subprocess.PIPE,
                                     ahead=True, runtime=self.runtime)
        self.waiting_env = dict(spec.env)
        self.started += 1
