"""`abdiff history` reports: a terminal table per config and a self-contained HTML page
whose plot (inline SVG, no scripts, like the result page) shows each config's time per
step across baselines and recorded runs, in the spirit of asv's graphs: one mark per
point with its spread as an error bar, baselines as diamonds, and a dashed line where
the facts or the kernels changed from the point before.
"""

from __future__ import annotations

from importlib import resources
from types import MappingProxyType
from typing import Any

from jinja2 import Environment

from abdiff.reports import common, table
from abdiff.reports.html import PLOT_LEFT, PLOT_RIGHT, ticks
from abdiff.store.history import History, Point, Snapshot

_PAGE = Environment(autoescape=True).from_string(
    resources.files("abdiff.reports").joinpath("history.html.j2").read_text(encoding="utf-8"))
KIND_COLOURS = MappingProxyType({"baseline": "#00838f", "run": "#1565c0"})
CHANGE_COLOUR = "#c62828"
PLOT_HEIGHT, PLOT_TOP, PLOT_BOTTOM = 220, 12, 190  # px: the y axis (time) runs top to bottom
KERNELS_SHOWN = 6
TERMINAL_KERNELS = 3  # of each kind, names cut to 160 characters: the HTML lists more


def latency_text(shot: Snapshot) -> str:
    """"1967 µs ±140" (median of the round medians ± their spread), "-" without a time."""
    if shot.median_us is None:
        return "-"
    spread = "" if shot.spread_us is None else f" ±{common.significant(shot.spread_us, 2)}"
    return common.us_text(shot.median_us) + spread


def status_text(shot: Snapshot) -> str:
    return shot.status if shot.error is None else f"{shot.status}: {common.clip(shot.error, 120)}"


def facts_text(facts: dict[str, Any]) -> str:
    return ", ".join(f"{name}={common.value_text(value)}" for name, value in sorted(facts.items()))


def kernels_text(kernels: dict[str, int], limit: int = KERNELS_SHOWN, width: int = 80) -> str:
    names = sorted(kernels, key=common.headline_first)
    shown = [f"{common.clip(name, width)} x{kernels[name]}" for name in names[:limit]]
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(shown) + more


def changes(before: Snapshot | None, now: Snapshot, shown: int = KERNELS_SHOWN,
            width: int = 200) -> list[str]:
    """What differs from the config's previous point: status, facts, kernels (`shown`
    of each kind, names cut to `width`); the first point lists its facts and kernels."""
    error = [f"error: {common.clip(now.error)}"] if now.error else []
    if before is None:
        return [*error, f"facts: {facts_text(now.facts) or 'none'}",
                f"kernels ({len(now.kernels)}): "
                f"{kernels_text(now.kernels, shown, width) or 'none'}"]
    out = []
    if before.status != now.status:
        out += [f"status {before.status} -> {now.status}", *error]
    facts = [f"{name} {common.value_text(before.facts.get(name))} -> "
             f"{common.value_text(now.facts.get(name))}"
             for name in sorted(set(before.facts) | set(now.facts))
             if before.facts.get(name) != now.facts.get(name)]
    if facts:
        out.append("facts: " + "; ".join(facts))
    added = {k: v for k, v in now.kernels.items() if before.kernels.get(k) != v}
    removed = {k: v for k, v in before.kernels.items() if now.kernels.get(k) != v}
    if now.kernels and before.kernels and (added or removed):
        listed = [f"+{common.clip(k, width)} x{v}" for k, v in sorted(added.items())][:shown] \
            + [f"-{common.clip(k, width)} x{v}" for k, v in sorted(removed.items())][:shown]
        more = len(added) + len(removed) - len(listed)
        out.append(f"kernels +{len(added)} -{len(removed)}: " + ", ".join(listed)
                   + (f" (+{more} more)" if more > 0 else ""))
    return out


def _series(history: History, config_id: str, shown: int = KERNELS_SHOWN, width: int = 200
            ) -> list[tuple[Point, Snapshot, list[str]]]:
    """The config's points (grouped by commit, store.history.collect), each with what
    changed: the first point of a commit against the last point of the commit before it,
    a later point of the same commit against that commit's first point (they should
    agree). A point measured another way (launcher, device, timing) than the one it is
    compared with says so and leaves its kernels out: they differ without a change."""
    out: list[tuple[Point, Snapshot, list[str]]] = []
    before: tuple[Point, Snapshot] | None = None  # the previous commit's last point
    opened: tuple[Point, Snapshot] | None = None  # this commit's first point
    last: tuple[Point, Snapshot] | None = None
    for point in history.points:
        shot = point.configs.get(config_id)
        if shot is None:
            continue
        if opened is not None and opened[0].sha != point.sha:
            before, opened = last, None
        against = opened or before
        if against is None:
            said = changes(None, shot, shown, width)
        elif against[0].setup != point.setup and against[0].setup and point.setup:
            said = [f"measured as {point.setup} ({against[0].source}: {against[0].setup}): "
                    "kernels not compared",
                    *(line for line in changes(against[1], shot, shown, width)
                      if not line.startswith("kernels"))]
        else:
            said = changes(against[1], shot, shown, width)
        out.append((point, shot, said))
        opened = opened or (point, shot)
        last = (point, shot)
    return out


