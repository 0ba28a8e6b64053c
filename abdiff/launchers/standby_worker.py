"""A worker process started before its job: `python -m abdiff.launchers.standby_worker`.

Python's start and the torch import cost a second or more per worker process,
and a run starts dozens. The local launcher starts the next worker this way
while the current one measures (launchers/standby.py): this process does that
side-independent part, then waits for one line on stdin, its job, as JSON:
{"cwd", "argv", "stdout", "stderr"}. It then becomes `argv` (`python -m MODULE
ARGS...`) in `cwd`, as if it had been started there: the checkout's folder first
on sys.path, its output in the job's files. Nothing of a checkout is imported
before the job names the checkout: standard library and torch only until then.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

from abdiff.launchers.guard import (
    CANNOT_CONFINE,
    CANNOT_CONFINE_LINE,
    Confinement,
    arm_parent_death,
    exit_as,
    narrow,
)
from abdiff.store.files import open_for_worker


def prepare() -> None:
    """What every worker of the run does first: import torch. Not the CUDA context: creating
    one while another process times its replays is a GPU-side event; it waits for the job."""
    import torch  # noqa: F401 - the import is the work


def become(job: dict) -> None:
    """Run the job's `python -m MODULE ARGS...` in its folder, with its output files, its
    environment (its side's HOME and caches) and, in a sandbox, writable only where its
    "confine" says (guard.narrow)."""
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        handle = open_for_worker(path)
        os.dup2(handle, fd)
        os.close(handle)
    if job.get("confine"):
        try:
            narrow(Confinement.decode(job["confine"]))
        except OSError as exc:
            print(f"{CANNOT_CONFINE_LINE}{exc.strerror or exc}", file=sys.stderr, flush=True)
            raise SystemExit(CANNOT_CONFINE) from None
    if "env" in job:
        os.environ.clear()
        os.environ.update(job["env"])
    os.chdir(job["cwd"])
    _, flag, module, *args = job["argv"]
    if flag != "-m":
        raise SystemExit(f"abdiff standby worker: cannot run {job['argv']!r} (only python -m)")
    # what `python -m` puts first: the folder it was started in (this process was started
    # with -P, its own folder left out of its path)
    sys.path.insert(0, os.getcwd())
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def main() -> int:
    prepare()
    line = sys.stdin.readline()
    if not line:  # abdiff ended the run without a job for this process
        return 0
    job = json.loads(line)
    if job.get("confine"):
        # a user namespace cannot be made by a process with threads (torch's import may have
        # started some): a fork has one thread; this process ends as it ends
        child = os.fork()
        if child:
            return exit_as(child)
        if not arm_parent_death(os.getppid()):
            os._exit(1)
    become(job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
