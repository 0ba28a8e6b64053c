"""Stored baselines: run files under `baselines/NAME.json`, with an environment fingerprint.

A baseline is side A measured in other sessions, so nothing cancels the
drift between those sessions and this one the way ABBA interleaving does
inside a run. Comparisons against a baseline therefore refuse a different
machine (unless told otherwise) and allow for the drift (`drift_allowance`):
measured from the baseline's own sessions, it is added to each latency
interval; not measured, latency is reported but does not gate
(docs/baselines.md).
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abdiff.errors import InputError
from abdiff.host.machine_state import recorded_noise
from abdiff.store.records import RunFile, load_run_file
from abdiff.verdict.stats import Drift

# What must match between the baseline's machine and this one for latency to be comparable
# (cuda_graph too: graph replays and eager calls time different things).
FINGERPRINT_KEYS = ("target", "device", "device_name", "device_count", "driver", "cuda",
                    "torch", "python", "cpu_model", "tensorrt_llm.version", "cuda_graph",
                    "kernel_env")
# env key: the kernel-selecting variables the workers ran under (launchers/process.py)
KERNEL_ENV = "kernel_env"
# Where the baseline's machine differs from this one in these, latency is still comparable
# (another host with the same GPU model, driver and software): a note, never a refusal.
NOTE_KEYS = ("host", "gpu_uuid", "clock_policy")
PREFIX = "baseline:"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def baselines_dir(repo_root: Path, override: Path | None) -> Path:
    return Path(override) if override else Path(repo_root) / "baselines"


def baseline_path(folder: Path, name: str) -> Path:
    if not NAME_PATTERN.fullmatch(name):
        raise InputError(f"baseline name {name!r}: use letters, digits, '.', '_' and '-'")
    return Path(folder) / f"{name}.json"


def load_baseline(folder: Path, name: str) -> RunFile:
    path = baseline_path(folder, name)
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in Path(folder).glob("*.json"))) or "none"
        raise InputError(f"baseline {name!r} not found in {folder} (known: {known}); create it "
                         f"with `abdiff baseline refresh {name} --rev REV --configs SUITE`")
    return load_run_file(path)


def list_baselines(folder: Path) -> list[tuple[str, RunFile]]:
    return [(p.stem, load_run_file(p)) for p in sorted(Path(folder).glob("*.json"))]


def fingerprint(run: RunFile) -> dict[str, Any]:
    env = {**run.env, "target": run.target}
    # no kernel-selecting variable set is the default path, as in runs recorded before the key
    return {key: env[key] for key in FINGERPRINT_KEYS if env.get(key) not in (None, {})}


def fingerprint_differences(baseline: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """`key: baseline value != value here` for every fingerprint key that differs."""
    return [
        *(f"{key}: {baseline.get(key)!r} in the baseline, {here.get(key)!r} here"
          for key in FINGERPRINT_KEYS
          if key != KERNEL_ENV and baseline.get(key) != here.get(key)
          and (key in baseline or key in here)),
        *kernel_env_differences(baseline, here, "in the baseline", "here"),
    ]


def kernel_env_differences(env_a: dict[str, Any], env_b: dict[str, Any], where_a: str,
                           where_b: str) -> list[str]:
    """`NAME: 'a' in A, unset in B` for each kernel-selecting variable that differs."""
    a = env_a.get(KERNEL_ENV) or {}
    b = env_b.get(KERNEL_ENV) or {}
    if not isinstance(a, dict) or not isinstance(b, dict):
        return []

    def shown(values: dict[str, Any], name: str) -> str:
        return repr(values[name]) if name in values else "unset"

    return [f"{name}: {shown(a, name)} {where_a}, {shown(b, name)} {where_b}"
            for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]


def fingerprint_notes(baseline_env: dict[str, Any], here_env: dict[str, Any]) -> list[str]:
    """The NOTE_KEYS that differ between the baseline's rounds and this run's (host, GPU)."""
    return [f"{key}: {baseline_env[key]!r} in the baseline, {here_env[key]!r} here"
            for key in NOTE_KEYS
            if baseline_env.get(key) and here_env.get(key)
            and baseline_env[key] != here_env[key]]


@dataclass(frozen=True)
class SessionDrift:
    """How far sessions of one commit move apart, from a run file's rounds (log latency)."""

    shared: float  # SD of the offset all configs share in a session
    own: float  # SD of a config's own offset in a session (robust pool over configs)
    sessions: int  # sessions every pooled config measured in (k)
    df: int  # the own part's degrees of freedom: configs x (k - 1)
    spread: dict[str, float]  # config id -> max/min - 1 of its session medians


