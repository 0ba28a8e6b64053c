"""Google Benchmark and nvbench JSON, read into per-config results (no I/O but jsonbin).

Google Benchmark (src/json_reporter.cc): `{"context": {...}, "benchmarks": [row, ...]}`;
with `--benchmark_repetitions=N` a benchmark has N rows of `run_type` "iteration" (each
the mean time per iteration of one repetition, `real_time` in `time_unit`) and then its
aggregates (mean, median, stddev, cv), which are dropped: abdiff does its own statistics.
A row with `error_occurred` (or `skipped`) carries `error_message` (`skip_message`).

nvbench (nvbench/json_printer.cu): `{"meta": ..., "devices": [...], "benchmarks":
[{"name", "states": [{"name", "axis_values", "summaries", "is_skipped", "skip_reason"}]}]}`;
a summary is `{"tag", "data": [{"name", "type", "value"}]}` with every value written as a
string. The GPU time is the summary `nv/cold/time/gpu/mean` (seconds); with `--jsonbin`,
`nv/json/bin:nv/cold/sample_times` names a file of the samples as little-endian float32
seconds, which are then the latencies.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Format = Literal["gbench", "nvbench"]
# Google Benchmark's time units, in microseconds
TIME_UNIT_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
# context keys that change from one process to the next: not the machine's fingerprint
VOLATILE_CONTEXT = ("date", "load_avg", "executable")
NVBENCH_MEAN = "nv/cold/time/gpu/mean"
NVBENCH_SAMPLES = "nv/json/bin:nv/cold/sample_times"


@dataclass(frozen=True)
class BenchmarkResult:
    """One config's outcome in one benchmark process."""

    latency_us: list[float] = field(default_factory=list)
    error: str | None = None  # the benchmark's own reason when it failed or skipped
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchmarkReport:
    """What one benchmark process reported: its machine, and a result per config id."""

    env: dict[str, Any]
    results: dict[str, BenchmarkResult]


class FormatError(ValueError):
    """The document is not the format it should be (the message says where)."""


def nvbench_id(benchmark: str, state: str) -> str:
    """`copy[Device=0 Elements=1024]`: a benchmark's state as a config id."""
    return f"{benchmark}[{state}]" if state else benchmark


def config_params(fmt: Format, config_id: str) -> dict[str, str]:
    """The params of a config id, for `expect` and --expect: gbench's `benchmark` (the full
    name) and `family` (the name before its arguments); nvbench's `benchmark` and `state`."""
    if fmt == "nvbench":
        name, _, state = config_id.partition("[")
        return {"benchmark": name, "state": state.removesuffix("]")}
    return {"benchmark": config_id, "family": config_id.split("/", 1)[0]}


