"""The trtllm target: config translation, blocks, the command, and the probe run for real.

tensorrt_llm cannot be installed here, so the probe runs against the stand-in
tree of test_hooks.py (upstream's module paths, class names and run.py flow,
with tiny CPU bodies), in a subprocess started exactly as the target's
LaunchSpec says: upstream-like run.py, probe site folder first on PYTHONPATH.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import git_env, run_abdiff, unwrapped
from test_hooks import git, make_upstream_repo, write_upstream_tree

from abdiff.errors import InputError
from abdiff.launchers.local import LocalLauncher
from abdiff.launchers.process import run_process
from abdiff.run.protocol import read_round_log
from abdiff.run.rounds import RoundSettings, run_round
from abdiff.suites import Config, load_suite
from abdiff.targets import detect_target
from abdiff.targets.base import RoundJob
from abdiff.targets.trtllm.probe import PLAN_ENV, SITE_DIR
from abdiff.targets.trtllm.probe.runtime import Probe, ProbePlan, _Pack
from abdiff.targets.trtllm.target import (
    RUN_PY,
    TrtllmOptions,
    TrtllmTarget,
    base_config,
    build_overlay,
    plan_block,
    run_py_options,
    translate_configs,
)

FACTS = ["attn_metadata.max_draft_tokens", "attn_metadata.max_total_draft_tokens",
         "attn_metadata.is_spec_decoding_enabled", "attn_metadata.kv_lens_cuda_2d.shape"]


@pytest.fixture(autouse=True)
def cpu_unless_gpu_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in runs on the CPU (operator names as kernels) except in `gpu` tests."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def cfg(backend: str, bs: int, q: int, kv: int = 16, run_type: str = "GEN") -> dict:
    params = {"run_type": run_type, "backend": backend, "batch_size": bs, "seq_len_q": q,
              "seq_len_kv_cache": kv}
    return {"id": f"{run_type}-{backend}-bs{bs}-q{q}-kv{kv}", "params": params}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_upstream_repo(tmp_path_factory.mktemp("upstream") / "TensorRT-LLM")


@pytest.fixture(scope="module")
def checkouts(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Worktrees of both branches, as the checkout cache makes them."""
    base = tmp_path_factory.mktemp("worktrees")
    out = {}
    for branch in ("main", "pr"):
        git(repo, "worktree", "add", "-q", "--detach", str(base / branch), branch)
        out[branch] = base / branch
    return out


def known(checkout: Path) -> dict:
    return run_py_options(checkout / RUN_PY)


# ------------------------------------------------------------------ config translation
def test_run_py_options_are_read_from_the_checkout(checkouts: dict[str, Path]) -> None:
    options = known(checkouts["main"])
    assert options["batch_size"].flag == "--batch-size" and options["batch_size"].comma_list
    assert options["model"].flag == "--model" and not options["model"].comma_list
    assert options["layer_indices"].comma_list
    assert (options["use_cuda_graph"].true_flag, options["use_cuda_graph"].false_flag) == (
        "--use-cuda-graph", "--no-use-cuda-graph")
    assert "config_path" not in options


def test_dsa_block_becomes_upstream_options(checkouts: dict[str, Path]) -> None:
    checkout = checkouts["main"]
    _, base = base_config(checkout, "GEN")
    block = [cfg("DSA", bs, q, 2049) for bs in (8, 32) for q in (1, 2, 4)]
    # cuda_graph True is the default: run.py's YAML decides; --eager (False) forces it off
    argv = translate_configs(block, TrtllmOptions(), [], warmup_times=3, run_times=20,
                             cuda_graph=True, known=known(checkout), base=base)
    eager = translate_configs(block, TrtllmOptions(), [], warmup_times=3, run_times=20,
                              cuda_graph=False, known=known(checkout), base=base)
    assert "--no-use-cuda-graph" in eager and "--no-use-cuda-graph" not in argv
    assert argv == [
        "--run-type", "GEN", "--batch-size", "8,32", "--seq-len-q", "1,2,4",
        "--seq-len-kv-cache", "2049", "--load-format", "DUMMY",
        "--model", "deepseek-ai/DeepSeek-V3.2-Exp", "--tokens-per-block", "64",
        "--moe-backend", "DEEPGEMM", "--moe-backend-for-prefill", "DEEPGEMM",
        "--warmup-times", "3", "--run-times", "20"]


def test_trtllm_block_keeps_upstream_model_and_takes_suite_options(
        checkouts: dict[str, Path]) -> None:
    checkout = checkouts["main"]
    _, base = base_config(checkout, "GEN")
    options = TrtllmOptions.parse(
        {"trtllm": {"models": {"TRTLLM": "/models/DeepSeek-R1"},
                    "backend_options": {"TRTLLM": {"moe_backend": "TRTLLM"}},
                    "layer_indices": [5, 6], "enable_attention_dp": False}},
        known(checkout))
    block = [cfg("TRTLLM", 1024, 8, 9500)]
    argv = translate_configs(block, options, ["--moe-backend", "WIDEEP"], warmup_times=1,
                             run_times=5, cuda_graph=True, known=known(checkout), base=base)
    text = " ".join(argv)
    assert "--model /models/DeepSeek-R1" in text
    assert "--layer-indices 5,6 --no-enable-attention-dp --moe-backend TRTLLM" in text
    assert "cuda-graph" not in text and "--tokens-per-block" not in argv
    # upstream's YAML caps (max_seq_len 9220, max_num_tokens 4096) are raised when too small
    assert argv[argv.index("--max-num-tokens") + 1] == "8192"
    assert argv[argv.index("--max-seq-len") + 1] == "9508"
    assert argv[-2:] == ["--moe-backend", "WIDEEP"]  # --target-arg last: it wins in run.py


