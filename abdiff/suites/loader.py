"""Load a suite (built-in name or YAML path), validate it, expand its matrix.

Every problem is one InputError that names the file, the key and what is
allowed, because a suite is hand-written and the error is read by a person.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml

from abdiff.errors import InputError, did_you_mean
from abdiff.store.files import read_text
from abdiff.store.validate import Len, from_json
from abdiff.suites.model import Config, Suite
from abdiff.targets.layerwise import MATRIX_KEYS, Matrix, NonNegative, Positive, config_id

log = logging.getLogger(__name__)

MAX_CONFIGS = 256  # larger matrices need --yes: a typo in a list should not start a day-long run
Scalar = str | int | float | bool


@dataclass
class SuiteFile:
    """A suite's YAML document, as written (unknown keys are rejected: they are typos)."""

    # the layer-wise configs; a target whose configs come from the benchmark itself (the
    # command target) takes none (Target.configs)
    matrix: Matrix | None = None
    description: str = ""
    warmup_times: NonNegative = 3  # iterations before timing, per config and round
    run_times: Positive = 20  # timed iterations per config and round (the first rounds')
    # false: every round times run_times; true: from the first look on, each config times
    # what its process-to-process and within-process spread make cheapest (run/iterations.py)
    adapt_run_times: bool = True
    expect: dict[str, list[Scalar] | Scalar] | None = None  # KEY: [VALUES] that may change
    facts: list[Annotated[str, Len(1)]] | None = None  # dotted names read from live objects
    target: dict[str, Any] | None = None  # options passed to the target (e.g. model)
    tp: Positive = 1  # ranks per round, tensor-parallel (the default of --np)


def builtin_suites() -> dict[str, Path]:
    """Built-in suite names mapped to their files (package data)."""
    folder = resources.files("abdiff.suites")
    return {
        Path(entry.name).stem: Path(str(entry))
        for entry in folder.iterdir()
        if entry.name.endswith(".yaml")
    }


def parse_suite(data: Any, name: str, where: str, allow_large: bool = False) -> Suite:
    """Validate decoded YAML and expand the matrix into configs."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: a suite must be a YAML mapping with a 'matrix'")
    document = from_json(SuiteFile, data, where, reject_unknown=True)
    matrix = {key: value if isinstance(value, list) else [value]
              for key, value in asdict(document.matrix).items()
              if value is not None} if document.matrix else {}
    for key, values in matrix.items():
        if len(set(values)) != len(values):
            raise InputError(f"{where}: matrix.{key} lists a value twice")
    size = math.prod(len(values) for values in matrix.values())
    if size > MAX_CONFIGS and not allow_large:
        raise InputError(
            f"{where}: the matrix expands to {size} configs (limit {MAX_CONFIGS}); "
            "pass --yes to run it anyway"
        )
    expect = document.expect or {}
    if matrix:  # else the target's configs are checked against it (with_configs)
        for key in expect:
            if key not in matrix:
                raise InputError(f"{where}: expect has unknown key '{key}'; "
                                 f"allowed: {', '.join(MATRIX_KEYS)}")
    configs = []
    for combo in itertools.product(*matrix.values()) if matrix else ():
        params = dict(zip(matrix, combo, strict=True))
        configs.append(Config(config_id(params), params))
    return Suite(
        name=name,
        source=where,
        description=document.description,
        configs=configs,
        expect={k: [str(v) for v in (vs if isinstance(vs, list) else [vs])]
                for k, vs in expect.items()},
        facts=document.facts or [],
        warmup_times=document.warmup_times,
        run_times=document.run_times,
        adapt_run_times=document.adapt_run_times,
        target_options=document.target or {},
        tp=document.tp,
    )


def load_suite(name_or_path: str, allow_large: bool = False,
               repo_root: Path | None = None) -> Suite:
    """A built-in suite by name, or a YAML file by path; `upstream-tests` is read from
    the repository (`repo_root`, else the current folder)."""
    from abdiff.suites.upstream_tests import NAME as UPSTREAM_TESTS

    if name_or_path == UPSTREAM_TESTS:
        from abdiff.suites.upstream_tests import load_upstream_tests

        suite, note = load_upstream_tests(repo_root)
        log.info(note)
        return suite
    builtin = builtin_suites()
    if name_or_path in builtin:
        path, name = builtin[name_or_path], name_or_path
    else:
        path = Path(name_or_path)
        name = path.stem
        if not path.is_file() and (path.suffix in (".yaml", ".yml") or len(path.parts) > 1):
            where = "is a folder" if path.is_dir() else "does not exist"
            raise InputError(f"--configs {name_or_path!r}: the file {path} {where} (relative "
                             "paths are read from the current folder); built-in suites are "
                             f"{', '.join(sorted(builtin))}")
        if not path.is_file():
            raise InputError(
                f"--configs {name_or_path!r}: no such suite; built-in suites are "
                f"{', '.join(sorted(builtin))}, or give a path to a YAML file"
                + did_you_mean(name_or_path, list(builtin))
            )
    text = read_text(path, "suite")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        why = getattr(exc, "problem", None) or getattr(exc, "reason", None) or type(exc).__name__
        raise InputError(f"{path}: malformed YAML{at}: {why}") from None
    from abdiff.targets.trtllm.upstream_config import is_upstream_config, translate

    if is_upstream_config(data):  # upstream's config_gen.yaml / config_ctx.yaml
        data, note = translate(data, path)
        log.info(note)
    return parse_suite(data, name, str(path), allow_large)


def with_configs(suite: Suite, configs: list[Config]) -> Suite:
    """`suite` measuring `configs` (what its target says the suite means), its `expect`
    checked against their params."""
    chosen = replace(suite, configs=configs)
    keys = chosen.param_keys()
    for key in suite.expect:
        if key not in keys:
            raise InputError(f"{suite.source}: expect has unknown key '{key}'; "
                             f"allowed: {', '.join(keys) or 'none'}")
    return chosen
