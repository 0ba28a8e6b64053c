"""The one protocol every target implements.

A target answers a few questions about a repository at one checkout:

- which configs a suite means for it (`configs`: the suite's matrix, or what the
  benchmark itself reports);
- how to start a worker round for a list of configs (`round_command`: argv, working
  folder, environment; `worker_env` where the environment is the same for every job);
- what its worker records beside latency: the environment (`env_info`), facts and
  kernels (`capture_pass`: the worker captures kernels in a pass of its own);
- what it needs before anything runs: the machine (`needs`, `requires`), the code
  (`hooks`, `hook_problems`), and the suite on this machine (`preflight`,
  `suite_findings`).

`abdiff doctor`, the session and the rounds ask these instead of knowing targets by
name; a target is found by name through the `abdiff.targets` entry point group
(abdiff/targets/__init__.py). Everything else (schedule, launch, compare) is shared.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from abdiff.errors import InputError
from abdiff.launchers.spec import LaunchSpec
from abdiff.run.protocol import RoundJob
from abdiff.targets.hooks import Hook, missing_hooks

if TYPE_CHECKING:  # the suites import the layer-wise domain of targets/: no import at run time
    from abdiff.launchers.runtime import Runtime
    from abdiff.suites import Config, Suite

__all__ = ["Finding", "Prepared", "RoundJob", "Target"]


@dataclass(frozen=True)
class Prepared:
    """What `Target.prepare` made of one side's checkout."""

    configs: list[Config] | None = None  # the configs this side lists (None: the suite's)
    failure: str | None = None  # why nothing of this side can run (one line): its status


@dataclass(frozen=True)
class Finding:
    """One line of a suite's check on this machine (`abdiff doctor --configs`)."""

    ok: bool
    text: str


class Target(ABC):
    """How to run configs of one kind of repository at one checkout."""

    name: ClassVar[str]
    # what the worker relies on in a checkout (checked with the ast module, no GPU)
    hooks: ClassVar[tuple[Hook, ...]] = ()
    # machine component (abdiff/host/doctor.py names them) -> what this target loses without it
    needs: ClassVar[dict[str, str]] = {}
    # the components without which this target cannot run at all
    requires: ClassVar[tuple[str, ...]] = ()
    # the worker captures kernels in a pass after every config was timed, and can be
    # started for captures only (RoundJob.capture_only)
    capture_pass: ClassVar[bool] = False
    # how the worker times iterations (run/iterations.py plans them): "config", each config
    # its own count (RoundJob.run_times_of); "job", every config of a job the job's count;
    # "fixed", the suite's run_times always (the plan is off)
    iteration_counts: ClassVar[Literal["config", "job", "fixed"]] = "fixed"
    # what `detect` looks for, as a user reads it ("no benchmark found ... looked for ...")
    layout: ClassVar[str] = ""
    # modules safe to import ahead of the benchmark, from each checkout, in that side's
    # fork server (the package under test; nothing that starts CUDA, MPI or threads a fork
    # cannot carry): its workers then find them imported (launchers/forkserver_process.py
    # checks, after the import, that forking is still safe, else that side starts cold)
    preimport: ClassVar[tuple[str, ...]] = ()

    @classmethod
    @abstractmethod
    def detect(cls, root: Path) -> bool:
        """True when the repository at `root` has this target's layout."""

    @property
    def default_launcher(self) -> str:
        """The launcher used when --launcher is not given."""
        return "local"

    def configs(self, suite: Suite, repo_root: Path) -> list[Config]:
        """The configs `suite` means for this target, decided once, before any checkout
        (`repo_root` is the repository's working tree). By default the suite's matrix."""
        if not suite.configs:
            raise InputError(f"{suite.source}: target {self.name} needs a 'matrix' in the "
                             "suite (the configs to measure)")
        return suite.configs

    def prepare(self, suite: Suite, checkout: Path, folder: Path,
                runtime: Runtime | None) -> Prepared:
        """Once per side per run, before its first round: `folder` is the side's own, kept
        with its caches and writable to the benchmark (the command target builds there);
        the repository's code it runs, it runs in `runtime`'s sandbox (launchers/runtime.py;
        None: none). Nothing by default."""
        return Prepared()

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

    def preflight(self, suite: Suite, launcher: str) -> str | None:
        """Why `suite` cannot run on this machine at all, checked before any checkout (the
        machine's components are doctor.preflight's); None when nothing stands in the way."""
        return None

    def suite_findings(self, suite: Suite) -> list[Finding]:
        """What `abdiff doctor --configs SUITE` says about the suite on this machine."""
        return []
