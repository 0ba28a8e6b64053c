"""Workers forked from one process that imported torch once (`--prestart fork`).

The local launcher's jobs go to a fork server (forkserver_process.py), started
like any worker (guard.py, its own session, the workers' environment, a HOME of
its own); each job becomes a fork of it, with the job's environment and a fresh
HOME. A forked worker is not abdiff's child: `ForkedProcess` gives run_process
what it needs of a Popen (pid, poll, wait), from the server's messages. A job
the server cannot take (not `python -m` of this Python, another environment)
starts cold. A server that died between workers is reported once and the run
goes on starting workers cold; one that died while a worker ran stops the run
(exit 3, the rounds before kept): that worker died with it, and a crash it did
not cause must not become its config's verdict.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from abdiff.errors import InfrastructureError
from abdiff.host import procfs
from abdiff.launchers.pool import (
    StartedProcess,
    python_module_job,
    signal_each,
    signal_group,
)
from abdiff.launchers.process import pipe, start_process, worker_environment
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.spec import LaunchSpec
from abdiff.reports.printable import printable
from abdiff.store.files import worker_json
from abdiff.store.sides import WorkerFolders

SERVER_MODULE = "abdiff.launchers.forkserver_process"
# for the first job the server may still be importing torch and the target's preimport
FORK_WAIT_S = 300.0
SWEEP_WAIT_S = 30.0


class ForkedProcess:
    """A worker forked by the server, seen through the server's messages."""

    def __init__(self, server: ForkServer, inner: int, pid: int | None) -> None:
        self.server = server
        self.inner = inner  # its pid in the server's messages (the sandbox's pid namespace)
        # its pid here, for signals to its process group; unknown (the server reaped it
        # already): -1, which no signal reaches (pool.signal_group)
        self.pid = pid if pid is not None else -1
        stat = procfs.read_stat(self.pid) if pid is not None else None
        self.start_ticks = stat.start_ticks if stat is not None else None
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._exit(0.0)

    def wait(self, timeout: float | None = None) -> int:
        returncode = self._exit(timeout)
        if returncode is None:
            raise subprocess.TimeoutExpired(f"forked worker {self.inner}", timeout or 0.0)
        return returncode

    def _exit(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.returncode(self.inner, timeout)
            if self.returncode is None and self.server.failure:
                # the server died before this worker's exit came: it died with the server
                self.returncode = -signal.SIGKILL  # what the parent-death signal did to it
                # how it really ended is unknown: blaming the benchmark for a crash would be
                # a verdict on no evidence
                raise InfrastructureError(f"{self.server.failure} while worker {self.inner} ran; "
                                          "its round is lost, the rounds before it are kept "
                                          "(run the same command again to go on)")
            if self.returncode is not None and self._still_running():
                # the side's preimported code runs in the server and can write its messages
                self.server._fail(f"it said worker {self.inner} ended while it still ran")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
                raise InfrastructureError(f"{self.server.failure}: its round is lost, the "
                                          "rounds before it are kept (run the same command "
                                          "again to go on)")
        return self.returncode

    def _still_running(self) -> bool:
        """Whether this worker still runs (not ended, not a zombie) although its server said
        it ended: the server reaps a worker before it says so."""
        stat = procfs.read_stat(self.pid) if self.start_ticks is not None else None
        return (stat is not None and stat.start_ticks == self.start_ticks
                and stat.rest[0] != "Z")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def message_problem(message: dict[str, Any], modules: tuple[str, ...] | None) -> str | None:
    """What makes `message` other than one forkserver_process sends, None if nothing does.

    The side's preimported code runs in the server and can write to its pipe: each kind must
    have the fields and types the server's own have, a preimport can only have imported the
    `modules` abdiff asked for (or none), and its seconds are a finite count. What a valid
    message may still claim is checked elsewhere (a worker's exit: `ForkedProcess`).
    """
    if "pid" in message:
        return None if _whole(message["pid"]) and message["pid"] > 0 else "a pid that is none"
    if "exit" in message:
        fine = _whole(message["exit"]) and _whole(message.get("returncode"))
        return None if fine else "an exit without a pid and a return code"
    if "preimported" in message:
        seconds = message.get("seconds")
        if modules is None or message["preimported"] not in ([], list(modules)):
            return "modules abdiff did not ask to import"
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) \
                or not 0 <= seconds < math.inf:
            return "seconds that are not a duration"
        return None if isinstance(message.get("failed", ""), str) else "a failure that is no text"
    if "swept" in message:
        return None if isinstance(message["swept"], bool) else "a sweep that is not yes or no"
    if "error" in message:
        return None if isinstance(message["error"], str) else "an error that is no text"
    return "no kind the server sends"


