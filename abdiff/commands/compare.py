"""`abdiff compare RUNFILE_A RUNFILE_B`: statistics only, no execution."""

from __future__ import annotations

import argparse
from pathlib import Path

from abdiff.commands.common import (
    add_compare_options,
    check_expect_values,
    check_min_effect,
    finish,
)
from abdiff.compare import compare_runs
from abdiff.policy import parse_expect
from abdiff.records import load_run_file
from abdiff.stats import DEFAULT_ALPHA
from abdiff.suites import builtin_suites, load_suite


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("compare", help="compare two run files (no execution)")
    parser.add_argument("run_a", type=Path, metavar="RUNFILE_A")
    parser.add_argument("run_b", type=Path, metavar="RUNFILE_B")
    add_compare_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    min_effect = check_min_effect(args.min_effect)
    run_a, run_b = load_run_file(args.run_a), load_run_file(args.run_b)
    keys = sorted({k for r in (run_a, run_b) for c in r.configs for k in c.params})
    expect = parse_expect(args.expect, keys)
    check_expect_values(expect, [c.params for r in (run_a, run_b) for c in r.configs])
    if not args.expect and run_b.suite in builtin_suites():
        expect = load_suite(run_b.suite).expect  # the suite's own scope, as `abdiff A..B` uses
    notes = []
    mismatched = sorted({c.id for c in run_a.configs} ^ {c.id for c in run_b.configs})
    if mismatched:
        notes.append(f"compared on the configs both files hold; {len(mismatched)} "
                     "config(s) are in one file only")
    result = compare_runs(run_a, run_b, expect, min_effect, DEFAULT_ALPHA, notes,
                          args.require_all)
    return finish(result, args)
