"""The launcher interface: turn a target's single-process command into what to start.

A launcher only rewrites the command (`wrap`); starting, watching and killing the
process group is shared (`run`, which is `launchers/process.py: run_process` for
every real launcher), so every launcher gets the same timeout and signal handling.
Tests replace `run` to run a fake worker in their own process (tests/fake_target.py).
"""

from __future__ import annotations

import copy
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from abdiff.launchers.pool import WorkerPool
from abdiff.launchers.process import ProcessOutcome, run_process
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.spec import LaunchSpec


class Launcher(ABC):
    """Rewrites a LaunchSpec so that it runs under this launcher."""

    name: ClassVar[str]
    ranks: int = 1  # processes one launch starts (each writes its own record log)
    own_lines: re.Pattern[str] | None = None  # the launcher's report lines in the ranks' stderr
    can_prestart: ClassVar[bool] = False  # workers may be started ahead of their job
    # where the benchmark's processes start, when not below abdiff (so not in its sandbox)
    ranks_start_elsewhere: ClassVar[str | None] = None
    # what a measurement holds open (sandbox, leftovers, warm pool): its command's, given by
    # make_launcher; None: a process of abdiff's own, outside any sandbox (doctor's hello)
    runtime: Runtime | None = None

    @classmethod
    @abstractmethod
    def for_options(cls, ranks: int, nodes: int, srun_container: str | None) -> Launcher:
        """This launcher for `--np RANKS --nodes NODES` (InputError where it cannot)."""

    @abstractmethod
    def wrap(self, spec: LaunchSpec) -> LaunchSpec:
        """The command to start for `spec` (argv as a list, never a shell string)."""

    def run(self, spec: LaunchSpec, log_dir: Path, progress_path: Path,
            timeout_s: float | None, pass_env: list[str] | None = None,
            max_memory_bytes: int | None = None) -> ProcessOutcome:
        """Start the wrapped command and watch it to the end (see run_process)."""
        return run_process(spec, log_dir, progress_path, timeout_s, pass_env, max_memory_bytes,
                           self.runtime)

    @property
    def pool(self) -> WorkerPool | None:
        """The warm pool its runtime holds now (--prestart; launchers/warm.py), if any."""
        return self.runtime.pool if self.runtime is not None else None

    def end_leftovers(self) -> None:
        """Between rounds: end what the benchmark left running (runtime.Leftovers.end)."""
        if self.runtime is not None:
            self.runtime.leftovers.end()

    def for_lane(self) -> Launcher:
        """This launcher for one more device of --devices: a warm pool of its own."""
        lane = copy.copy(self)
        if self.runtime is not None:
            lane.runtime = self.runtime.lane()
        return lane

    def launch_failure(self, stderr_text: str) -> str | None:
        """The launcher's own reason when the job never started (exit 3), else None."""
        return None

    def rank_death(self, returncode: int, stderr_text: str) -> tuple[int | None, str] | None:
        """(rank, signal name) when a rank died of a signal the launcher's own exit hides."""
        return None
