"""`abdiff cache clean [--cache-dir DIR] [--repo PATH | --runs [--older-than DAYS] | --caches]`.

Without --runs: remove cached checkouts. Checkouts are git worktrees registered in
the user's repository, so deleting the cache folder by hand would leave stale `git
worktree list` entries; this command deregisters them too. It refuses (exit 3) while a
running measurement uses them. Measured rounds (`runs/` in the cache) are kept.

With --runs: remove the measured rounds kept for --resume instead (all, or those not
written for DAYS days), except those a running measurement holds.

With --caches: remove every side's kept HOME, temporary folder and tool caches (`sides/` in
the cache: compiled kernels, autotuner picks; sides.py); refused (exit 3) while a running
measurement uses them. The next run compiles and tunes anew.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from abdiff.errors import InputError
from abdiff.repo.checkouts import clean_cache, default_cache_dir
from abdiff.repo.revs import open_repo
from abdiff.run.schedule import clean_runs
from abdiff.store.sides import clean_sides


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("cache", help="manage the checkout cache (abdiff cache clean)")
    actions = parser.add_subparsers(dest="cache_command", metavar="ACTION",
                                    parser_class=type(parser))
    actions.required = True
    clean = actions.add_parser(
        "clean", help="remove cached checkouts and their git worktree entries",
        description="Remove the cached checkouts (git worktrees and working-tree copies) of "
        "one repository (--repo) or, without --repo, of every repository in the cache.")
    clean.add_argument("--cache-dir", type=Path,
                       help="the cache folder (default: $ABDIFF_CACHE_DIR, "
                       "$XDG_CACHE_HOME/abdiff or ~/.cache/abdiff)")
    clean.add_argument("--repo", type=Path,
                       help="only this repository's checkouts (default: all repositories)")
    clean.add_argument("--runs", action="store_true",
                       help="remove measured rounds (runs/ in the cache), not checkouts")
    clean.add_argument("--older-than", type=float, metavar="DAYS",
                       help="with --runs: only run folders not written for DAYS days")
    clean.add_argument("--caches", action="store_true",
                       help="remove every side's kept tool caches, HOME and temporary folder "
                       "(sides/ in the cache: compiled kernels, autotuner picks), not checkouts")
    parser.set_defaults(run=run)
    clean.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    cache_dir = args.cache_dir or default_cache_dir()
    if args.older_than is not None and not args.runs:
        raise InputError("--older-than DAYS selects run folders: add --runs")
    if args.runs and args.caches:
        raise InputError("--runs and --caches clean one kind each: run them one after the other")
    if args.cache_dir is not None and not args.cache_dir.is_dir():
        raise InputError(f"--cache-dir {args.cache_dir}: no such folder (a cache is the folder "
                         "abdiff's --cache-dir named when it measured)")
    if args.runs:
        return clean_runs_folder(cache_dir / "runs", args.older_than, args.repo)
    if args.caches:
        if args.repo is not None:
            raise InputError("--caches cleans every repository's side caches; drop --repo")
        count = clean_sides(cache_dir)
        print(f"abdiff: removed the caches of {count} side{'s' if count != 1 else ''} from "
              f"{cache_dir / 'sides'}")
        return 0
    repo_root = open_repo(args.repo) if args.repo is not None else None
    count = clean_cache(cache_dir, repo_root)
    which = f" of {repo_root}" if repo_root is not None else ""
    print(f"abdiff: removed {count} cached checkout{'s' if count != 1 else ''}{which} "
          f"from {cache_dir}")
    return 0


def clean_runs_folder(runs_dir: Path, older_than: float | None, repo: Path | None) -> int:
    if repo is not None:
        raise InputError("--runs cleans every repository's run folders; drop --repo")
    if older_than is not None and not (older_than >= 0):
        raise InputError(f"--older-than {older_than:g}: give a number of days >= 0")
    removed, kept = clean_runs(runs_dir, older_than)
    age = (f" older than {older_than:g} day{'s' * (older_than != 1)}"
           if older_than is not None else "")
    print(f"abdiff: removed {removed} run folder{'s' if removed != 1 else ''}{age} "
          f"from {runs_dir}" + (f"; kept {kept} in use by a running abdiff" if kept else ""))
    return 0
