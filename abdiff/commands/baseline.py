"""`abdiff baseline refresh|list|show`: release baselines stored as run files.

Comparing against one is `abdiff baseline:NAME..B` (commands/diff.py).
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from abdiff.commands.common import add_measure_options, measuring
from abdiff.repo.revs import open_repo
from abdiff.reports.common import clip
from abdiff.reports.table import say
from abdiff.run.session import measure_one_side
from abdiff.store.baselines import (
    append_rounds,
    baseline_path,
    baselines_dir,
    drift_margin,
    fingerprint,
    list_baselines,
    load_baseline,
    session_drift,
)
from abdiff.store.records import write_run_file
from abdiff.verdict.stats import DEFAULT_MIN_EFFECT


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
    selection, schedule = measuring(args)  # before any git command
    folder = baselines_dir(open_repo(args.repo), args.baselines_dir)
    path = baseline_path(folder, args.name)
    run_file = measure_one_side(selection, schedule, args.rev, "baseline")
    run_file.env["recorded_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds")
    if args.append and path.exists():
        run_file = append_rounds(load_baseline(folder, args.name), run_file)
    write_run_file(path, run_file)
    rounds = max((len(c.rounds) for c in run_file.configs), default=0)
    say(f"baseline {args.name}: {run_file.rev} ({run_file.sha[:12]}), "
        f"{len(run_file.configs)} configs, {rounds} rounds -> {path}")
    return 0


def show_list(args: argparse.Namespace) -> int:
    from abdiff.reports.table import grid, terminal_width

    folder = baselines_dir(open_repo(args.repo), args.baselines_dir)
    rows = [[str(cell) for cell in (
                name, run.rev, run.sha[:12], run.suite, run.target, len(run.configs),
                run.env.get("device_name") or run.env.get("device"), run.env.get("recorded_at"))]
            for name, run in list_baselines(folder)]
    print(grid(["name", "rev", "sha", "suite", "target", "configs", "device", "recorded"], rows,
               terminal_width()) if rows else f"no baselines in {folder}")
    return 0


def show(args: argparse.Namespace) -> int:
    """The baseline's provenance, then a block per config (time per step with its spread,
    facts, kernels), wrapped to the terminal's width."""
    from abdiff.reports.history import facts_text, kernels_text, latency_text
    from abdiff.reports.table import terminal_width, wrap
    from abdiff.store.history import machine_of, measured_at, snapshot

    folder = baselines_dir(open_repo(args.repo), args.baselines_dir)
    run = load_baseline(folder, args.name)
    width = terminal_width()

    def say(text: str, indent: str = "") -> None:
        print("\n".join(wrap([indent + text], width, indent + "    ")))

    say(f"baseline {args.name}: {run.rev} at commit {run.sha[:12]}, suite {run.suite}, target "
        f"{run.target}, {len(run.configs)} configs")
    sessions = sorted(run.sessions.items(), key=lambda s: str(s[1].get("started", "")))
    say(f"recorded {run.env.get('recorded_at') or measured_at(run) or 'at an unknown time'} on "
        f"{machine_of(run)}; {len(sessions)} session{'' if len(sessions) == 1 else 's'}: "
        + ", ".join(f"{sid} ({str(where.get('started', '?'))[:16].replace('T', ' ')}, "
                    f"{where.get('host', '?')})" for sid, where in sessions))
    say("machine fingerprint: " + ", ".join(f"{k}={v}" for k, v in fingerprint(run).items()))
    drift = session_drift(run)
    if drift is None:
        say("session drift: unknown (one measuring session; `abdiff baseline refresh "
            f"{args.name} --rev {run.rev} --configs {run.suite} --append` in another session "
            "measures it)")
    else:
        margin = drift_margin(run, DEFAULT_MIN_EFFECT, f"baseline {args.name!r}")
        say(f"session drift: between-session SD {drift.sigma:.2%} over {drift.sessions} "
            f"sessions (df {drift.df}); at --min-effect {DEFAULT_MIN_EFFECT:.0%} a comparison "
            f"uses a {margin.value:.1%} margin")
    say("time per step: median of the round medians ± their spread (normal-consistent MAD)")
    for config in run.configs:
        shot = snapshot(config)
        spread = drift.spread.get(config.id) if drift else None
        print()
        say(f"{config.id}  {shot.status}  {shot.rounds} rounds  {latency_text(shot)}"
            + ("" if spread is None else f"  (session spread {spread:.2%})"))
        if shot.error:
            say(f"error    {clip(shot.error)}", "    ")
        say(f"facts    {facts_text(shot.facts) or 'none'}", "    ")
        say(f"kernels  {len(shot.kernels)}: {kernels_text(shot.kernels, 8) or 'none'}", "    ")
    return 0


def run(args: argparse.Namespace) -> int:
    return {"refresh": refresh, "list": show_list, "show": show}[args.action](args)
