"""Soft gates (`--gate latency=soft,kernels=hard`): every change is reported, only the hard
classes fail the run, and the PR comment says which classes were soft (policy.py, reports).

The run files are the trtllm target's shape (a TRTLLM config whose B side is slower and,
in one case, runs another attention kernel), compared for real by `abdiff compare`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_abdiff

from abdiff.errors import InputError
from abdiff.reports import common, markdown
from abdiff.store.records import ConfigRuns, RoundRecord, RunFile, write_run_file
from abdiff.verdict.compare import compare_runs
from abdiff.verdict.policy import parse_gates

CONFIG = "GEN-TRTLLM-bs32-q4-kv2049"


def side(rev: str, latency_us: float, kernel: str) -> RunFile:
    params = {"run_type": "GEN", "backend": "TRTLLM", "batch_size": 32, "seq_len_q": 4,
              "seq_len_kv_cache": 2049}
    rounds = [RoundRecord("ok", latency_us=[latency_us + (i + r) % 3 for i in range(20)],
                          round=r, kernels={kernel: 1, "gemm": 2}) for r in range(8)]
    return RunFile(rev, rev * 4, "trtllm", "mtp", {"device": "cuda"},
                   [ConfigRuns(CONFIG, params, rounds)])


def test_gates_are_parsed_from_the_option_or_a_file(tmp_path: Path) -> None:
    assert parse_gates("latency=soft,kernels=hard") == {"latency": "soft", "kernels": "hard"}
    assert parse_gates(None) == {}
    path = tmp_path / "gates.yaml"
    path.write_text("latency: soft\nfacts: soft\n")
    assert parse_gates(str(path)) == {"latency": "soft", "facts": "soft"}
    for bad in ("latency=medium", "speed=soft", "latency"):
        with pytest.raises(InputError, match="is not CLASS=soft|hard"):
            parse_gates(bad)


def test_a_latency_change_under_a_soft_gate_is_reported_and_does_not_fail() -> None:
    a, b = side("main", 100.0, "fmha_v2"), side("pr", 130.0, "fmha_v2")
    hard = compare_runs(a, b, {})
    assert hard.configs[0].verdict == "unintended" and hard.summary["exit_code"] == 1
    soft = compare_runs(a, b, {}, gates=parse_gates("latency=soft,kernels=hard"))
    assert soft.configs[0].verdict == "unintended"  # reported as what it is
    assert soft.summary["exit_code"] == 0
    assert soft.summary["soft_gates"] == ["latency"] and soft.summary["soft_only"] == [CONFIG]
    assert ("1 unintended change (soft gates: latency; 1 of them in soft classes only, "
            "reported, not failing)") in common.verdict_line(soft)
    comment = markdown.render(soft)
    assert comment.splitlines()[1].startswith(":warning: **abdiff: 1 unintended change (soft")


def test_a_hard_class_still_fails_beside_a_soft_one() -> None:
    a, b = side("main", 100.0, "fmha_v2"), side("pr", 130.0, "xqa_kernel")
    result = compare_runs(a, b, {}, gates=parse_gates("latency=soft,kernels=hard"))
    assert result.summary["exit_code"] == 1 and result.summary["soft_only"] == []
    assert markdown.render(result).splitlines()[1].startswith(":x:")


def test_abdiff_compare_takes_the_gate(tmp_path: Path) -> None:
    write_run_file(tmp_path / "a.json", side("main", 100.0, "fmha_v2"))
    write_run_file(tmp_path / "b.json", side("pr", 130.0, "fmha_v2"))
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    assert run_abdiff("compare", *files).returncode == 1
    done = run_abdiff("compare", *files, "--gate", "latency=soft", "--format", "markdown")
    assert done.returncode == 0, done.stderr
    assert "soft gates: latency" in done.stdout
    bad = run_abdiff("compare", *files, "--gate", "latency=medium")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
