"""HTML report: one self-contained page (no scripts, no external assets).

A page that can be attached as a CI artifact and opened offline, years later:
the verdict and counts, a legend, one forest plot of the latency ratios B/A
coloured by direction, then per verdict group a card per config with its
A and B round medians (a strip plot), absolute times, facts, the full kernel
diff (collapsible) and the failure lines. Plots are inline SVG whose x
positions are percentages, so they stretch from a phone to a wide screen
without distorting the marks.

The page is a Jinja2 template with autoescape: every benchmark-supplied string
reaches it as plain (clipped) text and is escaped there, so it can never
become markup.
"""

from __future__ import annotations

import functools
import math
import statistics
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING

from abdiff.reports import common
from abdiff.store.records import ConfigResult, LatencyResult, Result

# Direction colours (forest plot, legend) and side colours (strip plots).
DIRECTION_COLOURS = MappingProxyType({"slower": "#c62828", "faster": "#2e7d32",
                                      "unchanged": "#607d8b", "inconclusive": "#ef6c00"})
SIDE_COLOURS = MappingProxyType({"A": "#1565c0", "B": "#8e24aa"})
OPEN_VERDICTS = ("still-failing", "unintended", "expected")  # cards shown unfolded


if TYPE_CHECKING:
    from jinja2 import Template


@functools.cache
def _page() -> Template:
    """The page layout (report.html.j2, package data); autoescape is what keeps benchmark text
    inert. jinja2 is imported here: `abdiff comment` (markdown only) runs without it."""
    from jinja2 import Environment

    return Environment(autoescape=True).from_string(
        resources.files("abdiff.reports").joinpath("report.html.j2").read_text(encoding="utf-8"))

