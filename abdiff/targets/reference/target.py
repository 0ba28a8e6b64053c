"""The reference target: the embedded layer-wise harness that `abdiff demo` builds.

A round is `python -m abdiff.targets.reference.worker JOB.json` started in the checkout, so the
checkout's own `tinyllm` package is the one imported.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar, Literal

from abdiff.launchers.spec import ABDIFF_ROOT, LaunchSpec
from abdiff.targets.base import RoundJob, Target
from abdiff.targets.hooks import Hook, run_pack_hooks

HARNESS_PACKAGE = "tinyllm"
RUNNER_MODULE = "tinyllm.tools.layer_wise_benchmarks.runner"
RUNNER_FILE = "tinyllm/tools/layer_wise_benchmarks/runner.py"
ATTENTION = "tinyllm/_torch/attention_backend"

# What the worker and the facts of the built-in suites rely on (`abdiff doctor`).
REFERENCE_HOOKS: tuple[Hook, ...] = (
    Hook((f"{HARNESS_PACKAGE}/__init__.py",), why="the package the worker imports and verifies"),
    *run_pack_hooks(RUNNER_FILE, (f"{ATTENTION}/trtllm.py",), (f"{ATTENTION}/sparse/dsa.py",)),
)


class ReferenceTarget(Target):
    name: ClassVar[str] = "reference"
    layout: ClassVar[str] = RUNNER_FILE
    capture_pass: ClassVar[bool] = True
    iteration_counts: ClassVar[Literal["config", "job", "fixed"]] = "config"
    hooks = REFERENCE_HOOKS
    # the harness imports torch and its own modules only: no CUDA context, no thread
    preimport: ClassVar[tuple[str, ...]] = (RUNNER_MODULE,)
    needs: ClassVar[dict[str, str]] = {
        "GPU": "CUDA kernel names and GPU latency (it runs on the CPU instead)",
        "GPU clocks": "clocks and throttling per round (NVML, nvidia-ml-py)",
        "torch": "everything",
        "torch with CUDA": "GPU runs (CPU only)",
        "deep_gemm": "the real DeepGEMM kernel (the harness's Python stand-in is used)",
        "mpirun": "--launcher mpirun",
        "srun": "--launcher srun",
    }
    requires = ("torch",)

    @classmethod
    def detect(cls, root: Path) -> bool:
        return (Path(root) / RUNNER_FILE).is_file()

    def worker_env(self) -> dict[str, str]:
        # abdiff's own folder, so the worker imports this abdiff also where it is not
        # installed (run from a source tree): the allow-listed environment drops PYTHONPATH
        return {"PYTHONPATH": str(ABDIFF_ROOT)}

    def round_command(self, checkout: Path, job_path: Path, job: RoundJob) -> LaunchSpec:
        argv = [sys.executable, "-m", "abdiff.targets.reference.worker", str(job_path)]
        return LaunchSpec(argv, Path(checkout), self.worker_env())
