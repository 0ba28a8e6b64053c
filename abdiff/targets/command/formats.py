"""Google Benchmark and nvbench JSON, read into per-config results (no I/O but jsonbin).

Google Benchmark (src/json_reporter.cc): `{"context": {...}, "benchmarks": [row, ...]}`;
with `--benchmark_repetitions=N` a benchmark has N rows of `run_type` "iteration" (each
the mean per iteration of one repetition: `real_time` and `cpu_time` in `time_unit`, and
its counters) and then its aggregates (mean, median, stddev, cv), which are dropped:
abdiff does its own statistics (with aggregates only, the median row is the one value).
A row with `error_occurred` (or `skipped`) carries `error_message` (`skip_message`). The
reporter flushes after each benchmark: a process that died leaves the document cut there
(`gbench_document` reads it up to the cut).

nvbench (nvbench/json_printer.cu): `{"meta": ..., "devices": [...], "benchmarks":
[{"name", "states": [{"name", "axis_values", "summaries", "is_skipped", "skip_reason"}]}]}`;
a summary is `{"tag", "data": [{"name", "type", "value"}]}` with every value written as a
string. The GPU time is the summary `nv/cold/time/gpu/mean` (seconds); with `--jsonbin`,
`nv/json/bin:nv/cold/sample_times` names a file of the samples as little-endian float32
seconds, which are then the latencies.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from abdiff.store.files import worker_json

Format = Literal["gbench", "nvbench"]
# Google Benchmark's time units, in microseconds
TIME_UNIT_US = MappingProxyType({"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6})
# context keys that change from one process to the next: not the machine's fingerprint
VOLATILE_CONTEXT = ("date", "load_avg", "executable")
NVBENCH_MEAN = "nv/cold/time/gpu/mean"
TIMES = ("real_time", "cpu_time")
DEFAULT_METRICS = ("real_time",)
RATE_SUFFIX = "per_second"  # bytes_per_second, items_per_second: higher is faster
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


def config_params(fmt: Format, benchmark: str, metric: str = DEFAULT_METRICS[0]
                  ) -> dict[str, str]:
    """The params of a config, for `expect` and --expect: gbench's `benchmark` (the full
    name), `family` (the name before its arguments) and `metric`; nvbench's `benchmark` and
    `state` (`benchmark` is then its config id)."""
    if fmt == "nvbench":
        name, _, state = benchmark.partition("[")
        return {"benchmark": name, "state": state.removesuffix("]")}
    return {"benchmark": benchmark, "family": benchmark.split("/", 1)[0], "metric": metric}


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


def gbench_document(text: str) -> tuple[dict[str, Any], bool]:
    """Google Benchmark JSON text -> (the document, whether it was complete). A process
    that died mid-run leaves its `--benchmark_out` cut after the last benchmark it reported
    (the reporter flushes after each one): the context and every whole row before the cut
    are read, and the document says it is incomplete."""
    try:
        document = worker_json(text)
    except ValueError:
        pass
    else:
        return _mapping(document, "the document"), True
    decoder = json.JSONDecoder()
    context: Any = {}
    position = 0
    opening = re.search(r'"context"\s*:\s*', text)
    if opening is not None:
        # cut inside the context: no context (nested past the stack: none either)
        with contextlib.suppress(ValueError, RecursionError):
            context, position = decoder.raw_decode(text, opening.end())
    rows: list[Any] = []
    array = re.compile(r'"benchmarks"\s*:\s*\[').search(text, position)
    if array is not None:
        position, separator = array.end(), re.compile(r"[\s,]*")
        while True:
            position = separator.match(text, position).end()  # type: ignore[union-attr]
            try:
                row, position = decoder.raw_decode(text, position)
            except (ValueError, RecursionError):
                break
            rows.append(row)
    if opening is None and array is None:
        raise FormatError("no JSON object of Google Benchmark (no context, no benchmarks)")
    return {"context": context, "benchmarks": rows}, False


def metric_value(row: dict[str, Any], metric: str) -> float | str:
    """One repetition's value of `metric` (a time in microseconds; a counter as written,
    a rate counter, named `..._per_second`, as its reciprocal: microseconds per item), or
    why there is none."""
    if metric in TIMES:
        unit, value = row.get("time_unit", "ns"), row.get(metric)
        if unit not in TIME_UNIT_US or not isinstance(value, int | float):
            raise FormatError(f"{metric} {value!r} in unit {unit!r} is not a time")
        number = float(value) * TIME_UNIT_US[unit]
    else:
        value = row.get(metric)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return f"no counter {metric!r} in its row"
        number = 1e6 / float(value) if metric.endswith(RATE_SUFFIX) and value else float(value)
    if not math.isfinite(number) or number <= 0:
        return f"{metric} {value!r} is not a positive value"
    return number


def gbench_id(benchmark: str, metric: str, metrics: Sequence[str]) -> str:
    """The config id of a benchmark's metric: the name for the first metric of the suite,
    `NAME metric` for the others."""
    return benchmark if metric == metrics[0] else f"{benchmark} {metric}"


def context_warnings(context: dict[str, Any]) -> list[str]:
    """What the benchmark's own context says is wrong with its timings."""
    warnings = []
    if str(context.get("library_build_type", "")).lower() == "debug":
        warnings.append("the Google Benchmark library was built as DEBUG (its own timing "
                        "loop is slower; the benchmark's code is as you built it)")
    if context.get("cpu_scaling_enabled") is True:
        warnings.append("CPU frequency scaling was enabled while the benchmark ran: its "
                        "timings vary with the clock (pin the governor to performance)")
    return warnings


