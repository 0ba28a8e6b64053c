"""`abdiff run REV --configs SUITE --out RUNFILE`: measure one side only."""

from __future__ import annotations

import argparse
from pathlib import Path

from abdiff.commands.common import add_measure_options
from abdiff.records import write_run_file
from abdiff.session import measure_one_side


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="measure one revision and write a run file")
    parser.add_argument("rev", metavar="REV")
    add_measure_options(parser)
    parser.add_argument("--out", type=Path, required=True, metavar="RUNFILE")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    write_run_file(args.out, measure_one_side(args, args.rev, "run"))
    return 0
