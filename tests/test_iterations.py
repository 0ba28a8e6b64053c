"""run/iterations.py: the variance split of a config's rounds and the iterations per round
it makes cheapest (cost-optimal two-stage sampling)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from abdiff.run.iterations import (
    CEILING_FACTOR,
    FLOOR,
    MEDIAN_EFFICIENCY,
    RoundCost,
    VarianceSplit,
    iterations_per_round,
    plan_iterations,
    run_times_of,
    shared_cost,
    variance_split,
)
from abdiff.store.records import (
    ConfigRuns,
    RoundRecord,
    RunFile,
    SideTime,
    dump_json,
    parse_run_file,
)
from abdiff.verdict.compare import iterations_notes


def test_n_star_is_the_square_root_of_the_cost_and_variance_ratios() -> None:
    # process 0.5 s, iteration 1 ms, within 0.01, between 0.0005: sqrt(500 * 20) = 100
    # (affordable: 0.25 * 0.5 s / 1 ms = 125 iterations)
    split = VarianceSplit(within=0.01, between=0.0005, rounds=10)
    assert iterations_per_round(split, RoundCost(0.5, 0.001), 20) == 100
    # four times the process-to-process variance: half the iterations
    assert iterations_per_round(VarianceSplit(0.01, 0.002, 10), RoundCost(0.5, 0.001),
                                20) == 50


def test_n_star_is_clamped_to_the_floor_and_the_ceiling() -> None:
    cost = RoundCost(process_s=0.1, iteration_s=0.01)
    processes_differ = VarianceSplit(within=1e-6, between=1e-2, rounds=10)
    assert iterations_per_round(processes_differ, cost, 20) == FLOOR
    assert iterations_per_round(processes_differ, cost, 3) == 3  # never above the suite's
    iterations_differ = VarianceSplit(within=1e-2, between=1e-9, rounds=10)
    cheap = RoundCost(process_s=1.0, iteration_s=0.001)  # GPU-like: replays cost little
    assert iterations_per_round(iterations_differ, cheap, 20) == CEILING_FACTOR * 20
    no_between = VarianceSplit(within=1e-2, between=0.0, rounds=10)
    assert iterations_per_round(no_between, cheap, 20) == CEILING_FACTOR * 20
    # above the suite's count, no more iterations than cost a quarter of the process
    # (12.5 ms a round here: 25), and where even the suite's count costs more (a CPU's
    # iterations of milliseconds), the suite's count
    assert iterations_per_round(no_between, RoundCost(0.2, 0.002), 20) == 25
    assert iterations_per_round(no_between, cost, 20) == 20


def simulated_rounds(rng: np.random.Generator, between_sd: float, within_sd: float,
                     rounds: int, iterations: int) -> list[list[float]]:
    """Latencies (us) of rounds whose process offset and iterations are lognormal."""
    return [list(100.0 * np.exp(rng.normal(0, between_sd) + rng.normal(0, within_sd,
                                                                         iterations)))
            for _ in range(rounds)]


def test_the_split_recovers_known_variances() -> None:
    rng = np.random.default_rng(1)
    a, b = (simulated_rounds(rng, 0.03, 0.01, 300, 40) for _ in range(2))
    # a machine state shared by the two rounds of a pair (it drifts 20%): the pairs cancel it
    state = np.exp(rng.normal(0, 0.2, 300))
    pairs = [([v * s for v in ra], [v * s for v in rb])
             for ra, rb, s in zip(a, b, state, strict=True)]
    split = variance_split(pairs)
    assert split is not None and split.rounds == 600
    assert split.within == pytest.approx(MEDIAN_EFFICIENCY * 0.01 ** 2, rel=0.15)
    assert math.sqrt(split.between) == pytest.approx(0.03, rel=0.15)
    # iterations only: no process-to-process part left
    quiet = variance_split(list(zip(*(simulated_rounds(rng, 0.0, 0.02, 300, 40)
                                      for _ in range(2)), strict=True)))
    assert quiet is not None and quiet.between < 0.1 * quiet.within / 40


def test_the_split_is_the_same_whichever_round_of_a_pair_is_a() -> None:
    """From every round's iterations and each pair's |B - A|: swapping the rounds of any
    pair leaves the plan as it is, so under "no change" the pairs' signs stay equally
    likely given it (the sign-flip test's exactness)."""
    rng = np.random.default_rng(2)
    pairs = list(zip(*(simulated_rounds(rng, 0.02, 0.01, 8, 20) for _ in range(2)),
                     strict=True))
    swapped = [(b, a) if k in (1, 4, 5) else (a, b) for k, (a, b) in enumerate(pairs)]
    assert variance_split(pairs) == variance_split(swapped)
    assert variance_split(pairs) == variance_split([(b, a) for a, b in pairs])


def test_too_few_pairs_give_no_split() -> None:
    assert variance_split([([1.0, 2.0], [1.0, 2.0])] * 3) is None
    assert variance_split([([5.0], [5.0])] * 10) is None  # one iteration: no spread in it


def run_file(name: str, latencies: dict[str, list[list[float]]], warmup_s: float) -> RunFile:
    configs = [ConfigRuns(cid, {}, [RoundRecord("ok", None, lat, round=r,
                                                warmup={"seconds": warmup_s})
                                    for r, lat in enumerate(rounds)])
               for cid, rounds in latencies.items()]
    return RunFile(name, name * 40, "reference", "s", {}, configs)


def test_the_plan_pools_both_sides_and_prices_a_round() -> None:
    rng = np.random.default_rng(3)
    sides = []
    for name in ("a", "b"):
        noisy = {"cpu": simulated_rounds(rng, 0.05, 0.002, 5, 20),  # processes differ
                 "gpu": simulated_rounds(rng, 0.0005, 0.02, 5, 20)}  # iterations differ
        sides.append(run_file(name, noisy, warmup_s=0.05))
    plan = plan_iterations(sides, shared_s=0.2, run_times=20, from_round=5)
    assert plan.from_round == 5 and plan.suite_run_times == 20
    assert plan.configs["cpu"].run_times == FLOOR
    assert plan.configs["gpu"].run_times > 20
    assert plan.configs["cpu"].process_s == pytest.approx(0.25)  # shared + its warm-up
    assert plan.configs["cpu"].iteration_s == pytest.approx(100e-6, rel=0.2)
    assert plan.configs["cpu"].rounds == 10
    # a target that times a whole job alike: every planned config the largest count
    alike = plan_iterations(sides, 0.2, 20, 5, one_count=True)
    assert {c.run_times for c in alike.configs.values()} == {plan.configs["gpu"].run_times}
    # the rounds before the planning point keep the suite's count; unplanned configs too
    assert run_times_of(plan, "cpu", 4, 20) == 20
    assert run_times_of(plan, "cpu", 5, 20) == FLOOR
    assert run_times_of(plan, "other", 7, 20) == 20
    assert run_times_of(None, "cpu", 7, 20) == 20
    # kept in the run file as planned (validated on reading: docs/schemas/run.json)
    sides[0].iterations = plan
    assert parse_run_file(json.loads(dump_json(sides[0].to_json())), "a.json").iterations == plan
    note = iterations_notes(plan)
    assert note == [
        "timed iterations per round from round 6 on, as the rounds before showed cheapest: "
        f"20 -> 5 for 1 config (process-to-process spread dominates), 20 -> "
        f"{plan.configs['gpu'].run_times} for 1 config (within-process spread dominates) "
        "(to time every round as the suite says: `adapt_run_times: false` in it)"]
    three = dataclasses.replace(plan, configs={
        "a": dataclasses.replace(plan.configs["cpu"], run_times=6),
        "b": dataclasses.replace(plan.configs["cpu"], run_times=9), "c": plan.configs["cpu"],
        "d": dataclasses.replace(plan.configs["cpu"], run_times=20)})
    assert iterations_notes(three)[0].split(": ", 1)[1].startswith(
        "20 -> 5-9 for 3 configs (process-to-process spread dominates); 1 kept 20")
    assert iterations_notes(dataclasses.replace(three, configs={"d": three.configs["d"]})) == []
    assert iterations_notes(None) == []


def test_a_round_costs_its_share_of_what_the_workers_spent_besides_timing() -> None:
    times = [SideTime(workers=2, start_s=2.0, setup_s=1.0, warmup_s=0.5, timed_s=3.0,
                      capture_s=0.4, exit_s=0.6)] * 2
    assert shared_cost(times, config_rounds=8) == pytest.approx(2 * 4.0 / 8)
    assert shared_cost(times, config_rounds=0) is None


def test_numbers_the_workers_recorded_that_are_not_finite_keep_the_suites_count() -> None:
    split = VarianceSplit(within=1e-4, between=1e-4, rounds=10)
    for cost in (RoundCost(math.inf, 1e-3), RoundCost(0.2, math.nan), RoundCost(-1e9, 1e-3)):
        assert iterations_per_round(split, cost, 20) == 20
