"""doctor.preflight: the machine checks `abdiff A..B` makes before it checks anything out.

This machine is checked for real for the reference target; a GPU machine (which
this one is not) is described through doctor's injectable `Machine`.
"""

from __future__ import annotations

import importlib.util

from abdiff.doctor import Machine, preflight


def gpu_machine(**overrides) -> Machine:
    """An H200 host with torch+CUDA, tensorrt_llm and mpirun, not inside a Slurm job."""
    tools = {"mpirun": "/usr/bin/mpirun", "srun": "/usr/bin/srun"}
    fields = dict(
        which=tools.get,
        find_spec=lambda name: importlib.util.find_spec("json") if name == "tensorrt_llm"
        else None,
        version=lambda name: "1.2.0" if name == "tensorrt_llm" else None,
        environ={}, gpus=lambda: ["GPU 0: NVIDIA H200"], torch=lambda: ("2.13.0", "12.8"))
    fields.update(overrides)
    return Machine(**fields)


def test_this_machine_runs_the_reference_target_on_the_cpu() -> None:
    assert preflight("reference", "cpu", "local") is None
    assert preflight("reference", "auto", "local") is None


def test_cuda_asked_for_without_a_gpu_names_what_is_missing() -> None:
    cpu_only = gpu_machine(gpus=lambda: [], torch=lambda: ("2.13.0", None))
    line = preflight("reference", "cuda", "local", cpu_only)
    assert line is not None and line.startswith(
        "target reference cannot run here: needs GPU, torch with CUDA (GPU: nvidia-smi finds "
        "none; torch with CUDA: torch sees no CUDA device)")
    assert "--skip-preflight" in line and "\n" not in line
    assert preflight("trtllm", "auto", "local", cpu_only).startswith(
        "target trtllm cannot run here: needs GPU, torch with CUDA (")


def test_the_launcher_and_tensorrt_llm_are_checked() -> None:
    assert preflight("trtllm", "auto", "mpirun", gpu_machine()) is None
    no_mpirun = gpu_machine(which=lambda name: None)
    assert "needs mpirun (mpirun: not on PATH)" in preflight("trtllm", "auto", "mpirun", no_mpirun)
    assert "needs srun (srun: /usr/bin/srun, but SLURM_JOB_ID is not set" in preflight(
        "trtllm", "auto", "srun", gpu_machine())
    no_trtllm = gpu_machine(find_spec=lambda name: None)
    assert "needs tensorrt_llm (tensorrt_llm: not installed)" in preflight(
        "trtllm", "auto", "local", no_trtllm)
