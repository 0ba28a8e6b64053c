"""`abdiff doctor [--target T] [--repo PATH] [A..B]`: is this machine ready, do the hooks hold?

Without a range it checks the machine and, when the repository has a
target's layout (or --target names one), the hooks in its working tree. With
a range it materializes both sides as cached checkouts (the same ones a run
uses) and checks the hooks in each. See abdiff/doctor.py for the exit codes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from abdiff.errors import InfrastructureError, InputError


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
    from abdiff.doctor import (
        HookReport,
        exit_code,
        hooks_table,
        machine_checks,
        machine_table,
        missing_for,
    )
    from abdiff.revs import open_repo
    from abdiff.targets import target_class, target_names

    repo_root: Path | None = None
    if args.repo or args.range:
        repo_root = open_repo(args.repo)
    else:
        try:
            repo_root = open_repo(None)
        except (InputError, InfrastructureError):
            repo_root = None  # the machine checks need no repository
    names = target_names()
    classes = [target_class(name) for name in names]
    detected = next((t for t in classes if repo_root and t.detect(repo_root)), None)
    target_cls = target_class(args.target) if args.target else (
        detected or target_class("reference"))
    target = target_cls()

    if args.launcher:
        from abdiff.launchers import launcher_hello

        print(launcher_hello(args.launcher))  # InfrastructureError (exit 3) says what is missing
        print()
    checks = machine_checks(classes)
    print(machine_table(checks, sorted(names)))
    print()
    for name in sorted(names):
        missing = missing_for(checks, name)
        chosen = " (chosen)" if name == target_cls.name else ""
        state = f"cannot run here: needs {', '.join(missing)}" if missing else "can run here"
        print(f"target {name}{chosen}: {state}")

    suite_failed = False
    if args.configs:
        from abdiff.suites import load_suite

        suite = load_suite(args.configs)
        # no target chosen: every target that has something to say about the suite
        asked = [target] if args.target or detected else [cls() for cls in classes]
        for each in asked:
            findings = each.suite_findings(suite)
            if findings:
                print(f"\nsuite {args.configs} ({each.name}):")
            for finding in findings:
                print(f"  {'ok' if finding.ok else 'PROBLEM'}  {finding.text}")
                suite_failed = suite_failed or not finding.ok

    reports: list[HookReport] = []
    if not target.hooks:  # its worker relies on nothing inside the benchmark's code
        print(f"\ntarget {target_cls.name} has no hooks: nothing to check in the code")
    elif repo_root is not None and args.range:
        from abdiff.checkouts import CheckoutCache, default_cache_dir
        from abdiff.revs import resolve_range

        side_a, side_b = resolve_range(repo_root, args.range)
        cache = CheckoutCache(repo_root, args.cache_dir or default_cache_dir())
        for label, side in (("A", side_a), ("B", side_b)):
            path = cache.checkout(side)
            reports.append(HookReport(f"{label} {side.rev} ({side.sha[:12]})", path,
                                      target.hook_problems(path)))
    elif repo_root is not None and (args.target or detected):
        reports.append(HookReport("working tree", repo_root, target.hook_problems(repo_root)))
    if reports:
        print()
        print(f"probe hooks of target {target_cls.name}:")
        print(hooks_table(reports, len(target.hooks)))
        behaviours = getattr(target, "behaviours_table", None)
        if behaviours is not None:  # what of the benchmark's own flow the probe relies on
            print("\nrun.py behaviours the probe relies on:")
            print(behaviours([(r.label, r.path) for r in reports]))
        story = getattr(target, "seed_story_line", None)
        if story is not None and repo_root is not None:  # the real upstream commits
            print(f"\n{story(repo_root)}")
    elif repo_root is None and target.hooks:
        print("\nno repository here: hooks not checked (give --repo PATH or a range)")
    code = exit_code(checks, target_cls.name, reports)
    return 3 if code == 0 and suite_failed else code
