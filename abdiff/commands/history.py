"""`abdiff history CONFIG... [--html FILE]`: configs across release baselines and recorded
runs (latency, facts, kernels), as a table and as a plot in an HTML page (abdiff/store/history.py
collects, reports/history.py renders)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "history", help="configs across baselines and recorded runs: latency, facts, kernels",
        description="The time per step, facts and kernels of configs across the release "
        "baselines (baselines/*.json) and the runs kept in the cache, by commit (in the "
        "order first measured), each point with what changed from the commit before.")
    parser.add_argument("config", nargs="+", metavar="CONFIG",
                        help="config id, e.g. GEN-TRTLLM-bs8-q2-kv2049")
    parser.add_argument("--repo", type=Path, help="the benchmark repository (default: cwd): "
                        "only its baselines and runs are shown (the cache is shared)")
    parser.add_argument("--target", help="only the baselines and runs of this target")
    parser.add_argument("--baselines-dir", type=Path, metavar="DIR",
                        help="default: baselines/ in the repository")
    parser.add_argument("--cache-dir", type=Path, help="where the recorded runs are kept "
                        "(default: the measuring commands' cache)")
    parser.add_argument("--html", type=Path, metavar="FILE",
                        help="also write the page with a plot per config")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from abdiff.commands.common import output_path
    from abdiff.errors import InputError
    from abdiff.repo.checkouts import default_cache_dir
    from abdiff.repo.revs import open_repo
    from abdiff.reports.history import render_html, render_table
    from abdiff.reports.printable import printable
    from abdiff.reports.table import say, terminal_width
    from abdiff.store.baselines import baselines_dir
    from abdiff.store.files import write_output
    from abdiff.store.history import collect
    from abdiff.targets import registered

    output_path(args.html, "--html")
    known = registered()
    if args.target is not None and args.target not in known:
        raise InputError(f"--target {args.target!r} is unknown; choose one of "
                         f"{', '.join(sorted(known))}")
    repo_root = open_repo(args.repo)
    runs = (args.cache_dir or default_cache_dir()).resolve() / "runs"
    history = collect(repo_root, baselines_dir(repo_root, args.baselines_dir), runs,
                      list(dict.fromkeys(args.config)), args.target)
    if history.skipped:
        shown = "; ".join(history.skipped[:3]) + (
            f"; {len(history.skipped) - 3} more" if len(history.skipped) > 3 else "")
        say(f"abdiff: note: {len(history.skipped)} run folders in {runs} left out: {shown}")
    sys.stdout.write(printable(render_table(history, terminal_width())))
    if args.html:
        write_output(args.html, render_html(history))
        say(f"abdiff: wrote {args.html} (html)")
    return 0
