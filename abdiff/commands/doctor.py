"""`abdiff doctor [--target T] [--repo PATH] [A..B]`: is this machine ready, do the hooks hold?

Without a range it checks the machine and, when the repository has a
target's layout (or --target names one), the hooks in its working tree. With
a range it materializes both sides as cached checkouts (the same ones a run
uses) and checks the hooks in each. See abdiff/host/doctor.py for the exit codes.
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
    from abdiff.host.doctor import (
        HookReport,
        exit_code,
        hooks_table,
        machine_checks,
        machine_table,
        missing_for,
        sandbox_check,
    )
    from abdiff.repo.revs import open_repo
    from abdiff.suites import load_suite
    from abdiff.targets import detect_target, target_class, target_names

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
    if args.target:
        target_cls, why = target_class(args.target), "--target"
    elif detected:
        target_cls, why = detected, f"detected in {repo_root}: {detected.layout}"
    elif args.range and repo_root is not None:  # the run would refuse it: so does doctor
        target_cls, why = detect_target(repo_root), ""
    else:  # the machine alone, for the target that needs the least of it
        target_cls = target_class("reference")
        why = (f"no benchmark in {repo_root}" if repo_root else "no repository here") + \
            "; pass --target trtllm or --repo PATH to check another"
    target = target_cls()
    # a typo in the suite is refused before the machine table, not after it
    suite = load_suite(args.configs) if args.configs else None

    if args.launcher:
        from abdiff.launchers import launcher_hello

        print(launcher_hello(args.launcher))  # InfrastructureError (exit 3) says what is missing
        print()
    print(f"abdiff doctor: checking target {target_cls.name} ({why})\n")
    checks = [*machine_checks(classes), sandbox_check(classes)]
    print(machine_table(checks, sorted(names)))
    print()
    for name in sorted(names):
        missing = missing_for(checks, name)
        chosen = " (chosen)" if name == target_cls.name else ""
        state = f"cannot run here: needs {', '.join(missing)}" if missing else "can run here"
        print(f"target {name}{chosen}: {state}")

    suite_failed = False
    # a suite's models and GPU generation are the trtllm target's; with no benchmark to
    # tell the target, a suite is checked as trtllm would run it
    if args.configs and "GPU" not in target_cls.requires and (args.target or detected):
        print(f"\nsuite {args.configs}: target {target_cls.name} runs it on this machine's "
              "device (no model files, no GPU generation to check)")
    elif suite is not None:
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
        from abdiff.repo.checkouts import CheckoutCache, default_cache_dir
        from abdiff.repo.revs import resolve_range

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
    code = 3 if code == 0 and suite_failed else code
    meaning = DOCTOR_EXITS[code] if reports or code else \
        "this machine can run it (no hooks checked: give a benchmark repository and a range)"
    print(f"\nabdiff doctor: target {target_cls.name}: {meaning} (exit {code})")
    return code


# what doctor's exit status means, on its last line
DOCTOR_EXITS = {
    0: "ready: this machine can run it and every hook the probe uses is present",
    1: "a hook the probe uses is missing in a checkout (listed above); abdiff cannot read "
       "that side's facts",
    3: "this machine lacks what it needs (MISSING or PROBLEM above); install it, or measure "
       "elsewhere",
}