def session_drift(run: RunFile) -> SessionDrift | None:
    """Between-session variation of `run`, or None with fewer than two sessions.

    Model: a round's log latency = config mean + shared session offset + the
    config's own session offset + round noise. Per config, each session's mean
    of its log round medians (stats.round_summary), centred on the config's mean
    over sessions: the shared offset of a session is the median of those over
    the configs (one config with an odd worker process cannot move it), its
    variance the sum of squares over the k sessions / (k - 1); a config's own
    offsets are what is left, their variance pooled by the median over configs,
    scaled by (k - 1) / chi2_median(k - 1) so that it estimates the mean (on the
    H200, one process 25% slow in one session gave that config alone a 1.6%
    between-session estimate while the others stayed near 0). The round noise of
    the session means is not subtracted: a method-of-moments subtraction
    estimated 0 whenever the sessions happened to lie closer than their noise,
    and a drift then went uncovered (docs/baselines.md). Only the configs that
    measured in every session are pooled.
    """
    import numpy as np
    from scipy import stats as scipy_stats

    from abdiff.verdict.stats import round_summary

    means: dict[str, dict[str, float]] = {}
    spread: dict[str, float] = {}
    for config in run.configs:
        groups: dict[str, list[float]] = defaultdict(list)
        for record in config.rounds:
            if record.status == "ok" and record.latency_us and record.session:
                groups[record.session].append(math.log(round_summary(record.latency_us)))
        if len(groups) < 2:
            continue
        means[config.id] = {sid: sum(v) / len(v) for sid, v in groups.items()}
        medians = [math.exp(statistics.median(v)) for v in groups.values()]
        spread[config.id] = max(medians) / min(medians) - 1
    if not means:
        return None
    counted = max(len(m) for m in means.values())
    pooled = {cid: m for cid, m in means.items() if len(m) == counted}
    order = sorted(next(iter(pooled.values())))
    pooled = {cid: m for cid, m in pooled.items() if sorted(m) == order}
    k = len(order)
    centred = np.array([[m[sid] for sid in order] for m in pooled.values()])
    centred -= centred.mean(axis=1, keepdims=True)
    shared = np.median(centred, axis=0)
    own = ((centred - shared) ** 2).sum(axis=1) / (k - 1)
    scale = (k - 1) / float(scipy_stats.chi2.ppf(0.5, k - 1))
    return SessionDrift(math.sqrt(float((shared ** 2).sum()) / (k - 1)),
                        math.sqrt(float(np.median(own)) * scale), k, len(pooled) * (k - 1),
                        spread)


def sessions_with_rounds(run: RunFile) -> dict[str, dict[str, Any]]:
    """The run's sessions that measured rounds (a session can be named and hold none)."""
    used = {r.session for c in run.configs for r in c.rounds if r.session}
    return {sid: where for sid, where in run.sessions.items() if sid in used}


def unlike_machine(baseline: RunFile, here: RunFile) -> list[str]:
    """`host 'b' (the baseline's sessions ran on 'a')` for each of host and GPU where this run
    measured on one the baseline's sessions never did: their drift says nothing of a move
    between machines unless the baseline itself spans several (then it has measured it)."""
    found = []
    for key in ("host", "gpu_uuid"):
        there = {str(w[key]) for w in sessions_with_rounds(baseline).values() if w.get(key)}
        now = {str(w[key]) for w in sessions_with_rounds(here).values() if w.get(key)}
        if len(there) == 1 and now and not now <= there:
            found.append(f"{key} {', '.join(sorted(now))} (the baseline's sessions ran on "
                         f"{next(iter(there))})")
    return found


# The machine check's readings of a load that comes and goes (host/machine_state.py): other
# processes, a throttling GPU. A setting that stays (governor, turbo) moves every session alike.
LOAD_READINGS = re.compile(r"(CPU load|busy processes|GPU \d+ other processes|"
                           r"GPU \d+ throttling): ")


def busy_readings(run: RunFile) -> list[str]:
    """The machine check's flagged load readings (`name: value`) of the run and of each of
    its sessions that measured rounds (a refresh records each session's check)."""
    readings = [r for r in recorded_noise(run.env) if LOAD_READINGS.match(r)]
    for where in sessions_with_rounds(run).values():
        readings += [r for r in recorded_noise(where)
                     if LOAD_READINGS.match(r) and r not in readings]
    return readings


@dataclass(frozen=True)
class Allowance:
    """What the drift between a stored side's sessions and this one's allows: the drift
    added to each latency interval (None: not measured), the gates that follow (latency
    soft where the drift is not measured, unless the user named it), and why, in words."""

    drift: Drift | None
    gates: dict[str, str]
    why: str
    summary: dict[str, Any]


