"""The process runner of every launcher: start one worker process, watch it, and
kill its whole process group when needed.

Every launcher (local, mpirun, srun) ends here: the process gets its own
session, so a timeout, Ctrl-C or SIGTERM reaches mpirun's or torch's children
too, and no orphan keeps a GPU busy after abdiff is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abdiff.targets.base import LaunchSpec

# Names never passed to benchmark code unless --pass-env names them: a pull
# request's benchmark must not read the CI's credentials.
SECRET_PATTERNS = (
    "*_TOKEN", "*_SECRET", "*_SECRET_*", "*_PASSWORD", "*_PASSWD", "*_API_KEY", "*_ACCESS_KEY*",
    "GITHUB_TOKEN", "GH_TOKEN", "AWS_*", "AZURE_*", "GOOGLE_APPLICATION_CREDENTIALS",
    "HF_TOKEN", "*_CREDENTIALS", "*_PRIVATE_KEY", "SSH_AUTH_SOCK",
)
KILL_GRACE_S = 3.0
POLL_S = 0.05
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def worker_environment(extra: dict[str, str], pass_env: list[str] | None = None) -> dict[str, str]:
    """This process's environment without credentials, plus the target's variables.

    Names match SECRET_PATTERNS whatever their case (`github_token` too).
    """
    keep = set(pass_env or [])
    env = {
        name: value
        for name, value in os.environ.items()
        if name in keep
        or not any(fnmatch.fnmatchcase(name.upper(), p) for p in SECRET_PATTERNS)
    }
    env.update(extra)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


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


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after a grace period.

    The SIGKILL is sent even when the grace period is cut short (a second
    Ctrl-C while waiting): no worker outlives abdiff.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=KILL_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    finally:
        # the leader is gone or ignored SIGTERM; make sure it and its children are gone
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def parent_death_signal(parent: int | None = None) -> Callable[[], None] | None:
    """Linux: a function that makes the calling process get SIGKILL when its parent dies.

    Looked up in the parent (not in the forked child, where loading a library
    is unsafe); `parent` is the process expected to be the caller's parent
    (default: this one). Other systems: None.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid() if parent is None else parent

    def arm() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # abdiff died before the line above ran
            os._exit(1)

    return arm


def _child_setup(max_memory_bytes: int | None) -> Callable[[], None]:
    """Runs in the worker between fork and exec: memory limit, and die with abdiff.

    A worker outlives a SIGKILLed abdiff otherwise (it is in its own session,
    out of reach of the terminal's signals); the parent-death signal reaches the
    worker process itself, and what it started is in its process group.
    """
    arm = parent_death_signal()

    def setup() -> None:
        if arm is not None:
            arm()
        if max_memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (max_memory_bytes, max_memory_bytes))

    return setup


def run_process(
    spec: LaunchSpec,
    log_dir: Path,
    progress_path: Path,
    timeout_s: float | None,
    pass_env: list[str] | None = None,
    max_memory_bytes: int | None = None,
) -> ProcessOutcome:
    """Run `spec` to completion in its own session; stdout and stderr go to files in log_dir.

    The timeout is an inactivity limit: it restarts whenever `progress_path`
    grows (the worker logs each config's start), so it bounds one config, not
    the whole round. KeyboardInterrupt and other exceptions kill the group
    before they propagate.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    stderr_path = log_dir / "stderr.txt"
    with open(log_dir / "stdout.txt", "ab") as out, open(stderr_path, "ab") as err:
        try:
            proc = subprocess.Popen(
                spec.argv,
                cwd=spec.cwd,
                env=worker_environment(spec.env, pass_env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=_child_setup(max_memory_bytes),
            )
        except OSError as exc:
            from abdiff.errors import InfrastructureError

            raise InfrastructureError(f"cannot start {spec.argv[0]}: {exc.strerror}") from None
        last_size, deadline = -1, None
        try:
            while proc.poll() is None:
                size = progress_path.stat().st_size if progress_path.exists() else 0
                if size != last_size:
                    last_size = size
                    deadline = None if timeout_s is None else time.monotonic() + timeout_s
                if deadline is not None and time.monotonic() > deadline:
                    _kill_group(proc)
                    return ProcessOutcome(proc.returncode, True, stderr_path)
                time.sleep(POLL_S)
        except BaseException:
            _kill_group(proc)
            raise
        # the leader exited; children it left behind in the group go with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return ProcessOutcome(proc.returncode, False, stderr_path)


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
    if not path.exists():
        return None
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - 65536))
        lines = handle.read().decode("utf-8", errors="replace").splitlines()
    for line in reversed(lines):
        if since is not None and line.startswith(since):
            return None
        if line.strip() and not line.startswith(SKIP_PREFIXES) and not (
                ignore is not None and ignore.search(line)):
            return line.strip()[:limit]
    return None
