"""Targets: how to run one config of a repository at a checkout, and where to probe.

Each target is a small class behind `Target` (targets/base.py). Target modules
are imported on demand, so a worker process loads only its own.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from abdiff.errors import InputError
from abdiff.targets.base import Target

# --target name -> module:class, in detection order (the most specific layout first)
TARGET_CLASSES = {
    "trtllm": "abdiff.targets.trtllm.target:TrtllmTarget",
    "reference": "abdiff.targets.reference.target:ReferenceTarget",
}


def target_class(name: str) -> type[Target]:
    if name not in TARGET_CLASSES:
        raise InputError(
            f"--target {name!r} is unknown; choose one of {', '.join(sorted(TARGET_CLASSES))}"
        )
    module, cls = TARGET_CLASSES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def detect_target(root: Path, requested: str | None = None) -> type[Target]:
    """`--target` if given, else the first target whose layout the repository has."""
    if requested:
        return target_class(requested)
    for name in TARGET_CLASSES:
        target = target_class(name)
        if target.detect(root):
            return target
    return target_class("reference")
