"""Launchers start worker processes: locally, or under mpirun / srun / torchrun for several
ranks."""

from __future__ import annotations

from abdiff.errors import InputError
from abdiff.launchers.base import Launcher


def make_launcher(name: str, np: int | None = None, nodes: int | None = None) -> Launcher:
    """The launcher for `--launcher NAME --np N --nodes M`."""
    if name == "local":
        if (np or 1) > 1 or (nodes or 1) > 1:
            raise InputError("--np/--nodes need --launcher mpirun, srun or torchrun")
        from abdiff.launchers.local import LocalLauncher

        return LocalLauncher()
    if name == "mpirun":
        if (nodes or 1) > 1:
            raise InputError("--nodes needs --launcher srun (mpirun here runs on one node)")
        from abdiff.launchers.mpirun import MpirunLauncher

        return MpirunLauncher(np or 1)
    if name == "srun":
        from abdiff.launchers.slurm import SrunLauncher

        return SrunLauncher(np or 1, nodes or 1)
    if name == "torchrun":
        if (nodes or 1) > 1:
            raise InputError("--nodes needs --launcher srun (torchrun here runs on one node)")
        from abdiff.launchers.torchrun import TorchrunLauncher

        return TorchrunLauncher(np or 1)
    raise InputError(f"--launcher {name!r} is unknown; choose local, mpirun, srun or torchrun")
