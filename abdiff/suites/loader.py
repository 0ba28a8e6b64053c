"""Load a suite (built-in name or YAML path), validate it, expand its matrix.

Every problem is one InputError that names the file, the key and what is
allowed, because a suite is hand-written and the error is read by a person.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from abdiff.errors import InputError

MAX_CONFIGS = 256  # larger matrices need --yes: a typo in a list should not start a day-long run

TOP_LEVEL_KEYS = {
    "description": "a one-line description",
    "warmup_times": "iterations before timing, per config and round",
    "run_times": "timed iterations per config and round",
    "expect": "KEY: [VALUES] where changes are expected",
    "facts": "dotted names read from the live objects",
    "matrix": "KEY: [VALUES] expanded into configs",
    "target": "options passed to the target (e.g. model, moe_backend for trtllm)",
    "tp": "ranks per round, tensor-parallel (the default of --np; needs a multi-rank --launcher)",
}
RUN_TYPES = ("GEN", "CTX")
BACKENDS = ("DSA", "TRTLLM")
# matrix key -> (allowed values or None, kind, lowest allowed integer)
MATRIX_KEYS: dict[str, tuple[tuple[str, ...] | None, type, int]] = {
    "run_type": (RUN_TYPES, str, 0),
    "backend": (BACKENDS, str, 0),
    "batch_size": (None, int, 1),
    "seq_len_q": (None, int, 1),
    "seq_len_kv_cache": (None, int, 0),
}
ID_ORDER = ("run_type", "backend", "batch_size", "seq_len_q", "seq_len_kv_cache")
ID_PREFIX = {"batch_size": "bs", "seq_len_q": "q", "seq_len_kv_cache": "kv"}


@dataclass(frozen=True)
class Config:
    """One point of the matrix: what one run-pack measurement is made of."""

    id: str
    params: dict[str, Any]


@dataclass
class Suite:
    name: str
    source: str
    description: str
    configs: list[Config]
    expect: dict[str, list[str]]
    facts: list[str]
    warmup_times: int
    run_times: int
    target_options: dict[str, Any] = field(default_factory=dict)
    tp: int = 1


def builtin_suites() -> dict[str, Path]:
    """Built-in suite names mapped to their files (package data)."""
    folder = resources.files("abdiff.suites")
    return {
        Path(entry.name).stem: Path(str(entry))
        for entry in folder.iterdir()
        if entry.name.endswith(".yaml")
    }


def config_id(params: dict[str, Any]) -> str:
    """Readable id such as GEN-TRTLLM-bs32-q4-kv2049."""
    parts = [f"{ID_PREFIX.get(key, '')}{params[key]}" for key in ID_ORDER if key in params]
    return "-".join(parts)


def _int_field(data: dict, key: str, where: str, default: int, low: int) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InputError(f"{where}: '{key}' must be an integer >= {low}, got {value!r}")
    return value


def _matrix(data: Any, where: str) -> dict[str, list[Any]]:
    if not isinstance(data, dict) or not data:
        raise InputError(f"{where}: 'matrix' must be a non-empty mapping of KEY: [VALUES]")
    matrix: dict[str, list[Any]] = {}
    for key, values in data.items():
        if key not in MATRIX_KEYS:
            raise InputError(
                f"{where}: unknown matrix key '{key}'; allowed: {', '.join(MATRIX_KEYS)}"
            )
        allowed, kind, low = MATRIX_KEYS[key]
        values = values if isinstance(values, list) else [values]
        if not values:
            raise InputError(f"{where}: matrix key '{key}' has no values")
        for value in values:
            bad_type = not isinstance(value, kind) or isinstance(value, bool)
            if bad_type or (allowed is not None and value not in allowed):
                expected = ", ".join(allowed) if allowed else f"integers >= {low}"
                raise InputError(
                    f"{where}: matrix key '{key}' has value {value!r}; allowed: {expected}"
                )
            if kind is int and value < low:
                raise InputError(f"{where}: matrix key '{key}' has {value}; allowed: >= {low}")
        if len(set(values)) != len(values):
            raise InputError(f"{where}: matrix key '{key}' lists a value twice")
        matrix[key] = values
    missing = [k for k in MATRIX_KEYS if k not in matrix]
    if missing:
        raise InputError(f"{where}: matrix is missing {', '.join(missing)}")
    return matrix


def _expect(data: Any, where: str, matrix: dict[str, list[Any]]) -> dict[str, list[str]]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{where}: 'expect' must be a mapping of KEY: [VALUES]")
    expect: dict[str, list[str]] = {}
    for key, values in data.items():
        if key not in matrix:
            raise InputError(
                f"{where}: 'expect' names unknown key '{key}'; allowed: {', '.join(matrix)}"
            )
        values = values if isinstance(values, list) else [values]
        expect[key] = [str(v) for v in values]
    return expect


def parse_suite(data: Any, name: str, where: str, allow_large: bool = False) -> Suite:
    """Validate decoded YAML and expand the matrix into configs."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: a suite must be a YAML mapping with a 'matrix'")
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise InputError(
                f"{where}: unknown key '{key}'; allowed: {', '.join(TOP_LEVEL_KEYS)}"
            )
    matrix = _matrix(data.get("matrix"), where)
    size = 1
    for values in matrix.values():
        size *= len(values)
    if size > MAX_CONFIGS and not allow_large:
        raise InputError(
            f"{where}: the matrix expands to {size} configs (limit {MAX_CONFIGS}); "
            "pass --yes to run it anyway"
        )
    facts = data.get("facts") or []
    if not isinstance(facts, list) or not all(isinstance(f, str) and f for f in facts):
        raise InputError(f"{where}: 'facts' must be a list of dotted names")
    target = data.get("target") or {}
    if not isinstance(target, dict):
        raise InputError(f"{where}: 'target' must be a mapping of option: value")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise InputError(f"{where}: 'description' must be a string")
    keys = list(matrix)
    configs = []
    for combo in itertools.product(*(matrix[k] for k in keys)):
        params = dict(zip(keys, combo, strict=True))
        configs.append(Config(config_id(params), params))
    return Suite(
        name=name,
        source=where,
        description=description,
        configs=configs,
        expect=_expect(data.get("expect"), where, matrix),
        facts=facts,
        warmup_times=_int_field(data, "warmup_times", where, 3, 0),
        run_times=_int_field(data, "run_times", where, 20, 1),
        target_options=target,
        tp=_int_field(data, "tp", where, 1, 1),
    )


def load_suite(name_or_path: str, allow_large: bool = False) -> Suite:
    """A built-in suite by name, or a YAML file by path."""
    builtin = builtin_suites()
    if name_or_path in builtin:
        path, name = builtin[name_or_path], name_or_path
    else:
        path = Path(name_or_path)
        name = path.stem
        if not path.is_file():
            raise InputError(
                f"--configs {name_or_path!r}: no such suite; built-in suites are "
                f"{', '.join(sorted(builtin))}, or give a path to a YAML file"
            )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read suite ({exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        why = getattr(exc, "problem", None) or getattr(exc, "reason", None) or type(exc).__name__
        raise InputError(f"{path}: malformed YAML{at}: {why}") from None
    return parse_suite(data, name, str(path), allow_large)
