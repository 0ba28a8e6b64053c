# PYTHON_ARGCOMPLETE_OK (shell completion: abdiff/completion.py)
"""Command-line entry point: parses arguments and dispatches to commands/.

No pipeline logic lives here. Errors become exit codes: InputError -> 2,
InfrastructureError and OSError (disk full, unwritable folder) -> 3, each
printed as one line on stderr. Any other exception is a bug in abdiff: one line
"internal error: ..." naming the file its traceback was saved to (the run's
state folder when one was open, else the temporary folder), exit 3, never the
exit 1 that means "unintended change".

Ctrl-C (SIGINT) and SIGTERM stop abdiff cleanly: the signal becomes an
`Interrupted` exception, the running worker's process group is killed, the
rounds measured so far are saved, what the command held open is released (its
runtime: launchers/runtime.py, closed by the command itself), and abdiff exits
130 (SIGINT) or 143 (SIGTERM), 128 plus the signal number as a shell reports it. Re-running the
same command continues where it stopped. A second signal while abdiff is
stopping is ignored, so the stop (bounded by the kill grace period) cannot be
cut short half-way through saving.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from abdiff import __version__
from abdiff.commands import NAMES
from abdiff.errors import (
    InfrastructureError,
    InputError,
    InternalError,
    did_you_mean,
    one_line,
    save_traceback,
)
from abdiff.reports.printable import printable


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors raise InputError (one line, exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # prog is "abdiff" or "abdiff diff"; the CLI adds "abdiff: error:" itself
        where = self.prog.removeprefix("abdiff").strip()
        raise InputError(f"{where + ': ' if where else ''}{message} (see --help)")


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: stop, keep what was measured, exit 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into one Interrupted exception while a command runs."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    stopping = False

    def handler(signum: int, _frame: object) -> None:
        nonlocal stopping
        if stopping:
            return  # already stopping: let the workers be killed and the rounds saved
        stopping = True
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def build_parser(first_word: str | None = None,
                 started: float | None = None) -> argparse.ArgumentParser:
    """The parser; with the subcommand's name, only that subcommand is loaded. `started`:
    when the command began (time.monotonic(); now, when None), its `started` default."""
    started = time.monotonic() if started is None else started
    from abdiff.commands import commands

    parser = _Parser(
        prog="abdiff",
        description="Differential A/B regression testing for layer-wise GPU benchmarks. "
        "Usage: abdiff A..B --configs SUITE, or one of the subcommands below.",
    )
    parser.add_argument("--version", action="version", version=f"abdiff {__version__}")
    parser.set_defaults(started=started)  # a run's wall time counts its imports (Execution)
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for module in commands(first_word):
        module.register(sub)
    return parser


def check_command(word: str, commands: list[str]) -> None:
    """An unknown command word -> one line with what was probably meant.

    `main.pr` (one dot) is a range typo, anything else is compared with the
    command names (difflib).
    """
    if word in commands or word.startswith("-"):
        return
    guesses = difflib.get_close_matches(word, commands, n=2)
    if "." in word:
        guesses.insert(0, word.replace(".", "..", 1))
    hint = did_you_mean(word, commands, guesses=guesses)
    raise InputError(f"unknown command {word!r}: expected A..B or one of {', '.join(commands)}"
                     + hint)


class _Stderr(logging.Handler):
    """What library code reports (`logging.getLogger("abdiff....")`), as `abdiff: ...` lines
    on the standard error of the moment."""

    def emit(self, record: logging.LogRecord) -> None:
        # a message may carry text of the benchmark's (a suite file of the pull request)
        print(f"abdiff: {printable(record.getMessage())}", file=sys.stderr, flush=True)


def _report_to_stderr() -> None:
    logger = logging.getLogger("abdiff")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        logger.addHandler(_Stderr())
    logger.setLevel(logging.INFO)


def _error(exc: BaseException) -> None:
    """`abdiff: error: ...`: one line in a pipe or a log (a script greps it whole), wrapped
    to the terminal's width where a person reads it."""
    text = f"abdiff: error: {printable(one_line(exc))}"
    if sys.stderr.isatty():
        from abdiff.reports.table import fit, terminal_width

        text = fit(text, terminal_width())
    print(text, file=sys.stderr)


