"""The one interface every target implements.

A target answers three questions about a repository at one checkout:
how to start a worker round for a list of configs (`round_command`), which
hook points the probe relies on and whether they still exist there
(`hook_problems`, for `abdiff doctor`), and what it records of the
environment (`env_info`). Everything else (schedule, launch, compare) is
shared by all targets.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from abdiff.protocol import RoundJob


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
