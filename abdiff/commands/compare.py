"""`abdiff compare RUNFILE_A RUNFILE_B`: statistics only, no execution."""

from __future__ import annotations

import argparse
from pathlib import Path

from abdiff.commands.common import (
    add_compare_options,
    check_expect_values,
    finish,
    output_of,
    statistics_of,
)
from abdiff.errors import InputError
from abdiff.store.baselines import drift_allowance, interleaved
from abdiff.store.records import RunFile, load_run_file, run_file_of
from abdiff.suites import builtin_suites, load_suite
from abdiff.targets.command.files import (
    benchmark_file_note,
    benchmark_metrics,
    import_benchmark_file,
    sniff,
)
from abdiff.verdict.compare import compare_runs
from abdiff.verdict.policy import parse_expect


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("compare", help="compare two run files, or two Google Benchmark or "
                            "nvbench JSON files (no execution)")
    parser.add_argument("run_a", type=Path, metavar="RUNFILE_A")
    parser.add_argument("run_b", type=Path, metavar="RUNFILE_B")
    parser.add_argument("--metric", action="append", metavar="NAME",
                        help="Google Benchmark files: real_time (default), cpu_time or a "
                        "counter; repeat for several (one config each)")
    add_compare_options(parser)
    parser.set_defaults(run=run)


def load_side(path: Path) -> RunFile:
    """A run file, or a folder of upstream run.py outputs (targets/trtllm/upstream_runs.py).
    A run file in a run folder of abdiff's cache (`runs/KEY/a.json`) counts only when its
    folder's MAC holds: a benchmark could have written it (store.state.authenticated_run_files)."""
    if Path(path).is_dir():
        from abdiff.targets.trtllm.upstream_runs import import_run_dir

        return import_run_dir(path)
    folder = Path(path).absolute().parent
    if folder.parent.name == "runs" and Path(path).name in ("a.json", "b.json"):
        from abdiff.store.state import authenticated_run_files

        files = authenticated_run_files(folder)
        if isinstance(files, str) or Path(path).absolute() not in files:
            why = files if isinstance(files, str) else f"{Path(path).name} is not in it"
            raise InputError(f"{path}: a run folder of abdiff's cache whose run files do not "
                             f"authenticate ({why}); measure again, or copy a run file you "
                             "trust out of the cache and compare that")
        # the text that was authenticated: a second read could find another file
        text = files[Path(path).absolute()]
        return run_file_of(text, Path(path))
    return load_run_file(path)


def run(args: argparse.Namespace) -> int:
    statistics, output = statistics_of(args), output_of(args)
    min_effect = statistics.min_effect
    formats = {sniff(args.run_a), sniff(args.run_b)}
    if formats - {None} and len(formats) > 1:
        raise InputError(f"{args.run_a} and {args.run_b}: give two run files, or two JSON files "
                         "of the same benchmark library")
    fmt = formats.pop()
    notes = []
    if fmt is not None:
        metrics = benchmark_metrics(args.metric, fmt)
        run_a, run_b = (import_benchmark_file(p, fmt, metrics) for p in (args.run_a, args.run_b))
        notes.append(benchmark_file_note(fmt, run_a, run_b))
    elif args.metric:
        raise InputError("--metric chooses what a benchmark's JSON file is compared on; run "
                         "files hold what was measured: leave it out")
    else:
        run_a, run_b = load_side(args.run_a), load_side(args.run_b)
    keys = sorted({k for r in (run_a, run_b) for c in r.configs for k in c.params})
    expect = parse_expect(args.expect, keys)
    check_expect_values(expect, [c.params for r in (run_a, run_b) for c in r.configs])
    if not args.expect and run_b.suite in builtin_suites():
        expect = load_suite(run_b.suite).expect  # the suite's own scope, as `abdiff A..B` uses
    mismatched = sorted({c.id for c in run_a.configs} ^ {c.id for c in run_b.configs})
    if mismatched:
        notes.append(f"compared on the configs both files hold; {len(mismatched)} "
                     "config(s) are in one file only")
    together = interleaved(run_a, run_b)
    allowed = None
    if together is False and fmt is None:
        allowed = drift_allowance(run_a, run_b, f"run file A ({args.run_a.name})",
                                  statistics.gates)
        notes.append(f"the two run files were measured in different sessions, not interleaved: "
                     f"{allowed.why}")
    elif together is None and fmt is None:
        notes.append("a run file predates session records, so whether A and B were measured "
                     "interleaved is unknown; latency is compared as if they were")
    result = compare_runs(run_a, run_b, expect, min_effect, statistics.alpha, notes,
                          statistics.require_all, statistics.small_changes,
                          allowed.gates if allowed else statistics.gates,
                          allowed.drift if allowed else None)
    if allowed is not None:
        result.summary.update(allowed.summary)
    return finish(result, output)
