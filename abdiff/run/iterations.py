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

The plan is made once, from the first MIN_PLAN_PAIRS rounds of both sides (before the
first look's last round, where the run has an extension; else at the first look): the
iterations of every round, and the |B - A| of each pair's round medians, so it is the same
whichever round of any pair is A (under "no change" the signs of the pairs stay equally
likely given the plan: the sign-flip test stays exact), and it holds from the next round
on for both sides alike: the A and B rounds of one ABBA block time the same count, and each round is
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
"""Most iterations a planned round times, as a multiple of the suite's run_times."""
AFFORDABLE_SHARE = 0.25
"""Above the suite's run_times, a round times only as many iterations as cost this share
of its process cost (`iterations_per_round`)."""
MIN_PLAN_PAIRS = 4
"""Pairs (an A and a B round of one number, each with 2+ iterations) a config needs
before its split is estimated; fewer keep the suite's count."""


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


def variance_split(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]
                   ) -> VarianceSplit | None:
    """The split of one config from its pairs' iteration latencies (us): (A's round, B's
    round) of each round number; None with fewer than MIN_PLAN_PAIRS pairs whose rounds
    both timed 2+ iterations.

    within: the median over all rounds of the robust variance of a round's log
    iterations, times MEDIAN_EFFICIENCY. between: half the square of the normal-consistent
    median |log B - log A| of the pairs, less the mean within / n of their rounds; at
    least 0. A pair's difference is what the test sees: the machine's state, shared by a
    pair, cancels, and |difference| is the same whichever round of the pair is A, so the
    split is too (each pair's swap leaves the plan as it is)."""
    usable = [(np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float)))
              for a, b in pairs if min(len(a), len(b)) >= 2 and min(*a, *b) > 0]
    if len(usable) < MIN_PLAN_PAIRS:
        return None
    rounds = [r for pair in usable for r in pair]
    within = float(np.median([MEDIAN_EFFICIENCY * _robust_variance(r) for r in rounds]))
    differences = np.array([np.median(b) - np.median(a) for a, b in usable])
    observed = (1.4826 * float(np.median(np.abs(differences)))) ** 2 / 2
    explained = within * float(np.mean([1.0 / len(r) for r in rounds]))
    return VarianceSplit(within, max(0.0, observed - explained), len(rounds))


def iterations_per_round(split: VarianceSplit, cost: RoundCost, run_times: int) -> int:
    """n* = sqrt(process_s * within / (iteration_s * between)), rounded, at least
    min(FLOOR, run_times), at most CEILING_FACTOR * run_times and, above run_times, at
    most what costs AFFORDABLE_SHARE of process_s. Two-stage sampling takes the rounds as
    free; here the looks buy them (11 pairs before `unchanged`, futility), so iterations
    above the suite's count buy precision the looks may never use: only where they cost
    next to nothing (GPU graph replays), never on a CPU whose iterations cost
    milliseconds. A `between` near 0 from ten rounds is mostly their noise (no
    process-to-process variance at all: the ceiling)."""
    affordable = (AFFORDABLE_SHARE * cost.process_s / cost.iteration_s
                  if cost.iteration_s > 0 else math.inf)
    low = min(FLOOR, run_times)
    high = int(min(CEILING_FACTOR * run_times, max(run_times, affordable)))
    numbers = (cost.process_s, cost.iteration_s, split.within, split.between)
    if not all(math.isfinite(v) and v >= 0 for v in numbers):
        return run_times  # what the workers recorded cannot be planned from
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
    """The iterations per round of every config whose pairs (the two sides of `runs`, by
    round number) allow a split, from round `from_round` on. A config's round costs `shared_s`
    plus its median warm-up; an iteration its median latency. `one_count`: the target
    times every config of a job alike, so all planned configs get the largest n*."""
    planned: dict[str, ConfigIterations] = {}
    for config in runs[0].configs:
        sides = [c for run in runs if (c := run.config(config.id)) is not None]
        measured = [{r.round: r for r in c.rounds if r.round is not None
                     and r.status == "ok" and not r.companion and r.latency_us}
                    for c in sides]
        rounds = [r for side in measured for r in side.values()]
        numbers = sorted(set(measured[0]) & set(measured[1])) if len(measured) == 2 else []
        split = variance_split([(measured[0][n].latency_us, measured[1][n].latency_us)
                                for n in numbers])
        if split is None:
            continue
        warmup = [float(r.warmup["seconds"]) for r in rounds
                  if isinstance(r.warmup.get("seconds"), int | float)
                  and math.isfinite(r.warmup["seconds"]) and r.warmup["seconds"] >= 0]
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
