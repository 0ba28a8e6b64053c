"""The folders one side's workers keep between rounds and runs, in abdiff's cache folder.

A side is a checkout's commit and the kernel-selecting environment it runs under
(env.kernel_env). The tool caches a benchmark fills (DeepGEMM's JIT cubins, Triton's and
TorchInductor's kernels, torch extensions, the CUDA JIT cache, FlashInfer's and TileLang's
JIT modules, TensorRT-LLM's DeepGEMM cubins and autotuner picks) and its HOME (where tools
keep the defaults of the caches no variable names, `$HOME/.deep_gemm`, `~/.triton`) live in
one set per side: kept between rounds and runs, so a shape is compiled once per side, and
apart, so that a pull request's workers cannot write what main's workers load. The sandbox
(launchers/sandbox.py) lets a worker write its own side's folders only; without it the
variables still point per side, but nothing stops a worker writing elsewhere.

    <cache>/sides/<key>/home     HOME of the side's workers
    <cache>/sides/<key>/tmp      TMPDIR of the side's workers
    <cache>/sides/<key>/caches/  one folder per tool (TOOL_CACHES)
    <cache>/sides/<key>/build/   what the target builds there (the command target's build)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from abdiff.store.files import own_folder, remove_path, unless_in_use

# variable -> its folder under caches/ (what upstream reads; a user's own value of these is
# replaced for workers: one folder of the user's would be shared by both sides)
TOOL_CACHES: Mapping[str, str] = MappingProxyType({
    "DG_JIT_CACHE_DIR": "deep_gemm",  # DeepGEMM (default $HOME/.deep_gemm)
    "TRTLLM_DG_CACHE_DIR": "trtllm_deep_gemm",  # TensorRT-LLM's DeepGEMM (C++ getenv)
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TORCH_EXTENSIONS_DIR": "torch_extensions",
    "CUDA_CACHE_PATH": "cuda",  # the driver's PTX JIT cache (default ~/.nv/ComputeCache)
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",  # FlashInfer appends .cache/flashinfer
    "TILELANG_CACHE_DIR": "tilelang",
    "CUTE_DSL_CACHE_DIR": "cute_dsl",
    # TensorRT-LLM's root for the caches above that it sets itself (setdefault)
    "TRTLLM_CACHE_DIR": "trtllm",
})
# TensorRT-LLM's autotuner keeps its picks in a file (per rank: <name>.rank<N>.json)
AUTOTUNER_VARIABLE, AUTOTUNER_FILE = "TLLM_AUTOTUNER_CACHE_PATH", "trtllm_autotuner/cache.json"
CACHE_VARIABLES = (*TOOL_CACHES, AUTOTUNER_VARIABLE)


def in_use_lock(cache_dir: Path) -> Path:
    """Held (files.hold_in_use) by every running measurement: `cache clean --caches` waits
    for none of them and refuses instead."""
    return own_folder(Path(cache_dir) / "locks") / "sides.in-use"


def clean_sides(cache_dir: Path) -> int:
    """Remove every side's folders (a link there is removed, never followed); returns how
    many. InfrastructureError while a running measurement uses them."""
    sides = Path(cache_dir) / "sides"
    if not sides.is_dir() or sides.is_symlink():
        return 0
    with unless_in_use(in_use_lock(cache_dir), f"the side caches in {sides}"):
        entries = sorted(sides.iterdir())
        for entry in entries:
            remove_path(entry)
    return len(entries)


def side_key(sha: str, kernel_env: dict[str, str]) -> str:
    """The key of a side: its commit and the kernel-selecting variables it runs with."""
    text = json.dumps([sha, dict(sorted(kernel_env.items()))])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SideFolders:
    """One side's kept folders (see the module's docstring)."""

    root: Path
    home: Path = field(init=False)
    tmp: Path = field(init=False)
    caches: Path = field(init=False)  # one folder per tool cache variable (TOOL_CACHES)
    build: Path = field(init=False)

    def __post_init__(self) -> None:
        for name in ("home", "tmp", "caches", "build"):
            object.__setattr__(self, name, self.root / name)

    @classmethod
    def of(cls, cache_dir: Path, sha: str, kernel_env: dict[str, str]) -> SideFolders:
        return cls(Path(cache_dir) / "sides" / side_key(sha, kernel_env))

    def environment(self) -> dict[str, str]:
        """What a worker of this side gets: HOME, TMPDIR and every tool cache variable."""
        env = {"HOME": str(self.home), "TMPDIR": str(self.tmp)}
        env.update({name: str(self.caches / folder) for name, folder in TOOL_CACHES.items()})
        env[AUTOTUNER_VARIABLE] = str(self.caches / AUTOTUNER_FILE)
        return env

    def make(self) -> None:
        """Make the folders (before a worker starts: the sandbox binds what exists), refusing
        a link or a non-folder where one of them goes (InfrastructureError)."""
        folders = [self.root.parent, self.root, self.home, self.tmp, self.caches, self.build,
                   *(self.caches / name for name in TOOL_CACHES.values()),
                   (self.caches / AUTOTUNER_FILE).parent]
        for folder in folders:
            own_folder(folder)

    def to_json(self) -> dict[str, object]:
        """What a run file records: where its side's caches were."""
        return {"root": str(self.root), "variables": sorted(self.environment())}


@dataclass(frozen=True)
class WorkerFolders:
    """What one worker of a round may write: its round's folder and its side's folders."""

    side: SideFolders
    round_dir: Path

    def writable(self) -> tuple[str, ...]:
        return (str(self.round_dir), str(self.side.root))
