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

import ctypes
import glob
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

# the CUDA libraries of torch's wheels (nvidia/<library>/lib) that torch or a library of
# them opens only at its first call in a process (cuDNN's engines, cuBLAS, NVRTC, ...)
LAZY_CUDA_LIBRARIES = ("cudnn", "cublas", "nvrtc", "cusparse", "cufft")
NVIDIA_DRIVER_NODES = ("/dev/nvidiactl", "/proc/driver/nvidia/version")


def prepare() -> None:
    """What every worker of the run does first: import torch. Not the CUDA context: creating
    one while another process times its replays is a GPU-side event; it waits for the job."""
    import torch  # noqa: F401 - the import is the work


def load_cuda_libraries() -> list[str]:
    """On a host with an NVIDIA driver, load the LAZY_CUDA_LIBRARIES of torch's CUDA wheels
    from the `nvidia` folder beside torch's own package (what torch itself loads): a fork
    server does, before its first fork, so that its workers find them loaded instead of
    each loading them at its first call (docs/performance.md: 0.07 s a GPU worker).
    Returns their file names; none where torch's CUDA libraries are not pip wheels."""
    import torch

    if not torch.version.cuda or not any(os.path.exists(n) for n in NVIDIA_DRIVER_NODES):
        return []
    return load_libraries(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),
                                       "nvidia"))


def load_libraries(wheels: str) -> list[str]:
    """dlopen (no CUDA call: no context) each of LAZY_CUDA_LIBRARIES in `wheels`
    (<library>/lib/lib*.so*); the file names of those loaded."""
    loaded = []
    for path in sorted(glob.glob(os.path.join(wheels, "*", "lib", "lib*.so*"))):
        name = os.path.basename(path)
        if any(library in name for library in LAZY_CUDA_LIBRARIES):
            try:
                ctypes.CDLL(path)
            except OSError:
                continue  # one that cannot load here is left to whoever needs it
            loaded.append(name)
    return loaded


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
