"""Compare two run files config by config: status, facts, kernels, latency.

Pure functions of the two RunFiles; the policy then decides what each
difference means. Configs present on one side only are listed, not compared.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from abdiff.host.clocks import clock_notes
from abdiff.host.machine_state import recorded_noise
from abdiff.reports.latency_words import latency_result
from abdiff.run.ranks import rank_notes
from abdiff.store.baselines import interleaved, kernel_env_differences
from abdiff.store.records import (
    ConfigResult,
    ConfigRuns,
    EarlierNoise,
    IterationPlan,
    LatencyResult,
    Result,
    RoundRecord,
    RunFile,
    Side,
    Status,
    StatusChange,
)
from abdiff.verdict import stats
from abdiff.verdict.kernel_times import module_cause, profiled_total, root_cause
from abdiff.verdict.policy import apply_policy
from abdiff.verdict.sequential import Looks


def side_status(rounds: list[RoundRecord]) -> tuple[Status, str | None]:
    """`ok` when every round ran; otherwise the first failure and its error line.

    A config that fails in any round is not ok: a flaky abort is still an abort.
    """
    for record in rounds:
        if record.status != "ok":
            return record.status, record.error
    return "ok", None


def _mode(values: list[Any]) -> Any:
    """The most common value (by JSON form); rounds should agree, and a stray one must not win."""
    if not values:
        return None
    keyed = Counter(json.dumps(v, sort_keys=True) for v in values)
    return json.loads(keyed.most_common(1)[0][0])


def side_facts(rounds: list[RoundRecord]) -> dict[str, Any] | None:
    return _mode([r.facts for r in rounds if r.facts])


def side_kernels(rounds: list[RoundRecord]) -> dict[str, int] | None:
    return _mode([r.kernels for r in rounds if r.status == "ok" and r.kernels])


# What is incidental in a failure line: where the code sits (line numbers move with any
# edit above them), memory addresses, process and object ids, checkout paths keyed by a sha.
_INCIDENTAL = (
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "0x?"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"), "<id>"),
    (re.compile(r"(\.\w+):\d+(:\d+)?\b"), r"\1:N"),
    (re.compile(r"\bline \d+\b"), "line N"),
    (re.compile(r"\b\d{4,}(\.\d+)?(e[-+]?\d+)?\b"), "N"),  # a measured value, decimals too
)


def failure_signature(status: str, error: str | None) -> str:
    """What identifies a failure: the status and its line (signal or exception type, then
    the assert or last message), with line numbers, addresses and ids normalised, so the
    same failure reads the same on both sides and a different one does not."""
    line = " ".join((error or "").split())
    for pattern, replacement in _INCIDENTAL:
        line = pattern.sub(replacement, line)
    return f"{status}: {line}"


def status_change(status_a: Status, status_b: Status, error_a: str | None = None,
                  error_b: str | None = None) -> StatusChange:
    """same | broken | fixed | still-failing (the same failure) | failure-changed."""
    if status_a == "ok":
        return "same" if status_b == "ok" else "broken"
    if status_b == "ok":
        return "fixed"
    if failure_signature(status_a, error_a) == failure_signature(status_b, error_b):
        return "still-failing"
    return "failure-changed"


def facts_diff(a: dict | None, b: dict | None) -> dict[str, list[Any]]:
    if a is None or b is None:
        return {}
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def set_aside_redefined_facts(configs: list[ConfigResult], run_a: RunFile,
                              run_b: RunFile) -> dict[str, tuple[str, str]]:
    """Recorded facts whose meaning differs between the sides (env `fact_meanings`, set by
    the target per checkout): their value changes are taken out of `facts_changed` (neither
    a regression nor a match); returns fact -> (meaning at A, meaning at B)."""
    a, b = run_a.env.get("fact_meanings") or {}, run_b.env.get("fact_meanings") or {}
    recorded = {name for run in (run_a, run_b) for config in run.configs
                for record in config.rounds for name in record.facts}
    redefined = {name: (a[name], b[name]) for name in set(a) & set(b) & recorded
                 if a[name] != b[name]}
    for config in configs:
        for name in redefined:
            config.facts_changed.pop(name, None)
    return redefined


def kernels_diff(a: dict | None, b: dict | None) -> tuple[dict[str, int], dict[str, int]]:
    """Multiset difference: (added in B, removed from A), with counts."""
    if a is None or b is None:
        return {}, {}
    ca, cb = Counter(a), Counter(b)
    return dict(sorted((cb - ca).items())), dict(sorted((ca - cb).items()))


def timed_rounds(config: ConfigRuns) -> list[tuple[int, list[float]]]:
    """(schedule position, iteration latencies) of each round with latencies (list position
    where no position was recorded); a companion round of an older run file is not one."""
    return [(i if r.round is None else r.round, r.latency_us) for i, r in enumerate(config.rounds)
            if r.status == "ok" and r.latency_us and not r.companion]


def latency_samples(config: ConfigRuns) -> list[list[float]]:
    return [latencies for _, latencies in timed_rounds(config)]


def round_medians(config: ConfigRuns) -> dict[int, float]:
    """Each timed round's median (us) by its schedule position (the round number that
    pairs it with the other side's round of the same ABBA block)."""
    return {rid: stats.round_summary(latencies) for rid, latencies in timed_rounds(config)}


