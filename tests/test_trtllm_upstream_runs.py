"""Upstream's run outputs as a side (`abdiff compare UPSTREAM_RUN_DIR RUNFILE`), and
abdiff's nsys reports named so that upstream's parse.py reads them.

The logs are in run.py's output format (its args line and `[RANK r] batch_size ...
median ...` timing lines, as today's run.py prints them); one is the real stdout of the
stand-in run.py run by the trtllm target; the profile is an nsys export (test_nsys).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_abdiff
from test_trtllm_nsys_copies import step
from test_trtllm_target import cfg, checkouts, repo, run_worker  # noqa: F401 (fixtures)

from abdiff.errors import InputError
from abdiff.store.records import ConfigRuns, RoundRecord, RunFile, write_run_file
from abdiff.targets.trtllm.upstream_runs import import_run_dir

ARGS = ("Namespace(model='nvidia/DeepSeek-R1-0528-FP4-v2', layer_indices=[5], run_type='GEN', "
        "batch_size_list=[32], seq_len_q_list=[4], warmup_times=20, run_times=100)\n")


def timing(rank: int, median: float, balance: str = "") -> str:
    return (f"[RANK {rank}]  batch_size 32  seq_len_q 4  seq_len_kv_cache 2049{balance}  "
            f"min {median - 2:.1f}  max {median + 5:.1f}  mean {median + 0.5:.1f}  "
            f"median {median:.1f}  P90 {median + 3:.1f}  (us)\n")


def upstream_dir(folder: Path, medians: list[tuple[float, float]]) -> Path:
    folder.mkdir(parents=True)
    for i, (rank0, rank1) in enumerate(medians):
        (folder / f"run{i}.log").write_text(
            "[TensorRT-LLM] TensorRT-LLM version: 1.3.0\n" + ARGS + timing(0, rank0)
            + timing(1, rank1))
    return folder


def test_each_log_is_a_round_and_the_slowest_rank_counts(tmp_path: Path) -> None:
    run = import_run_dir(upstream_dir(tmp_path / "runs", [(100.0, 104.0), (103.0, 101.0)]))
    assert [c.id for c in run.configs] == ["GEN-TRTLLM-bs32-q4-kv2049"]
    assert [r.latency_us for r in run.configs[0].rounds] == [[104.0], [103.0]]
    assert run.rev == "upstream:runs" and run.target == "trtllm"


def test_balance_ratios_and_the_profile_parse_py_reads(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "a.log").write_text(ARGS + timing(0, 90.0, "  balance_ratio 0.50")
                                  + timing(0, 95.0))
    step(folder / "report_np4_rank0.sqlite", True)  # what run.sh + parse.py leave behind
    run = import_run_dir(folder)
    ids = [c.id for c in run.configs]
    assert ids == ["GEN-TRTLLM-bs32-q4-kv2049-br0.5", "GEN-TRTLLM-bs32-q4-kv2049"]
    record = run.configs[1].rounds[0]
    assert record.kernels["[memcpy DtoH 128 B]"] == 1 and set(record.module_us) == {
        "Attention", "MoE"}


def test_abdiff_compare_takes_an_upstream_folder_as_side_a(tmp_path: Path) -> None:
    # 8 logs a side: fewer unpaired rounds cannot reach the 1% level (4 + 4 have 70
    # orderings, so no permutation p below 1/70)
    folder = upstream_dir(tmp_path / "upstream-main", [(100.0, 100.5), (101.0, 100.0),
                                                       (100.0, 99.0), (100.5, 100.0)] * 2)
    params = {"run_type": "GEN", "backend": "TRTLLM", "batch_size": 32, "seq_len_q": 4,
              "seq_len_kv_cache": 2049}
    b = RunFile("pr", "cd" * 20, "trtllm", "mtp", {"device": "cuda"}, [ConfigRuns(
        "GEN-TRTLLM-bs32-q4-kv2049", params,
        [RoundRecord("ok", latency_us=[130.0 + r % 2], round=r) for r in range(8)])])
    write_run_file(tmp_path / "b.json", b)
    done = run_abdiff("compare", folder, tmp_path / "b.json", "--format", "markdown")
    assert done.returncode == 1, done.stderr  # 30% slower
    assert "upstream:upstream-main" in done.stdout and "slower" in done.stdout


def test_a_folder_without_timing_lines_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.log").write_text("nothing\n")
    with pytest.raises(InputError, match="no run.py timing lines"):
        import_run_dir(tmp_path / "empty")


@pytest.mark.slow
def test_the_stand_in_run_py_output_imports(checkouts: dict[str, Path],  # noqa: F811
                                            tmp_path: Path) -> None:
    """run.py's own stdout, as the trtllm target's worker saved it, is a round."""
    outcome, log, spec = run_worker(checkouts["main"], tmp_path / "work",
                                    [cfg("TRTLLM", 2, 1), cfg("TRTLLM", 2, 2)],
                                    warmup_times=1, run_times=2)
    assert outcome.returncode == 0
    folder = tmp_path / "upstream"
    folder.mkdir()
    stdout = (tmp_path / "work" / "stdout.txt").read_text()
    (folder / "round0.log").write_text(stdout)
    run = import_run_dir(folder)
    assert sorted(c.id for c in run.configs) == ["GEN-TRTLLM-bs2-q1-kv16",
                                                 "GEN-TRTLLM-bs2-q2-kv16"]
