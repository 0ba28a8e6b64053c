"""Run-file (`abdiff.run/1`) and result (`abdiff.result/1`) schemas, with atomic writes.

Data flows one way through the pipeline as these dataclasses; JSON is only
produced and parsed here, so every other module works on typed objects.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from abdiff.errors import InputError

RUN_SCHEMA = "abdiff.run/1"
RESULT_SCHEMA = "abdiff.result/1"
STATUSES = ("ok", "failed", "aborted", "timeout")


@dataclass
class RoundRecord:
    """One config measured in one round (one fresh worker process)."""

    status: str
    error: str | None = None
    latency_us: list[float] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    kernels: dict[str, int] = field(default_factory=dict)
    round: int | None = None  # schedule position; lets `--resume` skip finished rounds


@dataclass
class ConfigRuns:
    """All rounds of one config on one side."""

    id: str
    params: dict[str, Any]
    rounds: list[RoundRecord] = field(default_factory=list)


@dataclass
class RunFile:
    """One side's measurements: a run file, and also the format of a baseline."""

    rev: str
    sha: str
    target: str
    suite: str
    env: dict[str, Any] = field(default_factory=dict)
    configs: list[ConfigRuns] = field(default_factory=list)
    schema: str = RUN_SCHEMA

    def config(self, config_id: str) -> ConfigRuns | None:
        return next((c for c in self.configs if c.id == config_id), None)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {"schema": data.pop("schema"), **data}


@dataclass
class LatencyResult:
    """Latency comparison of one config; ratio and interval are B/A."""

    verdict: str  # unchanged | slower | faster | inconclusive | n/a
    ratio: float | None = None
    ci: list[float] | None = None
    p: float | None = None
    p_equivalence: float | None = None
    rounds_a: int = 0
    rounds_b: int = 0
    method: str | None = None


@dataclass
class ConfigResult:
    """Everything compared for one config, and what the policy makes of it."""

    id: str
    params: dict[str, Any]
    status_a: str
    status_b: str
    status_change: str  # same | fixed | broken | still-failing
    error_a: str | None
    error_b: str | None
    facts_changed: dict[str, list[Any]]
    kernels_added: dict[str, int]
    kernels_removed: dict[str, int]
    latency: LatencyResult
    in_scope: bool = False
    verdict: str = "unchanged"  # unchanged | expected | unintended | inconclusive


@dataclass
class Side:
    rev: str
    sha: str
    baseline: str | None = None  # name of the stored baseline used as this side


@dataclass
class Result:
    """The comparison of two run files; every report format renders this object."""

    a: Side
    b: Side
    expect: dict[str, list[str]]
    configs: list[ConfigResult]
    summary: dict[str, Any]
    suite: str = ""
    target: str = ""
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    schema: str = RESULT_SCHEMA

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {"schema": data.pop("schema"), **data}


def write_atomic(path: Path, text: str) -> None:
    """Write text so that readers see the old file or the new one, never half of it.

    Write to a temporary file in the same folder, fsync, then rename over the
    target (rename is atomic within one file system).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_safe(value: Any) -> Any:
    """NaN and infinity are not JSON; they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def dump_json(data: dict[str, Any]) -> str:
    return json.dumps(_json_safe(data), indent=1, allow_nan=False) + "\n"


def write_run_file(path: Path, run: RunFile) -> None:
    write_atomic(path, dump_json(run.to_json()))


def write_result(path: Path, result: Result) -> None:
    write_atomic(path, dump_json(result.to_json()))


def _require(data: dict, key: str, kind: type | tuple, where: str) -> Any:
    if key not in data:
        raise InputError(f"{where}: missing field '{key}'")
    value = data[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise InputError(f"{where}: field '{key}' must be {names}, got {type(value).__name__}")
    return value


def parse_round(data: Any, where: str) -> RoundRecord:
    if not isinstance(data, dict):
        raise InputError(f"{where}: a round must be an object")
    status = _require(data, "status", str, where)
    if status not in STATUSES:
        raise InputError(f"{where}: status '{status}' is not one of {', '.join(STATUSES)}")
    latency = data.get("latency_us") or []
    if not isinstance(latency, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0
        for x in latency
    ):
        raise InputError(f"{where}: latency_us must be a list of positive numbers")
    facts = data.get("facts") or {}
    if not isinstance(facts, dict):
        raise InputError(f"{where}: facts must be an object")
    kernels = data.get("kernels") or {}
    if not isinstance(kernels, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in kernels.values()
    ):
        raise InputError(f"{where}: kernels must map names to non-negative integer counts")
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        raise InputError(f"{where}: error must be a string or null")
    round_index = data.get("round")
    if round_index is not None and (not isinstance(round_index, int)
                                    or isinstance(round_index, bool)):
        raise InputError(f"{where}: round must be an integer")
    return RoundRecord(status, error, [float(x) for x in latency], facts, kernels, round_index)


def parse_run_file(data: Any, where: str) -> RunFile:
    """Validate a decoded run file; every problem is one InputError naming the place."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: a run file must be a JSON object")
    schema = data.get("schema")
    if schema != RUN_SCHEMA:
        raise InputError(f"{where}: schema is {schema!r}, expected '{RUN_SCHEMA}'")
    configs_data = _require(data, "configs", list, where)
    configs: list[ConfigRuns] = []
    seen: set[str] = set()
    for i, cfg in enumerate(configs_data):
        cwhere = f"{where}: configs[{i}]"
        if not isinstance(cfg, dict):
            raise InputError(f"{cwhere}: must be an object")
        cid = _require(cfg, "id", str, cwhere)
        if cid in seen:
            raise InputError(f"{cwhere}: duplicate config id '{cid}'")
        seen.add(cid)
        params = cfg.get("params") or {}
        if not isinstance(params, dict):
            raise InputError(f"{cwhere}: params must be an object")
        rounds = _require(cfg, "rounds", list, cwhere)
        parsed = [parse_round(r, f"{cwhere} ({cid}) rounds[{j}]") for j, r in enumerate(rounds)]
        configs.append(ConfigRuns(cid, params, parsed))
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise InputError(f"{where}: env must be an object")
    return RunFile(
        rev=str(data.get("rev", "")),
        sha=str(data.get("sha", "")),
        target=str(data.get("target", "")),
        suite=str(data.get("suite", "")),
        env=env,
        configs=configs,
    )


def load_run_file(path: Path) -> RunFile:
    """Read and validate a run file or baseline; bad files raise InputError (exit 2)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such run file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read run file ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    return parse_run_file(data, str(path))