def _when(iso: str) -> str:
    return iso[:16].replace("T", " ") if iso else "?"


def points_text(points: tuple[Point, ...]) -> str:
    """"6 points: 2 baselines, 4 sides of 2 recorded runs"."""
    baselines = sum(p.kind == "baseline" for p in points)
    sides = [p.run for p in points if p.run is not None]
    runs = len(set(sides))

    def many(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    return (f"{many(len(points), 'point')}: {many(baselines, 'baseline')}, "
            f"{many(len(sides), 'side')} of {many(runs, 'recorded run')}")


def render_table(history: History, width: int) -> str:
    """A block per config, and in it a block per commit (its rev and sha once, then a line
    per point of that commit: when, source, status, time, how it was measured), each point
    followed by what changed (`_series`), indented; every line wrapped to `width`."""
    lines = table.wrap([f"abdiff history: {points_text(history.points)} "
                        f"({history.searched})"], width, "    ")
    header = ("measured", "source", "status", "time per step", "measured as")
    for config_id in history.config_ids:
        series = _series(history, config_id, TERMINAL_KERNELS, 160)
        commits = len({p.sha for p, _, _ in series})
        lines += ["", f"{config_id}: {len(series)} points on {commits} commit"
                  f"{'' if commits == 1 else 's'}"]
        rows = [(_when(p.when), p.source, s.status, latency_text(s), p.setup or "?")
                for p, s, _ in series]
        widths = [max([len(h)] + [len(common.clip(r[i], 40)) for r in rows])
                  for i, h in enumerate(header)]
        lines += table.wrap(["    " + "  ".join(h.ljust(w) for h, w in zip(header, widths,
                                                                          strict=True))],
                            width, "        ")
        sha = ""
        for row, (point, _, said) in zip(rows, series, strict=True):
            if point.sha != sha:
                sha = point.sha
                lines += table.wrap([f"  {common.clip(point.rev, 80)} ({point.sha[:10]})"],
                                    width, "      ")
            cells = [common.clip(cell, 40).ljust(w) for cell, w in zip(row, widths, strict=True)]
            lines += table.wrap([("    " + "  ".join(cells)).rstrip()], width, "        ")
            lines += table.wrap([f"      {text}" for text in said], width, "        ")
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _plot(history: History, config_id: str) -> dict:
    """The SVG plot of one config: x the points in time order (percent), y time (px)."""
    series = _series(history, config_id)
    values = [v for _, s, _ in series if s.median_us is not None
              for v in (s.median_us - (s.spread_us or 0), s.median_us + (s.spread_us or 0))]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (hi - lo) * 0.1 or hi * 0.05 or 1.0
    lo, hi = max(lo - pad, 0.0), hi + pad

    def y(value: float) -> str:
        return f"{PLOT_BOTTOM - (value - lo) / (hi - lo) * (PLOT_BOTTOM - PLOT_TOP):.1f}"

    def x(index: int) -> str:
        share = index / (len(series) - 1) if len(series) > 1 else 0.5
        return f"{PLOT_LEFT + 4 + share * (PLOT_RIGHT - PLOT_LEFT - 8):.2f}"

    marks = []
    for i, (point, shot, said) in enumerate(series):
        low = shot.median_us - (shot.spread_us or 0) if shot.median_us is not None else None
        high = shot.median_us + (shot.spread_us or 0) if shot.median_us is not None else None
        marks.append({
            "x": x(i), "kind": point.kind, "colour": KIND_COLOURS[point.kind],
            "y": y(shot.median_us) if shot.median_us is not None else None,
            "low": y(low) if low is not None else None,
            "high": y(high) if high is not None else None,
            "label": point.source.removeprefix("baseline ") if point.kind == "baseline"
            else point.rev,
            "title": f"{point.source}: {point.rev} ({point.sha[:10]}), {_when(point.when)}, "
                     f"{status_text(shot)}, {latency_text(shot)}",
            "changed": bool(i and said), "change": "; ".join(said) if i else "",
            "failed": shot.status != "ok",
        })
    segments = [{"x1": a["x"], "y1": a["y"], "x2": b["x"], "y2": b["y"]}
                for a, b in zip(marks, marks[1:], strict=False) if a["y"] and b["y"]]
    return {"height": PLOT_HEIGHT, "marks": marks, "segments": segments,
            "ticks": [{"y": y(t), "text": f"{t:g} µs"} for t in ticks(lo, hi, 4)]}


def render_html(history: History) -> str:
    """The page: per config its plot, then the table of its points."""
    configs = []
    for config_id in history.config_ids:
        series = _series(history, config_id, KERNELS_SHOWN, 90)
        configs.append({
            "id": common.clip(config_id, 120), "plot": _plot(history, config_id),
            "rows": [{"when": _when(p.when), "source": p.source, "kind": p.kind,
                      "rev": f"{common.clip(p.rev, 60)} ({p.sha[:10]})", "machine": p.machine,
                      "status": s.status, "time": latency_text(s),
                      "rounds": s.rounds, "changes": said}
                     for p, s, said in series],
        })
    return _PAGE.render(count=len(history.points), searched=history.searched,
                        configs=configs, kinds=list(KIND_COLOURS.items()),
                        change_colour=CHANGE_COLOUR)
