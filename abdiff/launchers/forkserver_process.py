"""The fork server: `python -m abdiff.launchers.forkserver_process`.

A run starts dozens of worker processes, and each imports torch: on a 2-core
machine that import was more than half of a run's wall time. This process
imports torch once (standby_worker.prepare: nothing of either checkout), then
forks one worker per job; the fork becomes the job (standby_worker.become) in
a process group of its own. While workers measure, it only sleeps: unlike a
worker started ahead (standby.py), it takes no core from the timed work.

One JSON object per line. In, on stdin: a job {"cwd", "argv", "stdout",
"stderr", "env"}, or {"sweep": true} between jobs (see `sweep`). Out, on stdout:
{"swept": true|false} after a sweep, {"pid": N} once the job's process exists,
{"exit": N, "returncode": R} when it ended (R < 0: killed by signal -R, as
subprocess reports it), or {"error": "..."} and the server ends (it cannot
fork safely). End of stdin ends the server; a worker it leaves is killed with
it (parent-death signal).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
from pathlib import Path

from abdiff.launchers.guard import arm_parent_death, not_dumpable
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


def serve() -> dict | None:
    """Fork per job until stdin ends. Returns the job in a forked worker, None in the
    server when it is done."""
    not_dumpable()  # its workers run the benchmark: they must not reach into the server
    prepare()
    if thread_count() > 1:
        # A fork copies only the forking thread: a lock another thread held stays locked
        # in the copy. numpy's OpenBLAS starts a thread pool on import and stops it before
        # every fork (pthread_atfork); a trial fork shows whether all extra threads do.
        trial = os.fork()
        if trial == 0:
            os._exit(0)
        os.waitpid(trial, 0)
    if thread_count() > 1:
        tell({"error": f"{thread_count()} threads after importing torch that a fork does "
                       "not stop; forking is unsafe"})
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
            if json.loads(line).get("sweep"):
                sweep()
                continue
            server = os.getpid()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_read)
                os.close(wake_write)
                os.setpgid(0, 0)
                if not arm_parent_death(server):
                    os._exit(1)
                return json.loads(line)
            # set here too, so that a kill of the group cannot come before the child's own call
            # (it fails where the child has already ended and was reaped above)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.setpgid(pid, pid)
            tell({"pid": pid})


def main() -> int:
    job = serve()
    if job is None:
        return 0
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    become(job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
