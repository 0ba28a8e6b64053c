"""`abdiff run REV --configs SUITE --out RUNFILE`: measure one side only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from abdiff.commands.common import add_measure_options, measuring, output_path
from abdiff.run.session import run_one_side
from abdiff.store.records import write_run_file


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="measure one revision and write a run file")
    parser.add_argument("rev", metavar="REV")
    add_measure_options(parser)
    parser.add_argument("--out", type=Path, required=True, metavar="RUNFILE")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    output_path(args.out, "--out")  # a typo in the path is refused before measuring
    run_file = run_one_side(*measuring(args), args.rev, "run")
    write_run_file(args.out, run_file)
    rounds = sum(len(c.rounds) for c in run_file.configs)
    print(f"abdiff: wrote {args.out} (run file of {run_file.rev} {run_file.sha[:10]}: "
          f"{len(run_file.configs)} configs, {rounds} config-rounds; compare two with "
          "`abdiff compare A.json B.json`)", file=sys.stderr)
    return 0
