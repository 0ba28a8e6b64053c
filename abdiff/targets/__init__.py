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
    """`--target` if given, else the first target whose layout the repository has; none:
    InputError naming what was looked for (before any checkout or worker)."""
    if requested:
        return target_class(requested)
    classes = [target_class(name) for name in TARGET_CLASSES]
    for target in classes:
        if target.detect(root):
            return target
    from abdiff.revs import run_git

    head = run_git(root, "rev-parse", "--short=10", "HEAD", check=False).stdout.strip()
    looked = "; ".join(f"{t.layout} ({t.name})" for t in classes if t.layout)
    raise InputError(f"no benchmark found in {root} at {head or 'its working tree'}: looked "
                     f"for {looked}; pass --target {'|'.join(TARGET_CLASSES)} (or --repo "
                     "the benchmark's repository)")
