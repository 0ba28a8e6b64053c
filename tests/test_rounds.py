"""rounds.py: one side's round, its workers and their jobs (with the in-process fake target)."""

from __future__ import annotations

import json
from pathlib import Path

from fake_target import CONFIGS, SETTINGS, FakeLauncher, FakeTarget

from abdiff.run.rounds import run_round
from abdiff.store.records import RoundRecord


def test_a_worker_after_a_capture_death_is_still_asked_for_kernels(tmp_path: Path) -> None:
    # the first worker captures bs1's kernels, then dies capturing bs2's: a second worker is
    # given bs2's and bs3's captures, and its job must ask for kernels as the first one's did
    # (a plain true; rounds.py once passed the last KernelProfile read instead)
    def behaviour(side: str, config_id: str, round_index: int) -> float | str:
        return "abort-in-capture" if config_id == CONFIGS[1].id else 50.0

    (tmp_path / "A").mkdir()
    launcher = FakeLauncher(behaviour)
    kept: dict[str, RoundRecord] = {}
    run_round(FakeTarget(), launcher, tmp_path / "A", CONFIGS, SETTINGS, 0, tmp_path / "round",
              lambda config_id, record: kept.setdefault(config_id, record))

    jobs = [json.loads((tmp_path / "round" / f"worker{i}" / "job.json").read_text())
            for i in range(len(launcher.workers))]
    assert [job["profile_kernels"] for job in jobs] == [True, True]
    assert [c["id"] for c in jobs[1]["capture_only"]] == [CONFIGS[1].id, CONFIGS[2].id]
    assert {cid: record.status for cid, record in kept.items()} == {c.id: "ok" for c in CONFIGS}
    # bs2 kills the second worker too, before bs3's capture (no third try): both are kept,
    # timed, without kernels
    assert [kept[c.id].kernels for c in CONFIGS] == [{"kernel": 1}, {}, {}]
