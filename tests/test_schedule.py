"""Schedule: balanced, randomized ABBA blocks."""

import random
from collections import Counter
from pathlib import Path

from abdiff.records import RoundRecord, load_run_file, write_run_file
from abdiff.schedule import Measurement, SideRun, empty_run, schedule
from abdiff.suites import Config


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


def _one_config(tmp_path: Path) -> dict[str, SideRun]:
    configs = [Config("GEN-TRTLLM-bs8-q1-kv64", {"batch_size": 8})]
    return {side: SideRun(tmp_path, empty_run(side, side.lower() * 40, "reference", "s",
                                              configs, {}))
            for side in "AB"}


def _plant_round(state: Path) -> None:
    """What a benchmark sharing the cache could do: write a faster round into B's run file."""
    planted = load_run_file(state / "b.json")
    planted.configs[0].rounds = [RoundRecord("ok", latency_us=[1.0, 1.0, 1.0], round=0)]
    write_run_file(state / "b.json", planted)


def test_planted_rounds_are_not_continued(tmp_path: Path, capsys) -> None:
    """An unfinished measurement continues only while its run files are the bytes abdiff
    wrote; planted rounds are discarded (and said so on stderr), unless --resume."""
    state = tmp_path / "state"
    first = Measurement.open(state, _one_config(tmp_path), resume=False, seed=5)
    first.add("A", "GEN-TRTLLM-bs8-q1-kv64", RoundRecord("ok", latency_us=[9.0], round=0))
    first.save(complete=False)
    kept = Measurement.open(state, _one_config(tmp_path), resume=False, seed=6)
    assert kept.seed == 5 and len(kept.sides["A"].run.configs[0].rounds) == 1
    assert capsys.readouterr().err == ""

    _plant_round(state)
    fresh = Measurement.open(state, _one_config(tmp_path), resume=False, seed=7)
    assert fresh.seed == 7
    assert all(not c.rounds for side in fresh.sides.values() for c in side.run.configs)
    assert "not the ones abdiff wrote" in capsys.readouterr().err
    assert load_run_file(state / "b.json").configs[0].rounds == []

    _plant_round(state)
    resumed = Measurement.open(state, _one_config(tmp_path), resume=True, seed=8)
    assert resumed.sides["B"].run.configs[0].rounds[0].latency_us == [1.0, 1.0, 1.0]


def test_a_planted_state_folder_is_not_continued(tmp_path: Path) -> None:
    """A state folder abdiff never wrote (no hashes in state.json) is measured anew."""
    state = tmp_path / "state"
    Measurement.open(state, _one_config(tmp_path), resume=False, seed=5)
    _plant_round(state)
    (state / "state.json").write_text('{"seed": 5, "complete": false}\n')
    fresh = Measurement.open(state, _one_config(tmp_path), resume=False, seed=9)
    assert fresh.seed == 9 and fresh.sides["B"].run.configs[0].rounds == []
