"""session.py: what a run asks of its rounds once they are in."""

from __future__ import annotations

import pytest

from abdiff.options import Statistics
from abdiff.run import session
from abdiff.run.schedule import empty_run
from abdiff.run.session import LoadingAhead, wanting_kernel_times
from abdiff.store.records import RoundRecord, RunFile
from abdiff.suites import Config

CONFIGS = [Config(name, {}) for name in ("new-kernel", "same", "timed")]


def side(rev: str, kernels: dict[str, dict[str, int]]) -> RunFile:
    """Three rounds a config, 100 us each; round 0 named `kernels` (from graphs: no times,
    but for the config `timed`, whose kernel round captured them)."""
    run = empty_run(rev, rev * 40, "reference", "s", CONFIGS, {})
    for config in run.configs:
        named = kernels[config.id]
        times = dict.fromkeys(named, 1.0) if config.id == "timed" else {}
        config.rounds = [RoundRecord("ok", None, [100.0], round=r,
                                     kernels=named if r == 0 else {},
                                     kernel_us=times if r == 0 else {})
                         for r in range(3)]
    return run


def test_kernel_times_are_wanted_for_a_changed_config_named_without_times() -> None:
    before = {"new-kernel": {"gemm": 1}, "same": {"gemm": 1}, "timed": {"gemm": 1}}
    after = {"new-kernel": {"gemm": 1, "spin": 1}, "same": {"gemm": 1},
             "timed": {"gemm": 1, "spin": 1}}
    wanting = wanting_kernel_times(side("a", before), side("b", after), {}, Statistics())
    assert wanting() == {"new-kernel"}
    # latency alike and kernels alike: nothing to name, nothing to capture
    assert wanting_kernel_times(side("a", before), side("b", before), {}, Statistics())() \
        == set()


def test_what_failed_to_load_ahead_is_raised_where_the_command_waits_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread that imports scipy and torch ahead keeps its failure for the command's
    own thread, which raises it when it waits (a second import of torch after a failed one
    would fail another, misleading way); a thread that loaded returns."""
    def broken(device: str) -> None:
        raise ImportError(f"libcudart.so.13: cannot open shared object file ({device})")

    monkeypatch.setattr(session, "load_ahead", broken)
    loading = LoadingAhead("cuda")
    loading.start()
    with pytest.raises(ImportError, match="libcudart.so.13.*cuda"):
        loading.wait()
    monkeypatch.setattr(session, "load_ahead", lambda device: None)
    fine = LoadingAhead("cpu")
    fine.start()
    fine.wait()
    assert fine.failure is None
