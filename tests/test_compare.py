"""compare.py: what identifies a failure, and how two sides' failures are told apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from abdiff.compare import compare_runs, failure_signature, process_offsets, status_change
from abdiff.records import ConfigRuns, RoundRecord, RunFile, load_run_file

ABORT = ("SIGABRT: Assertion error (tinyllm/_torch/attention_backend/sparse/dsa.py:184): "
         "DG_HOST_ASSERT(batch_size == __batch_size and next_n == _next_n)")


def test_line_numbers_addresses_and_ids_do_not_make_a_different_failure() -> None:
    moved = ABORT.replace("dsa.py:184", "dsa.py:191")
    assert failure_signature("aborted", ABORT) == failure_signature("aborted", moved)
    a = ("RuntimeError: CUDA error at 0x7f3a2c001000 in worker pid 48213, file "
         "/cache/checkouts/0ee3276d94ab/x.py line 12")
    b = ("RuntimeError: CUDA error at 0x7f99aa000000 in worker pid 51007, file "
         "/cache/checkouts/2db9adaeea01/x.py line 40")
    assert failure_signature("failed", a) == failure_signature("failed", b)


def test_status_signal_type_and_message_each_make_a_different_failure() -> None:
    other_assert = ABORT.replace("next_n == _next_n", "next_n <= 1")
    assert status_change("aborted", "aborted", ABORT, ABORT) == "still-failing"
    assert status_change("aborted", "aborted", ABORT, other_assert) == "failure-changed"
    assert status_change("aborted", "aborted", "SIGABRT", "SIGSEGV") == "failure-changed"
    assert status_change("failed", "failed", "ValueError: x", "KeyError: x") == "failure-changed"
    assert status_change("failed", "timeout", "exit code 1", "exit code 1") == "failure-changed"
    assert status_change("ok", "aborted") == "broken"
    assert status_change("aborted", "ok", ABORT) == "fixed"
    assert status_change("ok", "ok") == "same"


def suite_run(seed: int, slow_process: tuple[int, int] | None = None,
              own_slow: tuple[int, ...] = ()) -> RunFile:
    """Eight configs x five rounds of GPU-like latencies; round 2 ran in two workers (the
    first died after four configs). `slow_process` (round, worker) ran every config it
    timed 25% slow; config c0 also ran 25% slow in the rounds `own_slow`."""
    rng = np.random.default_rng(seed)
    ids = [f"c{i}" for i in range(8)]
    orders = [{"round": r, "worker": 0, "seed": 1, "ids": ids} for r in range(5) if r != 2]
    orders += [{"round": 2, "worker": 0, "seed": 1, "ids": ids},
               {"round": 2, "worker": 1, "seed": 1, "ids": ids[4:]}]
    configs = []
    for i, cid in enumerate(ids):
        rounds = []
        for r in range(5):
            worker = 1 if r == 2 and i >= 4 else 0
            level = 40.0 * (1 + i) * float(np.exp(rng.normal(0, 0.003)))
            level *= 1.25 if slow_process == (r, worker) else 1.0
            level *= 1.25 if cid == "c0" and r in own_slow else 1.0
            latencies = (level * np.exp(rng.normal(0, 0.01, 20))).tolist()
            rounds.append(RoundRecord("ok", latency_us=latencies, round=r))
        configs.append(ConfigRuns(cid, {}, rounds))
    return RunFile("x", "0" * 40, "reference", "s", {}, configs, orders, {"s1": {}})


def test_a_round_of_two_workers_is_two_processes() -> None:
    run = suite_run(5, slow_process=(2, 1))  # the second worker of round 2 was slow
    _, offsets = process_offsets(suite_run(6), run)
    for cid in ("c4", "c5", "c6", "c7"):  # timed by that worker: known from each other
        assert abs(offsets[cid][2] - np.log(1.25)) < 0.02
    for cid in ("c0", "c1", "c2", "c3"):  # timed by the first worker, which was not slow
        assert abs(offsets[cid][2]) < 0.02
    result = compare_runs(suite_run(6), run, {})
    assert {c.latency.verdict for c in result.configs} == {"unchanged"}
    assert all(c.latency.note is None for c in result.configs)
    # appended baselines renumber rounds per config: no process is known there
    run.sessions["s2"] = {}
    assert process_offsets(suite_run(6), run) == ({}, {})


def test_a_config_slow_in_its_own_processes_is_flagged() -> None:
    result = compare_runs(suite_run(7, slow_process=(1, 0)),
                          suite_run(8, slow_process=(4, 0), own_slow=(0, 2, 3)), {})
    latency = {c.id: c.latency for c in result.configs}
    assert latency["c0"].verdict == "slower"
    assert latency["c0"].note.startswith("3 of 5 B rounds 25% slow beyond the rest of their")
    assert {latency[f"c{i}"].verdict for i in range(1, 8)} == {"unchanged"}


H200_AA = Path(__file__).parent / "data" / "h200"  # companions-pr..pr-a.json, -b.json


def slowed(run: RunFile, config_id: str | None, rounds: set[int]) -> RunFile:
    """The run with `rounds` of one config (None: of every config) 25% slower."""
    for config in run.configs:
        for record in config.rounds:
            if (config_id in (None, config.id)) and record.round in rounds:
                record.latency_us = [x * 1.25 for x in record.latency_us]
    return run


def test_recorded_h200_aa_with_a_planted_sometimes_slow_config() -> None:
    """An A/A run on the H200 (graph replays, 12 configs, 5-11 rounds); B's processes 1, 3
    and 4 made 25% slower in one config only, then in every config."""
    a, b = (load_run_file(H200_AA / f"companions-pr..pr-{side}.json") for side in "ab")
    assert {c.latency.verdict for c in compare_runs(a, b, {}).configs} == {"unchanged"}
    config = "GEN-TRTLLM-bs32-q1-kv2049"
    result = compare_runs(a, slowed(b, config, {1, 3, 4}), {})
    latency = {c.id: c.latency for c in result.configs}
    assert latency[config].verdict == "slower" and latency[config].p_odd < 1e-3
    assert latency[config].note.startswith("3 of 5 B rounds 25% slow beyond the rest of their")
    assert {lat.verdict for cid, lat in latency.items() if cid != config} == {"unchanged"}
    # the same processes slow in every config: the processes, not a config, were slow
    # (set aside, so a noisy config may lose its decision with that round, never flag)
    b = load_run_file(H200_AA / "companions-pr..pr-b.json")
    result = compare_runs(a, slowed(b, None, {1}), {})
    assert {c.latency.verdict for c in result.configs} <= {"unchanged", "inconclusive"}
    assert all(c.latency.note is None and len(c.latency.set_aside_b) == 1
               for c in result.configs)
