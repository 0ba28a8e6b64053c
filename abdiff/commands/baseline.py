"""`abdiff baseline refresh|list|show`: release baselines stored as run files.

Comparing against one is `abdiff baseline:NAME..B` (commands/diff.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import time
from pathlib import Path

from abdiff.commands.common import add_measure_options, measuring, positive_int
from abdiff.repo.revs import open_repo, resolve_rev
from abdiff.reports.common import clip
from abdiff.reports.table import say
from abdiff.run.session import run_one_side
from abdiff.store.baselines import (
    SessionDrift,
    append_rounds,
    baseline_path,
    baselines_dir,
    busy_readings,
    drift_of,
    fingerprint,
    list_baselines,
    load_baseline,
    same_commit,
    session_drift,
    sessions_with_rounds,
)
from abdiff.store.records import RunFile, write_run_file
from abdiff.verdict.stats import DEFAULT_ALPHA, drift_half_width

# Sessions a refresh records by default: with three, the between-session variance has two
# df per config, pooled over the suite's configs (baselines.session_drift)
DEFAULT_SESSIONS = 3
DEFAULT_SESSION_GAP_S = 60.0  # between sessions: drift that takes minutes gets into the estimate


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("baseline", help="refresh, list or show stored baselines")
    actions = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
    refresh = actions.add_parser("refresh", help="measure REV and store it as baselines/NAME.json")
    refresh.add_argument("name", metavar="NAME")
    refresh.add_argument("--rev", required=True, metavar="REV")
    refresh.add_argument("--append", action="store_true",
                         help="add sessions to the existing baseline (same commit and machine)")
    refresh.add_argument("--sessions", type=positive_int, default=DEFAULT_SESSIONS,
                         help="sessions to record, one after another, each with its own "
                         "worker processes and fork server and its own config orders; two or "
                         "more measure the drift between sessions (default "
                         f"{DEFAULT_SESSIONS})")
    refresh.add_argument("--session-gap", type=seconds, default=DEFAULT_SESSION_GAP_S,
                         metavar="SECONDS", help="pause between sessions (default "
                         f"{DEFAULT_SESSION_GAP_S:g})")
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
    """`--sessions` sessions of REV, each a measurement of its own (its own state folder,
    fork server, workers and seed), written to the baseline after each so that a failure
    keeps the sessions before it; `--append` adds them to the stored ones."""
    selection, execution = measuring(args)  # before any git command
    repo_root = open_repo(args.repo)
    folder = baselines_dir(repo_root, args.baselines_dir)
    path = baseline_path(folder, args.name)
    stored: RunFile | None = load_baseline(folder, args.name) \
        if args.append and path.exists() else None
    if stored is not None:
        same_commit(stored, resolve_rev(repo_root, args.rev).sha)
    for number in range(args.sessions):
        if number:
            if not args.quiet:
                say(f"abdiff: baseline {args.name}: session {number + 1} of {args.sessions} "
                    f"in {args.session_gap:g} s")
            time.sleep(args.session_gap)
        seed = None if execution.seed is None else execution.seed + number
        run_file = run_one_side(selection, dataclasses.replace(execution, seed=seed),
                                    args.rev, "baseline" if not number else f"baseline-{number}")
        run_file.env["recorded_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds")
        for where in run_file.sessions.values():  # each session's machine check, kept
            where.setdefault("machine", run_file.env.get("machine"))  # when appended
        stored = run_file if stored is None else append_rounds(stored, run_file)
        write_run_file(path, stored)
    assert stored is not None  # --sessions is at least 1
    rounds = max((len(c.rounds) for c in stored.configs), default=0)
    sessions = len(sessions_with_rounds(stored))
    say(f"baseline {args.name}: {stored.rev} ({stored.sha[:12]}), {len(stored.configs)} "
        f"configs, {rounds} rounds in {sessions} session{'s' * (sessions != 1)} -> {path}")
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
    busy = busy_readings(run)
    if drift is None:
        say("session drift: not measured (one measuring session): against this baseline "
            "latency is reported with its interval but does not fail a run (--gate "
            f"latency=hard gates it); `abdiff baseline refresh {args.name} --rev {run.rev} "
            f"--configs {run.suite} --append` measures it")
    else:
        say(f"session drift: over {drift.sessions} sessions, SD {drift.shared:.2%} shared by "
            f"the configs and {drift.own:.2%} a config's own (df {drift.df}): the drift alone "
            f"makes a comparison's latency interval {drift_alone(drift, len(run.configs))} wide "
            f"(family level {DEFAULT_ALPHA:g} over {len(run.configs)} configs)"
            + ("" if busy else "; latency against this baseline gates beyond that"))
    if busy:
        say(f"machine check: busy while it measured ({'; '.join(busy[:3])}): a load that comes "
            "and goes moves latency by more than sessions under it measure, so against this "
            "baseline latency is reported but does not fail a run; refresh it on an idle machine")
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


def drift_alone(drift: SessionDrift, configs: int) -> str:
    """The half-width of a latency interval against a baseline with this drift and no round
    noise (stats.drift_quantile)."""
    half = drift_half_width(drift_of(drift), DEFAULT_ALPHA, configs)
    if half < math.log(2):
        return f"+-{math.expm1(half):.1%}"
    if half > math.log(10):  # "3.62e-06x to 2.76e+05x" is no number to act on
        return "wider than 0.1x to 10x"
    return f"{math.exp(-half):.3g}x to {math.exp(half):.3g}x"


def run(args: argparse.Namespace) -> int:
    return {"refresh": refresh, "list": show_list, "show": show}[args.action](args)
