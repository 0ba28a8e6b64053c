"""The failures the CLI turns into exit codes (README, "Exit codes"): bad input (2),
the tool could not run (3), a bug in abdiff (3, with its traceback saved)."""

from __future__ import annotations

import difflib
import os
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class InputError(Exception):
    """Bad input or usage: the CLI prints the message as one line and exits 2."""

    exit_code = 2


class InfrastructureError(Exception):
    """The tool could not run at all (git or launcher failure): one line, exit 3."""

    exit_code = 3


class InternalError(Exception):
    """A bug in abdiff itself: one line naming the saved traceback, exit 3 (never the 1 of
    an unintended change)."""

    exit_code = 3

    def __init__(self, error: BaseException, traceback_path: Path) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.traceback_path = traceback_path


def save_traceback(error: BaseException, folder: Path) -> Path:
    """Write `error`'s traceback to a new file in `folder` and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder, prefix="traceback-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("".join(traceback.format_exception(error)))
    return Path(name)


@contextmanager
def internal_errors(folder: Path) -> Iterator[None]:
    """An unexpected exception inside becomes InternalError, its traceback kept in `folder`
    (a run's state folder, beside the rounds already measured)."""
    try:
        yield
    except (InputError, InfrastructureError, InternalError, OSError):
        raise
    except Exception as exc:  # noqa: BLE001 - any other exception is abdiff's own bug
        raise InternalError(exc, save_traceback(exc, folder)) from exc
def one_line(text: object, limit: int | None = None) -> str:
    """A message as one line (a YAML, git or HTTP message may hold several), clipped to
    `limit` characters where given."""
    line = " ".join(str(text).split())
    return line if limit is None or len(line) <= limit else line[: limit - 3] + "..."


def exception_line(exc: BaseException) -> str:
    """`Type: last line of the message` for an exception raised by benchmark code, whose
    last line (of an assertion or a CUDA error) is the one that says what failed."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1].strip()}" if lines else type(exc).__name__


def did_you_mean(word: str, known: list[str] | set[str], prefix: str = "",
                 guesses: list[str] | None = None) -> str:
    """"; did you mean X?" (or "X or Y") for a mistyped `word`, else "": a name that
    differs only in case first, then the close ones (difflib); `guesses` when the caller
    has its own (a range typo). `prefix` goes before each guess (`backend=`)."""
    if guesses is None:
        same_case = sorted(k for k in known if k.lower() == word.lower() and k != word)
        guesses = same_case or difflib.get_close_matches(word, sorted(known), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(prefix + g for g in guesses)}?" if guesses else ""
