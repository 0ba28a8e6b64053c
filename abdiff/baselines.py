"""Stored baselines: run files under `baselines/NAME.json`, with an environment fingerprint.

A baseline is side A measured in another session, so nothing cancels the
drift between that session and this one the way ABBA interleaving does inside
a run. Comparisons against a baseline therefore refuse a different machine
(unless told otherwise) and use a wider latency margin (docs/baselines.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from abdiff.errors import InputError
from abdiff.records import RunFile, load_run_file

# What must match between the baseline's machine and this one for latency to be comparable
# (cuda_graph too: graph replays and eager calls time different things).
FINGERPRINT_KEYS = ("target", "device", "device_name", "device_count", "driver", "cuda",
                    "torch", "python", "cpu_model", "tensorrt_llm.version", "cuda_graph")
BASELINE_MARGIN_FACTOR = 2.0
PREFIX = "baseline:"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def baselines_dir(repo_root: Path, override: Path | None) -> Path:
    return Path(override) if override else Path(repo_root) / "baselines"


def baseline_path(folder: Path, name: str) -> Path:
    if not NAME_PATTERN.fullmatch(name):
        raise InputError(f"baseline name {name!r}: use letters, digits, '.', '_' and '-'")
    return Path(folder) / f"{name}.json"


def load_baseline(folder: Path, name: str) -> RunFile:
    path = baseline_path(folder, name)
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in Path(folder).glob("*.json"))) or "none"
        raise InputError(f"baseline {name!r} not found in {folder} (known: {known}); create it "
                         f"with `abdiff baseline refresh {name} --rev REV --configs SUITE`")
    return load_run_file(path)


def list_baselines(folder: Path) -> list[tuple[str, RunFile]]:
    return [(p.stem, load_run_file(p)) for p in sorted(Path(folder).glob("*.json"))]


def fingerprint(run: RunFile) -> dict[str, Any]:
    env = {**run.env, "target": run.target}
    return {key: env[key] for key in FINGERPRINT_KEYS if env.get(key) is not None}


def fingerprint_differences(baseline: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """`key: baseline value != value here` for every fingerprint key that differs."""
    return [
        f"{key}: {baseline.get(key)!r} in the baseline, {here.get(key)!r} here"
        for key in FINGERPRINT_KEYS
        if baseline.get(key) != here.get(key) and (key in baseline or key in here)
    ]


def parse_baseline_range(text: str) -> tuple[str, str] | None:
    """`baseline:NAME..B` -> (NAME, B); B empty means the working tree. None if not a baseline."""
    if not text.startswith(PREFIX):
        return None
    name, sep, rev_b = text[len(PREFIX):].partition("..")
    if not sep or rev_b.startswith("."):
        raise InputError(f"{text!r}: expected baseline:NAME..B (two dots)")
    baseline_path(Path("."), name)  # validates the name
    return name, rev_b


def append_rounds(old: RunFile, new: RunFile) -> RunFile:
    """`--append`: the old baseline's rounds followed by the new ones, renumbered.

    Only rounds of the same commit on the same machine may be pooled.
    """
    if old.sha != new.sha:
        raise InputError(f"--append: the baseline holds {old.sha[:12]}, this run {new.sha[:12]}; "
                         "refresh without --append to replace it")
    differences = fingerprint_differences(fingerprint(old), fingerprint(new))
    if differences:
        raise InputError("--append: the environment differs from the baseline's: "
                         + "; ".join(differences))
    for config in new.configs:
        kept = old.config(config.id)
        if kept is None:
            old.configs.append(config)
            continue
        offset = 1 + max((r.round for r in kept.rounds if r.round is not None), default=-1)
        for record in config.rounds:
            record.round = offset + (record.round or 0)
        kept.rounds += config.rounds
    return old
