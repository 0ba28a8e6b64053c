"""The demo repository and its harness, exercised the way abdiff uses them.

Everything runs from a real demo repository built by `build_demo_repo`, with
each branch checked out as a git worktree and the harness started in fresh
subprocesses (`run.py`, or a small probe that reads the live metadata and the
profiler's operator names). Shapes are small so the file runs in seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from abdiff.demo import BRANCHES, build_demo_repo
from abdiff.demo.builder import RUNNER_PATH
from abdiff.errors import InputError

pytestmark = pytest.mark.slow  # every demo branch measured with torch

RUN_PY = "examples/layer_wise_benchmarks/run.py"
CONFIG = "examples/layer_wise_benchmarks/config_gen.yaml"
DG_ASSERT = "DG_HOST_ASSERT(batch_size == __batch_size and next_n == _next_n)"
KV = 300  # more cached tokens than the CPU indexer's top-k (128): selection is real

# Reads facts from the live metadata through the closure, as abdiff's probe does,
# and the aten operators of one profiled iteration.
PROBE = r"""
import inspect, json, sys
import torch
from torch.profiler import ProfilerActivity, profile
from tinyllm.tools.layer_wise_benchmarks import Runner

results = []
for cfg in json.loads(sys.argv[1]):
    runner = Runner(cfg["backend"], device="cpu")
    run_pack = runner.create_run_pack(
        cfg["run_type"],
        batch_size=cfg["batch_size"],
        seq_len_q=cfg["seq_len_q"],
        seq_len_kv_cache=cfg["seq_len_kv_cache"],
    )
    md = inspect.getclosurevars(run_pack).nonlocals["attn_metadata"]
    run_pack()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run_pack()
    facts = {
        "max_total_draft_tokens": md.max_total_draft_tokens,
        "is_spec_decoding_enabled": md.is_spec_decoding_enabled,
        "max_draft_tokens": getattr(md, "max_draft_tokens", None),
        "kv_lens_cuda_2d.shape": (
            list(md.kv_lens_cuda_2d.shape) if hasattr(md, "kv_lens_cuda_2d") else None
        ),
    }
    ops = sorted({e.name for e in prof.events() if e.name.startswith("aten::")})
    kernels = sorted(op.kernel for op in runner.attention.op_cache.values())
    results.append({"cfg": cfg, "facts": facts, "ops": ops, "kernels": kernels})
print("PROBE-JSON " + json.dumps(results))
"""

# Runs one GEN TRTLLM step on each kernel path (max_total_draft_tokens None, then
# set), and DSA against TRTLLM where the top-k keeps every token (so sparse
# attention must equal dense). Both runners draw the same seeded q/k/v and cache.
BOTH_PATHS = r"""
import inspect, sys
import torch
from tinyllm.tools.layer_wise_benchmarks import Runner

outputs, kernels, dense_vs_sparse = {}, {}, []
for q in (1, 2, 4):
    runner = Runner("TRTLLM", device="cpu")
    run_pack = runner.create_run_pack("GEN", batch_size=3, seq_len_q=q, seq_len_kv_cache=77)
    md = inspect.getclosurevars(run_pack).nonlocals["attn_metadata"]
    plain = run_pack()
    md.max_total_draft_tokens = q - 1
    spec = run_pack()
    outputs[q] = (plain, spec)
    kernels[q] = sorted(op.kernel for op in runner.attention.op_cache.values())
for run_type, q, kv in (("GEN", 1, 100), ("GEN", 4, 100), ("CTX", 16, 0), ("CTX", 8, 40)):
    shape = dict(batch_size=3, seq_len_q=q, seq_len_kv_cache=kv)
    dense = Runner("TRTLLM").create_run_pack(run_type, **shape)()
    sparse = Runner("DSA").create_run_pack(run_type, **shape)()
    dense_vs_sparse.append((dense, sparse))
saved = {"outputs": outputs, "kernels": kernels, "dense_vs_sparse": dense_vs_sparse}
torch.save(saved, sys.argv[1])
"""


def _run(cwd: Path, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # One intra-op thread, as abdiff's workers run: no oversubscription on small machines.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def run_bench(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, RUN_PY, CONFIG, "--device", "cpu"]
    return _run(cwd, [*argv, "--warmup-times", "1", "--run-times", "2", *args])


def probe(cwd: Path, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    proc = _run(cwd, [sys.executable, "-c", PROBE, json.dumps(configs)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PROBE-JSON "))
    return json.loads(line.removeprefix("PROBE-JSON "))


def gen(backend: str, batch_size: int, seq_len_q: int, run_type: str = "GEN") -> dict[str, Any]:
    return {
        "backend": backend,
        "run_type": run_type,
        "batch_size": batch_size,
        "seq_len_q": seq_len_q,
        "seq_len_kv_cache": KV if run_type == "GEN" else 0,
    }


def git(cwd: Path, *args: str) -> str:
    proc = _run(cwd, ["git", *args])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One demo repository; `main` in the repository itself, the others as worktrees."""
    root = tmp_path_factory.mktemp("demo")
    repo = root / "repo"
    shas = build_demo_repo(repo)
    checkouts = {"main": repo}
    for branch in ("pr-v1", "pr"):
        git(repo, "worktree", "add", "-q", str(root / branch), branch)
        checkouts[branch] = root / branch
    return {"repo": repo, "shas": shas, "checkouts": checkouts}