PLOT_LEFT, PLOT_RIGHT = 4.0, 98.0  # percent of the plot width the data may use


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _ratio_ci(lat: LatencyResult) -> tuple[float, float, float] | None:
    """(ratio, low, high) when the config has a plottable ratio; the CI may be absent."""
    ratio = lat.ratio
    if ratio is None or not _finite(ratio):
        return None
    low = high = float(ratio)
    ci = lat.ci or []
    if len(ci) == 2 and all(_finite(x) for x in ci):
        low, high = float(min(ci)), float(max(ci))
    return float(ratio), low, high


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` round tick values (steps of 1, 2 or 5 times a power of ten)."""
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step)
    return [round(i * step, 10) for i in range(first, math.floor(hi / step) + 1)]


class _Axis:
    """Data values -> percent positions in [PLOT_LEFT, PLOT_RIGHT]."""

    def __init__(self, values: list[float]) -> None:
        lo, hi = min(values), max(values)
        pad = (hi - lo) * 0.08 or abs(hi) * 0.01 or 0.01
        self.lo, self.hi = lo - pad, hi + pad

    def pos(self, value: float) -> str:
        share = (value - self.lo) / (self.hi - self.lo)
        return f"{PLOT_LEFT + share * (PLOT_RIGHT - PLOT_LEFT):.2f}"

    def ticks(self, fmt: str, count: int = 5) -> list[dict]:
        return [{"pos": self.pos(t), "text": format(t, fmt)}
                for t in ticks(self.lo, self.hi, count)]


def _decided_ratio(cfg: ConfigResult) -> tuple[float, float, float] | None:
    """The plotted (ratio, low, high) of a decided config; None for the others."""
    if cfg.latency.verdict not in ("slower", "faster", "unchanged"):
        return None
    return _ratio_ci(cfg.latency)


def _forest(configs: list[ConfigResult], effect: float, max_rounds: int | None
            ) -> tuple[list[dict], list, list]:
    """Rows, grid lines and ticks of the forest plot of the decided configs."""
    rows = [(c, r) for c in configs if (r := _decided_ratio(c)) is not None]
    if not rows:
        return [], [], []
    points = [v for _, ratio_ci in rows for v in ratio_ci]
    axis = _Axis([*points, 1.0 - effect, 1.0 + effect])
    grid = [{"pos": axis.pos(1.0), "stroke": "#333", "dash": False}]
    grid += [{"pos": axis.pos(e), "stroke": "#999", "dash": True}
             for e in (1.0 - effect, 1.0 + effect)]
    out = []
    for cfg, (ratio, low, high) in rows:
        out.append({"id": common.clip(cfg.id, 120),
                    "value": common.latency_cell(cfg.latency, max_rounds),
                    "ratio": axis.pos(ratio), "low": axis.pos(low), "high": axis.pos(high),
                    "colour": DIRECTION_COLOURS.get(cfg.latency.verdict, "#333")})
    return out, grid, axis.ticks("g")


def _strip(lat: LatencyResult) -> dict | None:
    """The strip plot of one config's round medians, A above B, on one µs axis."""
    sides = [("A", lat.a_rounds_us), ("B", lat.b_rounds_us)]
    values = [v for _, vs in sides for v in vs if _finite(v)]
    if not values:
        return None
    axis = _Axis(values)
    rows = []
    for i, (name, medians) in enumerate(sides):
        finite = [v for v in medians if _finite(v)]
        rows.append({
            "name": name, "y": 14 + 22 * i, "colour": SIDE_COLOURS[name],
            "marks": [{"pos": axis.pos(v), "n": n, "text": common.us_text(v)}
                      for n, v in enumerate(medians, start=1) if _finite(v)],
            "median": axis.pos(statistics.median(finite)) if finite else None,
        })
    return {"height": 76, "sides": rows, "ticks": [
        {**t, "text": f"{t['text']} µs"} for t in axis.ticks("g", 4)]}


def _extras(lat: LatencyResult) -> list[tuple[str, str]]:
    """Statistics worth a line when present: the detectable change, the rounds."""
    out = []
    detectable = lat.detectable
    if detectable is not None and _finite(detectable) and detectable < 1:
        out.append(("detectable", f"a change of {detectable:.1%} or more (80% power)"))
    elif detectable is not None and lat.verdict == "inconclusive":  # common.latency_details
        out.append(("detectable", "undecidable at this noise (only changes over 100%, 80% "
                    "power)"))
    out.append(("rounds", f"A {lat.rounds_a}, B {lat.rounds_b}"))
    return out


def _card(cfg: ConfigResult, groups: list[common.KernelGroup], max_rounds: int | None) -> dict:
    group = common.group_of(cfg, groups)
    facts = []
    for name in sorted(cfg.facts_changed):
        pair = cfg.facts_changed[name]
        a, b = (list(pair) + [None, None])[:2]
        facts.append((common.clip(name, 120), common.value_text(a, 200),
                      common.value_text(b, 200)))
    extras = _extras(cfg.latency)
    if cfg.kernel_deltas:
        extras.append(("kernels behind it", "; ".join(common.root_cause_lines(cfg, 2000))))
    return {
        "id": common.clip(cfg.id, 120),
        "anchor": "cfg-" + "".join(ch if ch.isalnum() or ch in "-_" else "_"
                                   for ch in common.clip(cfg.id, 120)),
        "params": common.params_text(cfg),
        "status": common.status_cell(cfg),
        "errors": common.error_lines(cfg, limit=2000),
        "times": common.times_cell(cfg.latency),
        "latency": common.latency_cell(cfg.latency, max_rounds),
        "method": common.clip(cfg.latency.method or "", 160),
        "extras": extras,
        "facts": facts,
        "kernels": common.kernel_changes(cfg, limit=10**6, width=2000),
        "kernel_group": f"{len(group.ids)} configs ({group.label})" if group else "",
        "strip": _strip(cfg.latency),
    }


def render(result: Result) -> str:
    """The whole page for `result`, self-contained."""
    facts = common.run_facts(result)
    effect = facts.min_effect
    configs = common.ordered(result)
    forest, grid, forest_ticks = _forest(configs, effect, facts.max_rounds)
    kernel_groups = common.kernel_groups(configs)
    tally = common.counts(result)
    tone = "fail" if tally["unintended"] else "pass" if common.passed(result) else "warn"
    return _page().render(
        headline=common.verdict_line(result),
        tone=tone,
        summary=common.summary_sentence(result),
        next_step=common.next_step(result),
        context=[*common.context_items(result), *common.environment_items(result)],
        notes=[*common.notes(result), *common.only_in_lines(result)],
        directions=list(DIRECTION_COLOURS.items()),
        sides=list(SIDE_COLOURS.items()),
        effect=f"{effect:.1%}",
        alpha=common.percent(facts.alpha),
        forest=forest, grid=grid, ticks=forest_ticks,
        groups=[{"verdict": verdict, "title": verdict.capitalize(),
                 "open": verdict in OPEN_VERDICTS,
                 "cards": [_card(cfg, kernel_groups, facts.max_rounds) for cfg in cfgs]}
                for verdict, cfgs in common.grouped(result).items()],
    )
