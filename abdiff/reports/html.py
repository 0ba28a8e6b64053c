"""HTML report: one self-contained page (no scripts, no external assets).

A page that can be attached as a CI artifact and opened offline, years later:
the summary, then per verdict group a forest plot of the latency ratios B/A
with their confidence intervals (inline SVG) and a table of what changed.
All text goes through `_e` (clip, then html.escape), so benchmark output can
never become markup.
"""

from __future__ import annotations

import math
from html import escape

from abdiff.records import ConfigResult, Result
from abdiff.reports import common

ROW_H = 22
LABEL_W = 300
PLOT_W = 420
VALUE_W = 380  # fits "1.113x [0.870, 1.425] p=1.000 (inconclusive)"
TOP = 8
AXIS_H = 34
_COLORS = {"slower": "#c62828", "faster": "#2e7d32", "unchanged": "#546e7a",
           "inconclusive": "#ef6c00"}
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; vertical-align: top; text-align: left; }
th { background: #f3f3f3; }
td.mono, .mono { font-family: ui-monospace, monospace; }
.unintended h2 { color: #c62828; }
dl.context { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.context dt { font-weight: bold; } dl.context dd { margin: 0; }
svg text { font-family: ui-monospace, monospace; font-size: 11px; }
"""


def _e(text: object, limit: int = common.TEXT_LIMIT) -> str:
    """Untrusted text as HTML: one clipped line, every special character escaped."""
    return escape(common.clip(text, limit), quote=True)


def _lines(lines: list[str]) -> str:
    return "<br>".join(_e(line) for line in lines)


def _finite_ci(cfg: ConfigResult) -> tuple[float, float, float] | None:
    """(ratio, low, high) when the config has a plottable ratio; the CI may be absent."""
    lat = cfg.latency
    if not isinstance(lat.ratio, int | float) or not math.isfinite(lat.ratio):
        return None
    low = high = float(lat.ratio)
    ci = lat.ci or []
    if len(ci) == 2 and all(isinstance(x, int | float) and math.isfinite(x) for x in ci):
        low, high = float(min(ci)), float(max(ci))
    return float(lat.ratio), low, high


def _axis_range(result: Result, effect: float) -> tuple[float, float]:
    """One x range for every plot of the page, so groups can be compared by eye."""
    values = [1.0 - effect, 1.0 + effect]
    for cfg in result.configs:
        point = _finite_ci(cfg)
        if point:
            values += list(point)
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or 0.01
    return lo - pad, hi + pad


def _ticks(lo: float, hi: float) -> list[float]:
    """About five round tick values (steps of 1, 2 or 5 times a power of ten)."""
    raw = (hi - lo) / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step)
    return [round(i * step, 10) for i in range(first, math.floor(hi / step) + 1)]


def forest_plot(configs: list[ConfigResult], lo: float, hi: float, effect: float) -> str:
    """An inline SVG forest plot: per config a dot at the ratio and a line for its CI.

    A solid vertical line marks 1.0 (no change), dashed lines 1 +/- min_effect
    (the practical threshold the verdicts use).
    """
    width = LABEL_W + PLOT_W + VALUE_W
    height = TOP + ROW_H * len(configs) + AXIS_H

    def x(value: float) -> float:
        return LABEL_W + (value - lo) / (hi - lo) * PLOT_W

    bottom = TOP + ROW_H * len(configs)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="latency ratio B/A with CI">'
    ]
    for tick in _ticks(lo, hi):
        out.append(f'<line x1="{x(tick):.1f}" y1="{bottom}" x2="{x(tick):.1f}" y2="{bottom + 4}" '
                   'stroke="#333" />')
        out.append(f'<text x="{x(tick):.1f}" y="{bottom + 16}" text-anchor="middle">'
                   f"{tick:g}</text>")
    out.append(f'<line x1="{LABEL_W}" y1="{bottom}" x2="{LABEL_W + PLOT_W}" y2="{bottom}" '
               'stroke="#333" />')
    out.append(f'<text x="{LABEL_W + PLOT_W / 2}" y="{bottom + 30}" text-anchor="middle">'
               "latency ratio B/A</text>")
    out.append(f'<line x1="{x(1.0):.1f}" y1="{TOP}" x2="{x(1.0):.1f}" y2="{bottom}" '
               'stroke="#333" />')
    for edge in (1.0 - effect, 1.0 + effect):
        out.append(f'<line x1="{x(edge):.1f}" y1="{TOP}" x2="{x(edge):.1f}" y2="{bottom}" '
                   'stroke="#888" stroke-dasharray="4 3" />')
    for i, cfg in enumerate(configs):
        y = TOP + ROW_H * i + ROW_H / 2
        cell = common.latency_cell(cfg.latency)
        out.append(f"<g><title>{_e(cfg.id, 120)}: {_e(cell)}</title>")
        out.append(f'<text x="{LABEL_W - 8}" y="{y + 4:.1f}" text-anchor="end">'
                   f"{_e(cfg.id, 40)}</text>")
        point = _finite_ci(cfg)
        if point:
            ratio, low, high = point
            color = _COLORS.get(cfg.latency.verdict, "#333")
            out.append(f'<line x1="{x(low):.1f}" y1="{y:.1f}" x2="{x(high):.1f}" y2="{y:.1f}" '
                       f'stroke="{color}" stroke-width="2" />')
            out.append(f'<circle cx="{x(ratio):.1f}" cy="{y:.1f}" r="4" fill="{color}" />')
        out.append(f'<text x="{LABEL_W + PLOT_W + 8}" y="{y + 4:.1f}">{_e(cell, 60)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _table(configs: list[ConfigResult]) -> str:
    head = ("Config", "Parameters", "Status", "Facts changed", "Kernels (B vs A)", "Latency B/A")
    rows = ["<table>", "<thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead>",
            "<tbody>"]
    for cfg in configs:
        cells = [
            f'<td class="mono">{_e(cfg.id, 120)}</td>',
            f"<td>{_e(common.params_text(cfg))}</td>",
            f"<td>{_lines([common.status_cell(cfg), *common.error_lines(cfg, limit=500)])}</td>",
            f'<td class="mono">{_lines(common.fact_changes(cfg))}</td>',
            f'<td class="mono">{_lines(common.kernel_changes(cfg))}</td>',
            f"<td>{_e(common.latency_cell(cfg.latency))}</td>",
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    rows += ["</tbody>", "</table>"]
    return "\n".join(rows)


def render(result: Result) -> str:
    """The whole page for `result`, self-contained."""
    effect = common.min_effect(result)
    lo, hi = _axis_range(result, effect)
    title = f"abdiff: {common.sides_line(result)}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>abdiff: {_e(common.verdict_line(result))}</h1>",
        f'<p class="summary">{_e(common.summary_sentence(result))}.</p>',
        '<dl class="context">',
    ]
    for key, value in common.context_items(result):
        parts.append(f"<dt>{_e(key)}</dt><dd>{_e(value)}</dd>")
    parts.append(f"<dt>min effect</dt><dd>{effect:.1%}</dd>")
    parts.append("</dl>")
    notes = [*common.notes(result), *common.only_in_lines(result)]
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{_e(n, 400)}</li>" for n in notes)
                     + "</ul>")
    for verdict, configs in common.grouped(result).items():
        parts += [
            f'<section class="{_e(verdict, 40)}">',
            f"<h2>{_e(verdict.capitalize(), 40)} ({len(configs)})</h2>",
            forest_plot(configs, lo, hi, effect),
            _table(configs),
            "</section>",
        ]
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"