# --- the repository -------------------------------------------------------------


def test_shas_are_deterministic(demo: dict[str, Any], tmp_path: Path) -> None:
    again = build_demo_repo(tmp_path / "again")
    assert again == demo["shas"]
    assert list(again) == list(BRANCHES) == ["main", "pr-v1", "pr"]
    assert len(set(again.values())) == 3


def test_branches_are_one_commit_each_and_differ_only_in_the_announcement(
    demo: dict[str, Any],
) -> None:
    repo, shas = demo["repo"], demo["shas"]
    assert git(repo, "rev-list", "--count", "main") == "1"
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    for branch in ("pr-v1", "pr"):
        assert git(repo, "rev-parse", f"{branch}^") == shas["main"]
        assert git(repo, "diff", "--name-only", "main", branch) == RUNNER_PATH
    main_runner = git(repo, "show", f"main:{RUNNER_PATH}")
    assert "update_spec_dec_param" not in main_runner
    assert "abdiff" not in main_runner
    assert 'hasattr(attn_metadata, "update_spec_dec_param")' in git(
        repo, "show", f"pr-v1:{RUNNER_PATH}"
    )
    assert 'hasattr(attn_metadata, "kv_lens_cuda_2d")' in git(repo, "show", f"pr:{RUNNER_PATH}")
    # pr-v1 and pr differ in the guard only.
    diff = git(repo, "diff", "-U0", "pr-v1", "pr", "--", RUNNER_PATH)
    changed = [x for x in diff.splitlines() if x[:1] in "+-" and x[:3] not in ("+++", "---")]
    assert len(changed) == 2