def latency_results(
    pairs: list[tuple[ConfigRuns, ConfigRuns]], min_effect: float, alpha: float,
    looks: Looks | None = None, paired: bool = True, drift: stats.Drift | None = None,
    earlier: Mapping[str, EarlierNoise] | None = None,
) -> list[LatencyResult]:
    """Per-config latency verdicts, one family-wise test over the run's configs
    (stats.latency_verdicts); `looks` is the run's adaptive plan, `paired` whether A and
    B were interleaved (a stored baseline was not), `drift` what moves between the
    sessions of sides measured apart (baselines.drift_allowance), `earlier` each config's
    noise in earlier paired runs (a plan of few rounds borrows it)."""
    earlier = earlier or {}
    comparable = [
        i for i, (a, b) in enumerate(pairs)
        if side_status(a.rounds)[0] == "ok" and side_status(b.rounds)[0] == "ok"
        and latency_samples(a) and latency_samples(b)
    ]
    ceiling = looks.max_rounds if looks is not None else None
    computed = [latency_result(s, min_effect, alpha, ceiling) for s in stats.latency_verdicts(
        [stats.ConfigRounds(round_medians(pairs[i][0]), round_medians(pairs[i][1]),
                            earlier.get(pairs[i][1].id))
         for i in comparable],
        min_effect, alpha, looks=looks, paired=paired, drift=drift,
    )]
    results = [
        LatencyResult("n/a", rounds_a=len(a.rounds), rounds_b=len(b.rounds)) for a, b in pairs
    ]
    for i, result in zip(comparable, computed, strict=True):
        results[i] = result
    for (a, b), result in zip(pairs, results, strict=True):
        result.a_rounds_us = [stats.round_summary(r) for r in latency_samples(a)]
        result.b_rounds_us = [stats.round_summary(r) for r in latency_samples(b)]
    return results


def noise_note(pairs: list[tuple[ConfigRuns, ConfigRuns]], configs: list[ConfigResult],
               min_effect: float, eager_cuda: bool) -> str | None:
    """Why latency stayed inconclusive, when round-to-round noise is the reason.

    Noise is taken to be the reason when the median round-to-round variation
    (`stats.round_variation`) of the inconclusive configs' sides exceeds
    `min_effect`; below that, the round budget is. For eager CUDA timing (--eager) the
    note says why graph replays are the default: steps of a few hundred microseconds are bound
    by kernel launches on the host, whose speed varies between processes
    (16-85% on an H200, 0.1-2% with graph replays, docs/performance.md).
    """
    spreads: list[float] = []
    for (config_a, config_b), result in zip(pairs, configs, strict=True):
        if result.latency.verdict != "inconclusive":
            continue
        values = [stats.round_variation(latency_samples(c)) for c in (config_a, config_b)]
        spreads.extend(v for v in values if v is not None)
    if not spreads or float(np.median(spreads)) <= min_effect:
        return None
    # no count here: the reports count the undecided configs once, from the configs
    over = [spread for spread in spreads if spread > min_effect]  # the median's is
    note = (f"where latency is undecided, round medians vary {min(over):.1%} to "
            f"{max(over):.1%} between worker processes, more than the "
            f"{min_effect * 100:g}% threshold")
    if len(over) < len(spreads):  # the range is theirs: "1.0% to 34%, more than 2%" was not
        note += f" ({len(over)} of {len(spreads)} sides; the others less)"
    if eager_cuda:
        note += ("; eager CUDA timing of short steps is bound by kernel launches on the host, "
                 "drop --eager to time graph replays (the default)")
    return note


