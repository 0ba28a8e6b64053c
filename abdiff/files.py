"""File-system helpers every stage shares: the one atomic writer and the one
"is this path inside that folder" check (links resolved)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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


def path_under_root(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Is `path` (links resolved) `root` itself or inside it?"""
    real, top = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return real == top or top in real.parents
