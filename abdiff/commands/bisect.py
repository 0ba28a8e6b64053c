"""`abdiff bisect A..B --configs SUITE [--config ID ...]`: the commit that made the change.

Measures A..B, takes the change of each config to find (the given ones, or
every unintended one), and binary-searches the first-parent path from A to B
(abdiff/verdict/bisection.py). Each step is an ordinary interleaved comparison kept in
the state cache, so an interrupted bisect re-run with the same arguments
reuses every comparison already finished and continues.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path

from abdiff.commands.common import (
    add_compare_options,
    add_measure_options,
    expect_scope,
    measuring,
    output_of,
    positive_int,
    statistics_of,
)
from abdiff.errors import InputError, did_you_mean
from abdiff.options import Execution, Statistics
from abdiff.repo.revs import SideSpec, open_repo, resolve_range, run_git
from abdiff.reports import bisect as bisect_report
from abdiff.reports import table
from abdiff.reports.printable import no_ci_commands
from abdiff.run.schedule import Plan
from abdiff.run.session import Bench, prepare_bench, run_and_compare, side_runs
from abdiff.store.files import write_output
from abdiff.store.records import Result
from abdiff.verdict.bisection import (
    BisectResult,
    ChangeSignature,
    Commit,
    Outcome,
    classify,
    culprits_of,
    last_unchanged,
    outcome_at,
    result_signatures,
    search,
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bisect", help="find the commit between A and B that made a change",
                            description="Measure A..B, then binary-search the first-parent "
                            "path from A to B for the first commit that shows the same change "
                            "(status, facts, kernels, latency) in the given configs, or in "
                            "every config A..B calls unintended.")
    parser.add_argument("range", metavar="A..B")
    parser.add_argument("--config", action="append", default=[], metavar="ID",
                        help="a config whose change to find (repeatable; default: every "
                        "unintended one)")
    add_measure_options(parser)
    add_compare_options(parser)
    parser.add_argument("--max-rounds", type=positive_int, default=None,
                        help="adaptive ceiling of rounds per side in each step "
                        f"(default {Plan.max_rounds})")
    parser.set_defaults(run=run)


def first_parent_path(repo_root: Path, a: SideSpec, b: SideSpec) -> list[Commit]:
    """[A, each first-parent commit after A, ..., B], with author, date and subject."""
    if a.sha == b.sha:
        raise InputError(f"{a.rev} and {b.rev} are the same commit: nothing to bisect")
    if run_git(repo_root, "merge-base", "--is-ancestor", a.sha, b.sha,
               check=False).returncode != 0:
        raise InputError(f"{a.rev} is not an ancestor of {b.rev}: bisect needs A..B along "
                         "B's history (try A...B's merge base as A)")
    shas = run_git(repo_root, "rev-list", "--first-parent", "--reverse",
                   f"{a.sha}..{b.sha}").stdout.split()
    if a.sha not in (run_git(repo_root, "rev-list", "--first-parent", b.sha).stdout.split()):
        raise InputError(f"{a.rev} is not on {b.rev}'s first-parent path: pass a commit of "
                         "that path as A")
    commits = []
    for sha in [a.sha, *shas]:
        fields = run_git(repo_root, "show", "-s", "--format=%H%x00%an%x00%aI%x00%s",
                         sha).stdout.rstrip("\n").split("\0")
        commits.append(Commit(sha=fields[0], author=fields[1], date=fields[2], subject=fields[3]))
    return commits


class StepRunner:
    """Interleaved comparisons of two commits on some configs, kept in the state cache."""

    def __init__(self, execution: Execution, statistics: Statistics, bench: Bench,
                 expect: dict) -> None:
        # every finished comparison is reused: that is how a bisect resumes
        self.execution = dataclasses.replace(execution, resume=True)
        self.statistics, self.bench, self.expect = statistics, bench, expect
        self.compared = 0

    def compare(self, older: Commit, newer: Commit, ids: list[str] | None = None) -> Result:
        """One comparison; its time split counts from the command's start for the first (its
        set-up is the bisect's), from its own start for every later one."""
        suite = self.bench.suite
        if ids is not None:
            suite = dataclasses.replace(suite, configs=[c for c in suite.configs if c.id in ids])
        started = self.bench.started if not self.compared else time.monotonic()
        self.compared += 1
        bench = dataclasses.replace(self.bench, suite=suite, started=started)
        bench, sides = side_runs(bench, {"A": SideSpec(older.sha[:12], older.sha),
                                         "B": SideSpec(newer.sha[:12], newer.sha)})
        return run_and_compare(self.execution, self.statistics, bench, sides,
                                   sides["A"].run, self.expect, [])


