"""kernel_times.py: per-kernel times of the capture pass name what a change is made of."""

from __future__ import annotations

from pathlib import Path

import pytest

from abdiff.store.records import KernelDelta, RoundRecord, load_run_file
from abdiff.verdict.kernel_times import (
    kernel_deltas,
    kernel_family,
    lacks_times,
    root_cause,
    side_kernel_us,
)
from abdiff.worker.measure import profile_kernels

H200 = Path(__file__).parent / "data" / "h200"
PLANTED = "GEN-TRTLLM-bs32-q1-kv2049"  # lab/plant_slowdown.py: +3% of torch.cuda._sleep


def rounds(*times: dict[str, float]) -> list[RoundRecord]:
    return [RoundRecord("ok", latency_us=[1.0], kernels=dict.fromkeys(t, 1), kernel_us=t)
            for t in times]


def test_a_new_kernel_and_a_slower_one_are_named_largest_first() -> None:
    a = {"gemm": 40.0, "softmax": 5.0, "copy": 1.0}
    b = {"gemm": 40.2, "softmax": 5.0, "copy": 1.1, "spin_kernel": 2.07}
    assert kernel_deltas(a, b) == [KernelDelta("spin_kernel", 0.0, 2.07, 2.07)]
    slower = {"gemm": 46.0, "softmax": 5.1, "copy": 1.0}
    assert [d.kernel for d in kernel_deltas(a, slower)] == ["gemm"]


def test_a_changed_template_argument_is_one_line() -> None:
    a = {"void cunn_SoftMaxForwardReg<float, float>(float*, int)": 9.0, "gemm": 40.0}
    b = {"void cunn_SoftMaxForwardReg<c10::BFloat16, float>(c10::BFloat16*, int)": 4.8,
         "gemm": 40.0}
    assert kernel_family(next(iter(a))) == "void cunn_SoftMaxForwardReg<>"
    (delta,) = kernel_deltas(a, b)
    assert delta.kernel == ("void cunn_SoftMaxForwardReg<float, float>(float*, int) -> "
                            "<c10::BFloat16, float>(c10::BFloat16*, int)")
    assert (delta.a_us, delta.b_us, delta.delta_us) == (9.0, 4.8, -4.2)


def test_at_most_five_kernels_and_only_what_accounts_for_the_change() -> None:
    a = {f"k{i}": 10.0 for i in range(10)}
    b = {f"k{i}": 10.0 + (10 - i) for i in range(10)}
    deltas = kernel_deltas(a, b)
    assert [d.kernel for d in deltas] == ["k0", "k1", "k2", "k3", "k4"]
    assert kernel_deltas(a, dict(a)) == []  # nothing changed: nothing to name


def test_a_side_is_the_median_of_its_rounds_and_needs_times() -> None:
    side = side_kernel_us(rounds({"gemm": 10.0}, {"gemm": 30.0, "copy": 3.0},
                                 {"gemm": 12.0}))
    assert side == {"gemm": 12.0, "copy": 0.0}  # copy ran in one round of three
    old = [RoundRecord("ok", latency_us=[1.0], kernels={"gemm": 1})]  # a run file from before
    assert side_kernel_us(old) is None
    assert root_cause(old, rounds({"gemm": 10.0})) == []


def test_cpu_capture_records_each_operators_self_time() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(256, 256)

    def step() -> object:
        return torch.softmax(x @ x, dim=-1)

    profile = profile_kernels(step, "cpu")
    assert set(profile.us) == set(profile.counts) >= {"aten::mm", "aten::softmax"}
    assert all(us >= 0 for us in profile.us.values())
    assert profile.us["aten::mm"] > 0


def test_recorded_h200_planted_slowdown_is_named() -> None:
    """pr..pr-slow on an H200: the planted sleep kernel is what B's extra time is made of."""
    run_a, run_b = (load_run_file(H200 / f"pr..pr-slow-{side}.json") for side in "ab")
    deltas = root_cause(run_a.config(PLANTED).rounds, run_b.config(PLANTED).rounds)
    assert "spin_kernel" in deltas[0].kernel and deltas[0].a_us == 0
    assert 1.5 < deltas[0].delta_us < 4  # the plant: 2.07 us of sleep per call
    assert all(abs(d.delta_us) < deltas[0].delta_us for d in deltas[1:])
    # a config nothing was planted in: its kernels' times barely move
    other = "GEN-TRTLLM-bs8-q1-kv2049"
    for delta in root_cause(run_a.config(other).rounds, run_b.config(other).rounds):
        assert abs(delta.delta_us) < 1.0, delta


def test_a_side_that_named_its_kernels_from_graphs_lacks_their_times() -> None:
    named = [RoundRecord("ok", latency_us=[1.0], kernels={"gemm": 1}), RoundRecord("ok", [1.0])]
    assert lacks_times(named)
    assert not lacks_times(rounds({"gemm": 40.0}) + named)  # times captured: root_cause has them
    assert not lacks_times([RoundRecord("ok", [1.0])])  # no kernel round: nothing to time
    assert not lacks_times([RoundRecord("failed", "boom", kernels={"gemm": 1})])
