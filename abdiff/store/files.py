"""File-system helpers every stage shares: the one atomic writer, the one "is this path
inside that folder" check (links resolved), and the in-use lock that keeps `cache clean`
away from what a running measurement uses."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from abdiff.errors import InfrastructureError, InputError


def write_atomic(path: Path, text: str) -> None:
    """Write text so that readers see the old file or the new one, never half of it.

    Write to a temporary file in the same folder, fsync, then rename over the
    target (rename is atomic within one file system).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report or baseline is shared
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def written_in_place(path: Path) -> bool:
    """`write_output` writes into what is at `path` (a device or a pipe; a link under /dev,
    as /dev/stdout; a name under /proc/self/fd or /dev/fd), not through a file of its own
    renamed there. A file in a folder under /dev (/dev/shm) is a file."""
    named = os.path.abspath(path)
    try:
        mode = os.lstat(named).st_mode
    except OSError:
        mode = 0
    return (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)
            or (stat.S_ISLNK(mode) and named.startswith("/dev/"))
            or named.startswith(("/proc/self/fd/", "/dev/fd/")))


def write_output(path: Path, text: str) -> None:
    """A file the user named (--output, --json, --html). A device or a pipe there
    (/dev/null, /dev/stdout, a named pipe) is written into, where write_atomic's rename
    would replace it (as root, /dev/null itself): the path itself is one (never through
    a link a checkout may hold: that is replaced, as any file), or a link under /dev, or
    it is named under /proc/self/fd (`written_in_place`). A pipe without its reader is
    refused, not waited for. Anything else as write_atomic writes."""
    named = os.path.abspath(path)
    if not written_in_place(path):
        write_atomic(path, text)
        return
    try:  # no O_CREAT: what is not there already is not a device
        fd = os.open(named, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        why = "a pipe nothing reads yet" if exc.errno == errno.ENXIO else exc.strerror
        raise InputError(f"cannot write {path}: {why}; name a file, or start the pipe's "
                         "reader first") from None
    os.set_blocking(fd, True)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def own_folder(folder: Path) -> Path:
    """`folder`, made if missing, refused (InfrastructureError) when something else is
    there: a link (the benchmark could have put it in place of abdiff's folder, and abdiff
    would write, lock or delete through it) or a file."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:
        pass
    except OSError as exc:
        raise InfrastructureError(f"cannot make {folder}: {exc.strerror}") from None
    status = os.lstat(folder)
    if not stat.S_ISDIR(status.st_mode):
        what = "a link" if stat.S_ISLNK(status.st_mode) else "not a folder"
        raise InfrastructureError(f"{folder} is {what}, where abdiff keeps a folder of its own "
                                  "(benchmark code may have put it there); remove it and run "
                                  "again")
    return folder


WORKER_FILE_LIMIT = 256 * 2**20
"""The most of a worker's file abdiff reads (its first bytes): a record log of thousands of
rounds is a few MB, and a benchmark that writes gigabytes must not take abdiff's memory."""


def read_worker_file(path: Path, tail: int | None = None,
                     limit: int | None = WORKER_FILE_LIMIT) -> str:
    """The text of a file a worker wrote, its last `tail` bytes if given ("" when there is
    none), at most `limit` bytes (None: all, for abdiff's own files in a folder a worker
    could reach). Read without following a link (or opening a FIFO): the benchmark can
    replace its own output by a link to a file of abdiff's user that its sandbox hides from
    it, which abdiff would then read for it."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # missing, or a link (ELOOP)
        return ""
    with os.fdopen(handle, "rb") as opened:
        status = os.fstat(handle)
        if not stat.S_ISREG(status.st_mode):
            return ""
        if tail is not None:
            opened.seek(max(0, status.st_size - tail))
        most = min((size for size in (tail, limit) if size is not None), default=-1)
        return opened.read(most).decode("utf-8", errors="replace")


def worker_json(text: str | bytes, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """JSON that the benchmark's code could have written (a record log's line, a fork
    server's message, a benchmark's output), decoded. Whatever abdiff cannot hold raises
    ValueError, as text that is not JSON does: a number of more digits than Python
    converts (that is a ValueError already) and nesting deeper than the interpreter's stack
    (a RecursionError otherwise, which no caller expects)."""
    try:
        return json.loads(text, parse_constant=parse_constant, parse_int=_bounded_int)
    except RecursionError:
        raise ValueError("JSON nested deeper than abdiff reads") from None


def _bounded_int(text: str) -> int:
    """An integer of JSON, refused beyond 4300 digits as Python 3.11 refuses it (3.10.0-6,
    or PYTHONINTMAXSTRDIGITS=0, would take it, and its conversion time is quadratic)."""
    if len(text.lstrip("-")) > 4300:
        raise ValueError("an integer of more than 4300 digits")
    return int(text)


def open_for_worker(path: Path) -> int:
    """A descriptor of `path` for a worker's output, appended to, never through a link."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o644)


def remove_path(path: Path) -> None:
    """Remove whatever is at `path`: a folder with its contents, a file, or a link (never
    followed: a link the benchmark planted where abdiff keeps a round names a folder abdiff
    must not empty)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def path_under_root(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Is `path` (links resolved) `root` itself or inside it?"""
    real, top = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return real == top or top in real.parents


def open_lock(path: Path) -> int:
    """A descriptor of the lock file `path` (made if missing), opened without following a
    link: a lock the benchmark replaced by a link to a file of the user must not open (let
    alone truncate) that file. A link or a non-file there: InfrastructureError."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o600)
    except OSError as exc:
        raise InfrastructureError(f"cannot open the lock {path}: {exc.strerror} (a link where "
                                  "abdiff keeps its lock is refused); remove it and run again"
                                  ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InfrastructureError(f"{path} is not a file, where abdiff keeps a lock; remove it "
                                  "and run again")
    return fd


def lock_exclusively(path: Path, timeout_s: float = 0.0) -> int | None:
    """Hold an exclusive lock on `path` (open_lock; flock, released when the descriptor is
    closed or the process ends): its descriptor, or None when another process still holds
    it after `timeout_s` seconds."""
    fd = open_lock(path)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


def hold_in_use(lock_path: Path) -> int:
    """Mark something as in use until this process ends: a shared POSIX lock on
    `lock_path`, whose descriptor is returned and kept open (the kernel drops it when the
    process exits, however it exits). Any number of processes may hold it at once.

    POSIX locks (lockf), not flock: they belong to the process, so the process that holds
    one may still clean up itself; only other processes are refused."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock(lock_path)
    fcntl.lockf(fd, fcntl.LOCK_SH)
    return fd


@contextlib.contextmanager
def unless_in_use(lock_path: Path, what: str) -> Iterator[None]:
    """Run the block holding `lock_path` exclusively; InfrastructureError (exit 3) right
    away when a running process holds it with `hold_in_use`."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock(lock_path)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # EAGAIN or EACCES: another process holds it
            raise InfrastructureError(f"{what} in use by a running abdiff; let it finish (or "
                                      "stop it), then clean again") from None
        yield
    finally:
        os.close(fd)


def read_text(path: Path, what: str) -> str:
    """A UTF-8 file's text; every way it can be unreadable is one InputError (exit 2)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read {what} ({exc})") from None