# a share's value may start with "-" (`--min-effect -2%`): argparse reads such a word as an
# option and says "expected one argument"; joined to its option, the value's own check
# says what is wrong with it
SHARE_OPTIONS = ("--min-effect", "--alpha")
SIGNED_NUMBER = re.compile(r"-(\d+\.?\d*|\.\d+)%?")


def _values_joined(argv: list[str]) -> list[str]:
    """`argv` with a share option and its signed value as one word (`--alpha=-1%`)."""
    joined: list[str] = []
    for word in argv:
        if joined and joined[-1] in SHARE_OPTIONS and SIGNED_NUMBER.fullmatch(word):
            joined[-1] = f"{joined[-1]}={word}"
        else:
            joined.append(word)
    return joined


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()  # the command's wall time: its imports below are its own
    _report_to_stderr()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions: answer, exit
        from abdiff.completion import complete

        complete(build_parser)
    argv = _values_joined(list(sys.argv[1:] if argv is None else argv))
    try:
        with _stop_on_signals():
            # `abdiff A..B ...` has no subcommand word: the range is the command.
            if argv and argv[0] not in NAMES:
                from abdiff.commands import diff

                if diff.looks_like_range(argv[0]):
                    argv = ["diff", *argv]
            if argv:
                check_command(argv[0], list(NAMES))
            parser = build_parser(argv[0] if argv else None, started)
            args = parser.parse_args(argv)
            if not getattr(args, "command", None):
                raise InputError("no command: try `abdiff demo`, `abdiff A..B --configs SUITE`, "
                                 "or `abdiff --help` for the subcommands")
            return int(args.run(args))
    except (InputError, InfrastructureError) as exc:
        _error(exc)
        return exc.exit_code
    except BrokenPipeError:
        # the reader went away (`abdiff ... | head`): nothing more to say, to anyone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        # a full disk, a read-only or vanished folder: the tool could not run. Never the
        # exit 1 of an uncaught exception, which would read as "unintended change".
        _error(exc)
        return InfrastructureError.exit_code
    except InternalError as exc:
        print(f"abdiff: internal error: {printable(one_line(exc))} (traceback in "
              f"{exc.traceback_path}; "
              "measured rounds are kept: the same command with --resume reports them)",
              file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a bug outside a run: still one line and exit 3
        path = save_traceback(exc, Path(tempfile.gettempdir()))
        print(f"abdiff: internal error: {type(exc).__name__}: {printable(one_line(exc))} "
              f"(traceback in {path})", file=sys.stderr)
        return InternalError.exit_code
    except KeyboardInterrupt as exc:
        what = "terminated (SIGTERM)" if isinstance(exc, Interrupted) and \
            exc.signum == signal.SIGTERM else "interrupted"
        print(f"abdiff: {what}; measured rounds are kept (re-run the same command to "
              "continue)", file=sys.stderr)
        return exc.exit_code if isinstance(exc, Interrupted) else 130


def command() -> NoReturn:
    """The `abdiff` command: `main`, then the end of the process without the interpreter's
    teardown (unloading torch where the command imported it, as on a GPU host: 0.3 s on
    the 2-core VM). Everything it wrote is closed by then; its output is flushed here."""
    code = main()
    logging.shutdown()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass  # the reader went away (`abdiff ... | head`): nothing more to say
    except OSError as exc:  # a full disk under `> report.txt`: the report is not whole
        with contextlib.suppress(OSError):
            print(f"abdiff: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        code = InfrastructureError.exit_code
    with contextlib.suppress(OSError):
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    command()
