"""`abdiff doctor [--target T] [--repo PATH] [A..B]`: is this machine ready, do the hooks hold?

Without a range it checks the machine and, when the repository has a
target's layout (or --target names one), the hooks in its working tree. With
a range it materializes both sides as cached checkouts (the same ones a run
uses) and checks the hooks in each. See abdiff/host/doctor.py for the exit codes.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from abdiff.errors import InfrastructureError, InputError

if TYPE_CHECKING:  # doctor imports these when it runs, not when the parser is built
    from abdiff.host.doctor import HookReport
    from abdiff.suites import Suite
    from abdiff.targets.base import Target


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "doctor", help="check this machine, and the probe's hooks in a checkout or both sides "
        "of a range")
    parser.add_argument("range", nargs="?", metavar="A..B",
                        help="check the hooks in both sides (no GPU needed)")
    parser.add_argument("--target", help="a registered target: reference, trtllm, command, "
                        "or one a package adds (default: detected)")
    parser.add_argument("--repo", type=Path, help="the benchmark repository (default: cwd)")
    parser.add_argument("--cache-dir", type=Path, help="checkout cache folder")
    parser.add_argument("--configs", metavar="SUITE",
                        help="trtllm: can this machine's GPUs and Hugging Face cache run the "
                        "suite's models?")
    parser.add_argument("--launcher", choices=["mpirun", "srun", "torchrun"],
                        help="start a 2-rank hello through this launcher, for real")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from abdiff.host.doctor import (
        exit_code,
        machine_checks,
        machine_rows,
        missing_for,
        sandbox_check,
    )
    from abdiff.reports.table import grid, terminal_width
    from abdiff.suites import load_suite
    from abdiff.targets import target_class, target_names

    repo_root = _repository(args)
    names = target_names()
    classes = [target_class(name) for name in names]
    target_cls, why, detected = _chosen_target(args, repo_root, classes)
    target = target_cls()
    # a typo in the suite is refused before the machine table, not after it
    suite = load_suite(args.configs) if args.configs else None

    if args.launcher:
        from abdiff.launchers import launcher_hello

        _say(launcher_hello(args.launcher))  # InfrastructureError (exit 3) says what is missing
        _say()
    _say(f"abdiff doctor: checking target {target_cls.name} ({why})")
    _say()
    checks = [*machine_checks(classes), sandbox_check(classes)]
    _say(grid(*machine_rows(checks, sorted(names)), terminal_width(), lead=3))
    _say()
    for name in sorted(names):
        missing = missing_for(checks, name)
        chosen = " (chosen)" if name == target_cls.name else ""
        state = f"cannot run here: needs {', '.join(missing)}" if missing else "can run here"
        _say(f"target {name}{chosen}: {state}")

    explicit = bool(args.target or detected)
    suite_failed = _suite_findings(args.configs, suite, target, explicit, classes)
    reports = _hook_reports(args, repo_root, target, explicit)
    code = exit_code(checks, target_cls.name, reports)
    code = 3 if code == 0 and suite_failed else code
    unchecked = ("its worker relies on no hook in the code" if not target.hooks else
                 "no hooks checked: give a benchmark repository and a range")
    meaning = DOCTOR_EXITS[code] if reports or code else \
        f"this machine can run it ({unchecked})"
    _say(f"\nabdiff doctor: target {target_cls.name}: {meaning} (exit {code})")
    return code


def _repository(args: argparse.Namespace) -> Path | None:
    """The repository to check, None where there is none and none was asked for."""
    from abdiff.repo.revs import open_repo

    if args.repo or args.range:
        return open_repo(args.repo)
    try:
        return open_repo(None)
    except (InputError, InfrastructureError):
        return None  # the machine checks need no repository


def _chosen_target(args: argparse.Namespace, repo_root: Path | None,
                   classes: list[type[Target]]) -> tuple[type[Target], str, type[Target] | None]:
    """(the target checked, why it was chosen, the target detected in the repository)."""
    from abdiff.targets import detect_target, target_class

    detected = next((t for t in classes if repo_root and t.detect(repo_root)), None)
    if args.target:
        return target_class(args.target), "--target", detected
    if detected:
        return detected, f"detected in {repo_root}: {detected.layout}", detected
    if args.range and repo_root is not None:  # the run would refuse it: so does doctor
        return detect_target(repo_root), "", detected
    # the machine alone, for the target that needs the least of it
    why = (f"no benchmark in {repo_root}" if repo_root else "no repository here") + \
        "; pass --target trtllm or --repo PATH to check another"
    return target_class("reference"), why, detected


def _suite_findings(configs: str | None, suite: Suite | None, target: Target, explicit: bool,
                    classes: list[type[Target]]) -> bool:
    """Print what the targets say of the suite on this machine; True when one is a problem."""
    # a suite's models and GPU generation are the trtllm target's; with no benchmark to
    # tell the target, a suite is checked as trtllm would run it
    if configs and "GPU" not in target.requires and explicit:
        _say(f"\nsuite {configs}: target {target.name} runs it on this machine's "
              "device (no model files, no GPU generation to check)")
        return False
    failed = False
    if suite is not None:
        # no target chosen: every target that has something to say about the suite
        asked = [target] if explicit else [cls() for cls in classes]
        for each in asked:
            findings = each.suite_findings(suite)
            if findings:
                _say(f"\nsuite {configs} ({each.name}):")
            for finding in findings:
                _say(f"  {'ok' if finding.ok else 'PROBLEM'}  {finding.text}")
                failed = failed or not finding.ok
    return failed


def _hook_reports(args: argparse.Namespace, repo_root: Path | None, target: Target,
                  explicit: bool) -> list[HookReport]:
    """Check the hooks the target's worker relies on (both sides of a range, or the working
    tree), print them, and return what was checked."""
    from abdiff.host.doctor import HookReport, hooks_table

    reports: list[HookReport] = []
    if not target.hooks:  # its worker relies on nothing inside the benchmark's code
        _say(f"\ntarget {target.name} has no hooks: nothing to check in the code")
    elif repo_root is not None and args.range:
        from abdiff.repo.checkouts import CheckoutCache, default_cache_dir
        from abdiff.repo.revs import resolve_range

        side_a, side_b = resolve_range(repo_root, args.range)
        cache = CheckoutCache(repo_root, args.cache_dir or default_cache_dir())
        for label, side in (("A", side_a), ("B", side_b)):
            path = cache.checkout(side)
            reports.append(HookReport(f"{label} {side.rev} ({side.sha[:12]})", path,
                                      target.hook_problems(path)))
    elif repo_root is not None and explicit:
        reports.append(HookReport("working tree", repo_root, target.hook_problems(repo_root)))
    if reports:
        _say()
        _say(f"probe hooks of target {target.name}:")
        _say(hooks_table(reports, len(target.hooks)))
        behaviours = getattr(target, "behaviours_table", None)
        if behaviours is not None:  # what of the benchmark's own flow the probe relies on
            _say("\nrun.py behaviours the probe relies on:")
            _say(behaviours([(r.label, r.path) for r in reports]))
        story = getattr(target, "seed_story_line", None)
        if story is not None and repo_root is not None:  # the real upstream commits
            _say(f"\n{story(repo_root)}")
    elif repo_root is None and target.hooks:
        _say("\nno repository here: hooks not checked (give --repo PATH or a range)")
    return reports


# what doctor's exit status means, on its last line
DOCTOR_EXITS = MappingProxyType({
    0: "ready: this machine can run it and every hook the probe uses is present",
    1: "a hook the probe uses is missing in a checkout (listed above); abdiff cannot read "
       "that side's facts",
    3: "this machine lacks what it needs (MISSING or PROBLEM above); install it, or measure "
       "elsewhere",
})


def _say(text: str = "") -> None:
    """A paragraph of doctor's output, every line within the terminal's width."""
    from abdiff.reports.table import fit, terminal_width

    print(fit(text, terminal_width()) if text else "")
