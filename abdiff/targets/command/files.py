"""Google Benchmark and nvbench JSON files as run files: `abdiff compare A.json B.json`.

Each file is one process of the benchmark, so its repetitions (gbench) or samples
(nvbench) stand in for rounds: one value per round, compared unpaired (the two files
were not measured interleaved, and nobody knows what ran between them).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from abdiff.errors import InputError
from abdiff.store.records import ConfigRuns, RoundRecord, RunFile
from abdiff.targets.command.formats import (
    DEFAULT_METRICS,
    Format,
    FormatError,
    config_params,
    gbench_document,
    gbench_id,
    read_report,
)

# a Google Benchmark row's numbers that are no metric of its own
NOT_METRICS = frozenset({"family_index", "per_family_instance_index", "repetitions",
                         "repetition_index", "threads", "iterations"})


def sniff(path: Path) -> Format | None:
    """The library that wrote the file at `path`, None for anything else (a run file)."""
    try:
        with open(path, encoding="utf-8") as handle:
            head = handle.read(1 << 16)
    except (OSError, UnicodeDecodeError):  # not text: a run file's own check says what it is
        return None
    if '"schema"' in head or '"benchmarks"' not in head:
        return None
    return "nvbench" if '"devices"' in head or '"meta"' in head else "gbench"


def import_benchmark_file(path: Path, fmt: Format, metrics: list[str]) -> RunFile:
    """The file's results as a run file: a round per repetition (sample) of each config."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        report, complete = read_report(fmt, text, [], metrics, Path(path).parent)
    except (FormatError, ValueError) as exc:
        raise InputError(f"{path}: not {fmt} JSON ({exc})") from None
    configs = []
    missing: dict[str, bool] = {}  # metric -> no benchmark of the file has it
    for config_id, result in report.results.items():
        name = config_id.removesuffix(next((f" {m}" for m in metrics[1:]
                                            if config_id.endswith(f" {m}")), ""))
        metric = next((m for m in metrics[1:] if config_id.endswith(f" {m}")), metrics[0])
        missing[metric] = missing.get(metric, True) and (result.error or "").startswith(
            "no counter")
        params = config_params(fmt, name, metric) if fmt == "gbench" else config_params(fmt, name)
        rounds = ([RoundRecord("ok", latency_us=[value], round=index)
                   for index, value in enumerate(result.latency_us)]
                  if result.error is None else [RoundRecord("failed", result.error, round=0)])
        configs.append(ConfigRuns(gbench_id(name, metric, metrics) if fmt == "gbench"
                                  else config_id, params, rounds))
    absent = [metric for metric, none in missing.items() if none]
    if absent and fmt == "gbench":
        rows = gbench_document(text)[0]["benchmarks"]
        has = sorted({key for row in rows if isinstance(row, dict) for key, value in row.items()
                      if isinstance(value, int | float) and not isinstance(value, bool)
                      and key not in NOT_METRICS})
        raise InputError(f"{path}: no benchmark has the metric {absent[0]!r} (--metric); its "
                         f"rows have {', '.join(has) or 'no numbers'}")
    session = hashlib.sha256(text.encode()).hexdigest()[:12]  # the file's own measurement
    env = {**report.env, "imported_from": str(path),
           **({} if complete else {"warnings": [*report.env.get("warnings", []),
                                                f"{Path(path).name} is cut short"]})}
    return RunFile(rev=Path(path).name, sha="", target="command", suite=fmt, env=env,
                   configs=configs, sessions={session: {"file": str(path)}})


def benchmark_file_note(fmt: Format, run_a: RunFile, run_b: RunFile) -> str:
    """What comparing two files means, in one sentence."""
    rounds = sorted({len(c.rounds) for run in (run_a, run_b) for c in run.configs})
    what = "repetition" if fmt == "gbench" else "sample"
    return (f"A and B are {fmt} JSON files ({run_a.rev}, {run_b.rev}), not measured "
            f"interleaved by abdiff: each {what} is taken as a round ({rounds[0]}"
            f"{f'-{rounds[-1]}' if len(rounds) > 1 else ''} per config) and the sides are "
            "compared unpaired; a change may be the machine's drift between the two runs")


def benchmark_metrics(given: list[str] | None, fmt: Format) -> list[str]:
    if fmt == "nvbench" and given:
        raise InputError("--metric is Google Benchmark's (nvbench's one metric is its cold GPU "
                         "time); leave it out")
    return list(given or DEFAULT_METRICS)

