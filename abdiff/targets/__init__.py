"""Targets: how to run one config of a repository at a checkout, and where to probe.

A target is a class implementing `Target` (targets/base.py), found by name through
the `abdiff.targets` entry point group: abdiff's own targets are registered in its
pyproject.toml (and listed in BUILTIN_TARGETS, so a source tree without installed
metadata finds them too); any installed package adds one with

    [project.entry-points."abdiff.targets"]
    mytarget = "my_package.target:MyTarget"

Target modules are imported on demand, so a worker process loads only its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import MappingProxyType

from abdiff import __version__
from abdiff.errors import InputError
from abdiff.targets.base import Target

ENTRY_POINT_GROUP = "abdiff.targets"
# abdiff's own targets, as its pyproject.toml registers them, in detection order (the
# most specific layout first); tests/test_targets.py checks that the two agree
BUILTIN_TARGETS: Mapping[str, str] = MappingProxyType({
    "trtllm": "abdiff.targets.trtllm.target:TrtllmTarget",
    "reference": "abdiff.targets.reference.target:ReferenceTarget",
    "command": "abdiff.targets.command.target:CommandTarget",
})


@dataclass(frozen=True)
class Registration:
    """Where a target's class is, and the distribution that registered it."""

    name: str
    value: str  # module:Class
    package: str  # distribution name
    version: str


def registered() -> dict[str, Registration]:
    """Every target by name: abdiff's own first (detection order), then the entry points
    of other installed packages, by name. A name registered twice is refused."""
    found = {name: Registration(name, value, "abdiff", __version__)
             for name, value in BUILTIN_TARGETS.items()}
    others = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    for entry in others:
        dist = entry.dist
        package = dist.metadata["Name"] if dist is not None else "an unknown package"
        if package == "abdiff":
            continue  # abdiff's own registrations: BUILTIN_TARGETS
        if entry.name in found:
            raise InputError(f"target {entry.name!r} is registered by both "
                             f"{found[entry.name].package} and {package}; uninstall one")
        found[entry.name] = Registration(entry.name, entry.value, package,
                                         dist.version if dist is not None else "unknown")
    return found


def target_names() -> list[str]:
    return list(registered())


def load_registered(registration: Registration) -> type[Target]:
    """The class behind one registration; anything wrong names the package that
    registered it."""
    where = (f"target {registration.name!r} (entry point {registration.value} of package "
             f"{registration.package})")
    module, _, attribute = registration.value.partition(":")
    try:
        loaded = importlib.import_module(module)
        cls = getattr(loaded, attribute) if attribute else loaded
    except Exception as exc:  # a third-party module may fail in any way on import
        raise InputError(f"{where} cannot be loaded: {type(exc).__name__}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Target)):
        raise InputError(f"{where} is not a subclass of abdiff.targets.base.Target")
    if getattr(cls, "name", None) != registration.name:
        raise InputError(f"{where}: its class's name is {getattr(cls, 'name', None)!r}, "
                         f"not {registration.name!r}")
    return cls


def target_class(name: str) -> type[Target]:
    targets = registered()
    if name not in targets:
        raise InputError(
            f"--target {name!r} is unknown; choose one of {', '.join(sorted(targets))}"
        )
    return load_registered(targets[name])


def target_package(name: str) -> str:
    """`package version` of the distribution that registered target `name` (recorded in
    the run file's env: a plugin's version shapes what its worker measured)."""
    registration = registered()[name]
    return f"{registration.package} {registration.version}"


def detect_target(root: Path, requested: str | None = None) -> type[Target]:
    """`--target` if given, else the first target whose layout the repository has; none:
    InputError naming what was looked for (before any checkout or worker)."""
    if requested:
        return target_class(requested)
    classes = [target_class(name) for name in registered()]
    for target in classes:
        if target.detect(root):
            return target
    from abdiff.repo.revs import run_git

    head = run_git(root, "rev-parse", "--short=10", "HEAD", check=False).stdout.strip()
    looked = "; ".join(f"{t.layout} ({t.name})" for t in classes if t.layout)
    raise InputError(f"no benchmark found in {root} at {head or 'its working tree'}: looked "
                     f"for {looked}; pass --target {'|'.join(registered())} (or --repo "
                     "the benchmark's repository)")
