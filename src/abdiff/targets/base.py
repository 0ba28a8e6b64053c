"""The one interface every target implements.

A target answers three questions about a repository at one checkout:
how to start a worker round for a list of configs (`round_command`), which
hook points the probe relies on and whether they still exist there
(`hook_problems`, for `abdiff doctor`), and what it records of the
environment (`env_info`). Everything else (schedule, launch, compare) is
shared by all targets.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass
class RoundJob:
    """What one worker process must do: the configs of one side's round.

    Written as JSON next to the record file and passed to the worker by path.
    The worker appends one JSON line per event to `record_path`:
    `{"event": "start", "id": ...}` before a config, then
    `{"event": "done", "id": ..., "record": {RoundRecord fields}}` after it,
    each line flushed and fsynced, so a crash loses nothing already measured.
    """

    configs: list[dict[str, Any]]  # [{"id": ..., "params": {...}}]
    facts: list[str]  # dotted names read from the live attention metadata
    record_path: str
    round: int
    warmup_times: int = 3
    run_times: int = 20
    device: str = "auto"  # auto | cpu | cuda
    cuda_graph: bool = False
    min_warmup_s: float | None = None  # None: GPU_MIN_WARMUP_S on CUDA, none on the CPU
    cpu_threads: int = 1  # torch intra-op threads on the CPU (see docs/performance.md)
    profile_kernels: bool = True
    target_options: dict[str, Any] = field(default_factory=dict)  # the suite's `target:` block
    target_args: list[str] = field(default_factory=list)  # --target-arg, passed through verbatim

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> RoundJob:
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))


@dataclass
class LaunchSpec:
    """A command for a launcher: argv (never a shell string), working folder, extra env."""

    argv: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)


class Target(ABC):
    """How to run configs of one kind of repository at one checkout."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def detect(cls, root: Path) -> bool:
        """True when the repository at `root` has this target's layout."""

    @abstractmethod
    def round_command(self, checkout: Path, job_path: Path, job: RoundJob) -> LaunchSpec:
        """The command that runs `job` inside `checkout`, importing that checkout's code."""

    @abstractmethod
    def hook_problems(self, checkout: Path) -> list[str]:
        """What the probe hooks into that is missing at `checkout` (empty when all is there)."""

    def env_info(self, checkout: Path) -> dict[str, Any]:
        """Extra environment facts recorded in the run file's `env`."""
        return {}
