"""The process runner of every launcher: start one worker process, watch it, and
kill its whole process group when needed.

Every launcher (local, mpirun, srun) ends here: the process gets its own
session, so a timeout, Ctrl-C or SIGTERM reaches mpirun's or torch's children
too, and no orphan keeps a GPU busy after abdiff is gone. It is also where the
benchmark is kept from abdiff's credentials: an allow-listed environment, a
temporary HOME per process, and abdiff's own /proc environ blanked.
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from abdiff.errors import InfrastructureError
from abdiff.host import procfs
from abdiff.launchers.guard import not_dumpable
from abdiff.launchers.pool import StartedProcess, WorkerProcess, signal_group
from abdiff.launchers.sandbox import GUARD
from abdiff.launchers.spec import LaunchSpec
from abdiff.store.files import open_for_worker, read_worker_file
from abdiff.store.sides import CACHE_VARIABLES, WorkerFolders

if TYPE_CHECKING:  # runtime.py holds what these functions start processes in
    from abdiff.launchers.runtime import Runtime

# What benchmark processes get from abdiff's environment: what a benchmark needs to run
# (locale, paths, the GPU stack, thread counts, the launchers' own variables, the Python
# environment, Hugging Face's non-secret locations). Everything else only by --pass-env NAME:
# credentials hide in names no deny-list foresees (PIP_INDEX_URL or HTTPS_PROXY with a
# password, GH_PAT, CI_JOB_JWT_V2, DOCKER_AUTH_CONFIG, GIT_CONFIG_* headers).
ALLOWED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "TERM", "LD_LIBRARY_PATH",
    "VIRTUAL_ENV", "CONDA_PREFIX", "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_CACHE",
    "TRANSFORMERS_OFFLINE",
})
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "OMP_", "MKL_", "TORCH_", "PYTORCH_",
                    "TRITON_", "OMPI_", "PMIX_", "SLURM_", "TLLM_", "TRTLLM_")
# Variables that pick kernels or communication paths (TLLM_FMHA_LIBS, TRTLLM_ENABLE_PDL,
# NCCL_ALGO, CUDA_MODULE_LOADING, ...): a run measured under them measures another path, so
# every run records them (measure.environment) and a difference between sides is reported.
KERNEL_SELECTING_PREFIXES = ("TLLM_", "TRTLLM_", "NCCL_", "CUDA_")
# Those prefixes' names that say where something is or which device a rank uses, not which
# kernel runs: not recorded (they differ between hosts and ranks of the same run).
NOT_KERNEL_SELECTING = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDA_CACHE_PATH",
    "CUDA_VERSION", "CUDA_DRIVER_VERSION", "NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS",
    "NCCL_VERSION", "TLLM_LOG_LEVEL", *CACHE_VARIABLES,
})
# Credentials that use an allowed prefix (SLURM_JWT, a TORCH_HUB token): still kept out.
SECRET_PATTERNS = ("*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*JWT*", "*_KEY",
                   "*CREDENTIAL*", "*_AUTH*")
KILL_GRACE_S = 3.0
POLL_S = 0.05


def passed_to_workers(name: str, pass_env: list[str] | None = None) -> bool:
    """Whether a variable of abdiff's environment reaches benchmark processes."""
    if name in (pass_env or ()):
        return True
    allowed = name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)
    return allowed and not any(fnmatch.fnmatchcase(name.upper(), p) for p in SECRET_PATTERNS)


