"""Terminal report: one tabulate table, unintended changes first, summary last.

Read in a terminal or a CI log, so the summary sentence is the last line
(what a truncated log still shows), and benchmark text is clipped to one
control-character-free line (an ANSI escape in an error line must not repaint
the reader's terminal).
"""

from __future__ import annotations

from abdiff.records import Result
from abdiff.reports import common

HEADERS = ("verdict", "config", "status", "facts changed", "kernels", "latency B/A")


def render(result: Result) -> str:
    """The terminal table for `result`, ending with a newline."""
    from tabulate import tabulate  # here: `abdiff comment` imports the formats, stdlib only

    lines = [f"abdiff: {common.sides_line(result)}"]
    details = [f"{k}: {v}" for k, v in common.context_items(result)[2:]]
    if details:
        lines.append("  ".join(details))
    lines += [f"note: {n}" for n in common.notes(result)]
    lines += [f"note: {line}" for line in common.only_in_lines(result)]
    rows = []
    errors: list[str] = []  # failure lines go under the table, so the columns stay narrow
    for cfg in common.ordered(result):
        marks = []
        for line in common.error_lines(cfg, limit=160):
            errors.append(f"[{len(errors) + 1}] {cfg.id} {line}")
            marks.append(f"[{len(errors)}]")
        status = " ".join([common.status_cell(cfg), *marks])
        rows.append(
            (
                cfg.verdict.upper() if cfg.verdict == "unintended" else cfg.verdict,
                common.clip(cfg.id, 80),
                status,
                "\n".join(common.fact_changes(cfg)),
                "\n".join(common.kernel_changes(cfg, limit=6, width=52)),
                common.latency_cell(cfg.latency),
            )
        )
    lines.append("")
    lines.append(tabulate(rows, headers=HEADERS, tablefmt="simple") if rows else "(no configs)")
    if errors:
        lines += ["", *errors]
    lines.append("")
    lines.append(f"{common.verdict_line(result)}: {common.summary_sentence(result)}")
    return "\n".join(lines) + "\n"
