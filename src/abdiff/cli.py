"""Command-line entry point: parses arguments and dispatches to commands/.

No pipeline logic lives here. Errors become exit codes: InputError -> 2,
InfrastructureError -> 3, each printed as one line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from abdiff.errors import InfrastructureError, InputError


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors raise InputError (one line, exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    from abdiff.commands import COMMANDS

    parser = _Parser(
        prog="abdiff",
        description="Differential A/B regression testing for layer-wise GPU benchmarks. "
        "Usage: abdiff A..B --configs SUITE, or one of the subcommands below.",
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from abdiff.commands import diff

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # `abdiff A..B ...` has no subcommand word: the range is the command.
        if argv and diff.looks_like_range(argv[0]):
            argv = ["diff", *argv]
        args = build_parser().parse_args(argv)
        if not getattr(args, "command", None):
            build_parser().print_help(sys.stderr)
            return 2
        return int(args.run(args))
    except (InputError, InfrastructureError) as exc:
        print(f"abdiff: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("abdiff: interrupted; measured rounds are kept (re-run with --resume)",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
