"""Schedule: balanced, randomized ABBA blocks."""

import random
from collections import Counter
from pathlib import Path

from abdiff.schedule import Measurement, SideRun, empty_run, schedule


def test_abba_blocks_balance_both_sides() -> None:
    slots = schedule(5, random.Random(1))
    assert Counter(side for side, _ in slots) == {"A": 5, "B": 5}
    for r in range(5):
        assert {side for side, rr in slots if rr == r} == {"A", "B"}
    blocks = ["".join(side for side, _ in slots[i:i + 4]) for i in range(0, 8, 4)]
    assert all(block in ("ABBA", "BAAB") for block in blocks)


def test_order_is_randomized_and_reproducible() -> None:
    orders = {tuple(schedule(8, random.Random(seed))) for seed in range(20)}
    assert len(orders) > 1
    assert schedule(8, random.Random(7)) == schedule(8, random.Random(7))


def test_extension_starts_at_the_next_round() -> None:
    slots = schedule(2, random.Random(3), start=5)
    assert sorted({r for _, r in slots}) == [5, 6]


def _sides(tmp_path: Path) -> dict[str, SideRun]:
    return {"A": SideRun(tmp_path, empty_run("pr", "a" * 40, "reference", "mtp", [], {}))}


def test_a_finished_measurement_does_not_lend_its_seed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    Measurement.open(state, _sides(tmp_path), resume=False, seed=11).save(complete=False)
    # unfinished: the saved seed wins, so the interrupted round order goes on
    assert Measurement.open(state, _sides(tmp_path), resume=False, seed=12).seed == 11
    Measurement.open(state, _sides(tmp_path), resume=False, seed=None).save(complete=True)
    assert Measurement.open(state, _sides(tmp_path), resume=False, seed=12).seed == 12
    Measurement.open(state, _sides(tmp_path), resume=False, seed=None).save(complete=True)
    seeds = set()
    for _ in range(3):
        measurement = Measurement.open(state, _sides(tmp_path), resume=False, seed=None)
        seeds.add(measurement.seed)
        measurement.save(complete=True)
    assert len(seeds) == 3  # a fresh random order each time
