"""compare.py: what identifies a failure, and how two sides' failures are told apart."""

from __future__ import annotations

import numpy as np

from abdiff.store.records import ConfigRuns, RoundRecord, RunFile
from abdiff.verdict.compare import compare_runs, earlier_noise, failure_signature, status_change

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
    # a measured rate in the line, its decimals as many as its repr has (a CI run's A/A of
    # the command target read 'failure-changed' for these two, an unintended change)
    rate = ("fact bytes_per_second varies between the repetitions of one process ({}, ...): "
            "not a constant; compare it as a metric (target.metrics) instead")
    assert failure_signature("failed", rate.format("130629245143.15572")) == \
        failure_signature("failed", rate.format("129735268186.413"))
    assert failure_signature("failed", "expected 1.5, got 2.5") != \
        failure_signature("failed", "expected 1.5, got 3.5")  # small values stay


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


def suite_run(seed: int, rounds: int = 10, slow_round: int | None = None,
              own_slow: tuple[int, ...] = (), factor: float = 1.0) -> RunFile:
    """Eight configs of GPU-like latencies, one worker per round; `slow_round` ran every
    config 25% slow; config c0 also ran 25% slow in the rounds `own_slow` and `factor`
    times slower in all."""
    rng = np.random.default_rng(seed)
    ids = [f"c{i}" for i in range(8)]
    orders = [{"round": r, "worker": 0, "seed": 1, "ids": ids} for r in range(rounds)]
    configs = []
    for i, cid in enumerate(ids):
        records = []
        for r in range(rounds):
            level = 40.0 * (1 + i) * float(np.exp(rng.normal(0, 0.003)))
            level *= 1.25 if slow_round == r else 1.0
            level *= (1.25 if r in own_slow else 1.0) * factor if cid == "c0" else 1.0
            latencies = (level * np.exp(rng.normal(0, 0.01, 20))).tolist()
            records.append(RoundRecord("ok", latency_us=latencies, round=r))
        configs.append(ConfigRuns(cid, {}, records))
    return RunFile("x", "0" * 40, "reference", "s", {}, configs, orders, {"s1": {}})


def test_a_process_slow_in_every_config_is_no_finding() -> None:
    result = compare_runs(suite_run(6), suite_run(5, slow_round=2), {})
    assert {c.latency.verdict for c in result.configs} <= {"unchanged", "inconclusive"}


def test_a_config_slow_in_some_of_its_own_processes_is_flagged() -> None:
    # pairs whose B round is not slow carry no sign: 9 informative pairs reach 1%, 6 do not
    slow = (0, 2, 3, 5, 6, 8, 10, 11, 13)
    result = compare_runs(suite_run(7, rounds=15), suite_run(8, rounds=15, own_slow=slow), {})
    latency = {c.id: c.latency for c in result.configs}
    assert latency["c0"].verdict == "slower"
    assert {latency[f"c{i}"].verdict for i in range(1, 8)} == {"unchanged"}


def test_a_change_below_the_threshold_is_a_small_change_never_unchanged() -> None:
    result = compare_runs(suite_run(1, rounds=15), suite_run(2, rounds=15, factor=1.008), {})
    c0 = result.configs[0]
    assert c0.latency.verdict == "slower" and c0.latency.below_threshold
    assert c0.latency.ci[0] > 1.0 and c0.latency.ratio < 1.02
    assert c0.verdict == "small-change" and result.summary["exit_code"] == 0
    gated = compare_runs(suite_run(1, rounds=15), suite_run(2, rounds=15, factor=1.008), {},
                         small_changes="gate")
    assert gated.configs[0].verdict == "unintended" and gated.summary["exit_code"] == 1


def test_interleaved_rounds_are_paired_and_a_stored_baseline_is_not() -> None:
    a, b = suite_run(11), suite_run(12, factor=1.03)
    assert "paired" in compare_runs(a, b, {}).configs[0].latency.method
    b.sessions = {"s2": {}}  # measured in another session: not interleaved with A
    latency = compare_runs(a, b, {}).configs[0].latency
    assert "paired" not in latency.method and latency.verdict == "slower"


def test_a_large_change_too_few_pairs_to_flag_says_more_rounds_decide_it() -> None:
    """4 pairs give 16 sign patterns, and Student's t at so few pairs would flag a
    two-level config's chance: no change, however large, is flagged. The row says so,
    and what decides it, not that the machine is too noisy. A plan of 6 rounds flags the
    same doubling (its last look, by Student's t)."""
    def run(rev: str, scale: float, pairs: int) -> RunFile:
        rounds = [RoundRecord("ok", latency_us=[scale * (100.0 + (3 * r) % 5)], round=r)
                  for r in range(pairs)]
        return RunFile(rev, rev * 20, "reference", "s", {"device": "cpu"},
                       [ConfigRuns("c", {}, rounds)])

    assert compare_runs(run("a", 1.0, 6), run("b", 2.0, 6), {}).configs[0].latency.verdict \
        == "slower"
    result = compare_runs(run("a", 1.0, 4), run("b", 2.0, 4), {})
    latency = result.configs[0].latency
    assert latency.verdict == "inconclusive" and latency.ci is not None and latency.ci[0] > 1.5
    assert "4 pairs have too few sign patterns" in (latency.note or "")
    assert "quieter machine" not in (latency.note or "")


def test_earlier_runs_lend_the_noise_of_the_rounds_timed_like_this_run_s_first() -> None:
    """earlier_noise takes the pairs whose rounds both timed the count asked for (a round's
    variance depends on it): suite_run's rounds time 20 iterations; rounds of another count
    (an adaptive plan's later rounds) are left out."""
    earlier = [(suite_run(20 + k, rounds=15), suite_run(30 + k, rounds=15)) for k in range(3)]
    configs = suite_run(1).configs
    noise = earlier_noise(earlier, configs, 20)
    assert set(noise) == {f"c{i}" for i in range(8)}
    assert all(n.runs == 3 and n.df == 42 and n.mean > 0 for n in noise.values())
    for run_a, run_b in earlier:  # rounds 5 on timed 40 iterations
        for config in run_a.configs + run_b.configs:
            for record in config.rounds[5:]:
                record.latency_us = record.latency_us * 2
    assert {n.df for n in earlier_noise(earlier, configs, 20).values()} == {12}
    assert earlier_noise(earlier, configs, 7) == {}
    # a config of the same id measured with other parameters lends nothing
    configs[0].params = {"batch_size": 64}
    assert "c0" not in earlier_noise(earlier, configs, 20)


def test_a_plan_of_few_rounds_borrows_the_noise_recorded_in_b_s_run_file() -> None:
    """compare_runs borrows what B's run file records (`earlier_noise`), where A and B were
    interleaved, and the method says so; a stored baseline's comparison does not."""
    earlier = [(suite_run(20 + k, rounds=15), suite_run(30 + k, rounds=15)) for k in range(3)]
    a, b = suite_run(41, rounds=5), suite_run(42, rounds=5, factor=1.05)
    b.earlier_noise = earlier_noise(earlier, b.configs, 20)
    latency = compare_runs(a, b, {}).configs[0].latency
    assert "variances borrowed from 3 earlier runs on this machine" in latency.method
    b.sessions = {"s2": {}}
    assert "borrowed" not in compare_runs(a, b, {}).configs[0].latency.method
