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
from types import MappingProxyType

from abdiff.errors import InputError
from abdiff.reports import common
from abdiff.store.records import ConfigResult, Result

MARKER = "<!-- abdiff -->"
# GitHub rejects comment bodies over 65536 characters; stay well below.
MAX_CHARS = 60000
NOTES_CHARS = 8000  # the notes section; the rest goes to the tables
MAX_KERNEL_GROUPS = 12  # shared kernel diffs listed once; configs beyond keep their own cell
ZWJ = "\u200d"
# GitHub turns these into links or cross-references even as plain text.
# any scheme (ftp://, file://, ...) and mailto:, www. and GH-123 become links or references
_AUTOLINK_RE = re.compile(r"(?i)(?<![a-z0-9])([a-z][a-z0-9+.-]*(?=://)|mailto(?=:)|www(?=\.)"
                          r"|gh(?=-\d))")
_SHORTCODE_RE = re.compile(r"(?<![\w:]):(?=[\w+-]+:)")
_BACKSLASH = frozenset("\\`*_[]|~$!")
_ENTITIES = MappingProxyType({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def escape(text: object, limit: int = common.TEXT_LIMIT) -> str:
    """Untrusted text as inert inline Markdown, safe in a paragraph or a table cell.

    - one line, control/format characters dropped, at most `limit` characters
      (cut before escaping so an escape is never cut in half);
    - `&`, `<`, `>` as entities: no raw HTML, no closing of our `<details>`;
    - backslash before `` \\ ` * _ [ ] | ~ $ ! ``: no code spans or fences,
      emphasis, links or images, math, and no `|` ending a table cell;
    - a zero-width joiner after `@`, before the digits of `#123`, after the
      first `:` of an emoji shortcode, and inside `scheme://`, `mailto:`, `www.` and `GH-123`:
      no @mention notifications, no emoji shortcodes (a fake :white_check_mark:),
      no links, no cross-references to other issues.
    """
    # no :white_check_mark: emoji from a kernel's name (aten::bmm stays as it is)
    line = _SHORTCODE_RE.sub(":" + ZWJ, common.clip(text, limit))
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


def _row(cfg: ConfigResult, groups: list[common.KernelGroup], with_verdict: bool,
         with_times: bool, max_rounds: int | None) -> str:
    cells = [escape(cfg.verdict)] if with_verdict else []
    cells += [
        escape(cfg.id, 120),
        _cell([common.status_cell(cfg), *common.error_lines(cfg)]),
        _cell(common.fact_changes(cfg)),
        _cell(common.kernel_cell(cfg, groups)),
    ]
    if with_times:
        cells.append(escape(common.times_cell(cfg.latency)))
    # whole: GitHub wraps a cell at spaces; cut, the explanation would end mid-word
    cells.append(escape(common.latency_cell(cfg.latency, max_rounds), common.NOTE_LIMIT))
    return "| " + " | ".join(cells) + " |"


def _table(configs: list[ConfigResult], groups: list[common.KernelGroup], with_verdict: bool,
           budget: int, max_rounds: int | None) -> list[str]:
    """A Markdown table; rows past `budget` characters are counted, not shown.

    The time column only when the statistics gave some config its times.
    """
    with_times = any(common.times_cell(cfg.latency) for cfg in configs)
    header = ["Config", "Status", "Facts changed", "Kernels (B vs A)",
              *(["A / B time"] if with_times else []), "Latency B/A"]
    if with_verdict:
        header.insert(0, "Verdict")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    used = sum(len(x) + 1 for x in lines)
    for shown, cfg in enumerate(configs):
        row = _row(cfg, groups, with_verdict, with_times, max_rounds)
        if used + len(row) + 1 > budget:
            lines.append("")
            lines.append(f"... {len(configs) - shown} more not shown; see the JSON result.")
            break
        lines.append(row)
        used += len(row) + 1
    return lines


def _kernel_groups(groups: list[common.KernelGroup], budget: int) -> list[str]:
    """Each shared kernel diff once, with the configs it hit; lines past `budget`
    characters are counted, not shown (an escaped `&` is five characters: kernel names
    of the benchmark's choosing must not push the comment past GitHub's limit)."""
    lines: list[str] = []
    used = 0
    for number, group in enumerate(groups):
        block = ["", f"**{group.label}**: same kernel change in {len(group.ids)} configs "
                 f"({escape(', '.join(group.ids), 600)}):", ""]
        shown = [f"- {escape(line)}" for line in group.lines[:common.KERNEL_LINES * 3]]
        if len(group.lines) > len(shown):
            shown.append(f"- ... {len(group.lines) - len(shown)} more in the JSON result")
        size = sum(len(x) + 1 for x in block + shown)
        if used + size > budget:
            lines += ["", f"... {len(groups) - number} more kernel changes in the JSON result."]
            break
        lines += block + shown
        used += size
    return lines


def icon(result: Result) -> str:
    """:x: for an unintended change that fails the run, :white_check_mark: for a pass,
    :warning: otherwise (an unintended change in soft gate classes only included)."""
    if common.counts(result)["unintended"]:
        return ":x:" if common.exit_code(result) == 1 else ":warning:"
    return ":white_check_mark:" if common.passed(result) else ":warning:"


def render(result: Result, details_url: str | None = None) -> str:
    """The PR comment for `result`; the first line is exactly `<!-- abdiff -->`.

    The second line is the verdict a reviewer reads first; `details_url` (the
    HTML report or the CI run's artifacts, checked by `check_url`) becomes a
    link under it.
    """
    groups = common.grouped(result)
    max_rounds = common.run_facts(result).max_rounds
    kernel_groups = common.kernel_groups(common.ordered(result))[:MAX_KERNEL_GROUPS]
    failing = groups.pop("still-failing", [])
    unintended = groups.pop("unintended", [])
    rest = [cfg for cfgs in groups.values() for cfg in cfgs]
    lines = [
        MARKER,
        f"{icon(result)} **abdiff: {escape(common.verdict_line(result), common.NOTE_LIMIT)}**",
        "",
        f"{escape(common.summary_sentence(result), common.NOTE_LIMIT)}.",
        "",
        " · ".join(f"{escape(k)}: {escape(v)}" for k, v in common.context_items(result)),
        *(f"\n{escape(k)}: {escape(v, 600)}" for k, v in common.environment_items(result)),
    ]
    if details_url:
        lines += ["", f"[Full report and run artifacts]({check_url(details_url)})"]
    step = common.next_step(result)
    if step:  # what to do about the inconclusive configs, before the notes that explain them
        lines += ["", escape(step[0].upper() + step[1:], common.NOTE_LIMIT)]
    lines += _notes([*common.notes(result), *common.only_in_lines(result)])

    # still failing is never folded away: those configs were not measured at all
    for title, configs in (("Still failing (the same failure on both sides: not measured)",
                            failing), ("Unintended changes", unintended)):
        if configs:
            lines += ["", f"#### {title}", ""]
            lines += _table(configs, kernel_groups, with_verdict=False, budget=MAX_CHARS // 3,
                            max_rounds=max_rounds)
    if kernel_groups:  # what the tables left, less room for the other configs' header
        lines += _kernel_groups(kernel_groups,
                                MAX_CHARS - sum(len(x) + 1 for x in lines) - 8000)
    if rest:
        tally = common.counts(result)
        parts = [f"{tally[v]} {v}" for v in common.VERDICT_ORDER[2:] if tally.get(v)]
        other = {c.verdict for c in rest} - set(common.VERDICT_ORDER)
        parts += [f"{tally[v]} {escape(v)}" for v in sorted(other)]
        used = sum(len(x) + 1 for x in lines)
        lines += [
            "",
            f"<details><summary>Other configs: {', '.join(parts)}</summary>",
            "",
            *_table(rest, kernel_groups, with_verdict=True, budget=MAX_CHARS - used - 4000,
                    max_rounds=max_rounds),
            "",
            "</details>",
        ]
    return "\n".join(lines) + "\n"



def _notes(notes: list[str]) -> list[str]:
    """The run's notes as lines of their own, as many as NOTES_CHARS holds; the rest
    counted and pointed to."""
    lines: list[str] = []
    used = 0
    for shown, note in enumerate(notes):
        line = f"Note: {escape(note, common.NOTE_LIMIT)}"
        if used + len(line) > NOTES_CHARS:
            lines += ["", f"... {len(notes) - shown} more notes in the JSON result."]
            break
        lines += ["", line]
        used += len(line) + 2
    return lines

_URL = re.compile(r"https?://[^\s<>()\[\]\"'`\\]+")


def check_url(url: str) -> str:
    """`--details-url`: an http(s) URL with nothing that could end the Markdown link."""
    if not _URL.fullmatch(url) or len(url) > 2000:
        raise InputError(f"--details-url {common.clip(url, 80)!r}: expected an http(s) URL without "
                         "spaces, quotes, brackets or parentheses (percent-encode them)")
    return url

