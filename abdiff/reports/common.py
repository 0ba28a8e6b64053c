"""What every report format shares: ordering, the summary sentence and cell texts.

Each format only decides layout and escaping; the words and numbers come from
here, so the terminal table, the PR comment and the HTML page can never
disagree about what a config's change was. Functions here return plain,
unescaped (but single-line, control-character-free and length-capped) text:
each format escapes it for its own medium.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from abdiff.records import ConfigResult, LatencyResult, Result, Side

# Reading order of every report: what needs a human first.
VERDICT_ORDER: tuple[str, ...] = ("unintended", "inconclusive", "expected", "unchanged")
# Order of the counts in the summary sentence ("2 unintended, 4 expected, ...").
SUMMARY_ORDER: tuple[str, ...] = ("unintended", "expected", "unchanged", "inconclusive")
DEFAULT_MIN_EFFECT = 0.02
TEXT_LIMIT = 200
ELLIPSIS = "\u2026"


def clip(text: Any, limit: int = TEXT_LIMIT) -> str:
    """One line of printable text, at most `limit` characters (ellipsis when cut).

    Text from benchmarks (error lines, fact values, kernel and config names)
    may hold newlines, ANSI escapes, bidirectional overrides or megabytes of
    traceback; no report should inherit any of that. Newlines become " / ",
    other control and format characters (Unicode Cc, Cf) are dropped.
    """
    text = str(text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    parts: list[str] = []
    for ch in text:
        if ch == "\n":
            parts.append(" / ")
        elif ch == "\t":
            parts.append(" ")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs"):
            continue
        else:
            parts.append(ch)
    line = "".join(parts).strip()
    if len(line) > limit:
        line = line[: max(limit - 1, 0)].rstrip() + ELLIPSIS
    return line


def ordered(result: Result) -> list[ConfigResult]:
    """Configs in reading order: unintended, inconclusive, expected, unchanged.

    Stable within a verdict (suite order is kept); an unknown verdict sorts
    right after the known ones rather than disappearing.
    """
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    return sorted(result.configs, key=lambda c: rank.get(c.verdict, len(VERDICT_ORDER)))


def grouped(result: Result) -> dict[str, list[ConfigResult]]:
    """Configs by verdict, in reading order; empty groups are left out."""
    groups: dict[str, list[ConfigResult]] = {}
    for cfg in ordered(result):
        groups.setdefault(cfg.verdict, []).append(cfg)
    return groups


def counts(result: Result) -> dict[str, int]:
    """How many configs got each verdict (every documented verdict present, maybe 0).

    Counted from the configs themselves rather than read from `summary`, so a
    hand-built or partial summary cannot make a report disagree with its rows.
    """
    tally = {v: 0 for v in VERDICT_ORDER}
    for cfg in result.configs:
        tally[cfg.verdict] = tally.get(cfg.verdict, 0) + 1
    return tally


def summary_sentence(result: Result) -> str:
    """"2 unintended, 4 expected, 6 unchanged, 0 inconclusive of 12 configs"."""
    tally = counts(result)
    extra = [v for v in tally if v not in SUMMARY_ORDER]
    parts = [f"{tally[v]} {v}" for v in (*SUMMARY_ORDER, *extra)]
    total = len(result.configs)
    return f"{', '.join(parts)} of {total} config{'' if total == 1 else 's'}"


def verdict_line(result: Result) -> str:
    """The headline: is there anything a reviewer must look at?"""
    tally = counts(result)
    n = tally["unintended"]
    if n:
        return f"{n} unintended change{'' if n == 1 else 's'}"
    if tally["inconclusive"]:
        return "no unintended change found (some configs inconclusive)"
    return "no unintended change"


def exit_code(result: Result) -> int:
    """The run's exit code: the summary's when present, else 1 iff any unintended."""
    code = result.summary.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return 1 if counts(result)["unintended"] else 0


def min_effect(result: Result) -> float:
    """The practical threshold of the run (fraction), 0.02 when the summary lacks it."""
    value = result.summary.get("min_effect")
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return DEFAULT_MIN_EFFECT


def side_label(side: Side) -> str:
    """"main (0123456789)", or "baseline:NAME (0123456789)" for a stored baseline."""
    rev = f"baseline:{side.baseline}" if side.baseline else side.rev
    sha = side.sha[:10] if side.sha else "?"
    return f"{clip(rev, 80)} ({clip(sha, 10)})"


def sides_line(result: Result) -> str:
    """"A: main (0123456789) B: pr (abcdef0123)"."""
    return f"A: {side_label(result.a)} B: {side_label(result.b)}"


def expect_text(result: Result) -> str:
    """The policy scope, "backend=DSA", or "nothing" when every change is unintended."""
    if not result.expect:
        return "nothing"
    items = [f"{k}={','.join(str(v) for v in vals)}" for k, vals in result.expect.items()]
    return clip("; ".join(items))


def context_items(result: Result) -> list[tuple[str, str]]:
    """(label, value) pairs describing the run: suite, target, scope, sides."""
    items = [("A", side_label(result.a)), ("B", side_label(result.b))]
    if result.suite:
        items.append(("suite", clip(result.suite, 80)))
    if result.target:
        items.append(("target", clip(result.target, 80)))
    items.append(("expected to change", expect_text(result)))
    return items


def value_text(value: Any, limit: int = 60) -> str:
    """A fact value as Python spells it: None, 3, True, [32, 4], 'fp8'."""
    return clip(repr(value), limit)


def fact_changes(cfg: ConfigResult) -> list[str]:
    """["attn_metadata.max_total_draft_tokens: None -> 3", ...], sorted by name."""
    lines = []
    for name in sorted(cfg.facts_changed):
        pair = cfg.facts_changed[name]
        a, b = (list(pair) + [None, None])[:2] if isinstance(pair, list | tuple) else (pair, None)
        lines.append(f"{clip(name, 80)}: {value_text(a)} -> {value_text(b)}")
    return lines


KERNEL_LINES = 8  # a kernel diff longer than this is cut in reports; the JSON has it all


# Kernels that do an attention step's real work; a cut kernel diff shows these first,
# so "-aten::bmm, +..._flash_attention..." is not hidden behind copies and fills.
HEADLINE_KERNELS = re.compile(
    r"gemm|bmm|\bmm\b|matmul|softmax|attention|sdpa|flash|fmha|mmha|xqa|mqa|conv", re.IGNORECASE)


def headline_first(name: str) -> tuple[bool, str]:
    """Sort key: headline kernels (HEADLINE_KERNELS) first, then by name."""
    return (not HEADLINE_KERNELS.search(name), name)


def kernel_changes(cfg: ConfigResult, limit: int = KERNEL_LINES, width: int = 120) -> list[str]:
    """["+aten::_scaled_dot_product_flash_attention_for_cpu x2", "-aten::bmm x4"].

    Headline kernels (HEADLINE_KERNELS) first, then added before removed, by name.
    """
    changes = [("+", k, n) for k, n in cfg.kernels_added.items()]
    changes += [("-", k, n) for k, n in cfg.kernels_removed.items()]
    changes.sort(key=lambda c: (headline_first(c[1])[0], c[0] == "-", c[1]))
    lines = [f"{sign}{clip(name, width)} x{n}" for sign, name, n in changes]
    if len(lines) > limit:
        lines = lines[: limit - 1] + [f"(+{len(lines) - limit + 1} more in the JSON result)"]
    return lines


def latency_cell(latency: LatencyResult) -> str:
    """"1.043x [1.021, 1.066] p=0.003 (slower)"; "n/a" when not comparable."""
    if latency.ratio is None:
        return "n/a" if latency.verdict in ("n/a", "", None) else f"({latency.verdict})"
    text = f"{latency.ratio:.3f}x"
    if latency.ci and len(latency.ci) == 2 and None not in latency.ci:
        text += f" [{latency.ci[0]:.3f}, {latency.ci[1]:.3f}]"
    if latency.p is not None:
        text += f" p={_p_text(latency.p)}"
    text += f" ({latency.verdict})"
    return f"{text}; {latency.note}" if latency.note else text


def _p_text(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def status_cell(cfg: ConfigResult) -> str:
    """"ok", or "aborted -> ok (fixed)" when the outcome changed."""
    if cfg.status_a == cfg.status_b and cfg.status_change == "same":
        return clip(cfg.status_a, 40)
    return f"{clip(cfg.status_a, 40)} -> {clip(cfg.status_b, 40)} ({clip(cfg.status_change, 40)})"


def error_lines(cfg: ConfigResult, limit: int = TEXT_LIMIT) -> list[str]:
    """["A: DG_HOST_ASSERT(...)"]: the failure lines of either side, clipped."""
    lines = []
    if cfg.error_a:
        lines.append(f"A: {clip(cfg.error_a, limit)}")
    if cfg.error_b:
        lines.append(f"B: {clip(cfg.error_b, limit)}")
    return lines


def params_text(cfg: ConfigResult) -> str:
    """"backend=TRTLLM batch_size=32 ..." for readers who do not know the id scheme."""
    return clip(" ".join(f"{k}={v}" for k, v in cfg.params.items()))


def only_in_lines(result: Result) -> list[str]:
    """Configs measured on one side only (a suite changed between the sides)."""
    lines = []
    if result.only_in_a:
        lines.append("only in A: " + clip(", ".join(result.only_in_a), 400))
    if result.only_in_b:
        lines.append("only in B: " + clip(", ".join(result.only_in_b), 400))
    return lines


def notes(result: Result) -> list[str]:
    """Result.notes, one clipped line each."""
    return [clip(n, 400) for n in result.notes]
