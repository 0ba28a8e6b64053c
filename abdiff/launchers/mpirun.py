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
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from typing import ClassVar

from abdiff.errors import InputError
from abdiff.launchers.ranked import RankLauncher
from abdiff.launchers.spec import LaunchSpec

# upstream: unset $(env | awk -F= '{print $1}' | grep -E "SLURM_|SLURMD_|slurm_|MPI_|PMIX_")
CLEARED = re.compile(r"SLURM_|SLURMD_|slurm_|MPI_|PMIX_")
PASSED_IF_SET = ("TLLM_AUTOTUNER_CACHE_PATH",)
EXTRA_ARGS_ENV = "ABDIFF_MPIRUN_ARGS"

class MpirunLauncher(RankLauncher):
    """`mpirun [--allow-run-as-root] --np N -x VAR ... <target command>` on this node."""

    name: ClassVar[str] = "mpirun"

    @classmethod
    def for_options(cls, ranks: int, nodes: int, srun_container: str | None) -> MpirunLauncher:
        if nodes > 1:
            raise InputError("--nodes needs --launcher srun (mpirun here runs on one node)")
        return cls(ranks)

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
