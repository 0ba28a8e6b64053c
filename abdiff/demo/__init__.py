"""The demo: a miniature TensorRT-LLM layer-wise benchmark in a scratch git repository.

`build_demo_repo(path)` writes the harness (package data under `harness/`)
into a new repository with branches `main`, `pr-v1` and `pr` (see builder.py).
"""

from abdiff.demo.builder import ANNOUNCEMENT_GUARDS, build_demo_repo, harness_files

BRANCHES: tuple[str, ...] = tuple(ANNOUNCEMENT_GUARDS)

__all__ = ["ANNOUNCEMENT_GUARDS", "BRANCHES", "build_demo_repo", "harness_files"]