def test_refuses_a_non_empty_path(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file.txt").write_text("x")
    with pytest.raises(InputError, match="not empty"):
        build_demo_repo(tmp_path / "busy")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        build_demo_repo(tmp_path / "afile")


# --- main: the bug --------------------------------------------------------------


def test_main_dsa_mtp_aborts_with_the_deepgemm_host_assert(demo: dict[str, Any]) -> None:
    main = demo["checkouts"]["main"]
    proc = run_bench(
        main,
        "--backend",
        "DSA",
        "--batch-size",
        "4",
        "--seq-len-q",
        "4",
        "--seq-len-kv-cache",
        str(KV),
    )
    assert proc.returncode == -signal.SIGABRT, proc.stderr[-2000:]
    last = [x for x in proc.stderr.splitlines() if x.strip()][-1]
    assert DG_ASSERT in last
    assert "tinyllm/_torch/attention_backend/sparse/dsa.py:" in last
    assert "[RANK 0]" not in proc.stdout
    # The abort leaves the checkout as it was (no core file, caches ignored).
    assert git(main, "status", "--porcelain") == ""


def test_main_dsa_q1_and_ctx_run(demo: dict[str, Any]) -> None:
    main = demo["checkouts"]["main"]
    proc = run_bench(
        main,
        "--backend",
        "DSA",
        "--batch-size",
        "4",
        "--seq-len-q",
        "1",
        "--seq-len-kv-cache",
        str(KV),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    timing = [x for x in proc.stdout.splitlines() if x.startswith("[RANK 0]")]
    assert len(timing) == 1
    for word in ("mean", "median", "min", "max", "P90", "(us)"):
        assert word in timing[0]
    # The context phase (both backends are also probed in CTX below).
    proc = run_bench(
        main,
        "--backend",
        "DSA",
        "--run-type",
        "CTX",
        "--batch-size",
        "2",
        "--seq-len-q",
        "48",
        "--seq-len-kv-cache",
        "0",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


# --- pr-v1 and pr: the fix and its side effect ----------------------------------


@pytest.fixture(scope="module")
def probes(demo: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Facts and operators per config, one probe process per branch."""
    configs = [gen("TRTLLM", bs, q) for bs in (2, 4) for q in (1, 2, 4)]
    configs += [gen("TRTLLM", 2, 16, "CTX"), gen("DSA", 2, 16, "CTX"), gen("DSA", 4, 1)]
    mtp_dsa = gen("DSA", 4, 4)  # aborts on main, so probed on the fixed branches only
    results = {"main": probe(demo["checkouts"]["main"], configs)}
    for branch in ("pr-v1", "pr"):
        *results[branch], dsa = probe(demo["checkouts"][branch], [*configs, mtp_dsa])
        results[branch + ":dsa"] = [dsa]
    return results


def _pick(results: list[dict[str, Any]], **cfg: Any) -> dict[str, Any]:
    return next(r for r in results if all(r["cfg"][k] == v for k, v in cfg.items()))


def test_main_facts(probes: dict[str, list[dict[str, Any]]]) -> None:
    for r in probes["main"]:
        assert r["facts"]["max_total_draft_tokens"] is None
        assert r["facts"]["is_spec_decoding_enabled"] is False
        if r["cfg"]["backend"] == "TRTLLM":
            assert r["facts"]["kv_lens_cuda_2d.shape"] is None  # DSA-only attribute
            assert r["facts"]["max_draft_tokens"] is None
    dsa = _pick(probes["main"], backend="DSA", run_type="GEN")
    assert dsa["facts"]["kv_lens_cuda_2d.shape"] == [4, 1]
    assert dsa["facts"]["max_draft_tokens"] == 0


def test_pr_v1_changes_trtllm_kernel_selection(
    demo: dict[str, Any], probes: dict[str, list[dict[str, Any]]]
) -> None:
    main = _pick(probes["main"], backend="TRTLLM", batch_size=4, seq_len_q=4, run_type="GEN")
    v1 = _pick(probes["pr-v1"], backend="TRTLLM", batch_size=4, seq_len_q=4)
    assert main["facts"]["max_total_draft_tokens"] is None
    assert v1["facts"]["max_total_draft_tokens"] == 3
    assert v1["facts"]["is_spec_decoding_enabled"] is False
    assert set(main["ops"]) != set(v1["ops"])
    assert {"aten::bmm", "aten::_softmax"} <= set(main["ops"])
    assert "aten::scaled_dot_product_attention" not in main["ops"]
    assert "aten::scaled_dot_product_attention" in v1["ops"]
    assert "aten::bmm" not in v1["ops"]
    assert main["kernels"] == ["mmha_bmm_softmax"]
    assert v1["kernels"] == ["fmha_spec_dec_sdpa"]
    # seq_len_q 1 is not announced, so pr-v1 leaves it alone.
    for bs in (2, 4):
        a = _pick(probes["main"], backend="TRTLLM", batch_size=bs, seq_len_q=1, run_type="GEN")
        b = _pick(probes["pr-v1"], backend="TRTLLM", batch_size=bs, seq_len_q=1)
        assert (a["facts"], a["ops"]) == (b["facts"], b["ops"])
    # And DSA MTP runs.
    assert_dsa_mtp_runs(demo["checkouts"]["pr-v1"])


def assert_dsa_mtp_runs(checkout: Path) -> None:
    """run.py at `checkout` completes DSA with seq_len_q 4 and prints its timing line."""
    proc = run_bench(checkout, "--backend", "DSA", "--batch-size", "4", "--seq-len-q", "4",
                     "--seq-len-kv-cache", str(KV))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[RANK 0]" in proc.stdout


def test_pr_leaves_trtllm_alone_and_fixes_dsa(
    demo: dict[str, Any], probes: dict[str, list[dict[str, Any]]]
) -> None:
    for a, b in zip(probes["main"], probes["pr"], strict=True):
        assert a["cfg"] == b["cfg"]
        if a["cfg"]["backend"] == "TRTLLM" or a["cfg"]["seq_len_q"] == 1:
            assert a["facts"] == b["facts"], a["cfg"]
            assert a["ops"] == b["ops"], a["cfg"]
            assert a["kernels"] == b["kernels"], a["cfg"]
    for branch in ("pr-v1", "pr"):
        dsa = probes[branch + ":dsa"][0]
        assert dsa["facts"]["kv_lens_cuda_2d.shape"] == [4, 4]
        assert dsa["facts"]["max_draft_tokens"] == 3
        assert dsa["facts"]["max_total_draft_tokens"] == 3
        assert dsa["facts"]["is_spec_decoding_enabled"] is False
    assert_dsa_mtp_runs(demo["checkouts"]["pr"])


# --- numerics -------------------------------------------------------------------


def test_both_trtllm_kernel_paths_agree(demo: dict[str, Any], tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    out = tmp_path / "paths.pt"
    proc = _run(demo["checkouts"]["pr"], [sys.executable, "-c", BOTH_PATHS, str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    saved = torch.load(out)
    for q, (plain, spec) in saved["outputs"].items():
        assert saved["kernels"][q] == ["fmha_spec_dec_sdpa", "mmha_bmm_softmax"]
        assert plain.shape == (3 * q, 8, 64)
        assert torch.isfinite(plain).all()
        torch.testing.assert_close(spec, plain, rtol=1e-4, atol=1e-5)
    # With every token inside the top-k, DSA's sparse attention is dense attention.
    for dense, sparse in saved["dense_vs_sparse"]:
        torch.testing.assert_close(sparse, dense, rtol=1e-4, atol=1e-5)