def test_translation_refuses_what_run_py_cannot_take(checkouts: dict[str, Path]) -> None:
    checkout = checkouts["main"]
    _, base = base_config(checkout, "GEN")
    opts = known(checkout)
    with pytest.raises(InputError, match="abdiff sets --batch-size itself"):
        translate_configs([cfg("DSA", 8, 1)], TrtllmOptions(), ["--batch-size=4"],
                          warmup_times=1, run_times=2, cuda_graph=False, known=opts, base=base)
    with pytest.raises(InputError, match="neither a trtllm target option"):
        TrtllmOptions.parse({"moe_backnd": "CUTLASS"}, opts)
    with pytest.raises(InputError, match="no option that takes it"):
        translate_configs([cfg("DSA", 8, 1)], TrtllmOptions(options={"scaled_from": True}), [],
                          warmup_times=1, run_times=2, cuda_graph=False, known=opts, base=base)
    with pytest.raises(InputError, match="must map backends"):
        TrtllmOptions.parse({"models": {"FLASHINFER": "x"}}, opts)


def test_blocks_are_products_of_one_group() -> None:
    full = [cfg(b, bs, q) for b in ("DSA", "TRTLLM") for bs in (8, 32) for q in (1, 2, 4)]
    ids = [c["id"] for c in plan_block(full)]
    assert ids == [c["id"] for c in full[:6]]  # the DSA configs, one run.py invocation
    # after DSA bs32 q4 aborted, the rest of DSA splits into product blocks
    rest = [c for c in full if c["id"] != "GEN-DSA-bs32-q4-kv16"]
    block = plan_block(rest)
    assert [c["id"] for c in block] == [
        "GEN-DSA-bs8-q1-kv16", "GEN-DSA-bs8-q2-kv16", "GEN-DSA-bs32-q1-kv16",
        "GEN-DSA-bs32-q2-kv16"]
    left = [c for c in rest if c not in block]
    assert [c["id"] for c in plan_block(left)] == ["GEN-DSA-bs8-q4-kv16"]
    assert [c["id"] for c in plan_block(full[6:], lists=False)] == ["GEN-TRTLLM-bs8-q1-kv16"]
    assert plan_block([]) == []


def test_the_mtp_suite_runs_as_two_invocations(checkouts: dict[str, Path], tmp_path: Path) -> None:
    suite = load_suite("mtp")
    remaining = [{"id": c.id, "params": c.params} for c in suite.configs]
    invocations = []
    while remaining:
        block = plan_block(remaining)
        invocations.append(block[0]["params"]["backend"])
        remaining = [c for c in remaining if c not in block]
    assert invocations == ["DSA", "TRTLLM"]


# ------------------------------------------------------------------ the command
def job_for(tmp: Path, configs: list[dict], **kw) -> tuple[Path, RoundJob]:
    tmp.mkdir(parents=True, exist_ok=True)
    job = RoundJob(configs=configs, facts=kw.pop("facts", FACTS),
                   record_path=str(tmp / "records.jsonl"), round=0,
                   warmup_times=kw.pop("warmup_times", 1), run_times=kw.pop("run_times", 3), **kw)
    path = tmp / "job.json"
    job.write(path)
    return path, job


def test_round_command(checkouts: dict[str, Path], tmp_path: Path) -> None:
    checkout = checkouts["main"]
    configs = [cfg("TRTLLM", 4, 1), cfg("DSA", 2, 1), cfg("TRTLLM", 4, 2)]
    job_path, job = job_for(tmp_path, configs, target_args=["--layer-indices", "3"])
    spec = TrtllmTarget(python="python3").round_command(checkout, job_path, job)
    assert spec.cwd == checkout.resolve() / "examples/layer_wise_benchmarks"
    config_path = tmp_path / "trtllm-config.yaml"
    assert spec.argv[:4] == ["python3", "-u", str(checkout.resolve() / RUN_PY), str(config_path)]
    assert spec.argv[spec.argv.index("--seq-len-q") + 1] == "1,2"
    assert spec.argv[-2:] == ["--layer-indices", "3"]
    # upstream's own YAML of this commit, verbatim
    assert config_path.read_text() == (
        checkout / "examples/layer_wise_benchmarks/config_gen.yaml").read_text()
    paths = spec.env["PYTHONPATH"].split(":")
    assert paths[0] == str(SITE_DIR) and paths[1] == str(checkout.resolve())
    plan = json.loads(Path(spec.env[PLAN_ENV]).read_text())
    assert [c["id"] for c in plan["configs"]] == ["GEN-TRTLLM-bs4-q1-kv16",
                                                  "GEN-TRTLLM-bs4-q2-kv16"]
    assert plan["backend"] == "TRTLLM" and plan["checkout"] == str(checkout.resolve())
    assert str(checkout.resolve()) in spec.env["ABDIFF_RANK_PATHS"].split(":")


