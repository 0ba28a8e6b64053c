"""The bisect report in every format: culprits first, their evidence, then the path taken.

The evidence of a culprit is the ordinary comparison `culprit^..culprit`,
rendered by the ordinary report format of the same name, so a bisect reads
like any abdiff report; the JSON document is `abdiff.bisect/1`.
"""

from __future__ import annotations

import html as html_lib

from abdiff.errors import InputError
from abdiff.reports import FORMATS, table
from abdiff.reports.common import NOTE_LIMIT
from abdiff.reports.markdown import escape
from abdiff.store.records import Result, dump_json
from abdiff.verdict.bisection import BisectResult, Commit, Culprit


def commit_line(commit: Commit) -> str:
    return f"{commit.sha[:12]} {commit.subject} ({commit.author}, {commit.date})"


def culprit_sentence(culprit: Culprit) -> str:
    configs = ", ".join(culprit.configs)
    if culprit.confirmed:
        undecided = (f" (its latency move was not decided there for "
                     f"{', '.join(culprit.latency_undecided)}: the facts and kernels identify it)"
                     if culprit.latency_undecided else "")
        return (f"culprit {commit_line(culprit.commit)}: changed {configs}; confirmed, its "
                f"parent..itself shows the same change{undecided}")
    start = culprit.spread_from.sha[:12] if culprit.spread_from else "?"
    end = culprit.commit.sha[:12]
    return (f"first commit showing the whole change: {commit_line(culprit.commit)} for "
            f"{configs}; NOT confirmed: its parent..itself shows only part of the change or "
            f"none, so the change may be spread over the commits {start}..{end}")


def headline(result: BisectResult) -> list[str]:
    """The answer in plain lines, the same in every text format."""
    if not result.configs:
        return [f"nothing to bisect: {result.a.sha[:12]}..{result.b.sha[:12]} shows no change to "
                "find in the configs given (or no unintended one)"]
    lines = [culprit_sentence(c) for c in result.culprits]
    lines += [f"not found for {config}: {why}" for config, why in sorted(result.unresolved.items())]
    if result.skipped:
        lines.append("skipped (could not run the benchmark): "
                     + ", ".join(c.sha[:12] for c in result.skipped))
    return lines


def path_rows(result: BisectResult) -> list[tuple[str, str, str]]:
    """(commit, subject, outcomes) per tested commit, in the order they were tested."""
    return [(s.commit.sha[:12], s.commit.subject,
             ", ".join(f"{cid}: {o}" for cid, o in sorted(s.outcomes.items())))
            for s in result.steps]


def _table(result: BisectResult, ends: Result, width: int | None = None) -> str:
    """The terminal report, every line within `width` (the terminal's by default): the
    sentences and the path taken wrap at spaces, the evidence is the ordinary table."""
    width = width or table.terminal_width()
    out = [f"abdiff bisect {result.a.sha[:12]}..{result.b.sha[:12]}: {len(result.steps)} "
           "commits tested", *headline(result)]
    for culprit in result.culprits:
        if culprit.evidence is not None:
            out += ["", f"evidence: {culprit.commit.sha[:12]}^..{culprit.commit.sha[:12]}",
                    table.render(culprit.evidence, width=width).rstrip()]
    out += ["", "path taken:"]
    out += [f"  {sha} {subject}: {outcomes}" for sha, subject, outcomes in path_rows(result)]
    out += ["", f"the change searched (A..B): {len(ends.configs)} configs compared"]
    return table.fit("\n".join(out), width) + "\n"


def _markdown(result: BisectResult, ends: Result) -> str:
    out = [f"### abdiff bisect `{result.a.sha[:12]}..{result.b.sha[:12]}`", ""]
    out += [f"- {escape(line, NOTE_LIMIT)}" for line in headline(result)]
    for culprit in result.culprits:
        if culprit.evidence is not None:
            out += ["", f"<details><summary>evidence: {escape(culprit.commit.sha[:12])}^.."
                    f"{escape(culprit.commit.sha[:12])}</summary>", "",
                    FORMATS["markdown"].render(culprit.evidence).rstrip(), "", "</details>"]
    out += ["", "| tested commit | subject | outcome per config |", "|---|---|---|"]
    out += [f"| `{sha}` | {escape(subject)} | {escape(outcomes, NOTE_LIMIT)} |"
            for sha, subject, outcomes in path_rows(result)]
    return "\n".join(out) + "\n"


def _html(result: BisectResult, ends: Result) -> str:
    e = html_lib.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             "<title>abdiff bisect</title></head><body>",
             f"<h1>abdiff bisect {e(result.a.sha[:12])}..{e(result.b.sha[:12])}</h1><ul>"]
    parts += [f"<li>{e(line)}</li>" for line in headline(result)]
    parts.append("</ul><h2>Path taken</h2><table><tr><th>commit</th><th>subject</th>"
                 "<th>outcome per config</th></tr>")
    parts += [f"<tr><td><code>{e(sha)}</code></td><td>{e(subject)}</td><td>{e(outcomes)}</td>"
              "</tr>" for sha, subject, outcomes in path_rows(result)]
    parts.append("</table>")
    for culprit in result.culprits:
        if culprit.evidence is not None:
            # the ordinary HTML report of culprit^..culprit, framed so its page stays intact
            page = FORMATS["html"].render(culprit.evidence)
            parts.append(f"<h2>Evidence: {e(culprit.commit.sha[:12])}</h2><iframe "
                         f"sandbox style='width:100%;height:40em' srcdoc=\"{e(page)}\"></iframe>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render(result: BisectResult, ends: Result, fmt: str, width: int | None = None) -> str:
    """`result` in `fmt`; `width` (the terminal's by default) only for the table."""
    if fmt == "json":
        return dump_json(result.to_json())
    if fmt == "table":
        return _table(result, ends, width)
    renderers = {"table": _table, "markdown": _markdown, "html": _html}
    if fmt not in renderers:
        raise InputError(f"unknown report format '{fmt}' (choose from json, "
                         f"{', '.join(renderers)})")
    return renderers[fmt](result, ends)
