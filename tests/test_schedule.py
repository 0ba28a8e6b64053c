"""Schedule: balanced, randomized ABBA blocks; adaptive extension, failure repeats and
resume, measured with the fake target."""

import dataclasses
import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_target import CONFIGS, SETTINGS, FakeLauncher, fake_measurement

from abdiff.errors import InputError
from abdiff.launchers.process import ProcessOutcome
from abdiff.launchers.spec import LaunchSpec
from abdiff.run.iterations import FLOOR
from abdiff.run.protocol import RoundJob
from abdiff.run.schedule import (
    FAILURE_REPEATS,
    Plan,
    RunState,
    SideRun,
    abba_slots,
    empty_run,
)
from abdiff.store.records import EarlierNoise, RoundRecord, load_run_file, write_run_file
from abdiff.store.state import stored_state
from abdiff.suites import Config
from abdiff.verdict.sequential import Looks


def test_abba_blocks_balance_both_sides() -> None:
    slots = abba_slots(5, random.Random(1))
    assert Counter(side for side, _ in slots) == {"A": 5, "B": 5}
    for r in range(5):
        assert {side for side, rr in slots if rr == r} == {"A", "B"}
    blocks = ["".join(side for side, _ in slots[i:i + 4]) for i in range(0, 8, 4)]
    assert all(block in ("ABBA", "BAAB") for block in blocks)


def test_order_is_randomized_and_reproducible() -> None:
    orders = {tuple(abba_slots(8, random.Random(seed))) for seed in range(20)}
    assert len(orders) > 1
    assert abba_slots(8, random.Random(7)) == abba_slots(8, random.Random(7))


def test_extension_starts_at_the_next_round() -> None:
    slots = abba_slots(2, random.Random(3), start=5)
    assert sorted({r for _, r in slots}) == [5, 6]


def _sides(tmp_path: Path) -> dict[str, SideRun]:
    return {"A": SideRun(tmp_path, empty_run("pr", "a" * 40, "reference", "mtp", [], {}))}


def test_a_finished_measurement_does_not_lend_its_seed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    RunState.open(state, _sides(tmp_path), resume=False, seed=11).save(complete=False)
    # unfinished: the saved seed wins, so the interrupted round order goes on
    assert RunState.open(state, _sides(tmp_path), resume=False, seed=12).seed == 11
    RunState.open(state, _sides(tmp_path), resume=False, seed=None).save(complete=True)
    assert RunState.open(state, _sides(tmp_path), resume=False, seed=12).seed == 12
    RunState.open(state, _sides(tmp_path), resume=False, seed=None).save(complete=True)
    seeds = set()
    for _ in range(3):
        run_state = RunState.open(state, _sides(tmp_path), resume=False, seed=None)
        seeds.add(run_state.seed)
        run_state.save(complete=True)
    assert len(seeds) == 3  # a fresh random order each time


def test_measuring_a_finished_command_again_keeps_the_finished_run(tmp_path: Path) -> None:
    """The same command measured again starts afresh and keeps the finished run beside it,
    readable as abdiff wrote it (history shows it, later runs borrow its noise); an
    unfinished one goes on in place, and one that fails authentication is not kept."""
    runs = tmp_path / "runs"
    state = runs / "key"
    RunState.open(state, _sides(tmp_path), resume=False, seed=11).save(complete=True)
    os.utime(state / "state.json", (1e9, 1e9))  # measured long ago: it stays as old
    RunState.open(state, _sides(tmp_path), resume=False, seed=12).save(complete=True)
    RunState.open(state, _sides(tmp_path), resume=False, seed=13).save(complete=False)
    assert sorted(p.name for p in runs.iterdir()) == ["key", "key.1", "key.2"]
    assert (runs / "key.1").stat().st_mtime == (runs / "key.1" / "state.json").stat().st_mtime \
        == 1e9
    kept = [stored_state(runs / name) for name in ("key.1", "key.2")]
    assert [(k.seed, k.complete, list(k.files)) for k in kept if not isinstance(k, str)] == [
        (11, True, ["a.json"]), (12, True, ["a.json"])]
    assert RunState.open(state, _sides(tmp_path), resume=False, seed=None).seed == 13
    (state / "state.json").write_text("{}")  # not abdiff's: measured anew, nothing kept
    RunState.open(state, _sides(tmp_path), resume=False, seed=14).save(complete=True)
    assert sorted(p.name for p in runs.iterdir()) == ["key", "key.1", "key.2"]


