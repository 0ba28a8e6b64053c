"""`torchrun` (torch's elastic launcher) on one node, for users without MPI or Slurm.

`python -m torch.distributed.run --standalone --nnodes 1 --nproc-per-node N
--no-python <target command>`, run by the ranks' own Python (the target
command's first word), so torchrun is the torch the ranks import. torchrun sets
RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for each rank; when
one rank fails it stops the others and exits 1 with a failure summary that
names the rank and its signal (launchers/signals.py).
"""

from __future__ import annotations

import re
from typing import ClassVar

from abdiff.errors import InputError
from abdiff.launchers.base import Launcher
from abdiff.launchers.signals import LAUNCHER_LINES, rank_signal
from abdiff.launchers.spec import LaunchSpec

# torchrun's own lines that mean no rank ever ran.
LAUNCH_FAILURES = re.compile(r"No module named '?torch|RendezvousError|"
                             r"torchrun: error:|Address already in use")


class TorchrunLauncher(Launcher):
    """N ranks on this node under torch.distributed.run."""

    name: ClassVar[str] = "torchrun"
    own_lines = LAUNCHER_LINES

    @classmethod
    def for_options(cls, ranks: int, nodes: int, srun_container: str | None) -> TorchrunLauncher:
        if nodes > 1:
            raise InputError("--nodes needs --launcher srun (torchrun here runs on one node)")
        return cls(ranks)

    def __init__(self, np: int) -> None:
        if np < 1:
            raise InputError(f"--np must be at least 1, got {np}")
        self.ranks = np

    def wrap(self, spec: LaunchSpec) -> LaunchSpec:
        python, *_ = spec.argv
        argv = [python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                "--nproc-per-node", str(self.ranks), "--no-python", *spec.argv]
        # the ranks meet on this host's loopback, not at its name: in the sandbox's network
        # namespace the name may resolve to an address it does not have (torchrun's
        # --local-addr, by its variable: a torch without the option ignores it)
        return LaunchSpec(argv, spec.cwd, {**spec.env, "PET_LOCAL_ADDR": "127.0.0.1"})

    def launch_failure(self, stderr_text: str) -> str | None:
        for line in stderr_text.splitlines():
            if LAUNCH_FAILURES.search(line):
                return line.strip()
        return None

    def rank_death(self, returncode: int, stderr_text: str) -> tuple[int | None, str] | None:
        return rank_signal(returncode, stderr_text)
