"""The reference target: the embedded layer-wise harness that `abdiff demo` builds.

A round is `python -m abdiff.targets.reference.worker JOB.json` started in the checkout, so the
checkout's own `tinyllm` package is the one imported.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

from abdiff.targets.base import LaunchSpec, RoundJob, Target
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

    @classmethod
    def detect(cls, root: Path) -> bool:
        return (Path(root) / RUNNER_FILE).is_file()

    def round_command(self, checkout: Path, job_path: Path, job: RoundJob) -> LaunchSpec:
        argv = [sys.executable, "-m", "abdiff.targets.reference.worker", str(job_path)]
        return LaunchSpec(argv, Path(checkout))

    def hook_problems(self, checkout: Path) -> list[str]:
        from abdiff.targets.hooks import missing_hooks

        return missing_hooks(Path(checkout), REFERENCE_HOOKS)
