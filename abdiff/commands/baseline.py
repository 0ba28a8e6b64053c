"""`abdiff baseline refresh|list|show`: release baselines stored as run files.

Comparing against one is `abdiff baseline:NAME..B` (commands/diff.py).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from tabulate import tabulate

from abdiff.baselines import (
    append_rounds,
    baseline_path,
    baselines_dir,
    drift_margin,
    fingerprint,
    list_baselines,
    load_baseline,
    session_drift,
)
from abdiff.commands.common import add_measure_options
from abdiff.compare import side_facts, side_kernels, side_status
from abdiff.records import write_run_file
from abdiff.reports.common import clip, headline_first, value_text
from abdiff.revs import open_repo
from abdiff.session import measure_one_side
from abdiff.stats import DEFAULT_MIN_EFFECT

KERNEL_WIDTH = 100  # CUDA kernel names run to thousands of characters


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("baseline", help="refresh, list or show stored baselines")
    actions = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
    refresh = actions.add_parser("refresh", help="measure REV and store it as baselines/NAME.json")
    refresh.add_argument("name", metavar="NAME")
    refresh.add_argument("--rev", required=True, metavar="REV")
    refresh.add_argument("--append", action="store_true",
                         help="add rounds to the existing baseline (same commit and machine)")
    add_measure_options(refresh)
    for action in (refresh, actions.add_parser("list", help="the stored baselines"),
                   actions.add_parser("show", help="one baseline's configs, facts and kernels")):
        action.add_argument("--baselines-dir", type=Path, metavar="DIR",
                            help="default: baselines/ in the repository")
        if action is not refresh:
            action.add_argument("--repo", type=Path)
    actions.choices["show"].add_argument("name", metavar="NAME")
    parser.set_defaults(run=run)


def refresh(args: argparse.Namespace) -> int:
    folder = baselines_dir(open_repo(args.repo), args.baselines_dir)
    path = baseline_path(folder, args.name)
    run_file = measure_one_side(args, args.rev, "baseline")
    run_file.env["recorded_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds")
    if args.append and path.exists():
        run_file = append_rounds(load_baseline(folder, args.name), run_file)
    write_run_file(path, run_file)
    rounds = max((len(c.rounds) for c in run_file.configs), default=0)
    print(f"baseline {args.name}: {run_file.rev} ({run_file.sha[:12]}), "
          f"{len(run_file.configs)} configs, {rounds} rounds -> {path}", file=sys.stderr)
    return 0


def show_list(args: argparse.Namespace) -> int:
    folder = baselines_dir(open_repo(args.repo), args.baselines_dir)
    rows = [[name, run.rev, run.sha[:12], run.suite, run.target, len(run.configs),
             run.env.get("device_name") or run.env.get("device"), run.env.get("recorded_at")]
            for name, run in list_baselines(folder)]
    print(tabulate(rows, headers=["name", "rev", "sha", "suite", "target", "configs", "device",
                                  "recorded"]) if rows else f"no baselines in {folder}")
    return 0


def show(args: argparse.Namespace) -> int:
    folder = baselines_dir(open_repo(args.repo), args.baselines_dir)
    run = load_baseline(folder, args.name)
    print(f"{args.name}: {run.rev} ({run.sha}) suite {run.suite}, target {run.target}")
    print("fingerprint: " + ", ".join(f"{k}={v}" for k, v in fingerprint(run).items()))
    for session_id, where in sorted(run.sessions.items(), key=lambda s: s[1].get("started", "")):
        print(f"session {session_id}: " + ", ".join(f"{k}={v}" for k, v in where.items()))
    drift = session_drift(run)
    if drift is None:
        print("session drift: unknown (one measuring session; refresh with --append in another "
              "session to measure it)")
    else:
        margin = drift_margin(run, DEFAULT_MIN_EFFECT, f"baseline {args.name!r}")
        print(f"session drift: between-session SD {drift.sigma:.2%} over {drift.sessions} "
              f"sessions (df {drift.df}); at --min-effect {DEFAULT_MIN_EFFECT:.0%} a comparison "
              f"uses a {margin.value:.1%} margin")
    rows = []
    for config in run.configs:
        status, error = side_status(config.rounds)
        facts = side_facts(config.rounds) or {}
        kernels = side_kernels(config.rounds) or {}
        names = sorted(kernels, key=headline_first)
        spread = drift.spread.get(config.id) if drift else None
        rows.append([
            config.id, len(config.rounds), "" if spread is None else f"{spread:.2%}",
            status if error is None else clip(f"{status}: {error}"),
            "\n".join(f"{k.split('.')[-1]}={value_text(v)}" for k, v in facts.items()),
            "\n".join(f"{clip(k, KERNEL_WIDTH)} x{kernels[k]}" for k in names[:8])
            + (f"\n(+{len(kernels) - 8} more)" if len(kernels) > 8 else ""),
        ])
    print(tabulate(rows, headers=["config", "rounds", "session spread", "status", "facts",
                                  "kernels"]))
    return 0


def run(args: argparse.Namespace) -> int:
    return {"refresh": refresh, "list": show_list, "show": show}[args.action](args)
