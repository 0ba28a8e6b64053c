"""The local launcher: one worker process on this machine."""

from __future__ import annotations

from typing import ClassVar

from abdiff.launchers.base import Launcher
from abdiff.launchers.spec import LaunchSpec


class LocalLauncher(Launcher):
    """One process on this machine: the command as the target gives it."""

    name: ClassVar[str] = "local"
    can_prestart: ClassVar[bool] = True

    def wrap(self, spec: LaunchSpec) -> LaunchSpec:
        return spec