@pytest.mark.slow
def test_use_cuda_graph_is_upstreams_yaml_decided_on_the_ranks(checkouts: dict[str, Path],
                                                               tmp_path: Path) -> None:
    """config_gen.yaml's `use_cuda_graph: true` reaches run.py unless the suite says otherwise;
    abdiff's own process (no CUDA here, like a login node) decides nothing about it."""
    checkout = patched_pr(checkouts, tmp_path, "use_cuda_graph: false", "use_cuda_graph: true",
                          rel="examples/layer_wise_benchmarks/config_gen.yaml")
    configs = [cfg("TRTLLM", 2, 1)]
    outcome, log, spec = run_worker(checkout, tmp_path / "work", configs)
    assert not {"--use-cuda-graph", "--no-use-cuda-graph"} & set(spec.argv)
    assert json.loads(Path(spec.env[PLAN_ENV]).read_text())["cuda_graph"] is True
    assert "use_cuda_graph=True" in (tmp_path / "work/stdout.txt").read_text()
    assert log.env["cuda_graph"] is True
    # this CPU-only machine cannot capture the graph run.py asked for: failed, not silent
    assert outcome.returncode != 0 and log.done[configs[0]["id"]].status == "failed"
    _, _, eager = run_worker(checkout, tmp_path / "eager", configs,
                             target_options={"use_cuda_graph": False})
    assert "--no-use-cuda-graph" in eager.argv


def test_detection_and_env_info(checkouts: dict[str, Path], tmp_path: Path) -> None:
    assert detect_target(checkouts["main"]) is TrtllmTarget
    info = TrtllmTarget().env_info(checkouts["pr"])
    assert info["tensorrt_llm.version"] == "1.3.0rc0-checkout"
    assert info["tensorrt_llm.sha"] == git(checkouts["pr"], "rev-parse", "HEAD")
    assert "tensorrt_llm.compiled_location" in info


