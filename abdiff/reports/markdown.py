"""Markdown report: the pull-request comment.

Layout: the marker line `<!-- abdiff -->` (how `abdiff comment` finds its own
earlier comment to update instead of adding another), one bold verdict
sentence (which says how many configs were measured), the still-failing configs
and the unintended changes in tables, and everything else folded into
`<details>` so a clean run costs the reviewer one line.

Everything that comes from a benchmark or a repository (error lines, fact
values, kernel names, config ids, rev names, notes) goes through `escape()`:
it is posted by a bot account under the project's name, so it must not be able
to inject HTML, ping people, break out of a table, or fill the comment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from abdiff.records import ConfigResult, Result
from abdiff.reports import common

MARKER = "<!-- abdiff -->"
# GitHub rejects comment bodies over 65536 characters; stay well below.
MAX_CHARS = 60000
NOTES_CHARS = 8000  # the notes section; the rest goes to the tables
ZWJ = "\u200d"
# GitHub turns these into links or cross-references even as plain text.
_AUTOLINK_RE = re.compile(r"(?i)(?<![a-z0-9])(https?|www|gh)(?=://|\.|-\d)")
_BACKSLASH = set("\\`*_[]|~$!")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def escape(text: object, limit: int = common.TEXT_LIMIT) -> str:
    """Untrusted text as inert inline Markdown, safe in a paragraph or a table cell.

    - one line, control/format characters dropped, at most `limit` characters
      (cut before escaping so an escape is never cut in half);
    - `&`, `<`, `>` as entities: no raw HTML, no closing of our `<details>`;
    - backslash before `` \\ ` * _ [ ] | ~ $ ! ``: no code spans or fences,
      emphasis, links or images, math, and no `|` ending a table cell;
    - a zero-width joiner after `@`, before the digits of `#123`, and inside
      `http://`, `https://`, `www.` and `GH-123`: no @mention notifications, no
      links, no cross-references to other issues.
    """
    line = common.clip(text, limit)
    out: list[str] = []
    for i, ch in enumerate(line):
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch in _BACKSLASH:
            out.append("\\" + ch)
        elif ch == "@":
            out.append("@" + ZWJ)
        elif ch == "#" and line[i + 1 : i + 2].isdigit():
            out.append("#" + ZWJ)
        else:
            out.append(ch)
    return _AUTOLINK_RE.sub(lambda m: m.group(1) + ZWJ, "".join(out))


def _cell(lines: Iterable[str]) -> str:
    """Several escaped lines in one table cell (our own `<br>`, never the input's)."""
    return "<br>".join(escape(line) for line in lines)


def _row(cfg: ConfigResult, with_verdict: bool) -> str:
    cells = [escape(cfg.verdict)] if with_verdict else []
    cells += [
        escape(cfg.id, 120),
        _cell([common.status_cell(cfg), *common.error_lines(cfg)]),
        _cell(common.fact_changes(cfg)),
        _cell(common.kernel_changes(cfg)),
        escape(common.latency_cell(cfg.latency)),
    ]
    return "| " + " | ".join(cells) + " |"


def _table(configs: list[ConfigResult], with_verdict: bool, budget: int) -> list[str]:
    """A Markdown table; rows past `budget` characters are counted, not shown."""
    header = ["Config", "Status", "Facts changed", "Kernels (B vs A)", "Latency B/A"]
    if with_verdict:
        header.insert(0, "Verdict")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    used = sum(len(x) + 1 for x in lines)
    for shown, cfg in enumerate(configs):
        row = _row(cfg, with_verdict)
        if used + len(row) + 1 > budget:
            lines.append("")
            lines.append(f"... {len(configs) - shown} more not shown; see the JSON result.")
            break
        lines.append(row)
        used += len(row) + 1
    return lines


def render(result: Result) -> str:
    """The PR comment for `result`; the first line is exactly `<!-- abdiff -->`."""
    groups = common.grouped(result)
    still_failing = groups.pop("still-failing", [])
    unintended = groups.pop("unintended", [])
    rest = [cfg for cfgs in groups.values() for cfg in cfgs]
    code = common.exit_code(result)
    if code == 1 or unintended:
        icon = ":x:"
    elif code != 0:
        icon = ":warning:"  # nothing measured: no green mark for a run that checked nothing
    elif still_failing or "inconclusive" in groups:
        icon = ":grey_question:"
    else:
        icon = ":white_check_mark:"
    lines = [
        MARKER,
        f"{icon} **abdiff: {escape(common.verdict_line(result))}** "
        f"({escape(common.summary_sentence(result))}).",
        "",
        " · ".join(f"{escape(k)}: {escape(v)}" for k, v in common.context_items(result)),
    ]
    notes = [*common.notes(result), *common.only_in_lines(result)]
    used = 0
    for shown, note in enumerate(notes):
        line = f"Note: {escape(note, 400)}"
        if used + len(line) > NOTES_CHARS:
            lines += ["", f"... {len(notes) - shown} more notes in the JSON result."]
            break
        lines += ["", line]
        used += len(line) + 2

    if still_failing:  # never folded away: these configs were not measured at all
        lines += ["", "#### Still failing (the same failure on both sides: not measured)", ""]
        lines += _table(still_failing, with_verdict=False, budget=MAX_CHARS // 4)
    if unintended:
        lines += ["", "#### Unintended changes", ""]
        lines += _table(unintended, with_verdict=False, budget=MAX_CHARS // 2)
    if rest:
        tally = common.counts(result)
        parts = [f"{tally[v]} {v}" for v in groups if v in common.VERDICT_ORDER]
        other = {c.verdict for c in rest} - set(common.VERDICT_ORDER)
        parts += [f"{tally[v]} {escape(v)}" for v in sorted(other)]
        used = sum(len(x) + 1 for x in lines)
        lines += [
            "",
            f"<details><summary>Other configs: {', '.join(parts)}</summary>",
            "",
            *_table(rest, with_verdict=True, budget=MAX_CHARS - used - 200),
            "",
            "</details>",
        ]
    return "\n".join(lines) + "\n"
