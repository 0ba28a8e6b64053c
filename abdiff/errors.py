"""The two kinds of failure the CLI turns into exit codes (DESIGN.md, "Commands")."""


class InputError(Exception):
    """Bad input or usage: the CLI prints the message as one line and exits 2."""

    exit_code = 2


class InfrastructureError(Exception):
    """The tool could not run at all (git or launcher failure): one line, exit 3."""

    exit_code = 3
