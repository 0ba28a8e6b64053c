"""`srun` inside a Slurm allocation, across nodes, as upstream's slurm_launch.sh does.

upstream: `srun --mpi=pmix -N $NODES --ntasks-per-node $((NP / NODES))
[--container-name ... --container-mounts ... --container-workdir ...] "$@"`,
refusing to run when SLURM_JOB_ID is unset. abdiff adds `--kill-on-bad-exit=1`
(one rank that dies ends the others instead of leaving them waiting in a
collective) and `--ntasks NP` (without it srun may start a step with more tasks
than the allocation has CPUs instead of refusing it). `--mpi` is pmix as
upstream (its ranks use MPI); set `ABDIFF_SRUN_MPI=none` where Slurm has no
PMIx plugin and the ranks need none (the reference harness rendezvouses
through torch.distributed). srun exports the caller's whole
environment to the tasks by default, so the target's variables (PYTHONPATH,
the probe's job file) reach every rank without extra flags.

The container options are used when a container name is given
(`ABDIFF_SRUN_CONTAINER`, or upstream's CONTAINER_NAME) or the target has a
default and srun has pyxis (trtllm: `layer_wise_benchmarks`, as upstream's slurm_launch.sh; set
`ABDIFF_SRUN_CONTAINER=none` to run without a container): the checkouts abdiff
creates and the abdiff package itself must then be mounted in the container,
is done from `container_mounts` plus the folders the target lists in the
`ABDIFF_RANK_PATHS` variable of its command (checkout, probe, job folder), each
mounted at the same path, as upstream mounts its TRTLLM_ROOT.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping
from typing import ClassVar

from abdiff.errors import InputError
from abdiff.launchers.ranked import RankLauncher
from abdiff.launchers.spec import LaunchSpec

MPI_ENV = "ABDIFF_SRUN_MPI"
NO_CONTAINER = "none"  # ABDIFF_SRUN_CONTAINER=none: no container even where a target has one
RANK_PATHS = "ABDIFF_RANK_PATHS"  # folders every rank reads (set by the target's command)


@functools.lru_cache(maxsize=1)
def srun_has_containers() -> bool:
    """Whether this srun takes `--container-name` (the pyxis plugin): a target's default
    container applies only there; a cluster without pyxis runs the ranks as they are."""
    try:
        shown = subprocess.run(["srun", "--help"], capture_output=True, text=True, timeout=30,
                               check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--container-name" in shown.stdout + shown.stderr


class SrunLauncher(RankLauncher):
    """`srun --mpi=pmix --kill-on-bad-exit=1 -N NODES --ntasks-per-node NP/NODES --ntasks NP
    <command>`."""

    name: ClassVar[str] = "srun"
    ranks_start_elsewhere: ClassVar[str | None] = "srun starts the ranks under slurmd"

    @classmethod
    def for_options(cls, ranks: int, nodes: int, srun_container: str | None) -> SrunLauncher:
        return cls(ranks, nodes, container_default=srun_container)

    def __init__(self, np: int, nodes: int = 1, container_name: str | None = None,
                 container_mounts: list[str] | None = None, extra_args: list[str] | None = None,
                 environ: Mapping[str, str] | None = None,
                 container_default: str | None = None) -> None:
        if np < 1 or nodes < 1:
            raise InputError(f"--np and --nodes must be at least 1, got {np} and {nodes}")
        if np % nodes:
            raise InputError(f"--np {np} is not a multiple of --nodes {nodes}: srun starts "
                             "the same number of ranks on every node")
        self.np = self.ranks = np
        self.nodes = nodes
        self._environ = environ
        env = self.environ
        chosen = (container_name or env.get("ABDIFF_SRUN_CONTAINER") or env.get("CONTAINER_NAME")
                  or (container_default if srun_has_containers() else None))
        self.container_name = None if chosen == NO_CONTAINER else chosen
        self.container_mounts = list(container_mounts or [])
        self.extra_args = list(extra_args or [])

    def wrap(self, spec: LaunchSpec) -> LaunchSpec:
        self.check()
        mpi = self.environ.get(MPI_ENV, "pmix")
        argv = ["srun", f"--mpi={mpi}", "--kill-on-bad-exit=1", "-N", str(self.nodes),
                "--ntasks-per-node", str(self.np // self.nodes), "--ntasks", str(self.np)]
        if self.container_name:
            workdir = str(spec.cwd)
            needed = [p for p in spec.env.get(RANK_PATHS, "").split(os.pathsep) if p]
            mounts = dict.fromkeys([*self.container_mounts,
                                    *(f"{p}:{p}" for p in [*needed, str(spec.cwd)])])
            argv += ["--container-name", self.container_name,
                     "--container-mounts", ",".join(mounts),
                     "--container-workdir", workdir]
        argv += [*self.extra_args, *spec.argv]
        return LaunchSpec(argv, spec.cwd, dict(spec.env))