# ---------------------------------------------------------------- with the fake target
# (tests/fake_target.py: rounds, schedule, extension, failure repeats and resume, in
# milliseconds, without torch or a worker process)


def test_every_config_gets_every_round_on_both_sides(tmp_path: Path) -> None:
    launcher = FakeLauncher(lambda side, cid, r: 100.0 if side == "A" else 110.0)
    run_state = fake_measurement(tmp_path / "state", launcher, Plan(3, 3))
    for side in "AB":
        run = run_state.sides[side].run
        assert all(sorted(r.round for r in c.rounds) == [0, 1, 2] for c in run.configs)
        assert run.env["device"] == "cpu"  # from the worker's env event
    assert len(launcher.workers) == 6  # one worker per side and round
    saved = load_run_file(tmp_path / "state" / "b.json")
    assert saved.configs[0].rounds[0].latency_us[0] == 110.0
    # planned without extension: one look, which compare tests at the full alpha
    assert Looks.from_json(saved.looks).rounds() == (3,)


def test_kernel_times_are_captured_after_the_rounds_for_the_configs_that_want_them(
        tmp_path: Path) -> None:
    # a GPU kernel round names kernels from its graphs (no times); once the rounds are in,
    # one worker a side that times nothing captures the wanted config's kernel times into
    # that config's kernel-round record, and nothing of the others
    launcher = FakeLauncher(lambda side, cid, r: 100.0, graph_named=True)
    asked: list[int] = []

    def wanting() -> set[str]:
        asked.append(1)
        return {CONFIGS[1].id}

    run_state = fake_measurement(tmp_path / "state", launcher, Plan(2, 2),
                                 wanting_times=wanting)
    assert asked == [1]
    assert launcher.workers[-2:] == [("A", 0, []), ("B", 0, [])]  # capture only
    assert run_state.processes == 6
    for side in "AB":
        job = json.loads((tmp_path / "state" / "logs" / side / "kernel-times" / "worker0"
                          / "job.json").read_text())
        assert [c["id"] for c in job["capture_only"]] == [CONFIGS[1].id]
        assert job["kernel_times"] and job["profile_kernels"]
        saved = load_run_file(tmp_path / "state" / f"{side.lower()}.json")
        times = {c.id: [r.kernel_us for r in c.rounds] for c in saved.configs}
        assert times == {CONFIGS[0].id: [{}, {}], CONFIGS[1].id: [{"kernel": 2.5}, {}],
                         CONFIGS[2].id: [{}, {}]}
        assert [c.rounds[0].kernels for c in saved.configs] == [{"kernel": 1}] * 3


@dataclasses.dataclass
class CaptureFailsLauncher(FakeLauncher):
    """A fake whose worker that only captures cannot start (no record log)."""

    def run(self, spec: LaunchSpec, log_dir: Path, progress_path: Path,
            timeout_s: float | None, pass_env: list[str] | None = None,
            max_memory_bytes: int | None = None) -> ProcessOutcome:
        job = RoundJob.read(Path(spec.argv[1]))
        if not job.configs and job.capture_only:
            (log_dir / "stderr.txt").write_text("CUPTI_ERROR_NOT_INITIALIZED\n")
            return ProcessOutcome(1, False, log_dir / "stderr.txt")
        return super().run(spec, log_dir, progress_path, timeout_s, pass_env, max_memory_bytes)


