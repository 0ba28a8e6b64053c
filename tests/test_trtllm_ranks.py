"""The trtllm target under real `mpirun -np 2` (issue 13, gap 5): both ranks of the
upstream-shaped stand-in start, their records merge, and an abort in rank 1 is
`aborted (rank 1, SIGABRT)`, not `failed` with mpirun's exit code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_hooks import git, make_upstream_repo

from abdiff.launchers.mpirun import MpirunLauncher
from abdiff.run.rounds import RoundSettings, run_round
from abdiff.suites import Config
from abdiff.targets.trtllm.target import TrtllmTarget

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mpirun") is None,
                       reason="Open MPI is not installed (apt-get install openmpi-bin)"),
]
FACTS = ["attn_metadata.max_total_draft_tokens"]
# rank 1 of the stand-in aborts when it builds a batch-size-4 pack
RANK_1_ABORT = (
    "        attn_metadata.prepare()\n"
    "        if os.environ.get('OMPI_COMM_WORLD_RANK') == '1' and batch_size == 4:\n"
    "            print('rank 1: injected host assert', file=sys.stderr, flush=True)\n"
    "            os.abort()\n"
)


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`pr` of the stand-in tree, with RANK_1_ABORT in its runner."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("ABDIFF_MPIRUN_ARGS", "--oversubscribe")
    repo = make_upstream_repo(tmp_path / "TensorRT-LLM")
    path = tmp_path / "checkout"
    git(repo, "worktree", "add", "-q", "--detach", str(path), "pr")
    runner = path / "tensorrt_llm/tools/layer_wise_benchmarks/runner.py"
    text = runner.read_text()
    assert text.count("        attn_metadata.prepare()\n") == 1
    runner.write_text(text.replace("        attn_metadata.prepare()\n", RANK_1_ABORT))
    return path


def test_both_ranks_record_and_an_abort_in_rank_1_names_rank_and_signal(
        checkout: Path, tmp_path: Path) -> None:
    configs = [Config(f"GEN-DSA-bs{bs}-q1-kv16",
                      {"run_type": "GEN", "backend": "DSA", "batch_size": bs, "seq_len_q": 1,
                       "seq_len_kv_cache": 16}) for bs in (2, 4)]
    settings = RoundSettings(facts=FACTS, warmup_times=1, run_times=3, timeout_s=120)
    records: dict = {}
    output = run_round(TrtllmTarget(), MpirunLauncher(2), checkout, configs, settings, 0,
                       tmp_path / "round", lambda cid, rec: records.__setitem__(cid, rec))
    aborted = records["GEN-DSA-bs4-q1-kv16"]
    assert aborted.status == "aborted"
    assert aborted.error == "rank 1, SIGABRT: rank 1: injected host assert"
    healthy = records["GEN-DSA-bs2-q1-kv16"]
    assert healthy.status == "ok", healthy.error
    # both ranks' records, merged: per-rank records kept, the slowest rank's latency
    assert [r["status"] for r in healthy.ranks] == ["ok", "ok"]
    per_rank = [r["latency_us"] for r in healthy.ranks]
    assert healthy.latency_us == [max(times) for times in zip(*per_rank, strict=True)]
    assert output.env["ranks"] == 2
    assert output.processes == 2  # the abort cost one launch; bs2 ran in the next
