"""How many timed iterations a round buys per config (more information per process): cost-optimal
two-stage sampling, with the worker process as the unit of the test.

A round's statistic is the median of its timed iterations (stats.round_summary). Its
variance over rounds is `between + within / n`: `between` what moves a whole process
(where its memory landed, its clocks, a neighbour), `within` what a single iteration's
noise adds, shrinking with the `n` iterations timed. A round costs `process_s` besides
its iterations (its share of the worker's start, the config's set-up, warm-up, capture
and exit) plus `n * iteration_s`. For a fixed cost, the variance of the mean over rounds
is least at n* = sqrt(process_s * within / (iteration_s * between)) (Cochran, Sampling
Techniques, 10.6): few iterations where processes differ more than iterations do (the
2-core CPU), many where they do not (GPU graph replays).

The plan is made once, at the first look, from every round both sides have, pooled (the
choice does not depend on which side is A: swapping the sides within a pair leaves it as
it is, so the sign-flip test stays exact), and it holds from the next round on for both
sides alike: the A and B rounds of one ABBA block time the same count, and each round is
still one statistic of one process. Pure functions of numbers; the schedule applies them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from abdiff.store.records import ConfigIterations, IterationPlan, RunFile, SideTime

MEDIAN_EFFICIENCY = math.pi / 2
"""Variance of the median of n normal iterations over that of their mean, as n grows:
what one iteration's variance becomes in a round's statistic (times 1/n)."""
FLOOR = 5
"""Fewest iterations a planned round times: the median of 5 still ignores two stray
iterations (a preemption, a page fault)."""
CEILING_FACTOR = 10
"""Most iterations a planned round times, as a multiple of the suite's run_times; and no
more than cost what the round's process share costs (`iterations_per_round`)."""
MIN_PLAN_ROUNDS = 6
"""Rounds (both sides together, each with 2+ iterations) a config needs before its
split is estimated; fewer keep the suite's count."""


@dataclass(frozen=True)
class VarianceSplit:
    """Where a config's round-to-round variance comes from, on the log scale."""

    within: float  # a round statistic's variance from one iteration's noise (x 1/n)
    between: float  # process-to-process variance beyond what the iterations explain
    rounds: int  # rounds it was estimated from (both sides)


@dataclass(frozen=True)
class RoundCost:
    """What one round of a config costs, seconds: besides its timed iterations, and each
    timed iteration."""

    process_s: float
    iteration_s: float


def _robust_variance(values: np.ndarray) -> float:
    """Square of the normal-consistent median absolute deviation about the median."""
    return float((1.4826 * np.median(np.abs(values - np.median(values)))) ** 2)


def variance_split(sides: Sequence[Sequence[Sequence[float]]]) -> VarianceSplit | None:
    """The split of one config from its rounds' iteration latencies (us), one list of
    rounds per side; None with fewer than MIN_PLAN_ROUNDS usable rounds.

    within: the median over rounds of the robust variance of a round's log iterations,
    times MEDIAN_EFFICIENCY. between: the robust variance of the log round medians about
    their own side's median (so a real A/B difference does not count as spread), pooled
    over the sides, less the mean within / n of those rounds; at least 0."""
    within_each: list[float] = []
    deviations: list[float] = []
    explained: list[float] = []
    for side in sides:
        rounds = [np.log(np.asarray(r, dtype=float)) for r in side
                  if len(r) >= 2 and min(r) > 0]
        if not rounds:
            continue
        medians = np.array([np.median(r) for r in rounds])
        deviations += list(medians - np.median(medians))
        for r in rounds:
            within_each.append(MEDIAN_EFFICIENCY * _robust_variance(r))
            explained.append(1.0 / len(r))
    if len(within_each) < MIN_PLAN_ROUNDS:
        return None
    within = float(np.median(within_each))
    observed = _robust_variance(np.array(deviations))
    between = max(0.0, observed - within * float(np.mean(explained)))
    return VarianceSplit(within, between, len(within_each))


def iterations_per_round(split: VarianceSplit, cost: RoundCost, run_times: int) -> int:
    """n* = sqrt(process_s * within / (iteration_s * between)), rounded, at least
    min(FLOOR, run_times), at most CEILING_FACTOR * run_times and (above run_times) at
    most process_s / iteration_s: a `between` near 0 from ten rounds is mostly their
    noise, and beyond that count the iterations would cost more than the process itself
    for a variance the rounds cannot tell from 0 (no process-to-process variance at
    all: the ceiling)."""
    affordable = cost.process_s / cost.iteration_s if cost.iteration_s > 0 else math.inf
    low = min(FLOOR, run_times)
    high = int(min(CEILING_FACTOR * run_times, max(run_times, affordable)))
    if split.between <= 0 or cost.iteration_s <= 0:
        return high
    best = math.sqrt(cost.process_s * split.within / (cost.iteration_s * split.between))
    return int(min(high, max(low, round(best))))



def shared_cost(times: Sequence[SideTime], config_rounds: int) -> float | None:
    """A config round's share of what its workers spent besides timing and warming up
    (start, set-ups, capture, exit), seconds; None when nothing was measured."""
    if config_rounds <= 0:
        return None
    spent = sum(t.total_s - t.timed_s - t.warmup_s for t in times)
    return max(0.0, spent) / config_rounds


def plan_iterations(runs: Sequence[RunFile], shared_s: float, run_times: int,
                    from_round: int, one_count: bool = False) -> IterationPlan:
    """The iterations per round of every config whose rounds (all sides of `runs`,
    pooled) allow a split, from round `from_round` on. A config's round costs `shared_s`
    plus its median warm-up; an iteration its median latency. `one_count`: the target
    times every config of a job alike, so all planned configs get the largest n*."""
    planned: dict[str, ConfigIterations] = {}
    for config in runs[0].configs:
        sides = [c for run in runs if (c := run.config(config.id)) is not None]
        rounds = [r for c in sides for r in c.rounds
                  if r.status == "ok" and not r.companion and r.latency_us]
        split = variance_split([[r.latency_us for r in c.rounds if r.status == "ok"
                                 and not r.companion] for c in sides])
        if split is None:
            continue
        warmup = [float(r.warmup.get("seconds", 0.0)) for r in rounds
                  if isinstance(r.warmup.get("seconds"), int | float)]
        cost = RoundCost(shared_s + (float(np.median(warmup)) if warmup else 0.0),
                         float(np.median([v for r in rounds for v in r.latency_us])) / 1e6)
        planned[config.id] = ConfigIterations(
            iterations_per_round(split, cost, run_times), split.within, split.between,
            cost.process_s, cost.iteration_s, split.rounds)
    if one_count and planned:
        most = max(c.run_times for c in planned.values())
        planned = {cid: dataclasses.replace(c, run_times=most) for cid, c in planned.items()}
    return IterationPlan(from_round, run_times, planned)


def run_times_of(plan: IterationPlan | None, config_id: str, round_index: int,
                 run_times: int) -> int:
    """The timed iterations of `config_id` in round `round_index`: the plan's from its
    first planned round on, else `run_times` (the suite's)."""
    if plan is None or round_index < plan.from_round or config_id not in plan.configs:
        return run_times
    return plan.configs[config_id].run_times
