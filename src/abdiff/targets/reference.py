"""The reference target: the embedded layer-wise harness that `abdiff demo` builds.

A round is `python -m abdiff.worker JOB.json` started in the checkout, so the
checkout's own `tinyllm` package is the one imported.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

from abdiff.hooks import Hook
from abdiff.targets.base import LaunchSpec, RoundJob, Target

HARNESS_PACKAGE = "tinyllm"
RUNNER_MODULE = "tinyllm.tools.layer_wise_benchmarks.runner"
RUNNER_FILE = "tinyllm/tools/layer_wise_benchmarks/runner.py"
ATTENTION = "tinyllm/_torch/attention_backend"

# What the worker and the facts of the built-in suites rely on (`abdiff doctor`).
REFERENCE_HOOKS: tuple[Hook, ...] = (
    Hook((f"{HARNESS_PACKAGE}/__init__.py",), why="the package the worker imports and verifies"),
    Hook((RUNNER_FILE,), cls="Runner", method="create_run_pack",
         params=("run_type", "batch_size", "seq_len_q", "seq_len_kv_cache"),
         why="the worker creates one run pack per config"),
    Hook((RUNNER_FILE,), cls="Runner", method="create_run_pack", closes_over="attn_metadata",
         why="facts are read from the attn_metadata the run pack closes over"),
    Hook((f"{ATTENTION}/trtllm.py",), cls="TrtllmAttentionMetadata",
         attribute="max_total_draft_tokens", why="fact attn_metadata.max_total_draft_tokens"),
    Hook((f"{ATTENTION}/trtllm.py",), cls="TrtllmAttentionMetadata",
         attribute="is_spec_decoding_enabled", why="fact attn_metadata.is_spec_decoding_enabled"),
    Hook((f"{ATTENTION}/sparse/dsa.py",), cls="DSAtrtllmAttentionMetadata",
         attribute="max_draft_tokens", why="fact attn_metadata.max_draft_tokens"),
    Hook((f"{ATTENTION}/sparse/dsa.py",), cls="DSAtrtllmAttentionMetadata",
         attribute="kv_lens_cuda_2d", why="fact attn_metadata.kv_lens_cuda_2d.shape"),
)


class ReferenceTarget(Target):
    name: ClassVar[str] = "reference"

    @classmethod
    def detect(cls, root: Path) -> bool:
        return (Path(root) / RUNNER_FILE).is_file()

    def round_command(self, checkout: Path, job_path: Path, job: RoundJob) -> LaunchSpec:
        return LaunchSpec([sys.executable, "-m", "abdiff.worker", str(job_path)], Path(checkout))

    def hook_problems(self, checkout: Path) -> list[str]:
        from abdiff.hooks import missing_hooks

        return missing_hooks(Path(checkout), REFERENCE_HOOKS)
