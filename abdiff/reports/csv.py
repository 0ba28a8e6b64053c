"""CSV report (`--format csv`): the result as one table for spreadsheets and pandas.

Three rows per config: side `A` and side `B` (what each side measured: status,
time per step with its spread, rounds, the facts and kernels that differ from
the other side), then side `B/A` (the comparison: verdict, status change, the
latency ratio with its interval and p). The columns are the same for every row;
a row leaves the others' columns empty. docs/reports.md lists them.

Text from the benchmark (errors, fact values, kernel names) is untrusted: a cell
is `printable` (no escape sequence reaches a terminal that shows the file, no line of
it is a CI command), and one that a spreadsheet would read as a formula (`=`, `+`, `-`,
`@`, tab, CR first) is prefixed with `'` (OWASP, "CSV injection"); numbers are written
as numbers.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from abdiff.reports.common import ordered, side_times, value_text
from abdiff.reports.printable import printable
from abdiff.store.records import ConfigResult, Result
from abdiff.targets.layerwise import MATRIX_KEYS

SIDE_COLUMNS = ("rev", "sha", "status", "error", "rounds", "time_us", "spread_us",
                "round_medians_us", "facts", "kernels_only_here")
RESULT_COLUMNS = ("verdict", "in_scope", "status_change", "latency_verdict", "ratio", "ci_low",
                  "ci_high", "p", "detectable", "note")
COLUMNS = ("config", "side", *MATRIX_KEYS, *SIDE_COLUMNS, *RESULT_COLUMNS)
FORMULA_FIRST = ("=", "+", "-", "@", "\t", "\r")


def _text(value: Any) -> str:
    """A text cell no terminal, CI log or spreadsheet acts on."""
    text = "" if value is None else printable(value)
    return "'" + text if text.startswith(FORMULA_FIRST) else text


def _number(value: float | None, digits: int = 6) -> str:
    return "" if value is None else f"{value:.{digits}g}"


def _side_row(result: Result, cfg: ConfigResult, side: str) -> dict[str, str]:
    is_a = side == "A"
    where = result.a if is_a else result.b
    latency = cfg.latency
    times = side_times(latency).get(side)
    index = 0 if is_a else 1
    kernels = cfg.kernels_removed if is_a else cfg.kernels_added
    return {
        "rev": _text(where.baseline and f"baseline:{where.baseline}" or where.rev),
        "sha": where.sha,
        "status": cfg.status_a if is_a else cfg.status_b,
        "error": _text(cfg.error_a if is_a else cfg.error_b),
        "rounds": str(latency.rounds_a if is_a else latency.rounds_b),
        "time_us": _number(times[0]) if times else "",
        "spread_us": _number(times[1]) if times and times[1] is not None else "",
        "round_medians_us": " ".join(
            _number(v) for v in (latency.a_rounds_us if is_a else latency.b_rounds_us)),
        "facts": _text("; ".join(f"{name}={value_text(pair[index], 200)}"
                                 for name, pair in sorted(cfg.facts_changed.items()))),
        "kernels_only_here": _text("; ".join(f"{name} x{count}"
                                             for name, count in sorted(kernels.items()))),
    }


def _result_row(cfg: ConfigResult) -> dict[str, str]:
    latency = cfg.latency
    low, high = latency.ci if latency.ci else (None, None)
    return {
        "verdict": cfg.verdict,
        "in_scope": "true" if cfg.in_scope else "false",
        "status_change": cfg.status_change,
        "latency_verdict": latency.verdict,
        "ratio": _number(latency.ratio),
        "ci_low": _number(low),
        "ci_high": _number(high),
        "p": _number(latency.p, 4),
        "detectable": _number(latency.detectable, 4),
        "note": _text(latency.note),
    }


def render(result: Result) -> str:
    """`result` as CSV: a header, then rows A, B and B/A per config in reading order."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, restval="", lineterminator="\n")
    writer.writeheader()
    for cfg in ordered(result):
        params = {key: _text(cfg.params[key]) for key in MATRIX_KEYS if key in cfg.params}
        for side in ("A", "B"):
            writer.writerow({"config": _text(cfg.id), "side": side, **params,
                             **_side_row(result, cfg, side)})
        writer.writerow({"config": _text(cfg.id), "side": "B/A", **params, **_result_row(cfg)})
    return out.getvalue()
