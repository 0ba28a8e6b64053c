"""The reference worker's passes, run for real: the demo harness in fresh worker processes.

Covers what issue 16 asks of a round: every config is timed before any kernel is
captured (the capture pass), configs are timed in an order drawn from a recorded
seed that replays exactly, the warm-up stops by its rule and says how long it took,
and a worker that dies after timing some configs leaves their capture to the next
worker of the round. Also the stopping rule itself, on synthetic sequences.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import config_id, git

from abdiff.demo import build_demo_repo
from abdiff.launchers import make_launcher
from abdiff.run.rounds import RoundSettings, capture_kernel_times, order_seed, run_round
from abdiff.store.records import RoundRecord
from abdiff.suites import Config
from abdiff.targets.reference.target import ReferenceTarget
from abdiff.targets.reference.worker import shuffled
from abdiff.worker.measure import GPU_DRIVER_NODES, WarmupRule, settled, warm_up

FACTS = ["attn_metadata.max_total_draft_tokens"]


def configs(batch_sizes: list[int], backends: tuple[str, ...] = ("TRTLLM", "DSA")) -> list[Config]:
    return [Config(config_id(bs, backend), {"run_type": "GEN", "backend": backend,
                                            "batch_size": bs, "seq_len_q": 1,
                                            "seq_len_kv_cache": 300})
            for backend in backends for bs in batch_sizes]


def settings() -> RoundSettings:
    return RoundSettings(facts=FACTS, warmup_times=2, run_times=3, timeout_s=120, device="cpu")


def events(work_dir: Path, worker: int = 0) -> list[dict]:
    lines = (work_dir / f"worker{worker}" / "records.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def measure_round(checkout: Path, todo: list[Config], round_index: int, work_dir: Path,
                  seed: int | None) -> tuple[dict[str, RoundRecord], list[dict]]:
    records: dict[str, RoundRecord] = {}
    output = run_round(ReferenceTarget(), make_launcher("local"), checkout, todo, settings(),
                       round_index, work_dir, records.__setitem__, lambda worker: seed)
    return records, output.orders


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("worker") / "demo"
    build_demo_repo(repo)
    return repo


# --- the stopping rule on synthetic per-call times -------------------------------------

RULE = WarmupRule(tolerance=0.02, agreeing=3, batch_s=0.001, cap_s=1.0)


@pytest.mark.parametrize("per_call, expected", [
    ([], False),
    ([5.0, 5.0], False),  # fewer batches than must agree
    ([9.0, 6.0, 5.0, 5.05, 5.0], True),  # a ramp, then three within 2%
    ([9.0, 6.0, 5.0, 5.05, 4.8], False),  # still getting faster by 5%
    ([5.0, 5.0, 5.2], False),  # one batch 4% slow
    ([1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0], True),  # an outlier batch, then agreement again
])
def test_warm_up_settles_when_the_last_batches_agree(per_call: list[float],
                                                     expected: bool) -> None:
    assert settled(per_call, RULE) is expected


def test_a_slow_clock_ramp_is_not_settled_until_it_flattens() -> None:
    # a GPU clock ramping up: each batch 1.5% faster than the last, then flat
    ramp = [100.0 * 0.985 ** i for i in range(10)] + [86.0] * 3
    stops = [n for n in range(1, len(ramp) + 1)
             if settled(ramp[:n], WarmupRule(0.01, 3, 0.01, 1.0))]
    assert stops and stops[0] == len(ramp)


def test_warm_up_of_steady_work_stops_by_the_rule() -> None:
    rule = WarmupRule(tolerance=0.5, agreeing=2, batch_s=0.002, cap_s=30.0)
    warmed = warm_up(lambda: sum(range(2000)), 3, rule, lambda: None)
    assert warmed.settled and warmed.batches >= 2 and warmed.calls >= 3


def test_warm_up_makes_at_least_the_suites_warmup_calls() -> None:
    calls = []
    rule = WarmupRule(tolerance=10.0, agreeing=1, batch_s=0.001, cap_s=0.0)  # always settled
    warmed = warm_up(lambda: calls.append(None), 5, rule, lambda: None)
    assert warmed.calls == len(calls) == 5 and warmed.settled


def test_warm_up_of_work_that_keeps_slowing_stops_at_the_cap() -> None:
    calls = []

    def slower_each_call() -> None:  # each call 30% longer than the one before
        calls.append(None)
        time.sleep(1e-4 * 1.3 ** min(len(calls), 30))

    rule = WarmupRule(tolerance=0.01, agreeing=3, batch_s=0.001, cap_s=0.2)
    warmed = warm_up(slower_each_call, 2, rule, lambda: None)
    assert not warmed.settled and warmed.seconds >= rule.cap_s
    assert warmed.calls == len(calls)


# --- real worker rounds ------------------------------------------------------------------

@pytest.mark.slow
def test_every_config_is_timed_before_any_kernel_is_captured(demo: Path,
                                                             tmp_path: Path) -> None:
    todo = configs([2, 4])
    records, orders = measure_round(demo, todo, 0, tmp_path, seed=11)
    assert {r.status for r in records.values()} == {"ok"}
    kinds = [e["event"] for e in events(tmp_path)]
    env = events(tmp_path)[0]["env"]  # graph replay was asked for (the default): no graphs here
    assert settings().cuda_graph and (env["timing"], env["cuda_graph"]) == ("eager", False)
    last_done = max(i for i, kind in enumerate(kinds) if kind == "done")
    captures = [i for i, kind in enumerate(kinds) if kind == "kernels"]
    assert len(captures) == len(todo) and min(captures) > last_done
    for record in records.values():  # the captured kernels reach the round's records
        assert any(name.startswith("aten::") for name in record.kernels)
        assert len(record.latency_us) == 3
        assert record.warmup["calls"] >= 2 and record.warmup["seconds"] > 0
        assert record.warmup["batches"] >= 1 and isinstance(record.warmup["settled"], bool)


@pytest.mark.slow
def test_rounds_after_the_kernel_rounds_capture_nothing(demo: Path, tmp_path: Path) -> None:
    records, _ = measure_round(demo, configs([2]), 2, tmp_path, seed=None)
    assert all(r.status == "ok" and not r.kernels for r in records.values())
    assert "kernels" not in {e["event"] for e in events(tmp_path)}


@pytest.mark.slow
def test_config_order_is_drawn_from_a_recorded_seed_and_replays(demo: Path,
                                                                tmp_path: Path) -> None:
    todo = configs([2, 3, 4])
    ids = [c.id for c in todo]
    seed = next(s for s in range(50)
                if [c["id"] for c in shuffled([{"id": i} for i in ids], s)] != ids)
    orders = []
    for attempt in ("first", "replay"):
        _, recorded = measure_round(demo, todo, 0, tmp_path / attempt, seed)
        started = [e["id"] for e in events(tmp_path / attempt) if e["event"] == "start"]
        assert recorded == [{"round": 0, "worker": 0, "seed": seed, "ids": started}]
        orders.append(started)
    assert orders[0] == orders[1] != ids  # shuffled, and the same again from the same seed
    assert sorted(orders[0]) == sorted(ids)


def test_kernel_times_are_captured_by_a_worker_that_times_nothing(demo: Path,
                                                                   tmp_path: Path) -> None:
    # after the rounds (rounds.capture_kernel_times): each wanted config set up afresh,
    # warmed up by the suite's calls, then captured with every operator's time
    todo = configs([2], backends=("TRTLLM",))
    profiles, output = capture_kernel_times(ReferenceTarget(), make_launcher("local"), demo,
                                            todo, settings(), tmp_path / "kernel-times")
    assert output.processes == 1
    assert set(profiles) == {todo[0].id}
    profile = profiles[todo[0].id]
    assert set(profile.us) == set(profile.counts) and all(us >= 0 for us in profile.us.values())
    assert any(name.startswith("aten::") for name in profile.counts)
    kinds = [e["event"] for e in events(tmp_path / "kernel-times")]
    assert "done" not in kinds and kinds.count("kernels") == 1  # nothing timed


def test_order_seeds_differ_by_round_and_worker_and_repeat_for_a_run_seed() -> None:
    # the same for both sides of a round: its pair times the configs in one order
    seeds = {order_seed(7, r, w) for r in range(3) for w in range(2)}
    assert len(seeds) == 6
    assert order_seed(7, 1, 0) == order_seed(7, 1, 0) != order_seed(8, 1, 0)


@pytest.mark.slow
def test_a_worker_that_dies_leaves_its_timed_configs_capture_to_the_next(
        faulty_repo: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "faulty"
    git(faulty_repo, "worktree", "add", "-q", "--detach", str(checkout), "faulty")
    todo = configs([2, 3], backends=("TRTLLM",))  # batch size 3 aborts on `faulty`
    ids = [c.id for c in todo]
    seed = next(s for s in range(50)
                if [c["id"] for c in shuffled([{"id": i} for i in ids], s)] == ids)
    records, orders = measure_round(checkout, todo, 0, tmp_path / "round", seed)
    good, aborting = (config_id(2), config_id(3))
    assert records[aborting].status == "aborted"
    assert records[good].status == "ok" and records[good].kernels  # captured by worker 1
    first = events(tmp_path / "round", 0)
    assert "kernels" not in {e["event"] for e in first}  # it died before its capture pass
    second = json.loads((tmp_path / "round" / "worker1" / "job.json").read_text())
    # no config was left to time: worker 1 only captures
    assert second["configs"] == [] and [c["id"] for c in second["capture_only"]] == [good]
    assert [o["worker"] for o in orders] == [0]


@pytest.mark.skipif(any(os.path.exists(node) for node in GPU_DRIVER_NODES),
                    reason="this host has a GPU driver: `auto` must ask torch")
def test_auto_on_a_host_without_a_gpu_driver_is_the_cpu_without_importing_torch() -> None:
    """`--device cpu` asks nothing of torch either, and what the command loads ahead
    (session.load_ahead, in a thread beside the checkouts) imports only scipy then."""
    probe = ("import sys; from abdiff.worker.measure import resolve_device; "
             "from abdiff.run.session import load_ahead; load_ahead('auto'); "
             "print(resolve_device('auto'), resolve_device('cpu'), 'torch' in sys.modules, "
             "'scipy.special' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["cpu", "cpu", "False", "True"]


def test_configs_marked_last_are_timed_after_the_others_in_every_order() -> None:
    configs = [{"id": i, **({"last": True} if i in (1, 4) else {})} for i in range(6)]
    for seed in range(30):
        order = [c["id"] for c in shuffled(configs, seed)]
        assert sorted(order[-2:]) == [1, 4] and sorted(order[:4]) == [0, 2, 3, 5]


def test_two_workers_of_one_seed_time_the_configs_they_share_in_one_order() -> None:
    """A pair's A and B workers get one seed (rounds.order_seed): the configs both pair sit
    at the same positions, also where one side also times configs the other cannot pair
    (marked `last` there); where one side lacks a config, the rest keep their order."""
    ids = [f"GEN-TRTLLM-bs{b}-q{q}" for b in (8, 32) for q in (1, 2, 4)]
    orders = set()
    for seed in range(40):
        whole = [c["id"] for c in shuffled([{"id": i} for i in ids], seed)]
        with_unpaired = [c["id"] for c in shuffled(
            [{"id": i} for i in ids] + [{"id": "GEN-DSA-bs8-q1", "last": True}], seed)]
        lacking = [c["id"] for c in shuffled([{"id": i} for i in ids if i != ids[2]], seed)]
        assert with_unpaired[:-1] == whole and with_unpaired[-1] == "GEN-DSA-bs8-q1"
        assert lacking == [i for i in whole if i != ids[2]]
        orders.add(tuple(whole))
    assert len(orders) > 30  # and the seeds draw many orders
    first = {order[0] for order in orders}
    assert first == set(ids)  # every config is first in some round