def kernel_selecting_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of `environ` that select kernels and reach workers, sorted by name."""
    return {name: environ[name] for name in sorted(environ)
            if name.startswith(KERNEL_SELECTING_PREFIXES) and name not in NOT_KERNEL_SELECTING
            and passed_to_workers(name)}


def worker_environment(extra: dict[str, str], pass_env: list[str] | None = None,
                       home: Path | None = None,
                       folders: WorkerFolders | None = None) -> dict[str, str]:
    """The allowed part of this process's environment, plus the target's variables.

    `home` replaces HOME (a fresh folder per process of abdiff's own, so `~/.netrc`,
    `~/.docker/config.json` or `~/.git-credentials` of the CI user are not there); a
    round's worker gets its side's kept HOME, TMPDIR and tool caches instead (sides.py),
    over whatever the user set for them (--pass-env TRITON_CACHE_DIR included): one folder
    of the user's would be shared by both sides.
    """
    env = {name: value for name, value in os.environ.items() if passed_to_workers(name, pass_env)}
    env.update(extra)
    if home is not None:
        env["HOME"] = str(home)
    if folders is not None:
        env.update(folders.side.environment())
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def hide_environment(pass_env: list[str] | None = None) -> None:
    """Keep this process's environment from the benchmark processes it starts.

    A worker can read `/proc/<abdiff's pid>/environ`: the environment abdiff was
    started with, as it lies in abdiff's memory. Blank there the values workers
    do not get (os.environ is Python's copy and keeps them), and make abdiff not
    dumpable, so that a process of the same (non-root) user cannot read its memory
    or attach to it. Linux only; elsewhere nothing to do. Idempotent.
    """
    if not sys.platform.startswith("linux"):
        return
    not_dumpable()
    stat = procfs.read_stat("self")
    try:
        start, end = stat.environ_span if stat else (0, 0)
    except (IndexError, ValueError):
        return
    if end <= start:
        return
    block = (ctypes.c_char * (end - start)).from_address(start)
    offset = 0
    for entry in bytes(block).split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and value and not passed_to_workers(os.fsdecode(name), pass_env):
            at = offset + len(name) + 1
            ctypes.memset(ctypes.addressof(block) + at, 0, len(value))
        offset += len(entry) + 1


@dataclass
class ProcessOutcome:
    returncode: int
    timed_out: bool
    stderr_path: Path
    # set from the launcher's exit code and messages when one of its ranks died of a signal
    rank: int | None = None
    rank_signal: str | None = None

    @property
    def signal_name(self) -> str | None:
        if self.rank_signal:
            return self.rank_signal
        if self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


def _kill_group(proc: WorkerProcess) -> int:
    """SIGTERM the process group, then SIGKILL whatever is left after a grace period;
    returns the leader's exit status.

    The SIGKILL is sent even when the grace period is cut short (a second
    Ctrl-C while waiting): no worker outlives abdiff.
    """
    try:
        signal_group(proc.pid, signal.SIGTERM)
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    finally:
        # the leader is gone or ignored SIGTERM; make sure it and its children are gone
        signal_group(proc.pid, signal.SIGKILL)
    return proc.wait()


def guarded(argv: list[str], max_memory_bytes: int | None, cpus: tuple[int, ...] = (),
            confine: list[str] | None = None) -> list[str]:
    """`argv` started through guard.py, which arms the parent-death signal and the memory
    limit inside the new process, pins it to `cpus` (where given), and enters the sandbox
    `confine` names (launchers/sandbox.py: `Sandbox.options`), before it execs `argv` (no
    preexec_fn: see guard.py)."""
    # -S: no site, so no sitecustomize (the trtllm probe) runs in the wrapper itself
    pinned = ["--cpus", ",".join(map(str, cpus))] if cpus else []
    return [sys.executable, "-S", str(GUARD), str(os.getpid()), str(max_memory_bytes or 0),
            *pinned, *(confine or []), "--", *argv]


def start_process(spec: LaunchSpec, stdout: Path | int, stderr: Path,
                  pass_env: list[str] | None, max_memory_bytes: int | None,
                  stdin: int | None = subprocess.DEVNULL, ahead: bool = False,
                  runtime: Runtime | None = None) -> StartedProcess[subprocess.Popen[bytes]]:
    """Start `spec` through guard.py in a session of its own, output appended to the files
    (stdout may be subprocess.PIPE: the fork server's messages), in `runtime`'s sandbox and
    known to it as abdiff's own (not a leftover). `ahead`: a process that waits for its jobs
    (launchers/pool.py), whose sandbox each job narrows."""
    hide_environment(pass_env)
    confine = runtime.sandbox.options(spec.folders.writable() if spec.folders else None,
                                      ahead) if runtime is not None else []
    if shutil.which(spec.argv[0], path=os.environ.get("PATH")) is None and not (
            os.access(spec.cwd / spec.argv[0], os.X_OK)):
        # checked here, because once guard.py runs a failed exec is only an exit code
        raise InfrastructureError(f"cannot start {spec.argv[0]}: no such program; install it "
                                  "or put it on PATH (`abdiff doctor` lists what is missing)")
    home = None if spec.folders else tempfile.TemporaryDirectory(prefix="abdiff-home-",
                                                                 ignore_cleanup_errors=True)
    try:
        with contextlib.ExitStack() as files:
            out = stdout if isinstance(stdout, int) else files.enter_context(
                os.fdopen(open_for_worker(stdout), "ab"))
            err = files.enter_context(os.fdopen(open_for_worker(stderr), "ab"))
            proc = subprocess.Popen(
                guarded(spec.argv, max_memory_bytes, spec.cpus, confine),
                cwd=spec.cwd,
                env=worker_environment(spec.env, pass_env, Path(home.name) if home else None,
                                       spec.folders),
                stdin=stdin,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            if runtime is not None:
                runtime.leftovers.record(proc.pid)
    except OSError as exc:
        if home is not None:
            home.cleanup()
        raise InfrastructureError(f"cannot start {spec.argv[0]}: {exc.strerror}") from None
    return StartedProcess(proc, home)


def pipe(stream: IO[bytes] | None, pid: int) -> IO[bytes]:
    """stdin or stdout of a process that start_process started with subprocess.PIPE."""
    if stream is None:
        raise RuntimeError(f"process {pid} was started without that pipe")
    return stream


def run_process(
    spec: LaunchSpec,
    log_dir: Path,
    progress_path: Path,
    timeout_s: float | None,
    pass_env: list[str] | None = None,
    max_memory_bytes: int | None = None,
    runtime: Runtime | None = None,
) -> ProcessOutcome:
    """Run `spec` to completion in its own session; stdout and stderr go to files in log_dir.

    In `runtime`'s sandbox; where it holds a warm pool (launchers/warm.py), a process of
    the pool takes the job when it can, instead of a new one. The timeout is an inactivity
    limit: it restarts whenever `progress_path` grows (the worker logs each config's
    start), so it bounds one config, not the whole round. KeyboardInterrupt and other
    exceptions kill the group before they propagate.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = log_dir / "stdout.txt", log_dir / "stderr.txt"
    pool = runtime.pool if runtime is not None else None
    started = pool.take(spec, stdout_path, stderr_path) if pool is not None else None
    if started is None:
        started = start_process(spec, stdout_path, stderr_path, pass_env, max_memory_bytes,
                                runtime=runtime)
    proc = started.proc
    last_size, deadline = -1, None
    try:
        while (returncode := proc.poll()) is None:
            size = progress_path.stat().st_size if progress_path.exists() else 0
            if size != last_size:
                last_size = size
                deadline = None if timeout_s is None else time.monotonic() + timeout_s
            if deadline is not None and time.monotonic() > deadline:
                returncode = _kill_group(proc)
                started.close()
                return ProcessOutcome(returncode, True, stderr_path)
            # wakes the moment the worker ends: the next one starts without a poll's delay
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(POLL_S)
    except BaseException:
        _kill_group(proc)
        started.close()
        raise
    # the leader exited; children it left behind in the group go with it
    started.close()
    return ProcessOutcome(returncode, False, stderr_path)


SKIP_PREFIXES = ("Traceback", "File ", "Fatal Python error", "Current thread", "Thread 0x",
                 "Extension modules:", "Stack (most recent", "  ", "\t", "^", "~")


def last_meaningful_line(path: Path, limit: int = 500, since: str | None = None,
                         ignore: re.Pattern[str] | None = None) -> str | None:
    """The last stderr line that says what went wrong (not a traceback frame).

    With `since`, only lines after the last line starting with it count: the
    worker marks each config's start, so a config that dies silently is never
    blamed with the previous config's traceback. Lines matching `ignore` (a
    launcher's own report of the death) are passed over.
    """
    lines = read_worker_file(path, tail=65536).splitlines()
    for line in reversed(lines):
        if since is not None and line.startswith(since):
            return None
        if line.strip() and not line.startswith(SKIP_PREFIXES) and not (
                ignore is not None and ignore.search(line)):
            return line.strip()[:limit]
    return None