def gbench_report(document: Any, facts: Sequence[str] = (),
                  metrics: Sequence[str] = DEFAULT_METRICS, complete: bool = True
                  ) -> BenchmarkReport:
    """Google Benchmark JSON -> a result per config (`gbench_id`: a benchmark's metric), in
    the order it ran them. Each `iteration` row (one repetition) is one value; a benchmark
    reported with aggregates only (`--benchmark_report_aggregates_only`) gives its `median`
    (else `mean`) row as its one value. An incomplete document (`gbench_document`) drops
    its last benchmark unless all of that benchmark's repetitions are there."""
    root = _mapping(document, "the document")
    context = _mapping(root.get("context", {}), "context")
    env = {"device": "cpu", "host": context.get("host_name"),
           "timing": f"Google Benchmark {metrics[0].replace('_', ' ')}",  # the report's `timing`
           "benchmark_context": {k: v for k, v in context.items() if k not in VOLATILE_CONTEXT},
           "warnings": context_warnings(context)}
    rows: dict[str, list[dict[str, Any]]] = {}
    aggregates: dict[str, dict[str, dict[str, Any]]] = {}
    for index, row in enumerate(_list(root.get("benchmarks"), "benchmarks")):
        row = _mapping(row, f"benchmarks[{index}]")
        name = row.get("run_name") or row.get("name")
        if not isinstance(name, str):
            raise FormatError(f"benchmarks[{index}] has no name")
        if row.get("run_type", "iteration") != "iteration" or "aggregate_name" in row:
            # mean, median, stddev, cv, BigO, RMS: abdiff's statistics, not theirs
            aggregates.setdefault(name, {})[str(row.get("aggregate_name"))] = row
            continue
        rows.setdefault(name, []).append(row)
    names = list(dict.fromkeys([*rows, *aggregates]))
    if not complete and names:
        last = names[-1]
        wanted = next((r.get("repetitions") for r in rows.get(last, [])), None)
        if not isinstance(wanted, int) or len(rows.get(last, [])) < wanted:
            names.pop()  # cut inside its rows: not reported
    results: dict[str, BenchmarkResult] = {}
    for name in names:
        measured = rows.get(name) or [aggregates[name][k] for k in ("median", "mean")
                                      if k in aggregates.get(name, {})][:1]
        for metric in metrics:
            results[gbench_id(name, metric, metrics)] = _gbench_result(name, measured, facts,
                                                                       metric)
    return BenchmarkReport(env, results)