def test_a_capture_of_kernel_times_that_fails_keeps_the_rounds(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    launcher = CaptureFailsLauncher(lambda side, cid, r: 100.0, graph_named=True)
    with caplog.at_level(logging.WARNING):
        run_state = fake_measurement(tmp_path / "state", launcher, Plan(2, 2),
                                     wanting_times=lambda: {CONFIGS[0].id})
    assert "kernel times not captured" in caplog.text
    saved = load_run_file(tmp_path / "state" / "a.json")
    assert all(len(c.rounds) == 2 and c.rounds[0].kernels for c in saved.configs)
    assert json.loads((tmp_path / "state" / "state.json").read_text())["complete"]
    assert run_state.processes == 4


def test_no_capture_of_kernel_times_when_no_config_wants_them(tmp_path: Path) -> None:
    launcher = FakeLauncher(lambda side, cid, r: 100.0, graph_named=True)
    run_state = fake_measurement(tmp_path / "state", launcher, Plan(2, 2),
                                 wanting_times=set)
    assert len(launcher.workers) == run_state.processes == 4
    assert not (tmp_path / "state" / "logs" / "A" / "kernel-times").exists()


def test_a_side_kept_for_later_captures_kernel_times_in_its_kernel_round(tmp_path: Path) -> None:
    # a baseline's side (settings.kernel_times): every kernel round job asks for the times
    launcher = FakeLauncher(lambda side, cid, r: 100.0, graph_named=True)
    run_state = fake_measurement(tmp_path / "state", launcher, Plan(2, 2),
                                 settings=dataclasses.replace(SETTINGS, kernel_times=True))
    for side in "AB":
        assert [c.rounds[0].kernel_us for c in run_state.sides[side].run.configs] == \
            [{"kernel": 2.5}] * 3


def test_adaptive_blocks_measure_only_the_undecided(tmp_path: Path) -> None:
    """The first config is undecided once, then nothing; asked again after the block."""
    asked = []

    def undecided() -> set[str]:
        asked.append(1)
        return {CONFIGS[0].id} if len(asked) == 1 else set()

    launcher = FakeLauncher(lambda side, cid, r: 100.0)
    run_state = fake_measurement(tmp_path / "state", launcher, Plan(2, 8, 2),
                                   undecided=undecided)
    assert len(asked) == 2  # asked again after the block, and stopped
    # the run file says when configs were looked at: their tests' levels depend on it
    assert run_state.sides["B"].run.looks == {"first": 2, "max_rounds": 8, "step": 2}
    for side in ("A", "B"):  # both sides of the block: the rounds stay paired
        rounds = {c.id: len(c.rounds) for c in run_state.sides[side].run.configs}
        assert rounds == {CONFIGS[0].id: 4, CONFIGS[1].id: 2, CONFIGS[2].id: 2}
    assert all(ids == [CONFIGS[0].id] for _, r, ids in launcher.workers if r >= 2)


def aborting_on_a(config_id: str) -> Callable[[str, str, int], float | str]:
    """The fake worker's behaviour: `config_id` aborts on side A in every round."""
    def behaviour(side: str, cid: str, r: int) -> float | str:
        return "abort" if (side, cid) == ("A", config_id) else 100.0

    return behaviour


def test_a_failing_config_is_repeated_then_settled(tmp_path: Path) -> None:
    launcher = FakeLauncher(aborting_on_a(CONFIGS[1].id))
    run_state = fake_measurement(tmp_path / "state", launcher, Plan(4, 4))
    a = {c.id: c.rounds for c in run_state.sides["A"].run.configs}
    assert [r.status for r in a[CONFIGS[1].id]] == ["aborted"] * FAILURE_REPEATS
    assert "SIGABRT" in a[CONFIGS[1].id][0].error
    # the configs after the abort still got every round, from a second worker
    assert [r.status for r in a[CONFIGS[2].id]] == ["ok"] * 4
    a_workers = [ids for side, _, ids in launcher.workers if side == "A"]
    assert a_workers[:2] == [[c.id for c in CONFIGS], [CONFIGS[2].id]]
    assert all(CONFIGS[1].id not in ids for ids in a_workers[4:])


def test_a_config_the_other_side_cannot_pair_is_timed_last(tmp_path: Path) -> None:
    """CONFIGS[0] aborts on A: once that is settled, a B worker that still runs it (B has
    fewer rounds of it than FAILURE_REPEATS) gets it after the configs both sides time, so
    those run after the same configs on both sides (a worker keeps what it set up); before
    it is settled, and on A, the order is the suite's."""
    ids = [c.id for c in CONFIGS]
    seen_last = 0
    for seed in range(12):
        launcher = FakeLauncher(aborting_on_a(CONFIGS[0].id))
        fake_measurement(tmp_path / f"state{seed}", launcher, Plan(4, 4), seed=seed)
        a_failures = 0
        b_runs = 0
        for side, _, job in launcher.workers:
            if side == "A":
                a_failures += job[0] == ids[0]
                continue
            if ids[0] in job:
                b_runs += 1
                settled = a_failures >= FAILURE_REPEATS
                assert job == ([*ids[1:], ids[0]] if settled else ids)
                seen_last += settled
            else:
                assert job == ids[1:]
        assert b_runs == FAILURE_REPEATS  # no more: no pair would come
    assert seen_last > 0  # some seeds' slots settle A's failure before B's second round


def test_a_config_the_other_side_failed_is_not_timed_again_once_its_status_is_known(
        tmp_path: Path) -> None:
    """CONFIGS[0] aborts on A in every round: B runs it in FAILURE_REPEATS rounds (its own
    status, facts and kernels: enough for `aborted -> ok`), then never again; the configs
    both sides run get every round."""
    launcher = FakeLauncher(aborting_on_a(CONFIGS[0].id))
    run_state = fake_measurement(tmp_path / "state", launcher, Plan(5, 5))
    b = {c.id: c.rounds for c in run_state.sides["B"].run.configs}
    assert [r.status for r in b[CONFIGS[0].id]] == ["ok"] * FAILURE_REPEATS
    assert all(len(b[c.id]) == 5 for c in CONFIGS[1:])


def test_resume_measures_only_what_an_interrupt_left(tmp_path: Path) -> None:
    def interrupted(side: str, cid: str, r: int) -> float | str:
        if (side, cid, r) == ("B", CONFIGS[1].id, 1):
            raise KeyboardInterrupt
        return 100.0

    first = FakeLauncher(interrupted)
    with pytest.raises(KeyboardInterrupt):
        fake_measurement(tmp_path / "state", first, Plan(2, 2), seed=3)
    kept = {(side, cid) for side, r, ids in first.workers for cid in ids if r == 1}
    second = FakeLauncher(lambda side, cid, r: 100.0)
    run_state = fake_measurement(tmp_path / "state", second, Plan(2, 2), seed=None)
    assert run_state.seed == 3  # the interrupted round order goes on
    redone = [(side, r, ids) for side, r, ids in second.workers]
    assert redone and all(r == 1 for _, r, _ in redone)
    # B's round 1 lost only the interrupted config and those after it
    assert ("B", 1, [CONFIGS[1].id, CONFIGS[2].id]) in redone
    assert ("B", CONFIGS[0].id) in kept
    for side in "AB":
        assert all(len(c.rounds) == 2 for c in run_state.sides[side].run.configs)


def test_a_resumed_run_keeps_the_noise_it_borrowed(tmp_path: Path) -> None:
    """What B's run file recorded of earlier runs' noise is what the resumed run's last look
    borrows (the cache may hold other runs by then)."""
    state = tmp_path / "state"
    first = RunState.open(state, _one_config(tmp_path), resume=False, seed=5)
    first.sides["B"].run.earlier_noise = {"GEN-TRTLLM-bs8-q1-kv64": EarlierNoise(
        1e-4, 2e-4, 12.0, 3)}
    first.add("A", "GEN-TRTLLM-bs8-q1-kv64", RoundRecord("ok", latency_us=[9.0], round=0))
    first.save(complete=False)
    kept = RunState.open(state, _one_config(tmp_path), resume=True, seed=6)
    assert kept.sides["B"].run.earlier_noise == {"GEN-TRTLLM-bs8-q1-kv64": EarlierNoise(
        1e-4, 2e-4, 12.0, 3)}


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


def test_planted_rounds_are_not_continued(tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """An unfinished measurement continues only with the run files abdiff wrote: a side
    whose file was changed is measured again (and said so on stderr), --resume or not."""
    caplog.set_level(logging.INFO, logger="abdiff")  # what schedule.py reports
    state = tmp_path / "state"
    first = RunState.open(state, _one_config(tmp_path), resume=False, seed=5)
    first.add("A", "GEN-TRTLLM-bs8-q1-kv64", RoundRecord("ok", latency_us=[9.0], round=0))
    first.save(complete=False)
    kept = RunState.open(state, _one_config(tmp_path), resume=False, seed=6)
    assert kept.seed == 5 and len(kept.sides["A"].run.configs[0].rounds) == 1
    assert caplog.text == ""

    for resume in (False, True):
        _plant_round(state)
        again = RunState.open(state, _one_config(tmp_path), resume=resume, seed=7)
        assert again.seed == 5 and len(again.sides["A"].run.configs[0].rounds) == 1
        assert again.sides["B"].run.configs[0].rounds == []
        assert "b.json: not the file abdiff wrote" in caplog.text
        again.save(complete=False)


SWAPPER = """
import os, sys
state, files = sys.argv[1], sys.argv[2:]
target, i = os.path.join(state, "b.json"), 0
while not os.path.exists(os.path.join(state, "stop")):
    with open(files[i % 2], "rb") as source, open(target + ".swap", "wb") as swap:
        swap.write(source.read())
    os.replace(target + ".swap", target)  # b.json is always there, either one
    i += 1
"""


def test_a_run_file_swapped_while_it_is_read_is_never_continued(tmp_path: Path) -> None:
    """A process (of a benchmark run with --sandbox off) that swaps B's run file between
    the one abdiff wrote and a forged one: where the hash is checked on one read and the
    rounds parsed from another, the forged rounds get in between (the control, the way
    RunState.open read them before); the rounds parsed are those of the bytes hashed,
    so a continued measurement keeps abdiff's round or measures B again, never the forged."""
    state = tmp_path / "state"
    first = RunState.open(state, _one_config(tmp_path), resume=False, seed=5)
    first.add("B", "GEN-TRTLLM-bs8-q1-kv64", RoundRecord("ok", latency_us=[9.0], round=0))
    first.save(complete=False)
    written = tmp_path / "written.json"
    written.write_bytes((state / "b.json").read_bytes())
    forged = load_run_file(written)
    forged.configs[0].rounds = [RoundRecord("ok", latency_us=[1.0], round=0)]
    write_run_file(tmp_path / "forged.json", forged)
    recorded = json.loads((state / "state.json").read_text())["files"]["b.json"]

    def hashed_then_read_again() -> bool:
        """The control: whether one check-then-read took the forged rounds."""
        try:
            if hashlib.sha256((state / "b.json").read_bytes()).hexdigest() != recorded:
                return False
            return load_run_file(state / "b.json").configs[0].rounds[0].latency_us == [1.0]
        except InputError:  # the read came between the write and the rename? never: atomic
            return False

    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(state), str(written),
                                str(tmp_path / "forged.json")])
    try:
        deadline = time.monotonic() + 120
        while not hashed_then_read_again():
            assert time.monotonic() < deadline, "no swap landed between the two reads"
        for _ in range(300):
            again = RunState.open(state, _one_config(tmp_path), resume=False, seed=6)
            assert [r.latency_us for r in again.sides["B"].run.configs[0].rounds] in ([], [[9.0]])
    finally:
        (state / "stop").touch()
        swapper.wait(timeout=30)


