"""Terminal report: a table that fits the terminal, unintended changes first, verdict last.

Read in a terminal or a CI log, so the verdict is the last line (what a
truncated log still shows), and benchmark text is clipped to one
control-character-free line (an ANSI escape in an error line must not repaint
the reader's terminal).

Layout follows the width (COLUMNS, else the terminal's, else 160 off a
terminal, so a CI log is the same on every run): from WIDE columns on, one
row per config whose long cells wrap inside their column; below that, one
block per config with a line per field. A row never spills into the next, so
each config's verdict and id stay on one line for grep, and the text is plain
(no box drawing) for diff. Colour only on a terminal, and never with NO_COLOR.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from types import MappingProxyType
from typing import TextIO

from abdiff.reports import common
from abdiff.reports.printable import printable
from abdiff.store.records import ConfigResult, Result

WIDE = 120  # below this many columns, the per-config block layout
DEFAULT_WIDTH = 160  # off a terminal without COLUMNS
MIN_WIDTH = 40
MAX_WIDTH = 200  # wider lines are hard to read, whatever the terminal
HEADERS = ("verdict", "config", "status", "facts changed", "kernels", "A / B time",
           "latency B/A")
# The narrowest each column may get, and how readily it gives way (0: never).
MIN_COLS = (12, 16, 10, 16, 16, 12, 16)
SHRINK = (0, 0, 3, 2, 1, 1, 2)  # the config id never wraps: grep finds it
OPTIONAL = (3, 4, 5)  # facts, kernels, times: left out when no config has any
SEP = "  "
_COLOURS = MappingProxyType({"unintended": "1;31", "still-failing": "1;35", "inconclusive": "33",
                             "small-change": "34",
                             "expected": "36", "unchanged": "32"})


def terminal_width() -> int:
    """COLUMNS when set, else the terminal's width, else DEFAULT_WIDTH (pipes, CI logs);
    kept within MIN_WIDTH..MAX_WIDTH. Every command's output fits it (`wrap`)."""
    return min(max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, MIN_WIDTH), MAX_WIDTH)


