"""The environment that picks kernels (TLLM_*, TRTLLM_*, NCCL_*, CUDA_*): passed to the
ranks, recorded in every run's env fingerprint, and a difference shown beside the verdict.

The rank is the stand-in tree of test_hooks.py run for real by the trtllm target's
LaunchSpec through the local launcher (process.py's allow-list applies).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_launchers import fake_path  # noqa: F401 (fixture)
from test_trtllm_target import cfg, checkouts, repo, run_worker  # noqa: F401 (fixtures)

from abdiff.launchers import make_launcher
from abdiff.launchers.mpirun import MpirunLauncher
from abdiff.launchers.process import kernel_selecting_environment, worker_environment
from abdiff.launchers.slurm import srun_has_containers
from abdiff.launchers.spec import LaunchSpec
from abdiff.reports import common, markdown
from abdiff.reports import json as json_report
from abdiff.store.baselines import fingerprint, fingerprint_differences
from abdiff.store.records import ConfigRuns, RoundRecord, RunFile
from abdiff.targets.trtllm.target import TrtllmTarget
from abdiff.verdict.compare import compare_runs

SELECTING = {"TLLM_FMHA_LIBS": "trtllm-gen", "TRTLLM_ENABLE_PDL": "1", "NCCL_ALGO": "Ring",
             "CUDA_MODULE_LOADING": "EAGER"}


def test_kernel_selecting_variables_reach_workers_and_secrets_do_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SELECTING.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TLLM_HUB_TOKEN", "secret")  # an allowed prefix, still a credential
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # a device, not a kernel choice
    env = worker_environment({})
    assert all(env[name] == value for name, value in SELECTING.items())
    assert "TLLM_HUB_TOKEN" not in env and env["CUDA_VISIBLE_DEVICES"] == "3"
    recorded = kernel_selecting_environment(env)
    assert recorded == dict(sorted(SELECTING.items()))


def test_the_rank_records_the_environment_it_ran_under(checkouts: dict[str, Path],  # noqa: F811
                                                       tmp_path: Path, fake_path: Path,  # noqa: F811
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRTLLM_ENABLE_PDL", "1")
    monkeypatch.setenv("NCCL_PROTO", "LL128")
    outcome, log, spec = run_worker(checkouts["main"], tmp_path, [cfg("TRTLLM", 2, 1)],
                                    warmup_times=1, run_times=2)
    assert outcome.returncode == 0, (tmp_path / "stderr.txt").read_text()
    assert log.env["kernel_env"] == {"NCCL_PROTO": "LL128", "TRTLLM_ENABLE_PDL": "1"}
    # in the launch spec, so that mpirun exports them to every rank with -x
    assert spec.env["TRTLLM_ENABLE_PDL"] == "1"
    wrapped = MpirunLauncher(2).wrap(spec)
    assert wrapped.argv[wrapped.argv.index("TRTLLM_ENABLE_PDL") - 1] == "-x"


def run_file(rev: str, kernel_env: dict[str, str]) -> RunFile:
    rounds = [RoundRecord("ok", latency_us=[100.0 + i % 3 for i in range(20)], round=r,
                          kernels={"fmha_kernel": 1}) for r in range(6)]
    params = {"run_type": "GEN", "backend": "TRTLLM", "batch_size": 8, "seq_len_q": 1,
              "seq_len_kv_cache": 16}
    env = {"device": "cuda", "device_name": "NVIDIA H200", "kernel_env": kernel_env}
    return RunFile(rev, rev * 5, "trtllm", "mtp", env,
                   [ConfigRuns("GEN-TRTLLM-bs8-q1-kv16", params, rounds)])


def test_a_difference_between_sides_is_shown_next_to_the_verdict() -> None:
    result = compare_runs(run_file("main", {"TRTLLM_ENABLE_PDL": "1"}),
                          run_file("pr", {"TLLM_FMHA_LIBS": "xqa"}), {})
    assert result.summary["kernel_env_differs"] == ["TLLM_FMHA_LIBS", "TRTLLM_ENABLE_PDL"]
    assert ("kernel-selecting environment differs between the sides: TLLM_FMHA_LIBS: unset in "
            "A, 'xqa' in B; TRTLLM_ENABLE_PDL: '1' in A, unset in B") in result.notes
    final = common.final_line(result)
    assert "kernel-selecting environment differs: TLLM_FMHA_LIBS, TRTLLM_ENABLE_PDL" in final
    comment = markdown.render(result)
    headline = comment.splitlines()[1].replace("\\_", "_")  # markdown escapes underscores
    assert "kernel-selecting environment differs: TLLM_FMHA_LIBS, TRTLLM_ENABLE_PDL" in headline
    assert '"kernel_env_differs"' in json_report.render(result)


def test_the_same_environment_says_nothing() -> None:
    result = compare_runs(run_file("main", {"NCCL_ALGO": "Ring"}),
                          run_file("pr", {"NCCL_ALGO": "Ring"}), {})
    assert "kernel_env_differs" not in result.summary
    assert "kernel-selecting" not in common.final_line(result)


def test_the_fingerprint_against_a_baseline_names_each_variable() -> None:
    baseline = fingerprint(run_file("main", {"TRTLLM_ENABLE_PDL": "1"}))
    here = fingerprint(run_file("pr", {}))
    assert "kernel_env" not in here  # nothing set: the default path, as in older run files
    assert fingerprint_differences(baseline, here) == [
        "TRTLLM_ENABLE_PDL: '1' in the baseline, unset here"]
    assert fingerprint_differences(here, fingerprint(run_file("x", {}))) == []


def test_srun_uses_upstreams_container_default_for_trtllm(fake_path: Path,  # noqa: F811
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """upstream's slurm_launch.sh: CONTAINER_NAME=${CONTAINER_NAME:-layer_wise_benchmarks}."""
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.delenv("CONTAINER_NAME", raising=False)
    monkeypatch.delenv("ABDIFF_SRUN_CONTAINER", raising=False)
    spec = LaunchSpec(["python3", "run.py"], Path("/work"), {})
    srun_has_containers.cache_clear()  # this fake srun has no pyxis: no default container
    assert "--container-name" not in make_launcher(
        "srun", 8, 2, TrtllmTarget.srun_container).wrap(spec).argv
    (fake_path / "srun").write_text('#!/bin/sh\n[ "$1" = --help ] && echo "  '
                                    '--container-name=NAME  [pyxis]"\necho "srun $*"\n')
    srun_has_containers.cache_clear()  # with pyxis: upstream's default
    srun = make_launcher("srun", 8, 2, TrtllmTarget.srun_container).wrap(spec)
    assert srun.argv[srun.argv.index("--container-name") + 1] == "layer_wise_benchmarks"
    assert "--container-name" not in make_launcher("srun", 8, 2).wrap(spec).argv  # reference
    monkeypatch.setenv("CONTAINER_NAME", "mine")
    srun = make_launcher("srun", 8, 2, TrtllmTarget.srun_container).wrap(spec)
    assert srun.argv[srun.argv.index("--container-name") + 1] == "mine"
    monkeypatch.setenv("ABDIFF_SRUN_CONTAINER", "none")  # a shared venv, no container
    assert "--container-name" not in make_launcher("srun", 8, 2, "layer_wise_benchmarks").wrap(
        spec).argv
    srun_has_containers.cache_clear()
