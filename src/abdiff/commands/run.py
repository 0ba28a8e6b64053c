"""`abdiff run REV --configs SUITE --out RUNFILE`: measure one side only."""

from __future__ import annotations

import argparse
from pathlib import Path

from abdiff.commands.common import add_measure_options, prepare_bench, side_run, state_dir
from abdiff.records import write_run_file
from abdiff.revs import open_repo, resolve_rev
from abdiff.schedule import Measurement, Plan, measure


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="measure one revision and write a run file")
    parser.add_argument("rev", metavar="REV")
    add_measure_options(parser)
    parser.add_argument("--out", type=Path, required=True, metavar="RUNFILE")
    parser.set_defaults(run=run)


def measure_one_side(args: argparse.Namespace, rev: str, kind: str):
    """The rounds of one side (no interleaving partner), kept like a diff's."""
    repo_root = open_repo(args.repo)
    bench = prepare_bench(args, repo_root)
    sides = {"A": side_run(bench, resolve_rev(repo_root, rev))}
    measurement = Measurement.open(state_dir(bench, sides, kind), sides, args.resume, args.seed)
    one_side = Plan(args.rounds, args.rounds)
    measure(measurement, bench.suite.configs, bench.target, bench.launcher, bench.settings,
            one_side, lambda _a, _b: [], args.quiet)
    return sides["A"].run


def run(args: argparse.Namespace) -> int:
    write_run_file(args.out, measure_one_side(args, args.rev, "run"))
    return 0