class ForkServer:
    """One fork server per run, for jobs with the environment it was started with.
    A WorkerPool (launchers/pool.py)."""

    words = "forked from a warm process"  # how the run's summary names these workers

    def __init__(self, folder: Path, runtime: Runtime | None = None,
                 own_folder: bool = False) -> None:
        self.folder = Path(folder)
        # the sandbox, limits and leftovers it starts its server with (none: no sandbox)
        self.runtime = runtime or Runtime()
        self.own_folder = own_folder  # made for this server alone (`prime`): removed with it
        self.server: StartedProcess[subprocess.Popen[bytes]] | None = None
        self.server_env: dict[str, str] = {}
        self.exits: dict[int, int] = {}
        self.pending = b""
        self.taken = 0
        self.failure: str | None = None  # why the server stopped: the run's summary says it
        self.preimport_sent: tuple[str, ...] | None = None  # the modules asked for
        self.answered = False  # the server's word on the preimport came
        # what the preimport did, in words, once the server said (the run file's env)
        self.preimported: str | None = None

    def start_waiting(self, env: dict[str, str]) -> None:
        """Start the server now (its torch import overlaps the run's own set-up)."""
        if self.server is None and not self.failure:
            self.folder.mkdir(parents=True, exist_ok=True)
            # -P: its folder, writable to the benchmark, is not on its import path
            spec = LaunchSpec([sys.executable, "-P", "-m", SERVER_MODULE], self.folder,
                              dict(env))
            self.server = start_process(spec, subprocess.PIPE, self.folder / "server.stderr.txt",
                                        self.runtime.pass_env, self.runtime.max_memory_bytes,
                                        stdin=subprocess.PIPE, ahead=True, runtime=self.runtime)
            self.server_env = dict(env)

    def take(self, spec: LaunchSpec, stdout: Path,
             stderr: Path) -> StartedProcess[ForkedProcess] | None:
        """`spec` as a fork of the server, or None: start it cold."""
        if self.failure or not python_module_job(spec):
            return None
        self.start_waiting(spec.env)
        server = self.server
        if server is None or self.server_env != spec.env:
            return None
        home = None if spec.folders else tempfile.TemporaryDirectory(
            prefix="abdiff-home-", ignore_cleanup_errors=True)
        job = {"cwd": str(spec.cwd), "argv": spec.argv, "stdout": str(stdout),
               "stderr": str(stderr), "cpus": list(spec.cpus),
               "env": worker_environment(spec.env, self.runtime.pass_env,
                                         Path(home.name) if home else None, spec.folders),
               "confine": self.runtime.sandbox.narrowing(
                   spec.folders.writable() if spec.folders else ())}
        pid = None
        try:  # unbuffered: nothing is left to flush (and fail) when it is closed
            os.write(pipe(server.proc.stdin, server.proc.pid).fileno(),
                     (json.dumps(job) + "\n").encode())
            pid = self._forked_pid(server.proc, time.monotonic() + FORK_WAIT_S)
        except BrokenPipeError:
            self._fail(f"it ended (exit {server.proc.wait()})")
        if pid is None:
            if home is not None:
                home.cleanup()
            return None
        self.taken += 1
        # the server may run in a pid namespace of its own (launchers/sandbox.py)
        here = procfs.seen_from_here(pid, server.proc.pid)
        return StartedProcess(ForkedProcess(self, pid, here), home)

    def send_preimport(self, cwd: Path, modules: tuple[str, ...],
                       folders: WorkerFolders | None = None) -> None:
        """Have the server import `modules` from the checkout `cwd` before its first fork
        (forkserver_process.preimport; none: it only answers, once torch is imported).
        The side's code then runs in the server: in a sandbox, it first narrows its own to
        `folders` (writable: that side's round folders and caches), with the side's HOME and
        caches in its environment."""
        server = self.server
        if server is None or self.failure or self.preimport_sent is not None:
            return
        self.preimport_sent = modules
        message: dict[str, object] = {"preimport": {
            "cwd": str(cwd), "modules": list(modules),
            "confine": self.runtime.sandbox.narrowing(folders.writable())
            if folders and modules else None,
            "env": folders.side.environment() if folders and modules else {}}}
        try:
            os.write(pipe(server.proc.stdin, server.proc.pid).fileno(),
                     (json.dumps(message) + "\n").encode())
        except BrokenPipeError:
            self._fail(f"it ended (exit {server.proc.wait()})")

    def wait_preimport(self) -> None:
        """Wait for the server's word on the preimport (it is ready to fork then)."""
        deadline = time.monotonic() + FORK_WAIT_S
        while self.server is not None and self.preimport_sent is not None and not self.answered \
                and not self.failure:
            if self._next_message(self.server.proc, deadline) is None and not self.answered:
                self._fail("no word after the preimport")

    def returncode(self, pid: int, timeout: float | None) -> int | None:
        """The exit of worker `pid`, waiting up to `timeout` seconds (None: to its end or
        the server's); None where it is not known."""
        deadline = None if timeout is None else time.monotonic() + timeout
        # a closed server sends nothing more: what it said is all there is
        while pid not in self.exits and not self.failure and self.server is not None:
            if self._next_message(self.server.proc, deadline) is None:
                break
        return self.exits.get(pid)

    def sweep(self) -> None:
        """Have the server kill every other process of its sandbox (forkserver_process.sweep)
        and wait for its word; a server that died is reported as ever (`failure`)."""
        server = self.server
        if server is None or self.failure:
            return
        try:
            os.write(pipe(server.proc.stdin, server.proc.pid).fileno(), b'{"sweep": true}\n')
        except BrokenPipeError:
            self._fail(f"it ended (exit {server.proc.wait()})")
            return
        deadline = time.monotonic() + SWEEP_WAIT_S
        while not self.failure:
            message = self._next_message(server.proc, deadline)
            if message is None:
                self._fail("no word after a sweep")
            elif "swept" in message:
                return

    def close(self) -> None:
        """End the server (the run needs no more workers); a folder of its own goes with
        it, unless the server failed (its stderr is there)."""
        if self.server is not None:
            pipe(self.server.proc.stdin, self.server.proc.pid).close()
            # one that forked nothing has nothing to finish (bad input found while it was
            # still importing torch: waiting for that cost 1.5 s): close() kills it
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.server.proc.wait(timeout=10 if self.taken else 0)
            self.server.close()
            self.server = None
        if self.own_folder and not self.failure:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _forked_pid(self, server: subprocess.Popen[bytes], deadline: float) -> int | None:
        while not self.failure:
            message = self._next_message(server, deadline)
            if message is None:
                self._fail("no worker after the job was sent")
            elif "pid" in message:
                return message["pid"]
        return None

    def _next_message(self, server: subprocess.Popen[bytes],
                      deadline: float | None) -> dict[str, Any] | None:
        """The server's next message (exits are recorded on the way), None at the
        deadline or the server's end."""
        out = pipe(server.stdout, server.pid)
        while b"\n" not in self.pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([out], [], [], remaining)[0]:
                return None
            chunk = os.read(out.fileno(), 65536)
            if not chunk:
                self._fail(f"it ended (exit {server.wait()})")
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        try:
            message = worker_json(line)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            self._fail(f"it wrote something that is not a message: {line[:80]!r}")
            return None
        problem = message_problem(message, self.preimport_sent)
        if problem is not None:
            self._fail(f"it wrote a message that is not one of the server's ({problem}): "
                       f"{line[:80]!r}")
            return None
        if "preimported" in message:
            self.answered = True
            if message.get("failed"):
                self.preimported = (f"not imported ahead: {printable(message['failed'], False)}"
                                    " (each worker imports it)")
            elif message["preimported"]:
                self.preimported = (f"{', '.join(message['preimported'])} imported once in the "
                                    f"fork server ({message['seconds']:.1f} s)")
        if "exit" in message:
            self.exits[message["exit"]] = message["returncode"]
        if "error" in message:
            self._fail(message["error"])
            return None
        return message

    def hold(self, running: bool) -> None:
        """Let the server and every process below it run (SIGCONT) or stop them (SIGSTOP).
        A side's preimported code runs in its server and can start a thread there after the
        check at its first fork (os.register_at_fork), or a process in a session of its own
        (setsid: out of the server's process group): stopped, it cannot burn the CPU or GPU
        while the other side's worker is timed."""
        if self.server is not None and self.server.proc.poll() is None:
            signal_tree(self.server.proc.pid, signal.SIGCONT if running else signal.SIGSTOP)

    def _fail(self, why: str) -> None:
        """Keep the first reason; the run goes on with cold starts."""
        if not self.failure:  # `why` may hold the server's words: the side's code wrote them
            self.failure = printable(f"the fork server stopped ({why}; its output is in "
                                     f"{self.folder})", lines=False)


