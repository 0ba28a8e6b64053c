"""Calibration of abdiff's latency verdicts against the rules of asv, Google Benchmark and pyperf.

On the same data (simulated suites with realistic noise, or replayed real
rounds) it measures, for every rule and at equal sample budgets:

- the family-wise false-alarm rate of A/A runs of a 12-config suite (any config
  flagged slower or faster when nothing changed), with a Clopper-Pearson 95% CI;
- the power to flag a 1%, 2%, 5% and 10% slowdown of one config (in the right
  direction), and the "clean" detection rate at 5% (the shifted config flagged
  and none of the 11 unchanged ones).

Rules (the anchors pool all iterations of all rounds, as those tools do):

- abdiff: `abdiff.stats` as shipped (Welch t on log round medians, Holm across
  the suite, --min-effect 2%, TOST for unchanged), with the default adaptive
  budget: 5 rounds per side, then +2 per side (one ABBA block) for
  configs for which `stats.needs_more_rounds` says so, up to 15 (the
  schedule of abdiff/schedule.py), every look tested at its alpha-spending
  level (abdiff/sequential.py); also "fixed 5" (a run planned without
  extension: one look at the full alpha), "every look at full alpha" (the
  naive extension the spending replaces) and "no odd rule" (every round
  tested, as before issue 23);
- asv (`asv compare`): Mann-Whitney U p < 0.002 and median ratio beyond 1.1;
- Google Benchmark compare.py: Mann-Whitney U, two-sided, p < 0.05 per benchmark;
- pyperf compare_to: Student's t-test on pooled values, p < 0.05 (and, as in
  pyperf, unequal value counts count as "significant": its t-score raises on
  them and the caller treats the error as significant).

The anchors are shown at 5 and at 15 rounds per side (the adaptive rule's
first and largest budget); abdiff's mean rounds per side are in the table, and
the A/A suite's rounds (the most rounds per side any config got: what the
wall time follows).

Noise model (per suite run, each round a fresh process that runs every config,
A and B rounds in randomized ABBA/BAAB blocks): log latency = config base
+ shift (B only) + slow drift over the run (linear ramp of random sign plus a
random walk) + per-process offset shared by all configs of the round + per-
config round offset (both Student-t, 4 d.o.f.: heavy-tailed) + a cold-start
penalty for the first process + within-round Gaussian jitter + heavy-tailed
outlier iterations (Lomax) + for a share of processes a slowdown of all their
configs (an odd process). Profiles: `h200` (DESIGN.md's H200 measurements),
`cpu-quiet` (a quiet dedicated CPU box), `cpu-2core` (this 2-core container
when idle, single-threaded torch; measured with --record), and the
contaminated `gpu-odd` (issue 23: 0.3% process noise, 1% jitter, 8% of
processes 25% slow) and `cpu-2core-odd`. Scenario "bimodal": config 0 of B
runs 25% slow in 40% of B's processes; "flagged or noted" counts the suites in
which it was `slower` or its result said B had more slow rounds than A.

Replay (`--replay DIR`): each recorded config's rounds are split at random into
two sides (A/A); for power, side B of one config (rotating over the recorded
configs) is multiplied by 1 + shift. Results and their reading: docs/statistics.md.

Usage:
  python benchmarks/calibration.py                 # full run (about 40 min on 2 cores)
  python benchmarks/calibration.py --quick         # 400 suites: about 4 min
  python benchmarks/calibration.py --record runs/cpu.json --record-rounds 30
  python benchmarks/calibration.py --record runs/h200.json --record-device cuda
  python benchmarks/calibration.py --replay runs/ a.json b.json  # real rounds
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats as sps

from abdiff import stats
from abdiff.errors import InputError
from abdiff.records import ConfigRuns, RoundRecord, RunFile, load_run_file, write_run_file
from abdiff.sequential import Looks

N_CONFIGS = 12
CONFIDENCE = 1 - 2 * stats.DEFAULT_EQUIVALENCE_ALPHA  # compare_latency's interval
SHIFTS = (0.01, 0.02, 0.05, 0.10)  # 1%: issue 17's goal with --min-effect 0.01


@dataclass(frozen=True)
class Profile:
    name: str
    round_sd: float  # sd of the log per-round offset (process + config parts)
    shared: float  # fraction of the round variance shared by all configs of a process
    within_sd: float  # sd of log iteration jitter inside a round
    outlier_p: float  # probability that an iteration is an outlier
    outlier_scale: float  # outlier factor: 1 + scale * Lomax(1.5)
    drift: float  # largest linear drift over the whole run (log)
    walk_sd: float  # random-walk step per slot (log)
    cold: float  # extra log latency of the first process of a run
    odd_share: float = 0.0  # share of processes that run slow (a contaminated fleet)
    odd_slowdown: float = 0.25  # how much slower such a process runs, all configs alike

    def describe(self) -> str:
        text = (f"round sd {self.round_sd:.1%} ({self.shared:.0%} shared per process, t4 tails), "
                f"within-round sd {self.within_sd:.1%}, outliers {self.outlier_p:.0%} x "
                f"(1 + {self.outlier_scale:g} Lomax(1.5)), drift up to {self.drift:.1%} "
                f"+ walk {self.walk_sd:.2%}/slot, cold start +{self.cold:.1%}")
        if self.odd_share:
            text += f", {self.odd_share:.0%} of processes {self.odd_slowdown:.0%} slow"
        return text


PROFILES = {
    "h200": Profile("h200", 0.002, 0.5, 0.004, 0.01, 0.05, 0.003, 0.0005, 0.005),
    "cpu-quiet": Profile("cpu-quiet", 0.01, 0.5, 0.02, 0.02, 0.2, 0.01, 0.001, 0.02),
    "cpu-2core": Profile("cpu-2core", 0.03, 0.5, 0.025, 0.03, 0.3, 0.03, 0.003, 0.05),
    # issue 23: H200 graph replays (0.1-0.8% between processes) where now and then a
    # process runs 25% slow
    "gpu-odd": Profile("gpu-odd", 0.003, 0.5, 0.01, 0.01, 0.05, 0.003, 0.0005, 0.0,
                       odd_share=0.08),
    "cpu-2core-odd": Profile("cpu-2core-odd", 0.03, 0.5, 0.025, 0.03, 0.3, 0.03, 0.003, 0.05,
                             odd_share=0.08),
}


@dataclass
class Budget:
    first: int = 5
    max_rounds: int = 15
    step: int = 2
    iterations: int = 20


@dataclass
class Tally:
    """Counts for one rule in one scenario."""

    runs: int = 0
    false_alarm: int = 0  # runs in which any unchanged config was flagged
    detected: int = 0  # runs in which the shifted config was flagged slower
    clean: int = 0  # detected and no unchanged config flagged
    rounds: float = 0.0  # sum over runs of mean rounds per side (unchanged configs)
    rounds_shifted: float = 0.0
    suite_rounds: float = 0.0  # sum over runs of the most rounds per side any config got
    unchanged: float = 0.0  # sum over runs of the share of unchanged configs called unchanged
    missed_unchanged: int = 0  # runs in which the shifted config was called unchanged
    noted: int = 0  # runs in which the shifted config was flagged or noted (odd rounds on B)
    shown: int = 0  # runs in which the shifted config was flagged or significant below threshold
    inconclusive: list[int] = field(default_factory=list)  # per run: unchanged configs undecided

    def add(self, other: Tally) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Scenario:
    name: str
    shifts: np.ndarray  # per config, relative slowdown of B
    rounds_b_offset: int = 0  # B gets this many more rounds than A (unequal counts)
    bimodal: float = 0.0  # share of B's processes in which config 0 runs 25% slow
    corrections: tuple[str, ...] = ("holm",)
    anchors: bool = True
    tallies: dict[str, Tally] = field(default_factory=dict)


# --------------------------------------------------------------------------- schedule + noise


def slot_positions(rng: np.random.Generator, budget: Budget) -> np.ndarray:
    """Time slot of (side, round) as schedule.py orders them: ABBA/BAAB blocks.

    The first `budget.first` rounds per side (an odd count ends in a half block),
    then blocks of `budget.step` per side. Returns shape (2, max_rounds).
    """
    pos = np.empty((2, budget.max_rounds), dtype=int)
    t = 0

    def block(start: int, count: int) -> None:
        nonlocal t
        for r in range(start, start + count, 2):
            first, second = (0, 1) if rng.random() < 0.5 else (1, 0)
            pos[first, r], pos[second, r] = t, t + 1
            t += 2
            if r + 1 < start + count:
                pos[second, r + 1], pos[first, r + 1] = t, t + 1
                t += 2

    block(0, min(budget.first, budget.max_rounds))
    done = budget.first
    while done < budget.max_rounds:
        extra = min(budget.step, budget.max_rounds - done)
        block(done, extra)
        done += extra
    return pos


def student_t4(rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """Heavy-tailed noise with unit variance (Student t, 4 degrees of freedom)."""
    return rng.standard_t(4, size=size) / np.sqrt(2.0)


def simulate(profile: Profile, shifts: np.ndarray, runs: int, budget: Budget,
             rng: np.random.Generator, bimodal: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Latencies (us) of `runs` suite runs: A and B, shape (runs, configs, rounds, iterations)."""
    n_cfg, n_r, n_it = len(shifts), budget.max_rounds, budget.iterations
    slots = 2 * n_r
    pos = np.stack([slot_positions(rng, budget) for _ in range(runs)])  # (runs, 2, rounds)
    tau = np.linspace(0.0, 1.0, slots)
    drift = (rng.uniform(-profile.drift, profile.drift, (runs, 1)) * tau
             + np.cumsum(rng.normal(0, profile.walk_sd, (runs, slots)), axis=1))
    process = profile.round_sd * np.sqrt(profile.shared) * student_t4(rng, (runs, slots))
    process[:, 0] += profile.cold
    process += np.log1p(profile.odd_slowdown) * (rng.random((runs, slots)) < profile.odd_share)
    per_config = profile.round_sd * np.sqrt(1 - profile.shared) * student_t4(
        rng, (runs, n_cfg, slots))
    base = np.log(rng.uniform(50, 5000, (runs, n_cfg)))
    sides = []
    for side in (0, 1):
        p = pos[:, side, :]  # (runs, rounds): slot of each round
        slot_effect = (np.take_along_axis(drift, p, 1) + np.take_along_axis(process, p, 1))
        cfg_slots = np.broadcast_to(p[:, None, :], (runs, n_cfg, n_r))
        cfg_effect = np.take_along_axis(per_config, cfg_slots, 2)
        level = base[:, :, None] + slot_effect[:, None, :] + cfg_effect
        if side == 1:
            level = level + np.log1p(shifts)[None, :, None]
            level[:, 0, :] += np.log1p(0.25) * (rng.random((runs, n_r)) < bimodal)
        jitter = rng.normal(0, profile.within_sd, (runs, n_cfg, n_r, n_it))
        outlier = rng.random((runs, n_cfg, n_r, n_it)) < profile.outlier_p
        jitter += outlier * np.log1p(profile.outlier_scale * rng.pareto(1.5, outlier.shape))
        sides.append(np.exp(level[..., None] + jitter))
    return sides[0], sides[1]


