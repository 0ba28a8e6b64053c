"""The local launcher: one worker process on this machine."""

from __future__ import annotations

from typing import ClassVar

from abdiff.errors import InputError
from abdiff.launchers.base import Launcher
from abdiff.launchers.spec import LaunchSpec


class LocalLauncher(Launcher):
    """One process on this machine: the command as the target gives it."""

    name: ClassVar[str] = "local"
    can_prestart: ClassVar[bool] = True

    @classmethod
    def for_options(cls, ranks: int, nodes: int, srun_container: str | None) -> LocalLauncher:
        if ranks > 1 or nodes > 1:
            raise InputError("--np/--nodes need --launcher mpirun, srun or torchrun")
        return cls()

    def wrap(self, spec: LaunchSpec) -> LaunchSpec:
        return spec