def run_timing(run_a: RunFile, run_b: RunFile) -> str:
    """What both sides timed ("graph replay" or "eager"), "A: ..., B: ..." when they differ.

    Run files from before graph replays became the default say only `cuda_graph`.
    """
    def timing(run: RunFile) -> str:
        if "timing" in run.env:
            return str(run.env["timing"])
        return "graph replay" if run.env.get("cuda_graph") else "eager"

    a, b = timing(run_a), timing(run_b)
    return a if a == b else f"A: {a}, B: {b}"


# What a result says of each side's environment, as its run file recorded it (with the
# target package's version, `NAME.version`, and the sessions): "measured where, with what"
SIDE_ENV_KEYS = ("device", "device_name", "device_count", "driver", "cuda", "torch", "python",
                 "cpu_model", "host", "target_package", "kernel_env", "sandbox", "machine",
                 "timing", "cuda_graph", "cpu_threads", "worker_start", "abdiff",
                 "recorded_at")


def side_of(run: RunFile, baseline: str | None = None) -> Side:
    """The result's Side of `run`: revision, commit and the environment it was measured in."""
    env = {key: run.env[key] for key in SIDE_ENV_KEYS if key in run.env}
    env.update({key: value for key, value in run.env.items() if key.endswith(".version")})
    return Side(run.rev, run.sha, baseline, env, dict(run.sessions))


def benchmark_warnings(run_a: RunFile, run_b: RunFile) -> list[str]:
    """What the benchmark itself said about its timings (its `warnings` in env: the command
    target's Google Benchmark context), once per warning, naming the sides."""
    said = {str(w): [n for n, run in (("A", run_a), ("B", run_b))
                     if str(w) in map(str, run.env.get("warnings") or [])]
            for run in (run_a, run_b) for w in run.env.get("warnings") or []}
    return [f"the benchmark warns ({' and '.join(sides)}): {warning}"
            for warning, sides in said.items()]


def earlier_noise(earlier: Sequence[tuple[RunFile, RunFile]], configs: Sequence[ConfigRuns],
                  run_times: int) -> dict[str, EarlierNoise]:
    """The noise of each of `configs` in `earlier` paired runs (A, B) that measured it with
    the same parameters, from the pairs of rounds that both timed `run_times` iterations
    (what this run's first rounds time: a round's variance depends on it), each run's odd
    processes taken off (stats.earlier_differences)."""
    params = {c.id: json.dumps(c.params, sort_keys=True) for c in configs}

    def medians(config: ConfigRuns) -> dict[int, float]:
        return {position: stats.round_summary(latencies)
                for position, latencies in timed_rounds(config) if len(latencies) == run_times}

    rows: dict[str, list[np.ndarray]] = {}
    for run_a, run_b in earlier:
        pairs, _ = measured_pairs(run_a, run_b)
        if not pairs:
            continue
        rounds = [stats.ConfigRounds(medians(a), medians(b)) for a, b in pairs]
        differences = stats.earlier_differences(*stats.log_matrices(rounds, paired=True))
        for (config, _), row in zip(pairs, differences, strict=True):
            if params.get(config.id) == json.dumps(config.params, sort_keys=True):
                rows.setdefault(config.id, []).append(row)
    return {config_id: noise for config_id, runs in rows.items()
            if (noise := stats.earlier_noise(runs)) is not None}