def use_colour(stream: TextIO) -> bool:
    """Colour on a terminal unless NO_COLOR is set (no-color.org) or TERM is dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return stream.isatty()


def _paint(text: str, verdict: str, colour: bool) -> str:
    code = _COLOURS.get(verdict)
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code and text else text


def _fit_kernels(lines: list[str], width: int) -> list[str]:
    """Kernel lines that fit two lines of `width` whole (they wrap inside the name, after
    `_`, `.` or `/`); a longer one cut to `width` with its count kept ("-void
    cutlass::Kern… x1").

    CUDA kernel names run to hundreds of characters; wrapped, one name fills a
    screen. The HTML report and the JSON result have them whole.
    """
    out = []
    for line in lines:
        name, sep, count = line.rpartition(" x")
        if len(line) > 2 * width and sep and count.isdigit():
            line = f"{common.clip(name, max(width - len(count) - 2, 4))} x{count}"
        out.append(line)
    return out


class _NameWrapper(textwrap.TextWrapper):
    """Breaks at spaces, and inside long names after '.', '/' or '_'
    (`attn_metadata.` / `max_total_draft_tokens`), never in the middle of a word part:
    for the narrow cells of the table, where a fact's name would not fit whole."""

    wordsep_re = re.compile(r"(\s+|(?<=[./_])(?=[^\s./_0-9]))")  # not inside 1.370


# Stands in, while wrapping, for the bytes beyond the first of a character outside ASCII.
_WIDE = "\x00"


def wrap(lines: list[str], width: int, indent: str = "") -> list[str]:
    """Sentences wrapped to `width` at spaces only (`DG_HOST_ASSERT(` stays whole); a word
    longer than the line, and only such a word, is broken where it must be. A character
    counts as its UTF-8 bytes (`≥` three), so a line fits `width` however it is counted:
    characters, terminal cells (two for East Asian ones) or bytes."""
    return _wrapped(textwrap.TextWrapper(width, subsequent_indent=indent,
                                         break_on_hyphens=False), lines)


def _wrapped(wrapper: textwrap.TextWrapper, lines: list[str], by_bytes: bool = True
             ) -> list[str]:
    """`lines` wrapped by `wrapper`, each character counted as its UTF-8 bytes (`wrap`), or
    as one where the lines are cells of columns padded in characters (`grid`)."""
    out: list[str] = []
    for line in lines:
        if by_bytes and not line.isascii():
            line = "".join(c + _WIDE * (len(c.encode()) - 1) for c in line.replace(_WIDE, ""))
        out += [part.replace(_WIDE, "") for part in wrapper.wrap(line)] or [""]
    return out


def say(text: str, stream: TextIO | None = None) -> None:
    """One of abdiff's own messages (a note, what it wrote, where the run files are) on
    stderr, or `stream`, wrapped to the terminal's width (`fit`). Error lines are not
    wrapped: they are one line, whatever their length. What a message quotes of the
    benchmark (a ref name, an error line) is made printable here, once wrapped."""
    print(printable(fit(text, terminal_width())), file=stream or sys.stderr, flush=True)


def fit(text: str, width: int) -> str:
    """Every line of `text` wrapped to `width` at spaces, a continuation indented four
    more than its line: how a command's own lines (doctor, bisect, baseline show, history)
    stay within the terminal."""
    out: list[str] = []
    for line in text.splitlines():
        lead = " " * (len(line) - len(line.lstrip(" ")))
        out += wrap([line], width, lead + "    ")
    return "\n".join(out)


MIN_CELL = 20  # a column narrower than this reads worse than one block per row


def grid(headers: list[str], rows: list[list[str]], width: int, lead: int = 1) -> str:
    """A plain table of text cells within `width` (`tabulate`'s "simple" look): columns at
    their natural width when they fit; else the widest give way (their cells wrap at spaces
    inside the column) down to MIN_CELL; when even that does not fit, one block per row:
    its first `lead` cells on a line, then a `header: cell` line for each other cell that
    holds something (not empty, not `-`)."""
    natural = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    least = [min(w, MIN_CELL) for w in natural]
    widths = list(natural)
    budget = width - len(SEP) * (len(headers) - 1)
    while sum(widths) > budget and any(w > m for w, m in zip(widths, least, strict=True)):
        widest = max(range(len(widths)), key=lambda i: widths[i] - least[i])
        widths[widest] -= 1
    if sum(widths) > budget:
        out: list[str] = []
        for row in rows:
            out += wrap([SEP.join(cell for cell in row[:lead] if cell)], width, "    ")
            out += [line for h, cell in zip(headers[lead:], row[lead:], strict=True)
                    if cell not in ("", "-")  # nothing to say in this column
                    for line in wrap([f"    {h}: {cell}"], width, "        ")]
        return "\n".join(out)
    lines = []
    for row in [headers, ["-" * w for w in widths], *rows]:
        cells = [wrap([cell], w) for cell, w in zip(row, widths, strict=True)]
        for n in range(max(len(c) for c in cells)):
            lines.append(SEP.join((c[n] if n < len(c) else "").ljust(w)
                                  for c, w in zip(cells, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _wrap_cell(lines: list[str], width: int, indent: str = "", by_bytes: bool = False
               ) -> list[str]:
    return _wrapped(_NameWrapper(width, subsequent_indent=indent), lines, by_bytes)


def _verdict_word(cfg: ConfigResult) -> str:
    return cfg.verdict.upper() if cfg.verdict in ("unintended", "still-failing") else cfg.verdict


def _cells(cfg: ConfigResult, groups: list[common.KernelGroup], marks: list[str],
           max_rounds: int | None) -> list[list[str]]:
    """A config's fields as lists of lines, in HEADERS order."""
    return [
        [_verdict_word(cfg)],
        [common.clip(cfg.id, 80)],
        [" ".join([common.status_cell(cfg), *marks])],
        common.fact_changes(cfg),
        common.kernel_cell(cfg, groups, limit=5, width=100),
        [t for t in common.times_cell(cfg.latency).split(", ") if t],
        [common.latency_cell(cfg.latency, max_rounds)],
    ]


def _column_widths(keep: list[int], rows: list[list[list[str]]], width: int) -> list[int]:
    """Each kept column's natural width, shrunk (widest excess first) until the row fits."""
    widths = [max([len(HEADERS[k])] + [len(line) for row in rows for line in row[i]])
              for i, k in enumerate(keep)]
    least = [min(MIN_COLS[k], w) for k, w in zip(keep, widths, strict=True)]
    budget = width - len(SEP) * (len(keep) - 1)
    while sum(widths) > budget:
        over = [i for i, w in enumerate(widths) if w > least[i] and SHRINK[keep[i]]]
        if not over:
            break
        i = max(over, key=lambda j: (widths[j] - least[j]) * SHRINK[keep[j]])
        widths[i] -= 1
    return widths


def _wide(rows: list[tuple[ConfigResult, list[list[str]]]], width: int, colour: bool) -> list[str]:
    keep = [i for i in range(len(HEADERS))
            if i not in OPTIONAL or any(cells[i] for _, cells in rows)]
    rows = [(cfg, [cells[i] for i in keep]) for cfg, cells in rows]
    headers = [HEADERS[i] for i in keep]
    widths = _column_widths(keep, [cells for _, cells in rows], width)
    header = SEP.join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    out = [header, SEP.join("-" * w for w in widths)]
    kernels = keep.index(HEADERS.index("kernels")) if HEADERS.index("kernels") in keep else -1
    for cfg, cells in rows:
        if kernels >= 0:
            cells[kernels] = _fit_kernels(cells[kernels], widths[kernels])
        wrapped = [_wrap_cell(cell, w, "  ") if cell else [""] for cell, w in zip(cells, widths,
                                                                           strict=True)]
        for n in range(max(len(c) for c in wrapped)):
            parts = [(c[n] if n < len(c) else "").ljust(w) for c, w in zip(wrapped, widths,
                                                                           strict=True)]
            if n == 0:
                parts[0] = _paint(parts[0], cfg.verdict, colour)
            out.append(SEP.join(parts).rstrip())
    return out


def _narrow(rows: list[tuple[ConfigResult, list[list[str]]]], width: int, colour: bool
            ) -> list[str]:
    labels = ("status", "facts", "kernels", "times", "latency")
    pad = 4 + max(len(x) for x in labels) + 2
    out: list[str] = []
    for cfg, cells in rows:
        verdict = cells[0][0]
        out.append(_paint(verdict, cfg.verdict, colour) + " " * max(14 - len(verdict), 1)
                   + cells[1][0])
        for label, lines in zip(labels, cells[2:], strict=True):
            if label == "kernels":
                lines = _fit_kernels(lines, width - pad)
            for n, line in enumerate(_wrap_cell(lines, width - pad, "  ", by_bytes=True)):
                out.append(("    " + label if n == 0 else "").ljust(pad) + line)
    return out


def render(result: Result, *, width: int | None = None, colour: bool | None = None) -> str:
    """The terminal table for `result`, ending with the one-line verdict and a newline.

    `width` and `colour` default to what stdout is (terminal_width, use_colour).
    """
    width = max(width or terminal_width(), MIN_WIDTH)
    colour = use_colour(sys.stdout) if colour is None else colour
    head = [f"abdiff: {common.sides_line(result)}"]
    details = [f"{k}: {v}" for k, v in common.context_items(result)[2:]]
    if details:
        head.append("  ".join(details))
    head += [f"note: {n}" for n in common.notes(result)]
    head += [f"note: {line}" for line in common.only_in_lines(result)]
    lines = wrap(head, width, "  ")
    configs = common.ordered(result)
    groups = common.kernel_groups(configs)
    rows = []
    # Failure lines go under the table, so the columns stay narrow; the same line from
    # several configs (one assert hit by four shapes) is one footnote naming them all.
    errors: dict[str, list[str]] = {}
    for cfg in configs:
        marks = []
        for line in common.error_lines(cfg, limit=160):
            ids = errors.setdefault(line, [])
            ids.append(cfg.id)
            marks.append(f"[{list(errors).index(line) + 1}]")
        rows.append((cfg, _cells(cfg, groups, marks, common.run_facts(result).max_rounds)))
    lines.append("")
    if not rows:
        lines.append("(no configs)")
    elif width >= WIDE:
        lines += _wide(rows, width, colour)
    else:
        lines += _narrow(rows, width, colour)
    for group in groups:
        lines += ["", *wrap([f"{group.label}: same kernel change in {len(group.ids)} configs: "
                              + ", ".join(group.ids)], width, "  ")]
        lines += [f"  {line}" for line in _fit_kernels(group.lines, width - 2)]
    if errors:
        notes = [f"[{n}] {', '.join(ids)} {line}"
                 for n, (line, ids) in enumerate(errors.items(), start=1)]
        lines += ["", *wrap(notes, width, "    ")]
    lines += ["", *ending(result, width, colour)]
    return "\n".join(lines) + "\n"


def ending(result: Result, width: int, colour: bool = False) -> list[str]:
    """The `next:` line, if any, the time line (a run that measured), and the verdict line,
    wrapped to `width` at spaces: what every compared run ends with, after the table or
    alone (the verdict's first words, its exit status, stay on the first line)."""
    step = common.next_step(result)
    spent = common.time_line(result)  # where the run's wall time went
    lines = wrap([step], width, "      ") if step else []
    lines += wrap([spent], width, "      ") if spent else []
    return lines + [_paint(line, _final_tone(result), colour)
                    for line in wrap([common.final_line(result)], width, "        ")]


def _final_tone(result: Result) -> str:
    """The verdict whose colour the last line takes: red, green, or yellow when undecided."""
    if common.counts(result)["unintended"]:
        return "unintended"
    return "unchanged" if common.passed(result) else "inconclusive"
