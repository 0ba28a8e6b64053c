"""What the rank launchers (mpirun.py, slurm.py) share: the environment they read, whether
a launcher can start processes here (`launcher_available`, asked before anything starts),
the launch failures they report in their own stderr, and the dead rank's signal.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping

from abdiff.errors import InfrastructureError
from abdiff.launchers.base import Launcher
from abdiff.launchers.signals import LAUNCHER_LINES, rank_signal

# Lines of mpirun's or srun's own stderr: the job never started (not a rank's death).
LAUNCH_FAILURES = re.compile(
    r"(There are not enough slots available|mpirun was unable to (launch|find|start)"
    r"|mpirun could not find|ORTE was unable to|PRTE has lost communication"
    r"|prterun was unable to|Open MPI detected an inbound MPI TCP connection request"
    r"|unable to reach|mpirun: command not found|No such file or directory.*mpirun"
    r"|srun: error: (Unable to|Invalid|.*allocation)|srun: fatal|srun: unrecognized option)",
)


def launcher_available(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """None when launcher `name` can start processes here, else the reason it cannot."""
    env = os.environ if environ is None else environ
    if name == "local":
        return None
    if name == "mpirun":
        if shutil.which("mpirun") is None:
            return ("mpirun is not on PATH: install Open MPI (upstream's container has it), "
                    "or run one rank with --launcher local")
        return None
    if name == "srun":
        if shutil.which("srun") is None:
            return "srun is not on PATH: --launcher srun needs a Slurm client on this machine"
        if not env.get("SLURM_JOB_ID"):
            return ("srun needs a Slurm allocation: SLURM_JOB_ID is not set (allocate with "
                    "salloc/sbatch, or export SLURM_JOB_ID=<job id> as upstream's "
                    "slurm_launch.sh requires)")
        return None
    return f"unknown launcher {name!r}"


def launch_failure(stderr_text: str) -> str | None:
    """The launcher's own reason when its stderr says the job never started, else None.

    A rank that aborts makes mpirun report "mpirun noticed that process rank
    ... exited on signal"; that is the config's status, not a launch failure,
    and is deliberately not matched here.
    """
    for line in stderr_text.splitlines():
        if LAUNCH_FAILURES.search(line):
            return line.strip()
    return None


class RankLauncher(Launcher):
    """What mpirun and srun share: the environment they read, the availability check
    before starting, and the launch failures they report in their own stderr."""

    _environ: Mapping[str, str] | None = None
    own_lines = LAUNCHER_LINES

    @property
    def environ(self) -> Mapping[str, str]:
        return os.environ if self._environ is None else self._environ

    def check(self) -> None:
        """InfrastructureError (exit 3) with the reason when this launcher cannot start here."""
        reason = launcher_available(self.name, self.environ)
        if reason:
            raise InfrastructureError(reason)

    def launch_failure(self, stderr_text: str) -> str | None:
        return launch_failure(stderr_text)

    def rank_death(self, returncode: int, stderr_text: str) -> tuple[int | None, str] | None:
        return rank_signal(returncode, stderr_text)
