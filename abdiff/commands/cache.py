"""`abdiff cache clean [--cache-dir DIR] [--repo PATH]`: remove cached checkouts.

Checkouts are git worktrees registered in the user's repository, so deleting
the cache folder by hand would leave stale `git worktree list` entries; this
command deregisters them too. Measured rounds (`runs/` in the cache) are kept.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from abdiff.checkouts import clean_cache, default_cache_dir
from abdiff.revs import open_repo


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
    parser.set_defaults(run=run)
    clean.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    cache_dir = args.cache_dir or default_cache_dir()
    repo_root = open_repo(args.repo) if args.repo is not None else None
    count = clean_cache(cache_dir, repo_root)
    which = f" of {repo_root}" if repo_root is not None else ""
    print(f"abdiff: removed {count} cached checkout{'s' if count != 1 else ''}{which} "
          f"from {cache_dir}")
    return 0
