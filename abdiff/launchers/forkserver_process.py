"""The fork server: `python -m abdiff.launchers.forkserver_process`.

A run starts dozens of worker processes, and each imports torch: on a 2-core
machine that import was more than half of a run's wall time. This process
imports torch once (standby_worker.prepare: nothing of either checkout), then
forks one worker per job; the fork becomes the job (standby_worker.become) in
a process group of its own. While workers measure, it only sleeps: unlike a
worker started ahead (standby.py), it takes no core from the timed work.

A target may name modules that are safe to import ahead (`Target.preimport`: its
package under test, nothing that starts CUDA, MPI or threads): before the first
job, abdiff sends {"preimport": {"cwd", "modules"}} and this process imports
them from that checkout (one server per checkout: forkserver.ForkServers), so
each worker finds them imported. Then it checks that forking is still safe (no
CUDA context, no thread but this one); where it is not, it says so and ends,
and abdiff starts that side's workers cold.

One JSON object per line. In, on stdin: a job {"cwd", "argv", "stdout",
"stderr", "env", "cpus"?}, {"preimport": {...}}, or {"sweep": true} between jobs
(see `sweep`). Out, on stdout: {"preimported": [modules] | null, "seconds": S,
"failed": LINE?} after a preimport, {"swept": true|false} after a sweep, {"pid":
N} once the job's process exists,
{"exit": N, "returncode": R} when it ended (R < 0: killed by signal -R, as
subprocess reports it), or {"error": "..."} and the server ends (it cannot
fork safely). End of stdin ends the server; a worker it leaves is killed with
it (parent-death signal).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import sys
import time
from pathlib import Path

from abdiff.launchers.guard import Confinement, arm_parent_death, narrow, not_dumpable
from abdiff.launchers.standby_worker import become, prepare


def tell(message: dict) -> None:
    """One line to abdiff; os.write: no buffer a fork could inherit and write twice."""
    os.write(1, (json.dumps(message) + "\n").encode())


def thread_count() -> int:
    """Threads of this process (Linux); 1 where it cannot be known."""
    task = Path("/proc/self/task")
    return len(list(task.iterdir())) if task.is_dir() else 1


def reap() -> None:
    """Report every worker that has ended."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        tell({"exit": pid, "returncode": os.waitstatus_to_exitcode(status)})


def sweep() -> None:
    """Between jobs: SIGKILL every process of this sandbox's pid namespace but this one and
    its first process, in one call (a leftover of the benchmark that keeps changing its pid
    escapes a kill by a list of pids), reap them, and say so. Only as process 2 of a pid
    namespace of its own (guard.py's sandbox): elsewhere kill(-1) would reach every process
    of the user."""
    if os.getpid() == 2 and os.getppid() == 1:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
    reap()
    tell({"swept": os.getpid() == 2})


def unsafe_to_fork() -> str | None:
    """Why a fork of this process would be unsafe now, None when it is safe: a CUDA context
    (a fork cannot carry one: the child's first CUDA call fails), or a thread besides this
    one (a fork copies only the forking thread: a lock another thread held stays locked in
    the copy)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return "a CUDA context exists"
    if thread_count() > 1:
        # numpy's OpenBLAS starts a thread pool on import and stops it before every fork
        # (pthread_atfork); a trial fork shows whether all extra threads do
        trial = os.fork()
        if trial == 0:
            os._exit(0)
        os.waitpid(trial, 0)
    if thread_count() > 1:
        return f"{thread_count()} threads that a fork does not stop"
    return None


def preimport(cwd: str, modules: list[str]) -> dict:
    """Import `modules` from the checkout at `cwd` (first on the path, as `python -m` there
    puts it, and the working folder while they import); their output goes to this
    process's stderr, never into the message pipe. A module that fails to import is left
    to the workers, which fail on it the same way, each with its own stderr: the modules
    the failed attempt left behind are taken out again, so a worker imports as if cold
    (a half-imported package in sys.modules would make it fail another way)."""
    started = time.monotonic()
    here = os.getcwd()
    before = set(sys.modules)
    saved_out = os.dup(1)
    os.dup2(2, 1)
    sys.path.insert(0, cwd)
    failed = None
    try:
        os.chdir(cwd)
        for module in modules:
            importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001 - the benchmark's code: anything may come
        failed = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        sys.stdout.flush()
        os.dup2(saved_out, 1)
        os.close(saved_out)
        sys.path.remove(cwd)
        os.chdir(here)
    seconds = round(time.monotonic() - started, 3)
    if failed is not None:
        for name in set(sys.modules) - before:
            del sys.modules[name]
        return {"preimported": [], "seconds": seconds, "failed": failed}
    return {"preimported": modules, "seconds": seconds}


def take_preimport(request: dict) -> bool:
    """Narrow the sandbox, import the request's modules and say what came of it; False when
    this server must end (it cannot narrow, or cannot fork safely after the import)."""
    modules = request["modules"]
    confine = request.get("confine")
    try:  # the side's code runs here from now on: its folders only
        if confine:
            narrow(Confinement.decode(confine))
    except OSError as exc:
        tell({"error": f"cannot narrow the sandbox before the preimport: "
                       f"{exc.strerror or exc}"})
        return False
    os.environ.update(request.get("env") or {})
    done = preimport(request["cwd"], modules)
    unsafe = unsafe_to_fork()
    if unsafe:
        tell({"error": f"after importing {', '.join(modules)} from the checkout "
                       f"ahead (the target's preimport): {unsafe}; forking is "
                       "unsafe"})
        return False
    tell(done)
    return True


def fork_job(job: dict, wake: tuple[int, int]) -> bool:
    """Fork the job's worker; True in the worker (which becomes the job), False in the
    server once it has said the worker's pid."""
    server = os.getpid()
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in wake:
            os.close(fd)
        os.setpgid(0, 0)
        if not arm_parent_death(server):
            os._exit(1)
        if job.get("cpus"):  # --devices: this worker's CPU set
            os.sched_setaffinity(0, job["cpus"])
        return True
    # set here too, so that a kill of the group cannot come before the child's own call
    # (it fails where the child has already ended and was reaped above)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.setpgid(pid, pid)
    tell({"pid": pid})
    return False


def serve() -> dict | None:
    """Fork per job until stdin ends. Returns the job in a forked worker, None in the
    server when it is done."""
    not_dumpable()  # its workers run the benchmark: they must not reach into the server
    prepare()
    unsafe = unsafe_to_fork()
    if unsafe:
        tell({"error": f"after importing torch: {unsafe}; forking is unsafe"})
        return None
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up byte is written
    pending = b""
    while True:
        ready, _, _ = select.select([0, wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
            reap()
        if 0 not in ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return None
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            message = json.loads(line)
            if message.get("sweep"):
                sweep()
            elif "preimport" in message:
                if not take_preimport(message["preimport"]):
                    return None
            elif fork_job(message, (wake_read, wake_write)):
                return message


def main() -> int:
    job = serve()
    if job is None:
        # no interpreter teardown: unloading torch took 0.4 s per server at every run's
        # end, and the preimported benchmark's atexit hooks have no business in abdiff's
        # process
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    become(job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
