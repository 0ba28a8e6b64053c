"""`abdiff compare RUNFILE_A RUNFILE_B`: statistics only, no execution."""

from __future__ import annotations

import argparse
from pathlib import Path

from abdiff.baselines import drift_allowance, interleaved
from abdiff.commands.common import (
    add_compare_options,
    check_expect_values,
    finish,
    output_of,
    statistics_of,
)
from abdiff.compare import compare_runs
from abdiff.policy import parse_expect
from abdiff.records import RunFile, load_run_file
from abdiff.suites import builtin_suites, load_suite


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("compare", help="compare two run files (no execution)")
    parser.add_argument("run_a", type=Path, metavar="RUNFILE_A")
    parser.add_argument("run_b", type=Path, metavar="RUNFILE_B")
    add_compare_options(parser)
    parser.set_defaults(run=run)


def load_side(path: Path) -> RunFile:
    """A run file, or a folder of upstream run.py outputs (targets/trtllm/upstream_runs.py)."""
    if Path(path).is_dir():
        from abdiff.targets.trtllm.upstream_runs import import_run_dir

        return import_run_dir(path)
    return load_run_file(path)


def run(args: argparse.Namespace) -> int:
    statistics, output = statistics_of(args), output_of(args)
    min_effect = statistics.min_effect
    run_a, run_b = load_side(args.run_a), load_side(args.run_b)
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
    together = interleaved(run_a, run_b)
    allowed = None
    if together is False:
        allowed = drift_allowance(run_a, run_b, f"run file A ({args.run_a.name})",
                                  statistics.gates)
        notes.append(f"the two run files were measured in different sessions, not interleaved: "
                     f"{allowed.why}")
    elif together is None:
        notes.append("a run file predates session records, so whether A and B were measured "
                     "interleaved is unknown; latency is compared as if they were")
    result = compare_runs(run_a, run_b, expect, min_effect, statistics.alpha, notes,
                          statistics.require_all, statistics.small_changes,
                          allowed.gates if allowed else statistics.gates,
                          allowed.drift if allowed else None)
    if allowed is not None:
        result.summary.update(allowed.summary)
    return finish(result, output)