def _picked(row: dict[str, Any], facts: Sequence[str]) -> dict[str, Any]:
    return {name: row.get(name) for name in facts}


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FormatError(f"{where} must be an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise FormatError(f"{where} must be a list")
    return value


def gbench_report(document: Any, facts: Sequence[str] = ()) -> BenchmarkReport:
    """Google Benchmark JSON -> a result per benchmark name, in the order it ran them."""
    root = _mapping(document, "the document")
    context = _mapping(root.get("context", {}), "context")
    env = {"device": "cpu", "host": context.get("host_name"),
           "timing": "Google Benchmark real time",  # the report's `timing`
           "benchmark_context": {k: v for k, v in context.items() if k not in VOLATILE_CONTEXT}}
    times: dict[str, list[float]] = {}
    errors: dict[str, str] = {}
    picked: dict[str, dict[str, Any]] = {}
    for index, row in enumerate(_list(root.get("benchmarks"), "benchmarks")):
        row = _mapping(row, f"benchmarks[{index}]")
        if row.get("run_type", "iteration") != "iteration" or "aggregate_name" in row:
            continue  # mean, median, stddev, cv, BigO, RMS: abdiff's statistics, not theirs
        name = row.get("run_name") or row.get("name")
        if not isinstance(name, str):
            raise FormatError(f"benchmarks[{index}] has no name")
        picked.setdefault(name, _picked(row, facts))
        times.setdefault(name, [])
        if row.get("error_occurred"):
            errors.setdefault(name, str(row.get("error_message") or "error_occurred"))
            continue
        if row.get("skipped"):
            errors.setdefault(name, f"skipped: {row.get('skip_message') or 'no reason given'}")
            continue
        unit = row.get("time_unit", "ns")
        value = row.get("real_time")
        if unit not in TIME_UNIT_US or not isinstance(value, int | float):
            raise FormatError(f"benchmarks[{index}] ({name}): real_time {value!r} in unit "
                              f"{unit!r} is not a time")
        latency = float(value) * TIME_UNIT_US[unit]
        if not math.isfinite(latency) or latency <= 0:
            errors.setdefault(name, f"real_time {value!r} {unit} is not a positive time")
            continue
        times[name].append(latency)
    results = {name: BenchmarkResult([] if name in errors else values, errors.get(name),
                                     picked[name])
               for name, values in times.items()}
    return BenchmarkReport(env, results)


def _summary_values(summary: dict[str, Any]) -> dict[str, str]:
    data = summary.get("data") or []
    return {str(item.get("name")): str(item.get("value")) for item in data
            if isinstance(item, dict)}


def read_sample_times(path: Path, count: int | None = None) -> list[float]:
    """An nvbench jsonbin file: little-endian float32 seconds -> microseconds."""
    raw = path.read_bytes()
    values = struct.unpack(f"<{len(raw) // 4}f", raw[: len(raw) // 4 * 4])
    if count is not None and count != len(values):
        raise FormatError(f"{path} holds {len(values)} samples, its summary says {count}")
    return [v * 1e6 for v in values]


def nvbench_report(document: Any, facts: Sequence[str] = (),
                   folder: Path | None = None) -> BenchmarkReport:
    """nvbench JSON -> a result per benchmark state (`nvbench_id`); jsonbin sample files
    are read where a summary names one (relative names from `folder`)."""
    root = _mapping(document, "the document")
    devices = [d for d in _list(root.get("devices", []), "devices") if isinstance(d, dict)]
    names = [str(d.get("name")) for d in devices]
    version = (((root.get("meta") or {}).get("version") or {}).get("nvbench") or {}).get("string")
    env = {"device": "cuda" if devices else "unknown", "device_name": ", ".join(names) or None,
           "timing": "nvbench cold GPU time",
           "device_count": len(devices), "nvbench": version,
           "benchmark_devices": devices}
    results: dict[str, BenchmarkResult] = {}
    for b_index, bench in enumerate(_list(root.get("benchmarks"), "benchmarks")):
        bench = _mapping(bench, f"benchmarks[{b_index}]")
        for s_index, state in enumerate(_list(bench.get("states", []),
                                              f"benchmarks[{b_index}].states")):
            where = f"benchmarks[{b_index}].states[{s_index}]"
            state = _mapping(state, where)
            config_id = nvbench_id(str(bench.get("name")), str(state.get("name", "")))
            axis = {str(a.get("name")): a.get("value") for a in state.get("axis_values") or []
                    if isinstance(a, dict)}
            summaries = {str(s.get("tag")): s for s in state.get("summaries") or []
                         if isinstance(s, dict)}
            picked = {name: axis.get(name, _summary_values(summaries[name]).get("value")
                                     if name in summaries else None) for name in facts}
            if state.get("is_skipped"):
                reason = state.get("skip_reason") or "no reason given"
                results[config_id] = BenchmarkResult([], f"skipped: {reason}", picked)
                continue
            latency: list[float] = []
            if NVBENCH_SAMPLES in summaries:
                values = _summary_values(summaries[NVBENCH_SAMPLES])
                path = Path(values.get("filename", ""))
                if folder is not None and not path.is_absolute():
                    path = folder / path
                try:
                    latency = read_sample_times(path, int(values["size"])
                                                if "size" in values else None)
                except OSError as exc:
                    raise FormatError(f"{where}: cannot read its sample times: {exc}") from None
            elif NVBENCH_MEAN in summaries:
                try:
                    latency = [float(_summary_values(summaries[NVBENCH_MEAN])["value"]) * 1e6]
                except (KeyError, ValueError):
                    raise FormatError(f"{where}: {NVBENCH_MEAN} has no number") from None
            positive = [v for v in latency if math.isfinite(v) and v > 0]
            error = None if positive else f"no GPU time ({NVBENCH_MEAN}) in its summaries"
            results[config_id] = BenchmarkResult(positive, error, picked)
    return BenchmarkReport(env, results)


def read_report(fmt: Format, document: Any, facts: Sequence[str],
                folder: Path | None = None) -> BenchmarkReport:
    if fmt == "nvbench":
        return nvbench_report(document, facts, folder)
    return gbench_report(document, facts)


def benchmark_arguments(fmt: Format, out: Path, repetitions: int,
                        config_ids: list[str] | None) -> list[str]:
    """What the benchmark is told, beside its own command: where to write its JSON, and
    (gbench) how many repetitions and which benchmarks (`config_ids`; None: all)."""
    if fmt == "nvbench":
        chosen = [] if config_ids is None else list(dict.fromkeys(
            config_params("nvbench", c)["benchmark"] for c in config_ids))
        return ["--jsonbin", str(out), *(a for name in chosen for a in ("--benchmark", name))]
    arguments = [f"--benchmark_out={out}", "--benchmark_out_format=json",
                 f"--benchmark_repetitions={repetitions}"]
    if config_ids is not None:  # POSIX extended regular expression, whole names only
        names = "|".join(_ere_escape(c) for c in config_ids)
        arguments.append(f"--benchmark_filter=^({names})$")
    return arguments


def _ere_escape(text: str) -> str:
    return "".join(f"\\{c}" if c in ".[]()*+?{}|^$\\" else c for c in text)