def fake_installed(root: Path) -> Path:
    """An installed tensorrt_llm: compiled parts plus Python that must NOT be used."""
    pkg = write_upstream_tree(root) / "tensorrt_llm"
    (pkg / "version.py").write_text('__version__ = "1.2.0-installed"\n')
    runner = pkg / "tools/layer_wise_benchmarks/runner.py"
    runner.write_text("raise ImportError('the installed runner.py was imported')\n")
    (pkg / "libs").mkdir()
    (pkg / "libs/libth_common.so").write_bytes(b"\x7fELF")
    (pkg / "bindings.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    (pkg / "deep_gemm").mkdir()
    (pkg / "deep_gemm/__init__.py").write_text("SOURCE = 'installed deep_gemm'\n")
    (pkg / "deep_gemm/_C.so").write_bytes(b"\x7fELF")
    (pkg / "_torch/stale_module.py").write_text("raise ImportError('deleted in the checkout')\n")
    return pkg


def test_overlay_links_checkout_python_and_installed_binaries(
        checkouts: dict[str, Path], tmp_path: Path) -> None:
    installed = fake_installed(tmp_path / "site-packages")
    dest = build_overlay(checkouts["pr"], installed, tmp_path / "overlay")
    pkg = dest / "tensorrt_llm"
    assert (pkg / "libs").resolve() == (installed / "libs").resolve()
    assert (pkg / "bindings.cpython-311-x86_64-linux-gnu.so").resolve().parent == installed
    assert (pkg / "deep_gemm").resolve() == installed / "deep_gemm"
    assert (pkg / "__init__.py").resolve() == checkouts["pr"] / "tensorrt_llm/__init__.py"
    assert (pkg / "tools").resolve() == checkouts["pr"] / "tensorrt_llm/tools"
    assert not (pkg / "_torch/stale_module.py").exists()
    assert not (checkouts["pr"] / "tensorrt_llm/libs").exists()  # the checkout is untouched
    assert git(checkouts["pr"], "status", "--porcelain") == ""


# ------------------------------------------------------------------ the probe, for real
def run_worker(checkout: Path, work: Path, configs: list[dict], **kw) -> tuple:
    job_path, job = job_for(work, configs, **kw)
    spec = TrtllmTarget().round_command(checkout, job_path, job)
    outcome = run_process(LocalLauncher().wrap(spec), work, Path(job.record_path), timeout_s=120)
    return outcome, read_round_log(Path(job.record_path)), spec

@pytest.mark.slow

def test_probe_records_facts_kernels_and_latency(checkouts: dict[str, Path],
                                                 tmp_path: Path) -> None:
    configs = [cfg("DSA", bs, q) for bs in (2, 4) for q in (1, 2)]
    outcome, log, _ = run_worker(checkouts["pr"], tmp_path, configs, warmup_times=2, run_times=4)
    assert outcome.returncode == 0, (tmp_path / "stderr.txt").read_text()
    assert set(log.done) == {c["id"] for c in configs}
    for config in configs:
        record = log.done[config["id"]]
        q = config["params"]["seq_len_q"]
        assert record.status == "ok" and len(record.latency_us) == 4
        assert record.facts["attn_metadata.kv_lens_cuda_2d.shape"] == [
            config["params"]["batch_size"], q]
        assert record.facts["attn_metadata.max_total_draft_tokens"] == (q - 1 or None)
        ops = "aten::_softmax" if q > 1 else "aten::mm"
        assert ops in record.kernels, record.kernels
    assert log.env["tensorrt_llm"] == "1.3.0rc0-checkout"
    tensorrt_file = Path(log.env["tensorrt_llm_file"]).resolve()
    assert checkouts["pr"].resolve() in tensorrt_file.parents
    assert log.env["trtllm.block"] == [c["id"] for c in configs]
    assert "--model deepseek-ai/DeepSeek-V3.2-Exp" in " ".join(log.env["trtllm.args"])


RUNNER_PY = "tensorrt_llm/tools/layer_wise_benchmarks/runner.py"


def patched_pr(checkouts: dict[str, Path], tmp_path: Path, old: str, new: str,
               rel: str = RUNNER_PY) -> Path:
    """A worktree of `pr` whose file `rel` has `old` replaced by `new` (which must occur)."""
    checkout = tmp_path / "checkout"
    if not checkout.exists():
        git(checkouts["pr"], "worktree", "add", "-q", "--detach", str(checkout), "pr")
    path = checkout / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return checkout

@pytest.mark.slow

def test_probe_uses_checkout_code_over_installed_compiled_parts(
        checkouts: dict[str, Path], tmp_path: Path) -> None:
    """The installed package's Python must not run; its compiled folders must be reachable."""
    installed = fake_installed(tmp_path / "site-packages")
    checkout = patched_pr(checkouts, tmp_path, "        attn_metadata.prepare()\n",
                          "        attn_metadata.prepare()\n"
                          "        from tensorrt_llm import deep_gemm\n"
                          "        attn_metadata.deep_gemm_source = deep_gemm.SOURCE\n")
    configs = [cfg("TRTLLM", 2, 1)]
    outcome, log, spec = run_worker(
        checkout, tmp_path / "work", configs, target_options={"compiled": str(installed)},
        facts=["attn_metadata.deep_gemm_source", "attn_metadata.max_total_draft_tokens"])
    assert outcome.returncode == 0, (tmp_path / "work/stderr.txt").read_text()
    record = log.done["GEN-TRTLLM-bs2-q1-kv16"]
    assert record.status == "ok"
    assert record.facts["attn_metadata.deep_gemm_source"] == "installed deep_gemm"
    assert log.env["tensorrt_llm"] == "1.3.0rc0-checkout"
    assert spec.env["PYTHONPATH"].split(":")[1] == str(tmp_path / "work/trtllm-overlay")

@pytest.mark.slow

def test_ranks_get_the_hugging_face_locations(checkouts: dict[str, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE reach the rank (and are in
    the launch spec, which mpirun/srun forward); HF_TOKEN does not without --pass-env."""
    values = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf/hub"),
              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_TOKEN": "hf_secret"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    checkout = patched_pr(checkouts, tmp_path, "        attn_metadata.prepare()\n",
                          "        attn_metadata.prepare()\n"
                          "        attn_metadata.hf = ','.join(sorted(\n"
                          "            k for k in os.environ\n"
                          "            if k.startswith(('HF_', 'TRANSFORMERS_'))))\n"
                          "        attn_metadata.hf_home = os.environ.get('HF_HOME')\n")
    outcome, log, spec = run_worker(checkout, tmp_path / "work", [cfg("TRTLLM", 2, 1)],
                                    facts=["attn_metadata.hf", "attn_metadata.hf_home"])
    assert outcome.returncode == 0, (tmp_path / "work/stderr.txt").read_text()
    facts = log.done["GEN-TRTLLM-bs2-q1-kv16"].facts
    del values["HF_TOKEN"]
    assert facts["attn_metadata.hf"] == ",".join(sorted(values))
    assert facts["attn_metadata.hf_home"] == values["HF_HOME"]
    assert {k: spec.env[k] for k in values} == values


def test_probe_refuses_code_from_outside_the_checkout(checkouts: dict[str, Path],
                                                      tmp_path: Path) -> None:
    configs = [cfg("TRTLLM", 2, 1), cfg("TRTLLM", 2, 2)]
    job_path, job = job_for(tmp_path, configs)
    spec = TrtllmTarget().round_command(checkouts["main"], job_path, job)
    # a PYTHONPATH where another tree's tensorrt_llm comes first
    spec.env["PYTHONPATH"] = spec.env["PYTHONPATH"].replace(
        str(checkouts["main"].resolve()), str(checkouts["pr"].resolve()))
    outcome = run_process(spec, tmp_path, Path(job.record_path), timeout_s=120)
    log = read_round_log(Path(job.record_path))
    assert outcome.returncode != 0
    for config in configs:
        assert log.done[config["id"]].status == "failed"
        assert "was imported from" in log.done[config["id"]].error
        assert "not from the checkout" in log.done[config["id"]].error

@pytest.mark.slow

def test_probe_fails_a_backend_the_model_cannot_build(checkouts: dict[str, Path],
                                                      tmp_path: Path) -> None:
    configs = [cfg("TRTLLM", 2, 1), cfg("TRTLLM", 4, 1)]
    outcome, log, _ = run_worker(checkouts["pr"], tmp_path, configs,
                                 target_options={"model": "deepseek-ai/DeepSeek-V3.2-Exp"})
    assert outcome.returncode != 0
    errors = {log.done[c["id"]].error for c in configs}
    assert len(errors) == 1 and "backend TRTLLM, but the model builds DSA" in errors.pop()

@pytest.mark.slow

def test_a_python_error_fails_its_config_and_names_it_last(checkouts: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """run.py's nan check raising in one shape's warm-up: that config fails with the message,
    and the last start line names it (the others were only warmed up: the next worker runs them).
    """
    checkout = patched_pr(checkouts, tmp_path, "        def run_pack(*, check=False):\n",
                          "        def run_pack(*, check=False):\n"
                          "            if check and batch_size == 4:\n"
                          "                raise ValueError('Has nan, please fix weights "
                          "initialization')\n")
    configs = [cfg("TRTLLM", bs, 1) for bs in (2, 4, 8)]
    outcome, log, _ = run_worker(checkout, tmp_path / "work", configs)
    assert outcome.returncode == 1
    assert log.started[-1] == "GEN-TRTLLM-bs4-q1-kv16"
    assert list(log.done) == ["GEN-TRTLLM-bs4-q1-kv16"]
    record = log.done["GEN-TRTLLM-bs4-q1-kv16"]
    assert (record.status, record.error) == (
        "failed", "ValueError: Has nan, please fix weights initialization")

@pytest.mark.slow

def test_probe_does_not_need_the_untimed_first_call(checkouts: dict[str, Path],
                                                    tmp_path: Path) -> None:
    """Older run.py (before the untimed call in its timed loop) times every call of the pack:
    the records, with kernels, are the same as with the newer run.py."""
    checkout = patched_pr(checkouts, tmp_path, "    run_pack()  # untimed first call\n", "",
                          rel=RUN_PY)
    configs = [cfg("DSA", 2, q) for q in (1, 2)]
    outcome, log, _ = run_worker(checkout, tmp_path / "work", configs, warmup_times=1,
                                 run_times=3)
    assert outcome.returncode == 0, (tmp_path / "work/stderr.txt").read_text()
    for config in configs:
        record = log.done[config["id"]]
        assert record.status == "ok", record.error
        assert len(record.latency_us) == 3 and record.kernels


@pytest.mark.slow
def test_nothing_is_profiled_while_autotuning(checkouts: dict[str, Path], tmp_path: Path) -> None:
    """The autotune pack's call runs inside `autotune()`: torch.profiler must be off then (the
    stand-in AutoTuner says so on stderr otherwise), and the call is not a sample."""
    configs = [cfg("TRTLLM", 2, 1), cfg("TRTLLM", 4, 1)]
    outcome, log, _ = run_worker(checkouts["pr"], tmp_path, configs, warmup_times=1,
                                 run_times=2)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert outcome.returncode == 0, stderr
    assert "tuning under torch.profiler" not in stderr
    assert all(log.done[c["id"]].kernels for c in configs)
    assert [len(log.done[c["id"]].latency_us) for c in configs] == [2, 2]


@pytest.mark.slow
def test_phase_lines_follow_run_py(checkouts: dict[str, Path], tmp_path: Path) -> None:
    configs = [cfg("DSA", 2, 1), cfg("DSA", 4, 1)]
    outcome, _, spec = run_worker(checkouts["pr"], tmp_path, configs)
    assert outcome.returncode == 0, (tmp_path / "stderr.txt").read_text()
    lines = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    phases = [(e["phase"], e["id"]) for e in lines if e["event"] == "phase"]
    big, small = "GEN-DSA-bs4-q1-kv16", "GEN-DSA-bs2-q1-kv16"
    assert phases == [("build", None), ("autotune", big), ("prefill", None),
                      ("warm-up", small), ("warm-up", big), ("timed", small), ("timed", big)]


@pytest.mark.slow
def test_a_hung_phase_is_named(checkouts: dict[str, Path], tmp_path: Path) -> None:
    """Autotuning that never ends (a cold DeepGEMM JIT, a stuck collective): the timeout
    says which phase and config hung. (The limit leaves the build phase, torch's import on
    a busy machine, ample time.)"""
    checkout = patched_pr(checkouts, tmp_path, '            AutoTuner.get().choose("attention")\n',
                          '            if AutoTuner.get().is_tuning_mode:\n'
                          '                __import__("time").sleep(600)\n')
    configs = [Config(c["id"], c["params"]) for c in [cfg("TRTLLM", 2, 1), cfg("TRTLLM", 2, 2)]]
    settings = RoundSettings(facts=FACTS, warmup_times=1, run_times=3, timeout_s=12)
    records: dict = {}
    run_round(TrtllmTarget(), LocalLauncher(), checkout, configs, settings, 0, tmp_path / "work",
              lambda cid, rec: records.__setitem__(cid, rec))
    record = records["GEN-TRTLLM-bs2-q2-kv16"]
    assert record.status == "timeout"
    assert "in phase autotune (GEN-TRTLLM-bs2-q2-kv16)" in record.error, record.error


@pytest.mark.slow
def test_a_round_isolates_aborting_shapes(checkouts: dict[str, Path], tmp_path: Path) -> None:
    """Through the round runner: one abort costs one process, never another config's data."""
    configs = [Config(c["id"], c["params"]) for c in
               [cfg("DSA", bs, q) for bs in (2, 4) for q in (1, 2)]]
    settings = RoundSettings(facts=FACTS, warmup_times=1, run_times=3, timeout_s=120)
    records: dict = {}
    output = run_round(TrtllmTarget(), LocalLauncher(), checkouts["main"], configs, settings, 0,
                       tmp_path, lambda cid, rec: records.__setitem__(cid, rec))
    statuses = {cid: rec.status for cid, rec in records.items()}
    assert statuses == {"GEN-DSA-bs2-q1-kv16": "ok", "GEN-DSA-bs4-q1-kv16": "ok",
                        "GEN-DSA-bs2-q2-kv16": "aborted", "GEN-DSA-bs4-q2-kv16": "aborted"}
    for aborted in ("GEN-DSA-bs4-q2-kv16", "GEN-DSA-bs2-q2-kv16"):
        assert "SIGABRT" in records[aborted].error and "DG_HOST_ASSERT" in records[aborted].error
    # 1: autotune at the largest shape (bs4 q2) aborts; 2: {2,4}x{1} runs; 3: bs2 q2 aborts
    assert output.processes == 3

@pytest.mark.slow

def test_both_backends_in_one_round(checkouts: dict[str, Path], tmp_path: Path) -> None:
    """A clean worker that leaves another block's configs: the round runner starts the next."""
    configs = [Config(c["id"], c["params"]) for c in
               [cfg("TRTLLM", 2, 1), cfg("TRTLLM", 2, 2), cfg("DSA", 2, 1), cfg("DSA", 2, 2)]]
    settings = RoundSettings(facts=FACTS, warmup_times=1, run_times=3, timeout_s=120)
    records: dict = {}
    run_round(TrtllmTarget(), LocalLauncher(), checkouts["pr"], configs, settings, 0, tmp_path,
              lambda cid, rec: records.__setitem__(cid, rec))
    assert {cid: rec.status for cid, rec in records.items()} == {c.id: "ok" for c in configs}
    trtllm_q2 = records["GEN-TRTLLM-bs2-q2-kv16"]
    assert trtllm_q2.facts["attn_metadata.max_total_draft_tokens"] is None
    assert trtllm_q2.facts["attn_metadata.kv_lens_cuda_2d.shape"] is None


UPSTREAM_STYLE = """model: deepseek-ai/DeepSeek-V3.2-Exp
layer_indices: [5]
run_type: GEN
scaled_from: null
tokens_per_block: 64
enable_attention_dp: true
moe_backend: DEEPGEMM
use_cuda_graph: false
batch_size: [2, 4]
seq_len_q: 2
seq_len_kv_cache: 16
balance_method: Balanced
balance_ratio: [0.5, 0.8]
warmup_times: 1
run_times: 3
"""


@pytest.mark.slow
def test_an_upstream_config_file_is_a_suite(checkouts: dict[str, Path], tmp_path: Path) -> None:
    """`--configs my_config_gen.yaml` in upstream's own format: translated, the ignored keys
    named, and it runs as upstream's run.py would run that file; its balance_ratio list is
    an axis: configs that differ only by it have their own ids and their own run.py process
    (the probe's per-process shape key never holds two of them)."""
    path = tmp_path / "my_config_gen.yaml"
    path.write_text(UPSTREAM_STYLE)
    done = run_abdiff("doctor", "--configs", path, env={**git_env(), "HF_HUB_CACHE": str(
        tmp_path / "hub")})
    assert (f"abdiff: {path}: upstream's run.py config, translated into a suite (backend DSA "
            "from the model name 'deepseek-ai/DeepSeek-V3.2-Exp'); ignored: scaled_from (null: "
            "run.py's default)\n") in done.stderr
    suite = load_suite(str(path))
    assert [c.id for c in suite.configs] == [
        "GEN-DSA-bs2-q2-kv16-br0.5", "GEN-DSA-bs2-q2-kv16-br0.8",
        "GEN-DSA-bs4-q2-kv16-br0.5", "GEN-DSA-bs4-q2-kv16-br0.8"]
    assert (suite.warmup_times, suite.run_times) == (1, 3)
    settings = RoundSettings(facts=suite.facts, warmup_times=1, run_times=3, timeout_s=120,
                             target_options=suite.target_options)
    records: dict = {}
    output = run_round(TrtllmTarget(), LocalLauncher(), checkouts["pr"], suite.configs,
                       settings, 0, tmp_path / "work",
                       lambda cid, rec: records.__setitem__(cid, rec))
    assert {cid: r.status for cid, r in records.items()} == {c.id: "ok" for c in suite.configs}
    assert output.processes == 2  # one run.py per balance ratio
    ratios = []
    for worker in ("worker0", "worker1"):
        log = read_round_log(tmp_path / "work" / worker / "records.jsonl")
        args = " ".join(log.env["trtllm.args"])
        for option in ("--layer-indices 5", "--tokens-per-block 64", "--enable-attention-dp",
                       "--moe-backend DEEPGEMM", "--no-use-cuda-graph",
                       "--balance-method Balanced"):
            assert option in args, args
        ratios.append(args.split("--balance-ratio ")[1].split()[0])
        assert all(cid.endswith(f"br{ratios[-1]}") for cid in log.env["trtllm.block"])
    assert sorted(ratios) == ["0.5", "0.8"]


def test_yaml_written_is_loadable_by_run_py(checkouts: dict[str, Path]) -> None:
    text, data = base_config(checkouts["main"], "CTX")  # no config_ctx.yaml: the fallback
    assert yaml.safe_load(text) == data and data["balance_method"] == "Balanced"
    assert "balance_ratio" in data  # run.py needs it to build its balance-ratio list


def test_doctor_checks_hooks_of_both_sides(repo: Path, tmp_path: Path, capsys) -> None:
    """`abdiff doctor --target trtllm main..broken` in a repository where a commit broke a hook."""
    from abdiff.cli import main

    git(repo, "checkout", "-q", "-b", "broken", "pr")
    runner = repo / "tensorrt_llm/tools/layer_wise_benchmarks/runner.py"
    runner.write_text(runner.read_text().replace("seq_len_kv_cache, kv_cache_manager",
                                                 "past_len, kv_cache_manager"))
    git(repo, "commit", "-q", "-am", "rename")
    git(repo, "checkout", "-q", "main")
    common = ["doctor", "--target", "trtllm", "--repo", str(repo),
              "--cache-dir", str(tmp_path / "cache")]
    assert main([*common, "main..broken"]) == 1
    out = capsys.readouterr().out
    assert "A main" in out and "all 8 hooks present" in out
    assert "B broken" in out and "1 hook(s) missing" in out
    assert "Runner.create_run_pack() no longer takes seq_len_kv_cache" in out
    code = main([*common, "main..pr"])
    out = capsys.readouterr().out
    assert "missing (" not in out and "hook(s) missing" not in out
    assert code == (0 if "target trtllm (chosen): can run here" in out else 3)
    assert "tensorrt_llm" in out and "GPU" in out

@pytest.mark.slow

def fake_nvidia_smi(folder: Path, name: str, cap: str) -> dict[str, str]:
    """An environment whose PATH has an `nvidia-smi` that reports one GPU."""
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
case "$1" in
  -L) echo "GPU 0: {name} (UUID: GPU-0)" ;;
  --query-gpu=index,name,compute_cap) echo "0, {name}, {cap}" ;;
  *) exit 1 ;;
