"""The seed story against real upstream: PR #17247, the fix the demo reproduces.

NVIDIA/TensorRT-LLM merged PR #17247 ("[None][fix] Announce MTP shapes to attention
metadata in layer-wise benchmarks", one file: tensorrt_llm/tools/layer_wise_benchmarks/
runner.py) on 2026-08-05 as commit SEED_MERGE. Today's upstream has the fix on both
sides of any `main..pr`, so a story that shows DSA going from aborting to running must
put side A before the merge: A = the merge's first parent (`SEED_MERGE^`), B = the merge.
The parent's SHA is whatever `git rev-parse SEED_MERGE^` says in a clone of upstream;
abdiff resolves it there (`abdiff doctor --target trtllm` prints both).

The demo's branches stand for the same commits: `main` for the parent, `pr` for the
merge, `pr-v1` for the PR's first version (review of 2026-08-04: the `hasattr(attn_metadata,
"update_spec_dec_param")` check that TRTLLM's metadata also passes).
"""

from __future__ import annotations

from pathlib import Path

from abdiff.errors import InfrastructureError
from abdiff.repo.revs import run_git

SEED_PR = 17247
SEED_MERGE = "6d72d24b8fb6c922ff896f51140f5a8a4f4d7f90"
SEED_FILE = "tensorrt_llm/tools/layer_wise_benchmarks/runner.py"


def seed_range(repo_root: Path) -> tuple[str, str] | None:
    """(parent sha, merge sha) of the seed fix in this clone; None when it lacks the merge."""
    shas = []
    for rev in (f"{SEED_MERGE}^{{commit}}", f"{SEED_MERGE}^1^{{commit}}"):
        try:
            done = run_git(repo_root, "rev-parse", "--verify", "--quiet", rev, check=False)
        except InfrastructureError:
            return None
        if done.returncode != 0:
            return None
        shas.append(done.stdout.strip())
    return shas[1], shas[0]


def seed_story_line(repo_root: Path) -> str:
    """One line for doctor: the seed story's two commits here, or how to get them."""
    found = seed_range(repo_root)
    if found is None:
        return (f"seed story (PR #{SEED_PR}): merge {SEED_MERGE} is not in this clone; fetch "
                f"upstream's main, then `abdiff {SEED_MERGE[:12]}^..{SEED_MERGE[:12]} "
                "--configs mtp`")
    parent, merge = found
    return (f"seed story (PR #{SEED_PR}): A = {parent} (the merge's parent: DSA aborts at "
            f"seq_len_q > 1), B = {merge} (the merge); `abdiff {parent[:12]}..{merge[:12]} "
            "--configs mtp`")