def measured_pairs(run_a: RunFile,
                   run_b: RunFile) -> tuple[list[tuple[ConfigRuns, ConfigRuns]], list[str]]:
    """(the configs both sides hold rounds of, as pairs; the ids both list but one of them
    holds no round of)."""
    pairs = []
    not_measured = []
    for config_a in run_a.configs:
        config_b = run_b.config(config_a.id)
        if config_b is None:
            continue
        if config_a.rounds and config_b.rounds:
            pairs.append((config_a, config_b))
        else:
            not_measured.append(config_a.id)
    return pairs, not_measured


def compare_runs(
    run_a: RunFile,
    run_b: RunFile,
    expect: dict[str, list[str]],
    min_effect: float = stats.DEFAULT_MIN_EFFECT,
    alpha: float = stats.DEFAULT_ALPHA,
    notes: list[str] | None = None,
    require_all: bool = False,
    small_changes: str = "report",
    gates: dict[str, str] | None = None,
    drift: stats.Drift | None = None,
) -> Result:
    """The Result of comparing B with A on the configs both measured.

    `require_all`: any config not measured on both sides makes the exit code 1
    (policy.apply_policy); without it, only the count says so. `drift`: sides measured
    apart, the variance of the shift between their sessions (added to each interval)."""
    ids_b = {c.id for c in run_b.configs}
    pairs, not_measured = measured_pairs(run_a, run_b)
    # B is the side measured with this comparison's plan (a stored baseline's A was not)
    paired = interleaved(run_a, run_b) is not False
    latencies = latency_results(pairs, min_effect, alpha, looks=Looks.from_json(run_b.looks),
                                paired=paired, drift=drift,
                                earlier=run_b.earlier_noise if paired else None)
    configs = [config_result(config_a, config_b, latency)
               for (config_a, config_b), latency in zip(pairs, latencies, strict=True)]
    iterations = run_b.iterations or run_a.iterations
    for config in configs:
        config.iterations = iterations.configs.get(config.id) if iterations else None
    redefined = set_aside_redefined_facts(configs, run_a, run_b)
    summary = apply_policy(configs, expect, require_all, len(not_measured), small_changes,
                           gates)
    plan = Looks.from_json(run_b.looks)
    if plan is not None:  # the adaptive plan's ceiling: a config stopped below it was futile
        summary["max_rounds"] = plan.max_rounds
    summary.update(min_effect=min_effect, alpha=alpha, timing=run_timing(run_a, run_b),
                   detectable=stats.detectable_range(latencies))
    all_notes = [*(notes or []), *iterations_notes(iterations),
                 *run_notes(run_a, run_b, pairs, configs, summary, redefined, min_effect)]
    if not_measured:
        all_notes.append(f"not measured on both sides (no rounds): {', '.join(not_measured)}")
    all_notes += benchmark_warnings(run_a, run_b)
    overall = stats.geometric_mean_ratio(latencies) if run_b.target == "command" else None
    if overall is not None:  # what compare.py users read first: the suite's overall change
        mean, count = overall
        all_notes.append(f"geometric mean of B/A over the {count} config(s) with a ratio: "
                         f"{mean:.3f}x ({mean - 1:+.1%})")
    all_notes += rank_notes("A", run_a) + rank_notes("B", run_b) + clock_notes(run_a, run_b)
    return Result(
        a=side_of(run_a),
        b=side_of(run_b),
        expect=expect,
        configs=configs,
        summary=summary,
        suite=run_b.suite or run_a.suite,
        target=run_b.target or run_a.target,
        only_in_a=[c.id for c in run_a.configs if c.id not in ids_b],
        only_in_b=[c.id for c in run_b.configs if run_a.config(c.id) is None],
        notes=all_notes,
    )