def run(args: argparse.Namespace) -> int:
    statistics, output = statistics_of(args), output_of(args)
    selection, execution = measuring(args)
    repo_root = open_repo(selection.repo)
    spec_a, spec_b = resolve_range(repo_root, args.range)  # refused before a worker starts
    if spec_b.sha == "WORKTREE":
        raise InputError(f"{args.range!r}: bisect needs a commit as B, not the working tree")
    with prepare_bench(selection, execution, repo_root, checkouts=2) as bench:
        if not bench.suite.configs:
            raise InputError(f"suite {bench.suite.name!r}: bisect needs its configs before it "
                             "measures; list them in the suite's target.benchmarks")
        expect = expect_scope(selection.expect, bench.suite.expect, bench.suite.param_keys(),
                              [c.params for c in bench.suite.configs])
        known = {c.id for c in bench.suite.configs}
        unknown = [c for c in args.config if c not in known]
        if unknown:
            raise InputError(f"--config {unknown[0]!r} is not in suite {bench.suite.name!r} "
                             f"(its configs: {', '.join(sorted(known))})"
                             + did_you_mean(unknown[0], known))
        path = first_parent_path(repo_root, spec_a, spec_b)
        steps = StepRunner(execution, statistics, bench, expect)

        say: Callable[[str], None] = (lambda text: None) if execution.quiet else table.say
        commits = len(path) - 1
        say(f"abdiff bisect: {commits} commit{'s' * (commits != 1)} from {spec_a.rev} to "
            f"{spec_b.rev}; "
            f"measuring {spec_a.rev}..{spec_b.rev}")
        ends = steps.compare(path[0], path[-1], args.config or None)
        signatures = result_signatures(ends, args.config)
        result = BisectResult(a=path[0], b=path[-1], configs=sorted(signatures))
        if signatures:
            _search_path(result, path, steps, signatures, say)
        text = bisect_report.render(result, ends, output.format)
        if output.format in ("table", "markdown"):  # a line a CI runner would obey
            text = no_ci_commands(text)
        if output.output:
            write_output(output.output, text)
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        if output.json:
            write_output(output.json, bisect_report.render(result, ends, "json"))
        if output.html:
            write_output(output.html, bisect_report.render(result, ends, "html"))
        return result.exit_code


def _search_path(result: BisectResult, path: list[Commit], steps: StepRunner,
                 signatures: dict[str, ChangeSignature], say: Callable[[str], None]) -> None:
    """Bisect `path` for the commits that made each signature's change, then check each
    culprit against its parent (the sandwich check); fills `result`."""

    def test(commit: Commit, ids: list[str]) -> dict[str, Outcome]:
        say(f"abdiff bisect: testing {commit.sha[:12]} {commit.subject} ({len(ids)} config"
            f"{'s' * (len(ids) != 1)})")
        against_a = {c.id: c for c in steps.compare(path[0], commit, ids).configs}
        moving = [i for i in ids if signatures[i].latency]
        against_b = {c.id: c for c in steps.compare(commit, path[-1], moving).configs} \
            if moving else {}
        return {i: classify(signatures[i], against_a[i], against_b.get(i)) for i in ids}

    first_new, result.unresolved, result.steps, skipped = search(path, list(signatures), test)
    result.skipped = [path[i] for i in sorted(skipped)]
    result.culprits = culprits_of(first_new, path)
    for culprit in result.culprits:
        index = path.index(culprit.commit)
        say(f"abdiff bisect: sandwich check {path[index - 1].sha[:12]}.."
            f"{culprit.commit.sha[:12]}")
        parent = path[index - 1]
        culprit.evidence = steps.compare(parent, culprit.commit, culprit.configs)
        shown = {c.id: c for c in culprit.evidence.configs}
        # the whole change in one commit: its parent had none of it (A, or tested `old`;
        # `partial` means part of it came earlier) and parent..culprit shows all of it
        culprit.confirmed = all(
            (index == 1 or outcome_at(result.steps, parent, i) == "old")
            and signatures[i].shown_by(shown[i]) for i in culprit.configs)
        culprit.latency_undecided = [i for i in culprit.configs
                                     if signatures[i].latency_undecided(shown[i])]
        if not culprit.confirmed:
            culprit.spread_from = min(
                (last_unchanged(result.steps, path, i, index) for i in culprit.configs),
                key=path.index)