def _gbench_result(name: str, rows: list[dict[str, Any]], facts: Sequence[str],
                   metric: str) -> BenchmarkResult:
    picked = _picked(rows[0], facts) if rows else {}
    varying = [f for f in facts if any(row.get(f) != picked[f] for row in rows)]
    if varying:  # a fact is compared exactly: a rate counter is not one
        return BenchmarkResult([], f"fact {varying[0]} varies between the repetitions of one "
                               f"process ({picked[varying[0]]!r}, ...): not a constant; compare "
                               "it as a metric (target.metrics) instead",
                               {k: v for k, v in picked.items() if k not in varying})
    values: list[float] = []
    for row in rows:
        if row.get("error_occurred"):
            return BenchmarkResult([], str(row.get("error_message") or "error_occurred"), picked)
        if row.get("skipped"):
            return BenchmarkResult([], f"skipped: {row.get('skip_message') or 'no reason given'}",
                                   picked)
        try:
            value = metric_value(row, metric)
        except FormatError as exc:
            raise FormatError(f"benchmarks ({name}): {exc}") from None
        if isinstance(value, str):
            return BenchmarkResult([], value, picked)
        values.append(value)
    if not values:
        return BenchmarkResult([], "no iteration or median row", picked)
    return BenchmarkResult(values, None, picked)


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


def read_report(fmt: Format, text: str, facts: Sequence[str],
                metrics: Sequence[str] = DEFAULT_METRICS, folder: Path | None = None
                ) -> tuple[BenchmarkReport, bool]:
    """A benchmark's JSON output -> (what it reported, whether the document was whole).
    Google Benchmark's is read up to its cut (`gbench_document`); nvbench's must be whole."""
    if fmt == "nvbench":
        return nvbench_report(worker_json(text), facts, folder), True
    document, complete = gbench_document(text)
    return gbench_report(document, facts, metrics, complete), complete


def benchmark_arguments(fmt: Format, out: Path, repetitions: int,
                        benchmarks: list[str] | None) -> list[str]:
    """What the benchmark is told, beside its own command: where to write its JSON, and
    (gbench) how many repetitions and which `benchmarks` (names; None: all)."""
    chosen = None if benchmarks is None else list(dict.fromkeys(benchmarks))
    if fmt == "nvbench":
        return ["--jsonbin", str(out), *(a for name in chosen or [] for a in ("--benchmark", name))]
    arguments = [f"--benchmark_out={out}", "--benchmark_out_format=json",
                 f"--benchmark_repetitions={repetitions}"]
    if chosen is not None:
        arguments.append(gbench_filter(chosen))
    return arguments


def gbench_filter(benchmarks: list[str]) -> str:
    """Google Benchmark's filter for these names: a POSIX extended regular expression,
    whole names only."""
    names = "|".join(_ere_escape(c) for c in dict.fromkeys(benchmarks))
    return f"--benchmark_filter=^({names})$"


# what Google Benchmark writes to stderr that never says why it died: the context header
# (date, "Running ./bench", "Run on (...)", caches, load average) and its ***WARNING*** lines
GBENCH_NOISE = re.compile(r"\d{4}-\d\d-\d\dT|Running |Run on \(|CPU Caches:|Load Average:|"
                          r"\*\*\*WARNING\*\*\*|\s")


def death_line(stderr: str) -> str | None:
    """The benchmark's last stderr line that can say why it died."""
    lines = [line for line in stderr.splitlines() if line.strip() and not GBENCH_NOISE.match(line)]
    return lines[-1].strip() if lines else None


def _ere_escape(text: str) -> str:
    return "".join(f"\\{c}" if c in ".[]()*+?{}|^$\\" else c for c in text)