def drift_of(drift: SessionDrift) -> Drift:
    """The variances of a new session's shift against the mean of the baseline's k
    sessions, sigma^2 (1 + 1/k) for the shared and the own part, with their df."""
    wider = 1 + 1 / drift.sessions
    return Drift(drift.shared ** 2 * wider, drift.own ** 2 * wider, drift.sessions,
                 float(drift.df))


def drift_allowance(baseline: RunFile, here: RunFile, what: str,
                    gates: dict[str, str]) -> Allowance:
    """The rule of docs/baselines.md: measured drift widens each latency interval; drift not
    measured (one session, or another machine than the baseline's only one) leaves latency
    reported with its interval but not gated, unless `gates` names latency (`--gate
    latency=hard` knowingly)."""
    drift = session_drift(baseline)
    moved = unlike_machine(baseline, here)
    busy = [(side, readings[0]) for side, readings in (("the baseline", busy_readings(baseline)),
                                                       ("this run", busy_readings(here)))
            if readings]
    if drift is not None and not moved and not busy:
        widened = drift_of(drift)
        return Allowance(widened, gates, (
            f"the drift between sessions measured in {what} ({drift.sessions} sessions, SD "
            f"{drift.shared:.2%} shared by the configs, {drift.own:.2%} a config's own) widens "
            "each latency interval: a change flagged is beyond what that drift explains"),
            {"drift": {"measured": True, "shared_sd": drift.shared, "own_sd": drift.own,
                       "sessions": drift.sessions, "df": drift.df}})
    if drift is None:
        missing = (f"{what} has one measuring session, so the drift between sessions is not "
                   "measured")
    elif moved:
        missing = (f"this run measured on {'; '.join(moved)}, a machine unlike the "
                   "baseline's, whose drift between machines is not measured")
    else:  # a load that comes and goes: sessions under one load do not sample the others
        missing = ("the machine was busy while " + " and ".join(
            f"{side} measured ({reading[:80]})" for side, reading in busy)
            + ", so drift under other loads is not measured")
    explicit = "latency" in gates
    soft = gates if explicit else {**gates, "latency": "soft"}
    consequence = (f"latency is gated as --gate latency={gates['latency']} says, although a "
                   "change may be that drift" if explicit else
                   "latency is reported with its interval, not gated (--gate latency=hard "
                   "gates it)")
    remedy = ("`abdiff baseline refresh NAME --rev REV --append` in another session measures "
              "it" if drift is None else "record the baseline on this machine" if moved else
              "measure both on an idle machine")
    return Allowance(None, soft, f"{missing}: {consequence}; {remedy}",
                     {"drift": {"measured": False, "missing": missing}})


def interleaved(run_a: RunFile, run_b: RunFile) -> bool | None:
    """Whether A and B were measured interleaved in one session; None when a run file
    predates session records and nobody can tell."""
    if not run_a.sessions or not run_b.sessions:
        return None
    return bool(set(run_a.sessions) & set(run_b.sessions))


def parse_baseline_range(text: str) -> tuple[str, str] | None:
    """`baseline:NAME..B` -> (NAME, B); B empty means the working tree. None if not a baseline."""
    if not text.startswith(PREFIX):
        return None
    name, sep, rev_b = text[len(PREFIX):].partition("..")
    if not sep or rev_b.startswith("."):
        raise InputError(f"{text!r}: expected baseline:NAME..B (two dots)")
    baseline_path(Path("."), name)  # validates the name
    return name, rev_b


def same_commit(old: RunFile, sha: str) -> None:
    """`--append` pools the rounds of one commit only: InputError for another (asked before
    anything is measured, and of what was)."""
    if old.sha != sha:
        raise InputError(f"--append: the baseline holds {old.sha[:12]}, this run {sha[:12]}; "
                         "refresh without --append to replace it")


def append_rounds(old: RunFile, new: RunFile) -> RunFile:
    """`--append`: the old baseline's rounds followed by the new ones, renumbered.

    Only rounds of the same commit on the same machine may be pooled.
    """
    same_commit(old, new.sha)
    differences = fingerprint_differences(fingerprint(old), fingerprint(new))
    if differences:
        raise InputError("--append: the environment differs from the baseline's: "
                         + "; ".join(differences))
    old.sessions.update(new.sessions)
    # one offset for every config: the rounds of a session keep their common numbering,
    # which the worker orders (`orders[].round`) refer to
    offset = 1 + max((r.round for c in old.configs for r in c.rounds if r.round is not None),
                     default=-1)
    for config in new.configs:
        for record in config.rounds:
            record.round = offset + (record.round or 0)
        kept = old.config(config.id)
        if kept is None:
            old.configs.append(config)
        else:
            kept.rounds += config.rounds
    old.orders += [{**order, "round": offset + int(order.get("round") or 0)}
                   for order in new.orders]
    return old