def test_a_planted_state_folder_is_not_continued(tmp_path: Path) -> None:
    """A state folder abdiff never wrote (no hashes in state.json) is measured anew."""
    state = tmp_path / "state"
    RunState.open(state, _one_config(tmp_path), resume=False, seed=5)
    _plant_round(state)
    (state / "state.json").write_text('{"seed": 5, "complete": false}\n')
    fresh = RunState.open(state, _one_config(tmp_path), resume=False, seed=9)
    assert fresh.seed == 9 and fresh.sides["B"].run.configs[0].rounds == []


def test_rounds_forged_with_their_hash_are_measured_again(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """What a benchmark can do that knows the layout: rewrite A's rounds *and* the hash
    state.json keeps of them. The state fails authentication (its MAC is keyed by a
    secret outside the cache): nothing of it is kept, --resume or not, and stderr says so."""
    import hashlib
    import json

    caplog.set_level(logging.INFO, logger="abdiff")  # what schedule.py reports
    state = tmp_path / "state"
    first = RunState.open(state, _one_config(tmp_path), resume=False, seed=5)
    first.add("A", "GEN-TRTLLM-bs8-q1-kv64", RoundRecord("ok", latency_us=[9.0], round=0))
    first.save(complete=True)
    forged = load_run_file(state / "a.json")
    forged.configs[0].rounds = [RoundRecord("ok", latency_us=[900.0], round=0)]
    write_run_file(state / "a.json", forged)
    saved = json.loads((state / "state.json").read_text())
    saved["files"]["a.json"] = hashlib.sha256((state / "a.json").read_bytes()).hexdigest()
    (state / "state.json").write_text(json.dumps(saved))

    again = RunState.open(state, _one_config(tmp_path), resume=True, seed=8)
    assert again.seed == 8
    assert all(not c.rounds for side in again.sides.values() for c in side.run.configs)
    assert "fail authentication" in caplog.text
    assert load_run_file(state / "a.json").configs[0].rounds == []


def test_a_state_copied_from_another_measurement_fails(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A valid state folder copied under another measurement's name is not that one's."""
    caplog.set_level(logging.INFO, logger="abdiff")  # what schedule.py reports
    import shutil

    RunState.open(tmp_path / "one", _one_config(tmp_path), resume=False, seed=5)
    shutil.copytree(tmp_path / "one", tmp_path / "two")
    again = RunState.open(tmp_path / "two", _one_config(tmp_path), resume=False, seed=9)
    assert again.seed == 9 and "fail authentication" in caplog.text


def process_speed(side: str, config_id: str, round_number: int) -> float:
    """A latency that moves from process to process (up to 10%) far more than the fake's
    iterations do (0.1% apart): the plan's floor."""
    return 100.0 * (1 + 0.1 * (zlib.crc32(f"{side}{config_id}{round_number}".encode()) % 97
                               / 97))


def test_the_plan_changes_counts_after_the_first_look_alike_for_both_sides(
        tmp_path: Path) -> None:
    settings = dataclasses.replace(SETTINGS, run_times=20)
    launcher = FakeLauncher(process_speed)
    run_state = fake_measurement(tmp_path / "state", launcher, Plan(4, 8, 4),
                                   undecided=lambda: {c.id for c in CONFIGS},
                                   settings=settings)
    plan = run_state.iterations
    assert plan is not None and plan.from_round == 4 and plan.suite_run_times == 20
    assert {c.run_times for c in plan.configs.values()} == {FLOOR}  # processes differ
    assert all(c.rounds == 8 and c.between > c.within / 20 for c in plan.configs.values())
    for config in CONFIGS:
        counts = {side: {r.round: len(r.latency_us)
                         for r in run_state.sides[side].run.config(config.id).rounds}
                  for side in "AB"}
        assert counts["A"] == counts["B"]  # a block's A and B rounds time the same count
        assert counts["A"] == {r: 20 if r < 4 else FLOOR for r in range(8)}
    # kept in both run files (a resumed run goes on with it)
    saved = [load_run_file(tmp_path / "state" / f"{s}.json").iterations for s in "ab"]
    assert saved == [plan, plan]


def test_the_plan_is_made_after_four_pairs_so_the_first_looks_last_round_times_it(
        tmp_path: Path) -> None:
    """The default first look at 5 rounds: the plan needs 4 pairs, so it is made after
    round 4 of each side and round 5 already times its counts, on both sides; a run
    without an extension plans nothing."""
    settings = dataclasses.replace(SETTINGS, run_times=20)
    run_state = fake_measurement(tmp_path / "state", FakeLauncher(process_speed),
                                 Plan(5, 11, 6), undecided=lambda: {c.id for c in CONFIGS},
                                 settings=settings)
    plan = run_state.iterations
    assert plan is not None and plan.from_round == 4
    assert all(c.rounds == 8 for c in plan.configs.values())  # 4 pairs, both sides
    for config in CONFIGS:
        for side in "AB":
            counts = {r.round: len(r.latency_us)
                      for r in run_state.sides[side].run.config(config.id).rounds}
            assert counts == {r: 20 if r < 4 else FLOOR for r in range(11)}
    fixed = fake_measurement(tmp_path / "fixed", FakeLauncher(process_speed), Plan(5, 5),
                             undecided=lambda: {c.id for c in CONFIGS}, settings=settings)
    assert fixed.iterations is None


def test_the_plan_is_off_when_the_suite_pins_run_times(tmp_path: Path) -> None:
    settings = dataclasses.replace(SETTINGS, run_times=20, adapt_run_times=False)
    run_state = fake_measurement(tmp_path / "state", FakeLauncher(process_speed),
                                   Plan(4, 8, 4), undecided=lambda: {c.id for c in CONFIGS},
                                   settings=settings)
    assert run_state.iterations is None
    assert {len(r.latency_us) for s in "AB" for c in run_state.sides[s].run.configs
            for r in c.rounds} == {20}
