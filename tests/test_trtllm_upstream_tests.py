"""`--configs upstream-tests`: the configs upstream's test_layer_wise_benchmarks.py guards,
read from the checkout, built into run.py command lines, and validated by run.py's own
argparse (the stand-in run.py of test_hooks.py with today's options), on the CPU.

UPSTREAM_TEST has the structure of upstream's tests/unittest/tools/
test_layer_wise_benchmarks.py (decorators, world-size parameters with skip marks,
`check_call(["./mpi_launch.sh", "./run.sh", YAML, "--model", model_root / ..., ...])`,
a world-size branch, a script test and a GPU-free test) with upstream's arguments.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_trtllm_upstream import TODAYS_OPTIONS, args_for, todays_upstream

from abdiff.errors import InputError
from abdiff.launchers.local import LocalLauncher
from abdiff.run.rounds import RoundSettings, run_round
from abdiff.suites import load_suite
from abdiff.suites.upstream_tests import TEST_FILE, parse_upstream_tests
from abdiff.targets.trtllm.target import RUN_PY, TrtllmTarget, base_config, plan_block

UPSTREAM_TEST = '''
import os
from subprocess import check_call

import pytest
from utils.llm_data import llm_models_root
from utils.util import skip_pre_blackwell

_NVBUG = pytest.mark.skip(reason="https://nvbugs/6337228")


@skip_pre_blackwell
@pytest.mark.parametrize("world_size", [pytest.param(1, marks=_NVBUG), 4])
def test_deepseek_r1_ctx_tep(llm_root, world_size):
    model_root = llm_models_root(check=True)
    check_call(["./mpi_launch.sh", "./run.sh", "config_ctx.yaml", "--model",
                model_root / "DeepSeek-R1" / "DeepSeek-R1-0528-FP4-v2",
                "--no-enable-attention-dp", "--moe-backend=TRTLLM"],
               cwd=llm_root / "examples" / "layer_wise_benchmarks", env={**os.environ})
    check_call(["python3", "parse.py", "--world-size=4"])


@skip_pre_blackwell
@pytest.mark.parametrize("world_size", [pytest.param(1, marks=_NVBUG), 4])
def test_deepseek_v32_ctx_dep(llm_root, world_size):
    model_root = llm_models_root(check=True)
    check_call(["./mpi_launch.sh", "./run.sh", "config_ctx.yaml", "--model",
                model_root / "DeepSeek-V3.2-Exp-hf", "--tokens-per-block=64",
                "--moe-backend=DEEPGEMM"])


@pytest.mark.skip(reason="--scaled-from makes the CTX prefill pack come out all-NaN")
@skip_pre_blackwell
@pytest.mark.parametrize("world_size", [4])
def test_deepseek_r1_gen_scaled_from_16_dep(llm_root, world_size):
    model_root = llm_models_root(check=True)
    check_call(["./mpi_launch.sh", "./run.sh", "config_gen.yaml", "--model",
                model_root / "DeepSeek-R1" / "DeepSeek-R1-0528-FP4-v2", "--layer-indices=5,6",
                "--scaled-from=16", "--moe-backend=CUTEDSL"])


@pytest.mark.parametrize("world_size", [1, 4])
def test_nemotron_gen_dep(llm_root, world_size):
    model_root = llm_models_root(check=True)
    check_call(["./mpi_launch.sh", "./run.sh", "config_gen.yaml", "--model",
                model_root / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "--layer-indices=4,5,6",
                "--mamba-ssm-cache-dtype=float16"])


@skip_pre_blackwell
@pytest.mark.parametrize("world_size", [1, 4])
def test_kimi_k3_gen_dep(llm_root, world_size):
    model_root = llm_models_root(check=True)
    if world_size == 1:
        layer_args = ["--layer-indices=6,7", "--balance-method=NotModified"]
    else:
        layer_args = ["--layer-indices=4,5,6,7"]
    check_call(["./mpi_launch.sh", "./run.sh", "config_gen.yaml", "--model",
                model_root / "Kimi-K3", *layer_args, "--tokens-per-block=64",
                "--moe-backend=TRTLLM", "--moe-backend-for-prefill=TRTLLM",
                "--batch-size=32", "--seq-len-q=4", "--spec-max-draft-len=3"])


@skip_pre_blackwell
@pytest.mark.parametrize("world_size", [1, 4])
def test_performance_alignment(llm_root, world_size):
    check_call(["./sample_performance_alignment.sh"])


def test_missing_replay_iterations_none_when_the_window_fits() -> None:
    assert True
'''
CONFIG_CTX = """model: nvidia/DeepSeek-R1-0528-FP4-v2
layer_indices: [5]
run_type: CTX
scaled_from: null
tokens_per_block: 32
max_seq_len: 9220
enable_attention_dp: true
max_num_tokens: 20480
moe_backend: CUTLASS
use_cuda_graph: false
batch_size: 1
seq_len_q: 8
seq_len_kv_cache: 0
balance_method: Balanced
balance_ratio: null
"""


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = todays_upstream(tmp_path_factory.mktemp("guarded") / "TensorRT-LLM")
    (root / TEST_FILE).parent.mkdir(parents=True)
    (root / TEST_FILE).write_text(UPSTREAM_TEST)
    (root / "examples/layer_wise_benchmarks/config_ctx.yaml").write_text(CONFIG_CTX)
    return root


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLM_MODELS_ROOT", str(tmp_path / "models"))
    return tmp_path / "models"


def test_the_guarded_tests_become_configs(upstream: Path, models: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="abdiff"):
        suite = load_suite("upstream-tests", repo_root=upstream)
    ids = [c.id for c in suite.configs]
    assert ids == ["deepseek_r1_ctx_tep-CTX-TRTLLM-bs1-q8-kv0",
                   "deepseek_v32_ctx_dep-CTX-DSA-bs1-q8-kv0",
                   "nemotron_gen_dep-GEN-TRTLLM-bs128-q1-kv8193",
                   "kimi_k3_gen_dep-GEN-TRTLLM-bs32-q4-kv8193"]
    kimi = suite.configs[3].params
    assert kimi["model"] == str(models / "Kimi-K3")
    assert kimi["layer_indices"] == "4,5,6,7" and "balance_method" not in kimi  # world size 4
    assert kimi["spec_max_draft_len"] == "3" and kimi["moe_backend_for_prefill"] == "TRTLLM"
    assert suite.configs[0].params["enable_attention_dp"] is False
    assert suite.target_options == {}  # nemotron runs before Blackwell too
    note = caplog.text
    assert ("4 upstream tests as 4 configs (world size 4); left out: "
            "test_deepseek_r1_gen_scaled_from_16_dep (pytest.mark.skip upstream)") in note


def run_py_accepts(checkout: Path, config_yaml: str,
                   argv: list[str]) -> subprocess.CompletedProcess:
    """run.py's own argparse and YAML merge on `argv` (its module code up to the options)."""
    source = (checkout / RUN_PY).read_text()
    end = source.index("print(args, flush=True)")
    return subprocess.run([sys.executable, "-c", source[:end], config_yaml, *argv],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(checkout)})


