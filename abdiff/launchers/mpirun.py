"""`mpirun --np N` on one node, as upstream's examples/layer_wise_benchmarks/mpi_launch.sh does.

upstream's script first clears every Slurm/PMIx/MPI variable from the
environment (a nested launch inside an allocation would otherwise make Open
MPI join the outer job), passes TLLM_AUTOTUNER_CACHE_PATH with `-x` when set,
then runs `mpirun --allow-run-as-root --np $NP "$@"`. This launcher builds the
same command as an argv list: the clearing is an `env -u NAME ...` prefix, and
every variable the target sets (PYTHONPATH, the probe's job file) is also
exported with `-x`, so ranks on other hosts of a multi-host mpirun get it too.
`--allow-run-as-root` is passed only when abdiff runs as root (Open MPI refuses
root without it); `ABDIFF_MPIRUN_ARGS` adds options of the user's (tests and CI
on a 2-core machine: `--oversubscribe`).

`launcher_available` is shared by all launchers: it says, before anything is
started, why a launcher cannot work here (None when it can).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping
from typing import ClassVar

from abdiff.errors import InfrastructureError, InputError
from abdiff.launchers.base import Launcher
from abdiff.launchers.signals import LAUNCHER_LINES, rank_signal
from abdiff.targets.base import LaunchSpec

# upstream: unset $(env | awk -F= '{print $1}' | grep -E "SLURM_|SLURMD_|slurm_|MPI_|PMIX_")
CLEARED = re.compile(r"SLURM_|SLURMD_|slurm_|MPI_|PMIX_")
PASSED_IF_SET = ("TLLM_AUTOTUNER_CACHE_PATH",)
EXTRA_ARGS_ENV = "ABDIFF_MPIRUN_ARGS"

# Lines of mpirun's own stderr that mean the job never started (not a rank's death).
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


class MpirunLauncher(RankLauncher):
    """`mpirun [--allow-run-as-root] --np N -x VAR ... <target command>` on this node."""

    name: ClassVar[str] = "mpirun"

    def __init__(self, np: int, extra_args: list[str] | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        if np < 1:
            raise InputError(f"--np must be at least 1, got {np}")
        self.np = self.ranks = np
        self._environ = environ
        self.extra_args = [*shlex.split(self.environ.get(EXTRA_ARGS_ENV, "")),
                           *(extra_args or [])]

    def wrap(self, spec: LaunchSpec) -> LaunchSpec:
        self.check()
        cleared = sorted(k for k in self.environ if CLEARED.search(k) and k not in spec.env)
        prefix: list[str] = []
        if cleared:
            prefix = ["env"] + [arg for k in cleared for arg in ("-u", k)]
        # In the spec's env they pass the worker environment's allow-list too.
        passed = {k: self.environ[k] for k in PASSED_IF_SET if k in self.environ}
        env = passed | spec.env
        as_root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        argv = [*prefix, "mpirun", *as_root, "--np", str(self.np)]
        for name in dict.fromkeys([*passed, *sorted(spec.env)]):
            argv += ["-x", name]
        argv += [*self.extra_args, *spec.argv]
        return LaunchSpec(argv, spec.cwd, env)
