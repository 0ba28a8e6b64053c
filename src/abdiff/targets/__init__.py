"""Targets: how to run one config of a repository at a checkout, and where to probe.

Each target is a small class behind `Target` (targets/base.py). `TARGETS` maps
the `--target` names to them; `detect_target` picks one from the repository.
"""

from __future__ import annotations

from pathlib import Path

from abdiff.errors import InputError
from abdiff.targets.base import Target
from abdiff.targets.reference import ReferenceTarget
from abdiff.targets.trtllm import TrtllmTarget

TARGETS: dict[str, type[Target]] = {
    TrtllmTarget.name: TrtllmTarget,
    ReferenceTarget.name: ReferenceTarget,
}


def detect_target(root: Path, requested: str | None = None) -> type[Target]:
    """`--target` if given, else the first target whose layout the repository has."""
    if requested:
        if requested not in TARGETS:
            raise InputError(
                f"--target {requested!r} is unknown; choose one of {', '.join(sorted(TARGETS))}"
            )
        return TARGETS[requested]
    for target in TARGETS.values():
        if target.detect(root):
            return target
    return ReferenceTarget