esac
""")
    smi.chmod(0o755)
    env = git_env()
    env["PATH"] = f"{folder}:{env['PATH']}"
    return env


@pytest.mark.slow
def test_doctor_checks_the_suites_gpu_generation(tmp_path: Path) -> None:
    """On an H200 the Blackwell suite is refused with the Hopper one named; mtp-hopper fits."""
    env = fake_nvidia_smi(tmp_path / "bin", "NVIDIA H200", "9.0")
    env["HF_HUB_CACHE"] = str(tmp_path / "hub")
    done = run_abdiff("doctor", "--configs", "mtp", env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert ("PROBLEM  suite mtp names models for SM100/SM103 (Blackwell (B200, GB200), "
            "Blackwell Ultra (B300, GB300)); GPU 0 is NVIDIA H200 (SM90): use --configs "
            "mtp-hopper") in "\n".join(unwrapped(done.stdout))  # doctor wraps to the terminal
    done = run_abdiff("doctor", "--configs", "mtp-hopper", env=env)
    assert "ok  suite mtp-hopper: models for SM90; GPUs: NVIDIA H200 (SM90)" in \
        "\n".join(unwrapped(done.stdout))
    listing = run_abdiff("suites", env=env).stdout
    rows = {line.split()[0]: line for line in listing.splitlines()[2:]}
    assert " SM90 " in rows["mtp-hopper"] and " SM100/SM103 " in rows["mtp"], listing


@pytest.mark.slow
def test_doctor_checks_model_configs_are_readable_offline(tmp_path: Path) -> None:
    """One model's config.json in the hub cache the ranks get, the other's missing: doctor
    names the missing one and how to fetch it, and passes the HF locations on."""
    env = fake_nvidia_smi(tmp_path / "bin", "NVIDIA H200", "9.0")
    cache = tmp_path / "hub"
    snapshot = cache / "models--deepseek-ai--DeepSeek-R1-0528/snapshots/0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "deepseek_v3"}')
    env.update(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    done = run_abdiff("doctor", "--configs", "mtp-hopper", env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    out = "\n".join(unwrapped(done.stdout))  # doctor wraps its lines to the terminal
    assert "ok  TRTLLM model deepseek-ai/DeepSeek-R1-0528: config readable offline" in out
    assert (f"PROBLEM  DSA model deepseek-ai/DeepSeek-V3.2-Exp: not in the hub cache {cache}: "
            "run `huggingface-cli download deepseek-ai/DeepSeek-V3.2-Exp config.json`") in out
    assert f"passed to the ranks: HF_HUB_CACHE={cache}, HF_HUB_OFFLINE=1" in out


@pytest.mark.slow
def test_doctor_names_the_run_py_behaviours_it_relies_on(repo: Path, tmp_path: Path) -> None:
    """An old run.py without `--run-times`: the probe could not tell the timed pack; the
    untimed first call is listed as not relied on."""
    git(repo, "checkout", "-q", "-b", "old-run-py", "pr")
    run_py = repo / RUN_PY
    run_py.write_text(run_py.read_text().replace(
        'parser.add_argument("--run-times", type=int, default=100)\n', "").replace(
        "args.warmup_times + args.run_times", "args.warmup_times + 100"))
    git(repo, "commit", "-q", "-am", "old run.py")
    git(repo, "checkout", "-q", "main")
    done = run_abdiff("doctor", "--target", "trtllm", "--repo", repo, "--cache-dir",
                      tmp_path / "cache", "main..old-run-py")
    assert done.returncode == 1, done.stdout + done.stderr
    out = "\n".join(unwrapped(done.stdout))  # doctor wraps its lines to the terminal
    assert "run.py behaviours the probe relies on:" in out
    assert ("  MISSING times each shape's run pack warmup_times + run_times times "
            "(--warmup-times, --run-times) [every run]") in out
    assert "  yes     autotunes inside `with autotune():`" in out
    assert "  -       one untimed call before each shape's timed calls" in out
    assert (f"{RUN_PY}: no --warmup-times / --run-times option (so the benchmark no longer "
            "times each shape's run pack") in out


@pytest.mark.slow
def test_nsys_profiles_become_the_kernel_record(checkouts: dict[str, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With `nsys: true` each rank runs under `nsys profile` (a stand-in here) and rank 0's
    report, exported to SQLite, gives each config's kernels."""
    import sys

    from test_nsys import Export

    export = Export(tmp_path / "prepared.sqlite")
    for start in (100, 200):
        export.nvtx(start, start + 50, "b=2 s=1 past=16 NP1")
        export.kernel(start + 10, "void fmhaSm90Kernel<stand-in>(...)")
        export.kernel(start + 20, "nvjet_tst_stand_in")
        export.nvtx(start + 30, start + 40, "layer_wise_benchmarks ignore")
        export.kernel(start + 35, "calibrator_bookkeeping_copy")  # parse.py skips it
    export.close()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(f"""#!{sys.executable}
import shutil, subprocess, sys
argv = sys.argv[1:]
out = argv[argv.index("-o") + 1]
if argv[0] == "profile":
    command = argv[argv.index("--force-overwrite") + 2:]
    code = subprocess.call(command)
    open(out + ".nsys-rep", "wb").write(b"report")
    sys.exit(code)
shutil.copy({str(tmp_path / "prepared.sqlite")!r}, out)
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    outcome, log, spec = run_worker(checkouts["pr"], tmp_path / "work", [cfg("TRTLLM", 2, 1)],
                                    target_options={"nsys": True})
    assert outcome.returncode == 0, (tmp_path / "work/stderr.txt").read_text()
    assert spec.argv[1:4] == ["-m", "abdiff.targets.trtllm.probe.nsys_rank", "--"]
    record = log.done["GEN-TRTLLM-bs2-q1-kv16"]
    assert record.status == "ok" and len(record.latency_us) == 3
    assert record.kernels == {"nvjet_tst_stand_in": 1, "void fmhaSm90Kernel<stand-in>(...)": 1}
    assert (tmp_path / "work/nsys/report_np1_rank0.sqlite").is_file()


class NumberedSensor:
    """Stands in for clocks.GpuSensor, which needs an NVIDIA driver: numbered readings."""

    def __init__(self) -> None:
        self.reads = 0

    def read(self) -> dict:
        self.reads += 1
        return {"sm_mhz": 1980, "reading": self.reads}


def test_probe_reads_the_clocks_around_the_timed_calls_only(tmp_path: Path) -> None:
    """Two warm-up calls, three timed: the clocks are read before the first timed call
    (outside its timing) and after the last, and go into the config's record."""
    config = {"id": "GEN-TRTLLM-bs8-q1-kv16", "batch_size": 8, "seq_len_q": 1,
              "seq_len_kv_cache": 16}
    plan = ProbePlan(record_path=str(tmp_path / "records.jsonl"), round=0, facts=[],
                     warmup_times=2, run_times=3, checkout=str(tmp_path), run_type="GEN",
                     configs=[config], profile_kernels=False, device="cpu")
    probe = Probe(plan, rank=0)
    probe.started, probe.device, probe.sensor = True, "cpu", NumberedSensor()
    pack = _Pack(config, {})
    probe.current = pack
    reads_seen = []
    run_pack = probe._wrap_pack(pack, lambda: reads_seen.append(probe.sensor.reads), None)
    for _ in range(5):
        run_pack()
    probe.finish_current()
    record = read_round_log(tmp_path / "records.jsonl").done[config["id"]]
    assert reads_seen == [0, 0, 1, 1, 1]  # nothing read during warm-up or inside a call
    assert record.clocks == {"start": {"sm_mhz": 1980, "reading": 1},
                             "end": {"sm_mhz": 1980, "reading": 2}}
    assert len(record.latency_us) == 3


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("graph", [False, True], ids=["events", "graph-replay"])
def test_probe_on_cuda(checkouts: dict[str, Path], tmp_path: Path, graph: bool) -> None:
    """CUDA events around run-pack calls, or around CUDAGraph.replay with --cuda-graph."""
    configs = [cfg("DSA", 32, q) for q in (1, 4)]
    # the stand-in's config_gen.yaml says use_cuda_graph: false (the CPU cannot capture);
    # on the GPU the suite asks for graphs, as upstream's own YAML does
    outcome, log, spec = run_worker(checkouts["pr"], tmp_path, configs, cuda_graph=graph,
                                    warmup_times=3, run_times=10,
                                    target_options={"use_cuda_graph": True} if graph else {})
    assert outcome.returncode == 0, (tmp_path / "stderr.txt").read_text()
    assert log.env["device"] == "cuda"
    assert ("--use-cuda-graph" in spec.argv) == graph
    clocks = log.env["clocks"] == "NVML"  # nvidia-ml-py installed (the H200 image has it)
    kernels = {}
    for config in configs:
        record = log.done[config["id"]]
        assert record.status == "ok" and len(record.latency_us) == 10
        assert all(0 < t < 50_000 for t in record.latency_us), record.latency_us
        assert record.kernels and not any(k.startswith("aten::") for k in record.kernels)
        assert not clocks or set(record.clocks) == {"start", "end"}
        kernels[config["params"]["seq_len_q"]] = record.kernels
    # q4 announces MTP shapes on pr: softmax runs, a kernel q1 does not launch
    assert set(kernels[4]) - set(kernels[1])
    print(json.dumps({"graph": graph, "env clocks": log.env.get("clocks"),
                      "clocks": {c["id"]: log.done[c["id"]].clocks for c in configs},
                      "latency_us": {c["id"]: log.done[c["id"]].latency_us for c in configs},
                      "kernels": kernels}))