# --------------------------------------------------------------------------- rules


def abdiff_adaptive(
    a: np.ndarray, b: np.ndarray, budget: Budget, min_effect: float, alpha: float,
    correction: str = "holm", extra_b: int = 0, spending: bool = True,
    odd: bool = True, process: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """abdiff's verdicts with the adaptive extension, through `abdiff.stats`.

    Returns (verdicts after the first rounds of a run planned without extension, at
    the full alpha; final verdicts; rounds per side used; whether the first and the
    final result note more slow rounds on B than on A; and whether the first and the
    final result show a slowdown, flagged or significant below the threshold), each
    (runs, configs).
    Every look of the extension is tested at its alpha-spending level (the budget's
    `sequential.Looks`, as the tool does); `spending=False` tests every look at the
    full alpha, the naive rule the spending replaces. `odd=False` is the rule before
    odd rounds were set aside (issue 23); `process=False` the odd rule before process
    speeds were
    taken into account (every round of a simulated suite is one process; an
    extension round holds only the configs still undecided, as in the tool, so
    its process speed is known only where PROCESS_MIN_CONFIGS others ran in it: where
    an undecided config's slow rounds are being counted the tool adds companions,
    `companions`, whose rounds count for process speeds only).
    Round-level tests run vectorized through
    `stats.round_level_tests` (what `compare_latency` calls); verdicts come from
    `stats.latency_verdicts` suite by suite, as compare.py calls it.
    """
    runs, n_cfg = a.shape[:2]
    log_a = np.log(np.median(a, axis=-1))  # round_summary on every round
    log_b = np.log(np.median(b, axis=-1))
    odd_method = "odd" if odd else ""
    nan = float("nan")
    cache = [[stats.LatencyStats(nan, (nan, nan), nan, nan, 0, 0, "") for _ in range(n_cfg)]
             for _ in range(runs)]
    used = np.zeros((runs, n_cfg), dtype=int)
    verdicts = np.full((runs, n_cfg), "inconclusive", dtype=object)
    noted = np.zeros((runs, n_cfg), dtype=bool)
    shown = np.zeros((runs, n_cfg), dtype=bool)
    first = first_noted = first_shown = None
    active = np.ones((runs, n_cfg), dtype=bool)
    picker = np.random.default_rng(0)  # companions are chosen independently of the data
    counting = np.zeros((runs, n_cfg), dtype=bool)  # p_odd known: B has more slow rounds
    ran_a = np.zeros(log_a.shape, dtype=bool)  # which configs each process (round) ran
    ran_b = np.zeros(log_b.shape, dtype=bool)
    ran_a[:, :, :budget.first] = True
    ran_b[:, :, :budget.first + extra_b] = True
    n = budget.first
    looks = Looks(budget.first, budget.max_rounds, budget.step) if spending else None
    while True:
        idx = np.argwhere(active)
        na, nb = n, min(n + extra_b, log_b.shape[2])
        sub_a = log_a[idx[:, 0], idx[:, 1], :na]
        sub_b = log_b[idx[:, 0], idx[:, 1], :nb]
        slow_a = slow_b = np.zeros(len(idx), dtype=int)
        excess = np.zeros(len(idx))
        counts = np.zeros((len(idx), 4), dtype=int)
        if odd:
            raw_a, raw_b = sub_a, sub_b
            sub_a, sub_b, slow_a, slow_b, excess = odd_round_inputs(raw_a, raw_b)
            if process:
                both = stats.process_offsets(np.concatenate(
                    [np.where(ran_a, log_a, np.nan)[..., :na],
                     np.where(ran_b, log_b, np.nan)[..., :nb]], axis=-1))
                off_a, off_b = both[..., :na], both[..., na:]
                use, counts, own_excess = process_round_inputs(
                    raw_a, raw_b, off_a[idx[:, 0], idx[:, 1]], off_b[idx[:, 0], idx[:, 1]])
                slow_a = np.where(use, counts[:, 2], slow_a)
                slow_b = np.where(use, counts[:, 3], slow_b)
                excess = np.where(use, own_excess, excess)
                counts[~use] = 0
        tests = stats.round_level_tests(sub_a, sub_b, min_effect, CONFIDENCE)
        for k, (r, c) in enumerate(idx):
            more_slow_b = bool(slow_b[k] > slow_a[k])
            cache[r][c] = stats.LatencyStats(
                float(tests.ratio[k]), (float(tests.ci_low[k]), float(tests.ci_high[k])),
                float(tests.p_difference[k]), float(tests.p_equivalence[k]), na, nb, odd_method,
                p_odd=stats.odd_rate_test(int(slow_b[k]), nb, int(slow_a[k]), na),
                odd_note="B has more slow rounds" if more_slow_b else None,
                odd_excess=float(excess[k]), known_a=int(counts[k, 0]),
                known_b=int(counts[k, 1]), specific_a=int(counts[k, 2]),
                specific_b=int(counts[k, 3]))
            used[r, c] = n
        active[:] = False
        if first is None:  # a run planned without extension: one look at the full alpha
            once = [stats.latency_verdicts(cache[r], min_effect, alpha, correction=correction)
                    for r in range(runs)]
            first = np.array([[res.verdict for res in row] for row in once], dtype=object)
            first_noted = np.array([[c.odd_note is not None for c in row] for row in cache])
            first_shown = np.array([[shows_slowdown(res, min_effect) for res in row]
                                    for row in once])
        for r in np.unique(idx[:, 0]):
            results = stats.latency_verdicts(cache[r], min_effect, alpha, correction=correction,
                                             looks=looks)
            verdicts[r] = [res.verdict for res in results]
            noted[r] = [c.odd_note is not None for c in cache[r]]
            shown[r] = [shows_slowdown(res, min_effect) for res in results]
            # the tool's rule (session.undecided_configs): undecided, and not futile
            active[r] = [stats.needs_more_rounds(res)
                         and not stats.futile(res, budget.max_rounds, min_effect)
                         for res in results]
            counting[r] = [res.p_odd is not None for res in results]
        if n >= budget.max_rounds or not active.any():
            break
        block = slice(n, min(n + budget.step, budget.max_rounds))
        # companions where an undecided config's slow rounds are being counted (session.py)
        wanted = process & (active & counting).any(-1, keepdims=True)
        timed = active | (companions(active, picker) & wanted)
        ran_a[:, :, block] = timed[:, :, None]
        ran_b[:, :, block.start + extra_b:block.stop + extra_b] = timed[:, :, None]
        n = min(n + budget.step, budget.max_rounds)
    return first, verdicts, used, np.stack([first_noted, noted]), np.stack([first_shown, shown])


def shows_slowdown(result: stats.LatencyResult, min_effect: float) -> bool:
    """Flagged `slower`, or a significant slowdown the result shows as below the threshold
    (issue 17: a clear change below --min-effect is shown as such, not as a bare verdict)."""
    notes = result.note.split("; ") if result.note else []
    below = stats.below_threshold_note(min_effect) in notes
    return result.verdict == "slower" or (below and (result.ratio or 0) > 1)


def odd_round_inputs(log_a: np.ndarray, log_b: np.ndarray) -> tuple[np.ndarray, ...]:
    """What compare_latency does with odd rounds, for rows of log round medians.

    Returns (A and B with odd rounds as NaN, slow-round counts of A and B, the
    excess of B's slow rounds over A's median); check_equivalence checks it.
    """
    kept_a, _ = stats.set_aside(log_a, log_b)
    kept_b, _ = stats.set_aside(log_b, log_a)
    slow_a = stats.slow_rounds(log_a, kept_b)
    slow_b = stats.slow_rounds(log_b, kept_a)
    excess = np.array([stats.slow_excess(log_b[k], int(n), kept_a[k])
                       for k, n in enumerate(slow_b)])
    return kept_a, kept_b, slow_a, slow_b, excess


def companions(active: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """schedule.pick_companions for rows of suites: random decided configs, as many as make
    PROCESS_MIN_CONFIGS + 1 configs in an adaptive round (none where none is undecided)."""
    wanted = np.clip(stats.PROCESS_MIN_CONFIGS + 1 - active.sum(-1), 0, None) * active.any(-1)
    priority = np.where(active, np.inf, rng.random(active.shape))
    rank = priority.argsort(-1).argsort(-1)
    return (rank < wanted[:, None]) & ~active


def process_round_inputs(log_a: np.ndarray, log_b: np.ndarray, off_a: np.ndarray,
                         off_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What compare_latency does where process speeds are known, for rows of log round
    medians and their process offsets (NaN: unknown).

    Returns (rows where it applies, counts [known A, known B, slow-beyond-process A,
    slow-beyond-process B], the excess of B's such rounds); check_equivalence checks it.
    """
    own_a, own_b = log_a - off_a, log_b - off_b
    known_a, known_b = np.isfinite(own_a).sum(-1), np.isfinite(own_b).sum(-1)
    use = (known_a >= stats.MIN_ROUNDS) & (known_b >= 1)
    slow_a = stats.slow_rounds(own_a, own_b, pooled_scale=True)
    slow_b = stats.slow_rounds(own_b, own_a, pooled_scale=True)
    excess = np.array([stats.slow_excess(own_b[k][np.isfinite(own_b[k])], int(n), own_a[k])
                       for k, n in enumerate(slow_b)])
    return use, np.stack([known_a, known_b, slow_a, slow_b], axis=1), excess


def pooled(x: np.ndarray, rounds: int) -> np.ndarray:
    """Pool the iterations of the first `rounds` rounds: (runs, configs, rounds*iterations)."""
    sub = x[:, :, :rounds, :]
    return sub.reshape(sub.shape[0], sub.shape[1], -1)


def anchor_flags(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """Signed flags (+1 slower, -1 faster, 0 none) of the anchor rules on pooled iterations."""
    u = sps.mannwhitneyu(b, a, alternative="two-sided", axis=-1).pvalue
    med = np.median(b, axis=-1) / np.median(a, axis=-1)
    mean = b.mean(axis=-1) / a.mean(axis=-1)
    if a.shape[-1] == b.shape[-1]:
        t = sps.ttest_ind(b, a, axis=-1).pvalue  # Student (pooled variance), as pyperf
        pyperf_sig = t < 0.05
    else:  # pyperf: tscore() raises on unequal counts, is_significant_benchs() says True
        pyperf_sig = np.ones(a.shape[:-1], dtype=bool)
    asv_sig = (u < 0.002) & ((med > 1.1) | (med < 1 / 1.1))
    return {
        "asv": np.where(asv_sig, np.sign(med - 1), 0),
        "gbench": np.where(u < 0.05, np.sign(mean - 1), 0),
        "pyperf": np.where(pyperf_sig, np.sign(mean - 1), 0),
    }


def tally(flags: np.ndarray, shifted: np.ndarray, rounds: np.ndarray | None = None,
          verdicts: np.ndarray | None = None, noted: np.ndarray | None = None,
          shown: np.ndarray | None = None) -> Tally:
    """Summarize signed flags (runs, configs) given which configs are really shifted."""
    null = ~shifted
    false_alarm = (flags[:, null] != 0).any(axis=1)
    out = Tally(runs=flags.shape[0], false_alarm=int(false_alarm.sum()))
    if shifted.any():
        hit = (flags[:, shifted] > 0).all(axis=1)
        out.detected = int(hit.sum())
        out.clean = int((hit & ~false_alarm).sum())
    if rounds is not None:
        out.rounds = float(rounds[:, null].mean(axis=1).sum())
        out.suite_rounds = float(rounds.max(axis=1).sum())
        if shifted.any():
            out.rounds_shifted = float(rounds[:, shifted].mean(axis=1).sum())
    if verdicts is not None:
        out.unchanged = float((verdicts[:, null] == "unchanged").mean(axis=1).sum())
        out.inconclusive = (verdicts[:, null] == "inconclusive").sum(axis=1).tolist()
        if shifted.any():
            out.missed_unchanged = int((verdicts[:, shifted] == "unchanged").any(axis=1).sum())
    if shown is not None and shifted.any():
        out.shown = int(shown[:, shifted].all(axis=1).sum())
    if noted is not None and shifted.any():
        out.noted = int(((flags[:, shifted] > 0) | noted[:, shifted]).all(axis=1).sum())
        silent = (verdicts == "unchanged") & ~noted if verdicts is not None else None
        if silent is not None:
            out.missed_unchanged = int(silent[:, shifted].any(axis=1).sum())
    return out


def signed(verdicts: np.ndarray) -> np.ndarray:
    return np.where(verdicts == "slower", 1, np.where(verdicts == "faster", -1, 0))


def evaluate(a: np.ndarray, b: np.ndarray, scenario: Scenario, budget: Budget, min_effect: float,
             alpha: float) -> dict[str, Tally]:
    """Every rule on the same data; returns Tally per rule name."""
    shifted = scenario.shifts != 0
    shifted[0] |= scenario.bimodal > 0  # the bimodal change is on config 0
    out: dict[str, Tally] = {}
    extra = scenario.rounds_b_offset
    span = f"{budget.first}-{budget.max_rounds}"
    for correction in scenario.corrections:
        first, final, used, noted, shown = abdiff_adaptive(a, b, budget, min_effect, alpha,
                                                           correction, extra)
        tag = "" if correction == "holm" else ", BH"
        out[f"abdiff (adaptive {span}{tag})"] = tally(signed(final), shifted, used, final,
                                                      noted[1], shown[1])
        if correction != "holm":
            continue
        fixed = np.full(used.shape, budget.first)
        out[f"abdiff (fixed {budget.first})"] = tally(signed(first), shifted, fixed, first,
                                                      noted[0], shown[0])
        _, final, used, noted, _ = abdiff_adaptive(a, b, budget, min_effect, alpha, correction,
                                                   extra, spending=False)
        out[f"abdiff (adaptive {span}, every look at full alpha)"] = tally(
            signed(final), shifted, used, final, noted[1])
        first, final, used, noted, _ = abdiff_adaptive(a, b, budget, min_effect, alpha,
                                                       correction, extra, process=False)
        out[f"abdiff (fixed {budget.first}, no process speeds)"] = tally(
            signed(first), shifted, fixed, first, noted[0])
        out[f"abdiff (adaptive {span}, no process speeds)"] = tally(signed(final), shifted,
                                                                   used, final, noted[1])
        first, final, used, _, _ = abdiff_adaptive(a, b, budget, min_effect, alpha, correction,
                                                   extra, odd=False)
        out[f"abdiff (fixed {budget.first}, no odd rule)"] = tally(signed(first), shifted, fixed,
                                                                   first)
        out[f"abdiff (adaptive {span}, no odd rule)"] = tally(signed(final), shifted, used, final)
    if scenario.anchors:
        budgets = [budget.first] if extra else sorted({budget.first, budget.max_rounds})
        for rounds in budgets:
            flags = anchor_flags(pooled(a, rounds), pooled(b, rounds + extra))
            for name, f in flags.items():
                out[f"{name} rule ({rounds} rounds)"] = tally(
                    f, shifted, np.full(f.shape, rounds))
    return out


# --------------------------------------------------------------------------- drivers


def sim_chunk(args: tuple) -> dict[str, Tally]:
    profile, scenario, runs, budget, min_effect, alpha, seed = args
    rng = np.random.default_rng(seed)
    rounds = budget.max_rounds + scenario.rounds_b_offset
    sim_budget = Budget(budget.first, rounds, budget.step, budget.iterations)
    a, b = simulate(profile, scenario.shifts, runs, sim_budget, rng, scenario.bimodal)
    return evaluate(a[:, :, : budget.max_rounds], b, scenario, budget, min_effect, alpha)


def scenarios(n_configs: int) -> list[Scenario]:
    def shift_one(s: float) -> np.ndarray:
        v = np.zeros(n_configs)
        v[0] = s
        return v

    half = np.zeros(n_configs)
    half[: n_configs // 2] = 0.10
    out = [Scenario("A/A", np.zeros(n_configs))]
    out += [Scenario(f"+{s:.0%}", shift_one(s)) for s in SHIFTS]
    out.append(Scenario("A/A, B has 1 more round", np.zeros(n_configs), rounds_b_offset=1))
    out.append(Scenario("half the suite +10% (expected scope)", half,
                        corrections=("holm", "bh"), anchors=False))
    out.append(Scenario("B slow in 40% of processes (bimodal)", np.zeros(n_configs), bimodal=0.4,
                        anchors=False))
    return out


def run_scenarios(make_chunks, scenario_list: list[Scenario], jobs: int) -> None:
    """Run every scenario's chunks in a process pool and merge the tallies."""
    work = []
    for si, scenario in enumerate(scenario_list):
        for args in make_chunks(scenario, si):
            work.append((si, args))
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_call, work))
    else:
        results = [_call(w) for w in work]
    for (si, _), res in zip(work, results, strict=True):
        tallies = scenario_list[si].tallies
        for name, t in res.items():
            tallies.setdefault(name, Tally()).add(t)


def _call(item: tuple) -> dict[str, Tally]:
    _, args = item
    if args[0] == "replay":
        return replay_chunk(args[1:])
    return sim_chunk(args)


# --------------------------------------------------------------------------- report


def ci(k: int, n: int) -> tuple[float, float]:
    interval = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return interval.low, interval.high


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def report(title: str, scenario_list: list[Scenario]) -> str:
    by_name = {s.name: s for s in scenario_list}
    aa = by_name["A/A"]
    rules = list(aa.tallies)
    header = ["rule", "rounds/side", "A/A suite rounds", "A/A false alarms (95% CI)"]
    header += [f"power +{s:.0%}" for s in SHIFTS] + ["clean +5%", "A/A unchanged",
                                                     "A/A inconclusive (median)"]
    rows = []
    for rule in rules:
        t = aa.tallies[rule]
        lo, hi = ci(t.false_alarm, t.runs)
        row = [rule, f"{t.rounds / t.runs:.1f}", f"{t.suite_rounds / t.runs:.1f}",
               f"{t.false_alarm}/{t.runs} = {pct(t.false_alarm / t.runs)} "
               f"[{pct(lo)}, {pct(hi)}]"]
        for s in SHIFTS:
            ts = by_name[f"+{s:.0%}"].tallies[rule]
            adaptive = rule.startswith("abdiff (a")
            rounds = f" ({ts.rounds_shifted / ts.runs:.1f}r)" if adaptive else ""
            row.append(pct(ts.detected / ts.runs) + rounds)
        t5 = by_name["+5%"].tallies[rule]
        row.append(pct(t5.clean / t5.runs))
        row.append(pct(t.unchanged / t.runs) if rule.startswith("abdiff") else "-")
        row.append(f"{np.median(t.inconclusive):g}" if t.inconclusive else "-")
        rows.append(row)
    lines = [title, format_table(header, rows)]
    extra = []
    unequal = by_name.get("A/A, B has 1 more round")
    if unequal:
        for rule, t in unequal.tallies.items():
            extra.append([f"{unequal.name}: {rule}", f"{t.false_alarm}/{t.runs}",
                          pct(t.false_alarm / t.runs)])
    expected = by_name.get("half the suite +10% (expected scope)")
    if expected:
        for rule, t in expected.tallies.items():
            if "fixed" in rule:
                continue
            extra.append([f"{expected.name}: {rule}, false alarms among the unchanged half",
                          f"{t.false_alarm}/{t.runs}", pct(t.false_alarm / t.runs)])
    bimodal = by_name.get("B slow in 40% of processes (bimodal)")
    if bimodal:
        for rule, t in bimodal.tallies.items():
            if "no odd rule" in rule:
                continue
            extra.append([f"{bimodal.name}: {rule}, flagged slower",
                          f"{t.detected}/{t.runs}", pct(t.detected / t.runs)])
            extra.append([f"{bimodal.name}: {rule}, flagged or noted",
                          f"{t.noted}/{t.runs}", pct(t.noted / t.runs)])
            extra.append([f"{bimodal.name}: {rule}, called unchanged without a note",
                          f"{t.missed_unchanged}/{t.runs}", pct(t.missed_unchanged / t.runs)])
    for shift in (0.02, 0.05):  # a change at (+2%) and beyond (+5%) the default threshold
        sc = by_name[f"+{shift:.0%}"]
        for rule, t in sc.tallies.items():
            if rule.startswith("abdiff"):
                extra.append([f"+{shift:.0%}: {rule}, shifted config called unchanged",
                              f"{t.missed_unchanged}/{t.runs}", pct(t.missed_unchanged / t.runs)])
    for shift in (0.01, 0.02):  # a change at or below the threshold: flagged or shown below it
        for name, t in by_name[f"+{shift:.0%}"].tallies.items():
            # abdiff's own rows (adaptive first, then fixed); the variants' names have commas
            if name.startswith(("abdiff (adaptive", "abdiff (fixed")) and "," not in name:
                extra.append([f"+{shift:.0%}: {name}, flagged or shown significant below "
                              "the threshold", f"{t.shown}/{t.runs}", pct(t.shown / t.runs)])
    if extra:
        lines.append(format_table(["extra scenario", "count", "rate"], extra))
    return "\n".join(lines)


def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = " | ".join(f"{{:<{w}}}" for w in widths)
    sep = "-+-".join("-" * w for w in widths)
    return "\n".join([fmt.format(*header), sep, *(fmt.format(*r) for r in rows)]) + "\n"


# --------------------------------------------------------------------------- replay


def load_replay(paths: list[Path], min_rounds: int) -> list[tuple[str, list[list[float]]]]:
    """(name, rounds) of every recorded config with enough ok rounds.

    Rounds of the same commit and config are pooled across files: both sides of
    an A/A run (`abdiff pr..pr`) were interleaved in one session, so their
    rounds are exchangeable.
    """
    pooled: dict[str, list[list[float]]] = {}
    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    for path in files:
        run = load_run_file(path)
        for cfg in run.configs:
            pooled.setdefault(f"{run.sha[:8]}:{cfg.id}", []).extend(
                r.latency_us for r in cfg.rounds if r.status == "ok" and r.latency_us)
    return [(name, rounds) for name, rounds in pooled.items() if len(rounds) >= min_rounds]


def replay_arrays(pool: list[list[list[float]]], n_configs: int, runs: int, per_side: int,
                  iterations: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A/A suites from recorded rounds: each config's rounds shuffled and split in two halves.

    Suite slot c of run r replays recorded config (c + offset_r) mod len(pool), with a
    random offset per run, so the shifted slot 0 visits every recorded config.
    """
    a = np.empty((runs, n_configs, per_side, iterations))
    b = np.empty_like(a)
    offsets = rng.integers(len(pool), size=runs)
    for r, c in itertools.product(range(runs), range(n_configs)):
        rounds = pool[(c + offsets[r]) % len(pool)]
        order = rng.permutation(len(rounds))
        a[r, c] = [rounds[i][:iterations] for i in order[:per_side]]
        b[r, c] = [rounds[i][:iterations] for i in order[per_side: 2 * per_side]]
    return a, b


def replay_chunk(args: tuple) -> dict[str, Tally]:
    pool, scenario, runs, budget, min_effect, alpha, seed = args
    rng = np.random.default_rng(seed)
    a, b = replay_arrays(pool, len(scenario.shifts), runs, budget.max_rounds, budget.iterations,
                         rng)
    b = b * (1 + scenario.shifts)[None, :, None, None]
    b[:, 0] *= np.where(rng.random(b.shape[:1] + b.shape[2:3]) < scenario.bimodal, 1.25,
                        1.0)[:, :, None]
    return evaluate(a, b, scenario, budget, min_effect, alpha)


# --------------------------------------------------------------------------- record

_CHILD = r"""
import json, sys, time
import torch
device, threads, iters, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if threads > 0:
    torch.set_num_threads(threads)
torch.manual_seed(0)
out = {}
for name, bs, q, kv, sdpa in json.loads(sys.argv[5]):
    h, d = 8, 64
    qt = torch.randn(bs * h, q, d, device=device)
    k = torch.randn(bs * h, kv, d, device=device)
    v = torch.randn(bs * h, kv, d, device=device)
    def step():
        if sdpa:
            return torch.nn.functional.scaled_dot_product_attention(qt, k, v)
        s = torch.bmm(qt, k.transpose(1, 2)) * d ** -0.5
        return torch.bmm(torch.softmax(s, -1), v)
    for _ in range(warmup):
        step()
    if device == "cuda":  # GPU time between events: no host jitter
        torch.cuda.synchronize()
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        marks[0].record()
        for i in range(iters):
            step()
            marks[i + 1].record()
        torch.cuda.synchronize()
        lat = [marks[i].elapsed_time(marks[i + 1]) * 1e3 for i in range(iters)]
    else:
        lat = []
        for _ in range(iters):
            t0 = time.perf_counter_ns()
            step()
            lat.append((time.perf_counter_ns() - t0) / 1e3)
    out[name] = lat
print(json.dumps(out))
"""

RECORD_CONFIGS = {
    "cpu": [
        ("GEN-bmm-bs8-q4", 8, 4, 2049, False),
        ("GEN-sdpa-bs8-q4", 8, 4, 2049, True),
        ("GEN-bmm-bs32-q1", 32, 1, 2049, False),
        ("GEN-sdpa-bs32-q1", 32, 1, 2049, True),
    ],
    "cuda": [  # large enough to be GPU-bound (about 0.1 to 1 ms per step on an H200)
        ("GEN-bmm-bs128-q4", 128, 4, 8193, False),
        ("GEN-sdpa-bs128-q4", 128, 4, 8193, True),
        ("GEN-bmm-bs256-q1", 256, 1, 8193, False),
        ("GEN-sdpa-bs256-q1", 256, 1, 8193, True),
    ],
}


def record(out: Path, rounds: int, device: str, threads: int, iterations: int) -> None:
    """Time real attention steps in `rounds` fresh processes; write an abdiff.run/1 file."""
    shapes = RECORD_CONFIGS["cuda" if device.startswith("cuda") else "cpu"]
    configs = {name: ConfigRuns(name, {"batch_size": bs, "seq_len_q": q, "seq_len_kv_cache": kv,
                                       "op": "sdpa" if sdpa else "bmm+softmax"})
               for name, bs, q, kv, sdpa in shapes}
    env: dict = {"device": device, "threads": threads}
    for i in range(rounds):
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, device, str(threads), str(iterations), "20",
             json.dumps(shapes)],
            capture_output=True, text=True, check=True, timeout=600)
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        for name, lat in data.items():
            configs[name].rounds.append(RoundRecord("ok", latency_us=lat, round=i))
        print(f"round {i + 1}/{rounds} done", file=sys.stderr)
    run = RunFile(rev="calibration", sha="0" * 40, target="calibration-record", suite="attention",
                  env=env, configs=list(configs.values()))
    write_run_file(out, run)
    for cfg in run.configs:
        med = np.array([np.median(r.latency_us) for r in cfg.rounds])
        within = np.median([np.std(np.log(r.latency_us)) for r in cfg.rounds])
        print(f"{cfg.id}: median {np.median(med):.1f} us, round-to-round sd "
              f"{np.std(np.log(med), ddof=1):.2%}, within-round sd {within:.2%}")


# --------------------------------------------------------------------------- main


def check_equivalence(seed: int) -> None:
    """The vectorized path used here gives what compare_latency gives (a few spot checks).

    On the contaminated profile, with one B round made 25% slow, so that the
    odd-round path (set aside, slow-round counts, excess) is compared too.
    """
    rng = np.random.default_rng(seed)
    a, b = simulate(PROFILES["gpu-odd"], np.full(5, 0.03), 1, Budget(), rng)
    b[0, :, 2] *= 1.25  # one process slow in every config
    b[0, 0, 4] *= 1.25  # and one config slow in a process of its own
    log_a, log_b = np.log(np.median(a[0, :, :7], -1)), np.log(np.median(b[0, :, :9], -1))
    both = stats.process_offsets(np.concatenate([log_a, log_b], axis=-1))
    off_a, off_b = both[:, :7], both[:, 7:]
    for c in range(5):
        ra, rb = a[0, c, :7].tolist(), b[0, c, :9].tolist()
        direct = stats.compare_latency(ra, rb)
        kept_a, kept_b, slow_a, slow_b, excess = odd_round_inputs(log_a[c][None], log_b[c][None])
        vec = stats.round_level_tests(kept_a, kept_b, stats.DEFAULT_MIN_EFFECT, CONFIDENCE)
        assert len(direct.set_aside_b) >= 1
        assert np.isclose(direct.p_odd, stats.odd_rate_test(int(slow_b[0]), 9, int(slow_a[0]), 7))
        assert np.isclose(direct.odd_excess, excess[0])
        by_process = stats.compare_latency(ra, rb, a_offsets=dict(enumerate(off_a[c])),
                                           b_offsets=dict(enumerate(off_b[c])))
        use, counts, own_excess = process_round_inputs(log_a[c][None], log_b[c][None],
                                                       off_a[c][None], off_b[c][None])
        assert use[0] and [by_process.known_a, by_process.known_b, by_process.specific_a,
                           by_process.specific_b] == counts[0].tolist()
        assert np.isclose(by_process.odd_excess, own_excess[0])
        assert by_process.specific_b == (1 if c == 0 else 0)  # the process-wide one is no finding
        assert np.isclose(direct.p_difference, vec.p_difference[0])
        assert np.isclose(direct.p_equivalence, vec.p_equivalence[0])
        assert np.isclose(direct.ci[0], vec.ci_low[0]) and np.isclose(direct.ratio, vec.ratio[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4000, help="suite runs per scenario")
    parser.add_argument("--quick", action="store_true", help="400 runs per scenario")
    parser.add_argument("--profiles", default=",".join(PROFILES),
                        help=f"comma-separated, from {', '.join(PROFILES)}")
    parser.add_argument("--configs", type=int, default=N_CONFIGS)
    parser.add_argument("--rounds", type=int, default=5, help="first rounds per side")
    parser.add_argument("--max-rounds", type=int, default=15)
    parser.add_argument("--step", type=int, default=2, help="rounds per side per extension")
    parser.add_argument("--iterations", type=int, default=20, help="timed iterations per round")
    parser.add_argument("--alpha", type=float, default=stats.DEFAULT_ALPHA)
    parser.add_argument("--min-effect", type=float, default=stats.DEFAULT_MIN_EFFECT)
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--replay", type=Path, nargs="+",
                        help="abdiff.run/1 files, or folders holding only such files")
    parser.add_argument("--record", type=Path, help="record real rounds into this run file")
    parser.add_argument("--record-rounds", type=int, default=30)
    parser.add_argument("--record-device", default="cpu")
    parser.add_argument("--record-threads", type=int, default=1, help="torch threads (0: default)")
    args = parser.parse_args(argv)

    if args.record:
        record(args.record, args.record_rounds, args.record_device, args.record_threads,
               args.iterations)
        return 0

    runs = 400 if args.quick else args.runs
    budget = Budget(args.rounds, args.max_rounds, args.step, args.iterations)
    chunk = 100
    check_equivalence(args.seed)
    seeds = np.random.SeedSequence(args.seed)
    started = time.perf_counter()
    print(f"abdiff calibration: {args.configs}-config suites, {runs} suite runs per scenario, "
          f"alpha {args.alpha:g}, min-effect {args.min_effect:.0%}, {budget.iterations} "
          f"iterations per round, adaptive {budget.first}..{budget.max_rounds} rounds per side "
          f"(+{budget.step} per extension)\n")

    if args.replay:
        try:
            pool_named = load_replay(args.replay, 2 * stats.MIN_ROUNDS)
        except InputError as exc:
            print(f"calibration: {exc}", file=sys.stderr)
            return 2
        if not pool_named:
            print(f"calibration: no config with {2 * stats.MIN_ROUNDS}+ ok rounds in "
                  + " ".join(map(str, args.replay)), file=sys.stderr)
            return 2
        pool = [r for _, r in pool_named]
        per_side = min(len(r) for r in pool) // 2
        iters = min(len(x) for r in pool for x in r)
        rb = Budget(min(budget.first, per_side), min(budget.max_rounds, per_side), budget.step,
                    min(budget.iterations, iters))
        scen = [s for s in scenarios(args.configs) if s.rounds_b_offset == 0]

        def make(scenario: Scenario, si: int):
            n_chunks = max(1, runs // chunk)
            for child in seeds.spawn(n_chunks):
                yield ("replay", pool, scenario, runs // n_chunks, rb, args.min_effect, args.alpha,
                       child)

        run_scenarios(make, scen, args.jobs)
        names = ", ".join(f"{n} ({len(r)} rounds)" for n, r in pool_named)
        print(report(f"== replay: {names}; {rb.first}..{rb.max_rounds} rounds "
                     f"per side, {rb.iterations} iterations", scen))
    else:
        for name in args.profiles.split(","):
            profile = PROFILES[name]
            scen = scenarios(args.configs)

            def make(scenario: Scenario, si: int, profile: Profile = profile):
                n_chunks = max(1, runs // chunk)
                for child in seeds.spawn(n_chunks):
                    yield (profile, scenario, runs // n_chunks, budget, args.min_effect,
                           args.alpha, child)

            run_scenarios(make, scen, args.jobs)
            print(report(f"== profile {name}: {profile.describe()}", scen))
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
