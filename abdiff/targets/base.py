"""The one interface every target implements.

A target answers a few questions about a repository at one checkout: how to
start a worker round for a list of configs (`round_command`), which hook points
its worker relies on (`hooks`; `hook_problems` says which are missing there),
what of the machine it needs (`needs`, `requires`), and what it records of the
environment (`env_info`). `abdiff doctor` asks these instead of knowing targets
by name. Everything else (schedule, launch, compare) is shared by all targets.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from abdiff.protocol import RoundJob
from abdiff.targets.hooks import Hook, missing_hooks

# The folder holding the abdiff package: on a worker's PYTHONPATH, so it imports this
# abdiff also where abdiff is not installed (run from a source tree)
ABDIFF_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LaunchSpec:
    """A command for a launcher: argv (never a shell string), working folder, extra env."""

    argv: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)


class Target(ABC):
    """How to run configs of one kind of repository at one checkout."""

    name: ClassVar[str]
    # what the worker relies on in a checkout (checked with the ast module, no GPU)
    hooks: ClassVar[tuple[Hook, ...]] = ()
    # machine component (abdiff/doctor.py names them) -> what this target loses without it
    needs: ClassVar[dict[str, str]] = {}
    # the components without which this target cannot run at all
    requires: ClassVar[tuple[str, ...]] = ()
    # the worker captures kernels in a pass after every config was timed, and can be
    # started for captures only (RoundJob.capture_only)
    capture_pass: ClassVar[bool] = False
    # what `detect` looks for, as a user reads it ("no benchmark found ... looked for ...")
    layout: ClassVar[str] = ""

    @classmethod
    @abstractmethod
    def detect(cls, root: Path) -> bool:
        """True when the repository at `root` has this target's layout."""

    @abstractmethod
    def round_command(self, checkout: Path, job_path: Path, job: RoundJob) -> LaunchSpec:
        """The command that runs `job` inside `checkout`, importing that checkout's code."""

    def worker_env(self) -> dict[str, str] | None:
        """The environment every worker of this target gets, where it is the same for all
        (a worker can then be started before its job is known), else None."""
        return None

    def hook_problems(self, checkout: Path) -> list[str]:
        """What the worker hooks into that is missing at `checkout` (empty when all is there)."""
        return missing_hooks(Path(checkout), self.hooks)

    def env_info(self, checkout: Path) -> dict[str, Any]:
        """Extra environment facts recorded in the run file's `env`."""
        return {}
