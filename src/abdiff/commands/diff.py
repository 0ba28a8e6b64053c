"""`abdiff A..B --configs SUITE`: measure both sides interleaved, compare, report.

The range is the command word: `abdiff main..pr` is parsed as `abdiff diff main..pr`.
`abdiff baseline:NAME..B` takes side A from a stored baseline and measures B only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from abdiff.baselines import (
    BASELINE_MARGIN_FACTOR,
    baselines_dir,
    fingerprint,
    fingerprint_differences,
    load_baseline,
    parse_baseline_range,
)
from abdiff.commands.common import (
    Bench,
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
from abdiff.errors import InputError
from abdiff.probe import environment, resolve_device
from abdiff.records import Result, RunFile
from abdiff.revs import open_repo, resolve_range, resolve_side_b
from abdiff.schedule import Measurement, Plan, SideRun, exclusive, measure
from abdiff.stats import DEFAULT_ALPHA, futile, needs_more_rounds
from abdiff.suites.loader import MATRIX_KEYS


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
    parser.add_argument("--max-rounds", type=int, default=Plan.max_rounds,
                        help=f"adaptive ceiling of rounds per side (default {Plan.max_rounds})")
    parser.add_argument("--baselines-dir", type=Path, metavar="DIR",
                        help="where baseline:NAME is looked up (default: baselines/ in the repo)")
    parser.add_argument("--allow-env-mismatch", action="store_true",
                        help="compare with a baseline recorded on a different machine")
    parser.set_defaults(run=run)


def undecided_configs(
    run_a: RunFile, run_b: RunFile, expect: dict, min_effect: float, max_rounds: int
) -> Callable[[], list[str]]:
    """Which configs still need rounds: latency inconclusive, or flagged without the
    overwhelming evidence that lets a flag stand early (stats.needs_more_rounds),
    unless `max_rounds` could not plausibly decide them (stats.futile)."""

    def undecided() -> list[str]:
        result = compare_runs(run_a, run_b, expect, min_effect, DEFAULT_ALPHA)
        return [c.id for c in result.configs if needs_more_rounds(c.latency)
                and not futile(c.latency, max_rounds, min_effect)]

    return undecided


def measure_and_compare(
    args: argparse.Namespace, bench: Bench, sides: dict[str, SideRun], run_a: RunFile,
    expect: dict, min_effect: float, notes: list[str], adaptive: bool = True,
) -> Result:
    where = state_dir(bench, sides, "diff")
    run_b = sides["B"].run
    max_rounds = max(args.rounds, args.max_rounds) if adaptive else args.rounds
    with exclusive(where):
        measurement = Measurement.open(where, sides, args.resume, args.seed)
        measure(measurement, bench.suite.configs, bench.target, bench.launcher, bench.settings,
                Plan(args.rounds, max_rounds),
                undecided_configs(run_a, run_b, expect, min_effect, max_rounds), args.quiet)
    if not args.quiet:
        print(f"abdiff: {measurement.processes} worker processes this run; run files in {where}",
              file=sys.stderr)
    return compare_runs(run_a, run_b, expect, min_effect, DEFAULT_ALPHA, notes)


def against_baseline(args: argparse.Namespace, bench: Bench, repo_root: Path, name: str,
                     rev_b: str, expect: dict, min_effect: float) -> Result:
    """B measured now against a stored side A; refuses another machine's baseline."""
    run_a = load_baseline(baselines_dir(repo_root, args.baselines_dir), name)
    wanted = {c.id for c in bench.suite.configs}
    run_a.configs = [c for c in run_a.configs if c.id in wanted]
    spec_b = resolve_side_b(repo_root, rev_b or None, args.range)
    sides = {"B": side_run(bench, spec_b)}
    here = {**environment(resolve_device(args.device)), **sides["B"].run.env,
            "target": bench.target.name, "cuda_graph": bench.settings.cuda_graph}
    differences = fingerprint_differences(fingerprint(run_a), here)
    notes = []
    if differences:
        if not args.allow_env_mismatch:
            raise InputError(f"baseline {name!r} was recorded on another environment ("
                             + "; ".join(differences) + "); pass --allow-env-mismatch to compare")
        notes.append("environment differs from the baseline's: " + "; ".join(differences))
    wide = min_effect * BASELINE_MARGIN_FACTOR
    notes.insert(0, f"side A is the stored baseline {name!r} ({run_a.rev} {run_a.sha[:12]}, "
                 f"recorded {run_a.env.get('recorded_at', 'at an unknown time')}); it was not "
                 f"interleaved with B, so latency uses a {wide:.1%} margin "
                 f"({BASELINE_MARGIN_FACTOR:g}x --min-effect), and B gets no adaptive rounds: "
                 f"they would run fewer configs per process than the baseline's rounds did, "
                 f"and a config's place in its process moves its latency")
    result = measure_and_compare(args, bench, sides, run_a, expect, wide, notes, adaptive=False)
    result.a.baseline = name
    return result


def run(args: argparse.Namespace) -> int:
    min_effect = check_min_effect(args.min_effect)
    repo_root = open_repo(args.repo)
    bench = prepare_bench(args, repo_root)
    expect = expect_scope(args, bench.suite.expect, list(MATRIX_KEYS))
    baseline = parse_baseline_range(args.range)
    if baseline is not None:
        result = against_baseline(args, bench, repo_root, *baseline, expect, min_effect)
    else:
        spec_a, spec_b = resolve_range(repo_root, args.range)
        sides = {"A": side_run(bench, spec_a), "B": side_run(bench, spec_b)}
        result = measure_and_compare(args, bench, sides, sides["A"].run, expect, min_effect, [])
    emit_reports(result, args)
    return int(result.summary["exit_code"])
