"""The two kinds of failure the CLI turns into exit codes (DESIGN.md, "Commands")."""


class InputError(Exception):
    """Bad input or usage: the CLI prints the message as one line and exits 2."""

    exit_code = 2


class InfrastructureError(Exception):
    """The tool could not run at all (git or launcher failure): one line, exit 3."""

    exit_code = 3


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