@pytest.mark.slow
def test_every_guarded_config_is_a_command_line_run_py_accepts(upstream: Path,
                                                               models: Path) -> None:
    suite = load_suite("upstream-tests", repo_root=upstream)
    remaining = [{"id": c.id, "params": c.params} for c in suite.configs]
    invocations = 0
    while remaining:
        block = plan_block(remaining)
        argv = args_for(upstream, block, suite.target_options)
        text, _ = base_config(upstream, block[0]["params"]["run_type"])
        config_yaml = upstream / f"{block[0]['id']}.yaml"
        config_yaml.write_text(text)
        done = run_py_accepts(upstream, str(config_yaml), argv)
        assert done.returncode == 0, (block[0]["id"], argv, done.stderr)
        remaining = [c for c in remaining if c not in block]
        invocations += 1
    assert invocations == 4  # one run.py per upstream test


def test_a_run_py_without_an_option_a_test_passes_is_refused_before_running(
        upstream: Path, models: Path, tmp_path: Path) -> None:
    """The seed's run.py has no --spec-max-draft-len: the Kimi test cannot run there."""
    old = tmp_path / "old"
    old.mkdir()
    (old / RUN_PY).parent.mkdir(parents=True)
    (old / RUN_PY).write_text((upstream / RUN_PY).read_text().replace(TODAYS_OPTIONS, ""))
    kimi = next(c for c in load_suite("upstream-tests", repo_root=upstream).configs
                if c.id.startswith("kimi"))
    with pytest.raises(InputError, match="target option spec_max_draft_len=3: run.py of "
                                         "this checkout has no option that takes it"):
        args_for(old, [{"id": kimi.id, "params": kimi.params}], {})


def test_missing_pieces_are_one_clear_line(upstream: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLM_MODELS_ROOT", raising=False)
    with pytest.raises(InputError, match="set LLM_MODELS_ROOT"):
        load_suite("upstream-tests", repo_root=upstream)
    monkeypatch.setenv("LLM_MODELS_ROOT", "/models")
    with pytest.raises(InputError, match="test_layer_wise_benchmarks.py not found"):
        load_suite("upstream-tests", repo_root=tmp_path)
    with pytest.raises(InputError, match="not Python"):
        parse_upstream_tests("def test_x(:\n", "t.py", "/models")


@pytest.mark.slow
def test_a_guarded_config_runs_through_the_probe(upstream: Path, models: Path,
                                                 tmp_path: Path) -> None:
    """The Nemotron test's config, run for real on the stand-in (CPU) by the round runner."""
    suite = load_suite("upstream-tests", repo_root=upstream)
    nemotron = [c for c in suite.configs if c.id.startswith("nemotron")]
    nemotron[0].params.update(batch_size=2, seq_len_kv_cache=16)  # CPU-sized shapes
    settings = RoundSettings(facts=suite.facts, warmup_times=1, run_times=3, timeout_s=120)
    records: dict = {}
    run_round(TrtllmTarget(), LocalLauncher(), upstream, nemotron, settings, 0, tmp_path,
              lambda cid, rec: records.__setitem__(cid, rec))
    record = records[nemotron[0].id]
    assert record.status == "ok", record.error
    assert len(record.latency_us) == 3
