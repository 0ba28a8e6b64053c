"""`abdiff demo [PATH]` and `abdiff demo init PATH`: the seed bug, reproduced and caught.

`init` writes the demo repository (branches main, pr-v1, pr). Without `init`,
the repository is made (or reused) and `main..pr-v1` then `main..pr` run with
the mtp suite, each report printed; the exit code says whether both came out
as the story says (pr-v1 flagged, pr clean).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import MappingProxyType

from abdiff.cli import main as cli_main
from abdiff.commands.common import positive_int
from abdiff.demo.builder import RUNNER_PATH, build_demo_repo
from abdiff.errors import InputError
from abdiff.repo.revs import run_git
from abdiff.reports import FORMATS
from abdiff.reports.table import say
from abdiff.run.schedule import Plan

DEMO_BRANCHES = ("main", "pr-v1", "pr")

STORY = MappingProxyType({
    "pr-v1": (1, "hasattr(update_spec_dec_param) also reaches TRTLLM: unintended changes"),
    "pr": (0, "hasattr(kv_lens_cuda_2d) confines the fix to DSA: nothing unintended"),
})


def is_demo_repo(path: Path) -> bool:
    """A repository with the demo's branches and harness, e.g. from an earlier `abdiff demo`."""
    if not (path / ".git").exists() or not (path / RUNNER_PATH).exists():
        return False
    done = run_git(path, "branch", "--list", "--format=%(refname:short)", check=False)
    return set(DEMO_BRANCHES) <= set(done.stdout.split())


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="build the demo repository and run abdiff on it",
                            description="abdiff demo [PATH] builds (or reuses) the demo "
                            "repository and runs main..pr-v1 and main..pr; "
                            "abdiff demo init PATH only builds it.")
    parser.add_argument("words", nargs="*", metavar="[init] PATH")
    parser.add_argument("--rounds", type=positive_int, default=None,
                        help=f"first rounds per side (default {Plan.rounds})")
    parser.add_argument("--cache-dir", type=Path, help="checkout and state cache folder")
    parser.add_argument("--format", choices=sorted(FORMATS), default="table",
                        help="report format (default table)")
    parser.add_argument("--history", action="store_true",
                        help="with init: also write the branch `history` (seven commits after "
                        "main, two of which change something) for `abdiff bisect main..history`")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    words = list(args.words)
    init_only = bool(words) and words[0] == "init"
    if init_only:
        words = words[1:]
        if len(words) != 1:
            raise InputError("usage: abdiff demo init PATH")
    if len(words) > 1:
        raise InputError("usage: abdiff demo [PATH] or abdiff demo init PATH")
    path = Path(words[0] if words else "abdiff-demo").resolve()
    if args.history and not init_only:
        raise InputError("--history goes with `abdiff demo init PATH --history`")
    if init_only or not is_demo_repo(path):
        shas = build_demo_repo(path, history=args.history)
        print(f"demo repository written to {path}", file=sys.stderr)
        for branch, sha in shas.items():
            print(f"  {branch:7} {sha}", file=sys.stderr)
    if init_only:
        return 0
    as_told = True
    for branch, (expected_code, story) in STORY.items():
        print(flush=True)
        say(f"$ abdiff main..{branch} --configs mtp   # {story}", sys.stdout)
        argv = [f"main..{branch}", "--configs", "mtp", "--repo", str(path),
                "--format", args.format]
        if args.rounds:
            argv += ["--rounds", str(args.rounds)]
        if args.cache_dir:
            argv += ["--cache-dir", str(args.cache_dir)]
        code = cli_main(argv)
        print(f"exit code {code} (the story expects {expected_code})", flush=True)
        as_told &= code == expected_code
    return 0 if as_told else 1
