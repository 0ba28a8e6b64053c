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
    session: str | None = None  # the measuring session (RunFile.sessions), for drift


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
    # session id -> when and where its rounds were measured (started, host, GPU, driver)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
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
    note: str | None = None  # e.g. what a widened baseline margin did to the verdict


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
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report or baseline is shared
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


def _type_name(kind: type) -> str:
    return "null" if kind is type(None) else kind.__name__


def _require(data: dict, key: str, kind: type | tuple, where: str) -> Any:
    if key not in data:
        raise InputError(f"{where}: missing field '{key}'")
    value = data[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        kinds = (kind,) if isinstance(kind, type) else kind
        names = "/".join(_type_name(k) for k in kinds)
        raise InputError(f"{where}: field '{key}' must be {names}, got {_type_name(type(value))}")
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
    session = data.get("session")
    if session is not None and not isinstance(session, str):
        raise InputError(f"{where}: session must be a string or null")
    return RoundRecord(status, error, [float(x) for x in latency], facts, kernels, round_index,
                       session)


def _check_document(data: Any, schema: str, what: str, where: str) -> None:
    if not isinstance(data, dict):
        raise InputError(f"{where}: {what} must be a JSON object")
    if data.get("schema") != schema:
        raise InputError(f"{where}: schema is {data.get('schema')!r}, expected '{schema}'")


def parse_run_file(data: Any, where: str) -> RunFile:
    """Validate a decoded run file; every problem is one InputError naming the place."""
    _check_document(data, RUN_SCHEMA, "a run file", where)
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
    sessions = data.get("sessions") or {}
    if not isinstance(sessions, dict) or not all(isinstance(v, dict) for v in sessions.values()):
        raise InputError(f"{where}: sessions must map session ids to objects")
    return RunFile(
        rev=str(data.get("rev", "")),
        sha=str(data.get("sha", "")),
        target=str(data.get("target", "")),
        suite=str(data.get("suite", "")),
        env=env,
        configs=configs,
        sessions=sessions,
    )


def read_json(path: Path, what: str) -> Any:
    """Decode a JSON file; every way it can be unreadable is one InputError (exit 2)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read {what} ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # a huge integer, absurd nesting
        raise InputError(f"{path}: not usable JSON ({type(exc).__name__})") from None


def load_run_file(path: Path) -> RunFile:
    """Read and validate a run file or baseline; bad files raise InputError (exit 2)."""
    return parse_run_file(read_json(path, "run file"), str(path))


# Result (`abdiff.result/1`) loading. The result may come from an untrusted job
# (a pull request's CI run, docs/ci.md), so every field is checked for its type
# before a report is rendered from it; unknown extra fields are ignored.

_NULL = type(None)
_STR_OR_NULL = (str, _NULL)


def _optional(data: dict, key: str, kind: type | tuple, where: str, default: Any = None) -> Any:
    """Like _require, for a field whose dataclass has a default: absent gives `default`."""
    return _require(data, key, kind, where) if key in data else default


def _object(data: Any, where: str) -> dict:
    if not isinstance(data, dict):
        raise InputError(f"{where}: must be an object")
    return data


def _float(data: dict, key: str, where: str) -> float | None:
    """An optional finite number (null or absent is None)."""
    value = _optional(data, key, (int, float, _NULL), where)
    if value is None:
        return None
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InputError(f"{where}: field '{key}' must be a finite number")
    return number


def _count(data: dict, key: str, where: str) -> int:
    value = _optional(data, key, int, where, 0)
    if value < 0:
        raise InputError(f"{where}: field '{key}' must be a non-negative integer")
    return value


def _strings(data: dict, key: str, where: str) -> list[str]:
    value = _optional(data, key, list, where, [])
    if not all(isinstance(item, str) for item in value):
        raise InputError(f"{where}: field '{key}' must be a list of strings")
    return value


def _counts(data: dict, key: str, where: str) -> dict[str, int]:
    value = _require(data, key, dict, where)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value.values()):
        raise InputError(f"{where}: field '{key}' must map names to non-negative integer counts")
    return value


def _side(data: dict, key: str, where: str) -> Side:
    side = _require(data, key, dict, where)
    swhere = f"{where}: {key}"
    return Side(_require(side, "rev", str, swhere), _require(side, "sha", str, swhere),
                _optional(side, "baseline", _STR_OR_NULL, swhere))


def _latency(data: dict, where: str) -> LatencyResult:
    ci = _optional(data, "ci", (list, _NULL), where)
    if ci is not None:
        if len(ci) != 2:
            raise InputError(f"{where}: field 'ci' must be [low, high] or null")
        ci = [_float({"ci": c}, "ci", where) for c in ci]
    return LatencyResult(
        verdict=_require(data, "verdict", str, where),
        ratio=_float(data, "ratio", where),
        ci=ci,
        p=_float(data, "p", where),
        p_equivalence=_float(data, "p_equivalence", where),
        rounds_a=_count(data, "rounds_a", where),
        rounds_b=_count(data, "rounds_b", where),
        method=_optional(data, "method", _STR_OR_NULL, where),
        note=_optional(data, "note", _STR_OR_NULL, where),
    )


def _config_result(data: Any, where: str) -> ConfigResult:
    cfg = _object(data, where)
    cid = _require(cfg, "id", str, where)
    where = f"{where} ({cid})"
    facts = _require(cfg, "facts_changed", dict, where)
    if not all(isinstance(pair, list) and len(pair) == 2 for pair in facts.values()):
        raise InputError(f"{where}: field 'facts_changed' must map names to [a, b] pairs")
    return ConfigResult(
        id=cid,
        params=_require(cfg, "params", dict, where),
        status_a=_require(cfg, "status_a", str, where),
        status_b=_require(cfg, "status_b", str, where),
        status_change=_require(cfg, "status_change", str, where),
        error_a=_require(cfg, "error_a", _STR_OR_NULL, where),
        error_b=_require(cfg, "error_b", _STR_OR_NULL, where),
        facts_changed=facts,
        kernels_added=_counts(cfg, "kernels_added", where),
        kernels_removed=_counts(cfg, "kernels_removed", where),
        latency=_latency(_require(cfg, "latency", dict, where), f"{where} latency"),
        in_scope=_optional(cfg, "in_scope", bool, where, False),
        verdict=_optional(cfg, "verdict", str, where, "unchanged"),
    )


def parse_result(data: Any, where: str) -> Result:
    """Validate a decoded `abdiff.result/1` document; every problem is one InputError."""
    _check_document(data, RESULT_SCHEMA, "a result", where)
    expect = _require(data, "expect", dict, where)
    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
               for v in expect.values()):
        raise InputError(f"{where}: field 'expect' must map keys to lists of strings")
    configs = _require(data, "configs", list, where)
    return Result(
        a=_side(data, "a", where),
        b=_side(data, "b", where),
        expect=expect,
        configs=[_config_result(c, f"{where}: configs[{i}]") for i, c in enumerate(configs)],
        summary=_require(data, "summary", dict, where),
        suite=_optional(data, "suite", str, where, ""),
        target=_optional(data, "target", str, where, ""),
        only_in_a=_strings(data, "only_in_a", where),
        only_in_b=_strings(data, "only_in_b", where),
        notes=_strings(data, "notes", where),
    )


def load_result(path: Path) -> Result:
    """Read and validate a result JSON (`--json FILE`); bad files raise InputError (exit 2)."""
    return parse_result(read_json(path, "result file"), str(path))