def iterations_notes(plan: IterationPlan | None) -> list[str]:
    """Where the plan changed the timed iterations per round (run/iterations.py), once."""
    if plan is None:
        return []
    suite = plan.suite_run_times
    counts = [c.run_times for c in plan.configs.values()]
    changed = []
    for chosen, why in (([n for n in counts if n < suite], "process-to-process"),
                        ([n for n in counts if n > suite], "within-process")):
        if chosen:
            span = f"{min(chosen)}" + (f"-{max(chosen)}" if max(chosen) > min(chosen) else "")
            changed.append(f"{suite} -> {span} for {len(chosen)} "
                           f"config{'s' * (len(chosen) > 1)} ({why} spread dominates)")
    if not changed:
        return []
    kept = counts.count(suite)
    return [f"timed iterations per round from round {plan.from_round + 1} on, as the rounds "
            "before showed cheapest: " + ", ".join(changed)
            + (f"; {kept} kept {suite}" if kept else "")
            + " (to time every round as the suite says: `adapt_run_times: false` in it)"]


def shows_change(added: Mapping[str, int], removed: Mapping[str, int],
                 latency: LatencyResult) -> bool:
    """Kernels or latency changed: what the kernels behind it are named for (kernel_times)."""
    return bool(added or removed) or latency.verdict in ("slower", "faster")


def config_result(config_a: ConfigRuns, config_b: ConfigRuns,
                  latency: LatencyResult) -> ConfigResult:
    """One config both sides measured: status, facts, kernels and latency side by side."""
    status_a, error_a = side_status(config_a.rounds)
    status_b, error_b = side_status(config_b.rounds)
    added, removed = kernels_diff(side_kernels(config_a.rounds), side_kernels(config_b.rounds))
    changed = shows_change(added, removed, latency)
    return ConfigResult(
        id=config_a.id,
        params=config_b.params or config_a.params,
        status_a=status_a,
        status_b=status_b,
        status_change=status_change(status_a, status_b, error_a, error_b),
        error_a=error_a,
        error_b=error_b,
        facts_changed=facts_diff(side_facts(config_a.rounds), side_facts(config_b.rounds)),
        kernels_added=added,
        kernels_removed=removed,
        latency=latency,
        kernel_deltas=root_cause(config_a.rounds, config_b.rounds) if changed else [],
        module_deltas=module_cause(config_a.rounds, config_b.rounds) if changed else [],
        profiled_a_us=profiled_total(config_a.rounds) if changed else None,
        profiled_b_us=profiled_total(config_b.rounds) if changed else None,
    )


def run_notes(run_a: RunFile, run_b: RunFile, pairs: list[tuple[ConfigRuns, ConfigRuns]],
              configs: list[ConfigResult], summary: dict[str, Any],
              redefined: dict[str, tuple[str, str]], min_effect: float) -> list[str]:
    """What the run's setting says about its verdicts: another kernel path, facts that mean
    something else on each side, rounds too noisy to decide, a noisy machine (the summary
    gets the keys the reports read)."""
    all_notes: list[str] = []
    env_differences = kernel_env_differences(run_a.env, run_b.env, "in A", "in B")
    if env_differences:
        # another kernel path may have been measured: said next to the verdict too
        summary["kernel_env_differs"] = sorted({d.split(":", 1)[0] for d in env_differences})
        all_notes.append("kernel-selecting environment differs between the sides: "
                         + "; ".join(env_differences))
    if redefined:
        summary["facts_redefined"] = sorted(redefined)
        all_notes += [f"{name} means something else on each side, values not compared "
                      f"(A: {meanings[0]}; B: {meanings[1]})"
                      for name, meanings in sorted(redefined.items())]
    eager_cuda = all(r.env.get("device") == "cuda" and not r.env.get("cuda_graph")
                     for r in (run_a, run_b))
    noise = noise_note(pairs, configs, min_effect, eager_cuda)
    if noise:
        all_notes.append(noise)
    machine = recorded_noise(run_b.env) or recorded_noise(run_a.env)
    if machine:
        summary["machine"] = machine
        undecided = any(c.latency.verdict == "inconclusive" for c in configs)
        all_notes.append(f"the machine was noisy while measuring ({'; '.join(machine)})"
                         + ("; status, facts and kernels are checked all the same, latency "
                            "only where the noise let it be decided" if undecided else ""))
    return all_notes
