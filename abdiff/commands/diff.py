"""`abdiff A..B --configs SUITE`: measure both sides interleaved, compare, report.

The range is the command word: `abdiff main..pr` is parsed as `abdiff diff main..pr`.
`abdiff baseline:NAME..B` takes side A from a stored baseline and measures B only.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from abdiff.commands.common import (
    add_compare_options,
    add_measure_options,
    expect_scope,
    finish,
    measuring,
    output_of,
    positive_int,
    statistics_of,
)
from abdiff.repo.revs import open_repo, resolve_range
from abdiff.reports.table import say
from abdiff.run.schedule import Plan
from abdiff.run.session import against_baseline, prepare_bench, run_and_compare, side_runs
from abdiff.store.baselines import parse_baseline_range
from abdiff.suites import Suite


def looks_like_range(word: str) -> bool:
    return ".." in word and not word.startswith("-")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("diff", help="A..B: measure two revisions and compare (the default)",
                            description="Measure A and B interleaved and compare them. "
                            "A..B, A...B (merge base of A and B as A), A.. (B = working tree), "
                            "baseline:NAME..B (A = a stored baseline).")
    parser.add_argument("range", metavar="A..B")
    add_measure_options(parser)
    add_compare_options(parser)
    parser.add_argument("--max-rounds", type=positive_int, default=None,
                        help=f"adaptive ceiling of rounds per side (default {Plan.max_rounds})")
    parser.add_argument("--baselines-dir", type=Path, metavar="DIR",
                        help="where baseline:NAME is looked up (default: baselines/ in the repo)")
    parser.add_argument("--allow-env-mismatch", action="store_true",
                        help="compare with a baseline recorded on a different machine")
    parser.set_defaults(run=run)


def expect_of(given: tuple[str, ...], suite: Suite) -> dict[str, list[str]]:
    """--expect checked against the configs (known once the sides are prepared)."""
    return expect_scope(given, suite.expect, suite.param_keys(), [c.params for c in suite.configs])


def run(args: argparse.Namespace) -> int:
    # every option is read (and a typo in --gate or --min-effect refused) before measuring
    statistics, output = statistics_of(args), output_of(args)
    selection, execution = measuring(args)
    repo_root = open_repo(selection.repo)
    baseline = parse_baseline_range(args.range)
    # the range before the bench: a typo is refused before a worker process starts
    specs = resolve_range(repo_root, args.range) if baseline is None else None
    # a fork server per checkout measured in, started now: B only against a baseline, one
    # for an A/A (both sides in one checkout)
    checkouts = 1 if specs is None or specs[0].sha == specs[1].sha else 2
    with prepare_bench(selection, execution, repo_root, checkouts) as bench:
        if baseline is not None:
            name, rev_b = baseline
            return finish(against_baseline(selection, execution, statistics, bench, repo_root, name,
                                           rev_b, args.range, partial(expect_of, selection.expect)),
                          output)
        assert specs is not None  # resolved above whenever there is no baseline
        spec_a, spec_b = specs
        notes = []
        if spec_a.sha == spec_b.sha:
            notes.append(f"A/A run: A and B are the same commit ({spec_a.sha[:10]}); "
                         "every change reported is noise or flakiness")
            say(f"abdiff: note: {notes[0]}")
        bench, sides = side_runs(bench, {"A": spec_a, "B": spec_b})
        expect = expect_of(selection.expect, bench.suite)
        return finish(run_and_compare(execution, statistics, bench, sides, sides["A"].run,
                                          expect, notes), output)
