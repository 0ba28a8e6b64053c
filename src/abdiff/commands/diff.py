"""`abdiff A..B --configs SUITE`: measure both sides interleaved, compare, report.

The range is the command word: `abdiff main..pr` is parsed as `abdiff diff main..pr`.
"""

from __future__ import annotations

import argparse
import sys

from abdiff.commands.common import (
    add_compare_options,
    add_measure_options,
    check_min_effect,
    emit_reports,
    expect_scope,
    prepare_bench,
    side_run,
    state_dir,
)
from abdiff.compare import compare_runs
from abdiff.records import RunFile
from abdiff.revs import open_repo, resolve_range
from abdiff.schedule import Measurement, Plan, measure
from abdiff.stats import DEFAULT_ALPHA, needs_more_rounds
from abdiff.suites.loader import MATRIX_KEYS


def looks_like_range(word: str) -> bool:
    return ".." in word and not word.startswith("-")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("diff", help="A..B: measure two revisions and compare (the default)",
                            description="Measure A and B interleaved and compare them. "
                            "A..B, A...B (merge base of A and B as A), A.. (B = working tree).")
    parser.add_argument("range", metavar="A..B")
    add_measure_options(parser)
    add_compare_options(parser)
    parser.add_argument("--max-rounds", type=int, default=Plan.max_rounds,
                        help=f"adaptive ceiling of rounds per side (default {Plan.max_rounds})")
    parser.set_defaults(run=run)


def undecided_configs(expect: dict, min_effect: float):
    """Which configs still need rounds: those whose verdict would be inconclusive."""

    def undecided(run_a: RunFile, run_b: RunFile) -> list[str]:
        result = compare_runs(run_a, run_b, expect, min_effect, DEFAULT_ALPHA)
        return [c.id for c in result.configs
                if c.verdict == "inconclusive" and needs_more_rounds(c.latency)]

    return undecided


def run(args: argparse.Namespace) -> int:
    min_effect = check_min_effect(args.min_effect)
    if args.max_rounds < args.rounds:
        args.max_rounds = args.rounds
    repo_root = open_repo(args.repo)
    bench = prepare_bench(args, repo_root)
    expect = expect_scope(args, bench.suite.expect, list(MATRIX_KEYS))
    spec_a, spec_b = resolve_range(repo_root, args.range)
    sides = {"A": side_run(bench, spec_a), "B": side_run(bench, spec_b)}
    where = state_dir(bench, sides, "diff")
    measurement = Measurement.open(where, sides, args.resume, args.seed)
    measure(measurement, bench.suite.configs, bench.target, bench.launcher, bench.settings,
            Plan(args.rounds, args.max_rounds), undecided_configs(expect, min_effect), args.quiet)
    result = compare_runs(sides["A"].run, sides["B"].run, expect, min_effect, DEFAULT_ALPHA)
    emit_reports(result, args)
    if not args.quiet:
        print(f"abdiff: run files in {where}", file=sys.stderr)
    return int(result.summary["exit_code"])