def signal_tree(root: int, number: int) -> None:
    """Send signal `number` to `root`'s process group and to every process below `root`,
    again to those that appeared meanwhile until none did (a process forking as it was
    listed; once stopped, none forks)."""
    signal_group(root, number)
    sent: set[int] = set()
    while True:
        todo = [pid for pid in procfs.below([root], procfs.children()) if pid not in sent]
        if not todo:
            return
        sent.update(signal_each(todo, number))


class ForkServers:
    """A fork server per checkout (`--prestart fork`), each in a sandbox of its own. The
    workers of one server are one user in one pid namespace: a benchmark's worker can set
    its server's limits, CPU affinity or priority (prlimit, sched_setaffinity), and every
    later fork inherits them. Side B's benchmark must not reach side A's workers that way:
    a side's workers are forks of its own server. A WorkerPool (launchers/pool.py)."""

    words = ForkServer.words

    def __init__(self, folder: Path, runtime: Runtime | None = None,
                 own_folder: bool = False) -> None:
        self.folder = Path(folder)
        self.own_folder = own_folder  # made for these servers alone (`prime`): removed with them
        self.runtime = runtime or Runtime()
        self.make = lambda n: ForkServer(self.folder / f"server{n}", self.runtime)
        self.waiting: list[ForkServer] = []  # started ahead of knowing their checkouts
        self.by_checkout: dict[Path, ForkServer] = {}

    @property
    def servers(self) -> list[ForkServer]:
        return [*self.by_checkout.values(), *self.waiting]

    @property
    def taken(self) -> int:
        return sum(server.taken for server in self.servers)

    @property
    def failure(self) -> str | None:
        return next((server.failure for server in self.servers if server.failure), None)

    def start_waiting(self, env: dict[str, str]) -> None:
        """Start one more server now, for the next checkout without one (called once per
        side that will measure: both sides' torch imports overlap abdiff's own set-up)."""
        server = self.make(len(self.servers))
        self.waiting.append(server)
        server.start_waiting(env)

    def prepare(self, checkouts: list[Path], env: dict[str, str],
                preimport: tuple[str, ...],
                folders: dict[Path, WorkerFolders] | None = None) -> None:
        """Start the server of every checkout now, so that their imports overlap, have each
        import `preimport` from its checkout, and wait until all are ready to fork: nothing
        of theirs then runs beside a timed worker. A server that imports a side's code
        writes only that side's `folders` from then on (its round folders, its caches)."""
        servers = [self.server_of(cwd) for cwd in checkouts]
        for cwd, server in zip(checkouts, servers, strict=True):
            server.start_waiting(env)
            server.send_preimport(cwd, preimport, (folders or {}).get(cwd))
        for server in servers:
            server.wait_preimport()
        self.sweep()  # what an import left running ends before the first round

    def preimported(self, cwd: Path) -> str | None:
        server = self.by_checkout.get(cwd)
        if server is None:
            return None
        if server.preimported is None and server.failure and server.preimport_sent is not None:
            return f"not imported ahead: {server.failure}; that side's workers started cold"
        return server.preimported

    def server_of(self, cwd: Path) -> ForkServer:
        server = self.by_checkout.get(cwd)
        if server is None:
            server = self.waiting.pop(0) if self.waiting else self.make(len(self.servers))
            self.by_checkout[cwd] = server
        return server

    def take(self, spec: LaunchSpec, stdout: Path,
             stderr: Path) -> StartedProcess[ForkedProcess] | None:
        """`spec` forked from its checkout's server, every other server stopped while it
        runs (`ForkServer.hold`); None: start it cold."""
        server = self.server_of(spec.cwd)
        for other in self.servers:
            other.hold(other is server)
        return server.take(spec, stdout, stderr)

    def sweep(self) -> None:
        """Each server ends what its last worker left; then all are stopped until a job."""
        for server in self.servers:
            server.hold(True)
            server.sweep()
            server.hold(False)

    def close(self) -> None:
        for server in self.servers:
            server.hold(True)
            server.close()
        self.waiting, self.by_checkout = [], {}
        if self.own_folder and not self.failure:
            shutil.rmtree(self.folder, ignore_errors=True)
