"""Reports: every format renders the same Result; untrusted text stays inert."""

from __future__ import annotations

import csv
import dataclasses
import html as html_lib
import io
import json
import re
from html.parser import HTMLParser

import pytest

from abdiff.errors import InputError
from abdiff.reports import FORMATS, common, markdown, render
from abdiff.reports import csv as csv_report
from abdiff.reports import html as html_report
from abdiff.reports import json as json_report
from abdiff.reports import table as table_report
from abdiff.store.records import ConfigResult, KernelDelta, LatencyResult, Result, Side

SUMMARY = ("5 of 6 configs measured; 1 failed on one side; "
           "1 unintended, 1 expected, 3 unchanged, 1 inconclusive")

DG_ASSERT = "DG_HOST_ASSERT(batch_size == __batch_size and next_n == _next_n)"
SDPA = "aten::_scaled_dot_product_flash_attention_for_cpu"


def _params(backend: str, bs: int, q: int) -> dict:
    return {"backend": backend, "run_type": "GEN", "batch_size": bs, "seq_len_q": q,
            "seq_len_kv_cache": 2049}


def _config(backend: str, bs: int, q: int, verdict: str, **kw) -> ConfigResult:
    base = dict(
        id=f"GEN-{backend}-bs{bs}-q{q}-kv2049", params=_params(backend, bs, q),
        status_a="ok", status_b="ok", status_change="same", error_a=None, error_b=None,
        facts_changed={}, kernels_added={}, kernels_removed={},
        latency=LatencyResult("unchanged", 1.002, [0.995, 1.009], 0.41, 0.001, 6, 6, "rounds"),
        in_scope=backend == "DSA", verdict=verdict,
    )
    base.update(kw)
    return ConfigResult(**base)


def make_result(**overrides) -> Result:
    """The seed PR's pr-v1 story: DSA fixed (expected), TRTLLM MTP changed (unintended)."""
    configs = [
        _config("DSA", 32, 1, "unchanged"),
        _config("TRTLLM", 32, 1, "unchanged"),
        _config(
            "TRTLLM", 32, 4, "unintended",
            facts_changed={"attn_metadata.max_total_draft_tokens": [None, 3]},
            kernels_added={SDPA: 2}, kernels_removed={"aten::bmm": 4, "aten::_softmax": 2},
            latency=LatencyResult("slower", 1.043, [1.021, 1.066], 0.003, None, 6, 6, "rounds"),
        ),
        _config(
            "DSA", 32, 4, "expected", status_a="aborted", status_b="ok", status_change="fixed",
            error_a=f"SIGABRT: {DG_ASSERT}", latency=LatencyResult("n/a"),
            facts_changed={"attn_metadata.kv_lens_cuda_2d.shape": [[64, 1], [64, 4]]},
        ),
        _config("TRTLLM", 64, 2, "inconclusive",
                latency=LatencyResult("inconclusive", 1.012, [0.990, 1.035], 0.21, 0.30, 4, 4)),
        _config("TRTLLM", 64, 1, "unchanged"),
    ]
    data = dict(
        a=Side("main", "a" * 40), b=Side("pr-v1", "b" * 40), expect={"backend": ["DSA"]},
        configs=configs,
        summary={"unchanged": 3, "expected": 1, "unintended": 1, "inconclusive": 1,
                 "configs": 6, "exit_code": 1, "min_effect": 0.02, "alpha": 0.05},
        suite="mtp", target="reference",
        notes=["side A is a stored baseline, not interleaved with B"],
    )
    data.update(overrides)
    return Result(**data)


def test_formats_registry() -> None:
    assert set(FORMATS) == {"table", "markdown", "json", "html", "csv"}
    result = make_result()
    for name, module in FORMATS.items():
        assert isinstance(module.render(result), str), name
    assert render(result, "json") == json_report.render(result)


def test_ordering_and_summary_sentence() -> None:
    result = make_result()
    verdicts = [c.verdict for c in common.ordered(result)]
    assert verdicts == ["unintended", "inconclusive", "expected",
                        "unchanged", "unchanged", "unchanged"]
    assert common.summary_sentence(result) == SUMMARY
    assert common.verdict_line(result) == "1 unintended change"
    # counted from the rows, whatever the summary claims (it says 6 measured of 8): 4 ran
    # on both sides, 1 on one, and 3 of the 8 are not in the result at all
    clean = make_result(summary={"configs": 8, "measured": 6, "exit_code": 0})
    clean.configs = [c for c in clean.configs if c.verdict != "unintended"]
    clean.configs[0].verdict = "still-failing"
    assert common.verdict_line(clean) == (
        "no unintended change found, but latency undecided for 1 of the 4 configs timed on "
        "both sides; 4 measured, 1 still failing, 1 inconclusive, 1 failed on one side, 3 not "
        "run on both sides")
    assert common.summary_sentence(clean).endswith(
        "0 unintended, 1 expected, 2 unchanged, 1 inconclusive, 1 still-failing")
    assert [c.verdict for c in common.ordered(clean)][0] == "still-failing"
    nothing = make_result(configs=[], summary={"configs": 12, "measured": 0, "exit_code": 3})
    assert common.verdict_line(nothing) == "nothing measured (0 of 12 configs ran on both sides)"
    assert not common.passed(nothing)


def test_cell_texts() -> None:
    result = make_result()
    trt = next(c for c in result.configs if c.verdict == "unintended")
    assert common.latency_cell(trt.latency) == "1.043x [1.021, 1.066] p=0.003 (slower)"
    assert common.fact_changes(trt) == ["attn_metadata.max_total_draft_tokens: None -> 3"]
    assert common.kernel_changes(trt) == [f"+{SDPA} x2", "-aten::_softmax x2", "-aten::bmm x4"]
    assert common.latency_cell(LatencyResult("n/a")) == "n/a"
    assert common.min_effect(make_result(summary={})) == 0.02


def test_table() -> None:
    text = table_report.render(make_result(), width=240, colour=False)
    lines = text.rstrip("\n").splitlines()
    assert lines[0] == "abdiff: A: main (aaaaaaaaaa) B: pr-v1 (bbbbbbbbbb)"
    assert "note: side A is a stored baseline, not interleaved with B" in text
    assert lines[-1] == ("abdiff: 1 unintended change: 5 of 6 configs measured; 1 failed on one "
                         "side; 1 unintended, 1 expected, 3 unchanged, 1 inconclusive (exit 1: a "
                         "change outside the expected scope, in the UNINTENDED rows)")
    # a result without rounds_needed (result/2): no projection is made up
    assert lines[-2] == ("next: latency undecided for 1 of the 5 configs timed on both sides, "
                         "after 4 rounds per side; more rounds would decide them: re-run with a "
                         "larger --max-rounds")
    assert lines[-1] == common.final_line(make_result())
    assert "\x1b" not in text
    first = text.index("GEN-TRTLLM-bs32-q4")
    assert first < text.index("GEN-TRTLLM-bs64-q2") < text.index("GEN-DSA-bs32-q4")
    assert first < text.index("GEN-DSA-bs32-q1")
    assert "None -> 3" in text and SDPA in text


ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_table_fits_the_terminal_width(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    """COLUMNS sets the width; long cells wrap inside their column, rows never mix."""
    monkeypatch.setenv("COLUMNS", str(columns))
    result = make_result()
    trt = next(c for c in result.configs if c.verdict == "unintended")
    trt.kernels_added["void cutlass::device_kernel<flash::FlashAttnFwdSm90<" + "x" * 120] = 3
    text = table_report.render(result, colour=False)
    lines = text.rstrip("\n").splitlines()
    # the verdict last, wrapped at spaces: its first line starts it, every line fits
    verdict = next(i for i, ln in enumerate(lines)
                   if ln.startswith("abdiff: 1 unintended change: "))
    assert " ".join(ln.strip() for ln in lines[verdict:]) == common.final_line(result)
    assert all(len(line) <= columns for line in lines), max(lines, key=len)
    for cfg in result.configs:  # each config's verdict and id on one line, once: grep finds it
        hits = [ln for ln in lines if cfg.id in ln and not ln.startswith("[")]
        assert len(hits) == 1 and hits[0].split()[0].lower() == cfg.verdict, hits
    narrow = columns < table_report.WIDE
    assert any(line.startswith("    status ") for line in lines) == narrow
    assert any(line.startswith("verdict ") for line in lines) == (not narrow)
    if not narrow:  # rows of a wrapped cell stay under their own column
        header = next(line for line in lines if line.startswith("verdict "))
        kernels_at = header.index("kernels")
        row = lines.index(next(ln for ln in lines if trt.id in ln))
        block = lines[row:row + 6]
        assert all(ln[kernels_at - 1] == " " for ln in block if len(ln) > kernels_at)


def test_table_colour_only_when_asked() -> None:
    result = make_result()
    coloured = table_report.render(result, width=160, colour=True)
    assert "\x1b[1;31mUNINTENDED" in coloured
    assert ANSI.sub("", coloured) == table_report.render(result, width=160, colour=False)


def test_colour_follows_the_terminal_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import pty

    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as tty, open(os.devnull, "w") as pipe_like:
        monkeypatch.delenv("NO_COLOR", raising=False)
        monkeypatch.setenv("TERM", "xterm")
        assert table_report.use_colour(tty) and not table_report.use_colour(pipe_like)
        monkeypatch.setenv("NO_COLOR", "1")
        assert not table_report.use_colour(tty)
    os.close(leader)


def _details_split(text: str) -> tuple[str, str]:
    start = text.index("<details>")
    end = text.index("</details>")
    assert start < end
    return text[:start], text[start:end]


def test_markdown_layout() -> None:
    text = markdown.render(make_result())
    lines = text.splitlines()
    assert lines[0] == "<!-- abdiff -->"
    assert lines[1] == ":x: **abdiff: 1 unintended change**"
    assert lines[3] == f"{SUMMARY}."
    head, folded = _details_split(text)
    # The unintended table, outside <details>, has the fact change, kernels and latency.
    row = next(line for line in head.splitlines() if "GEN-TRTLLM-bs32-q4" in line)
    assert row.startswith("| ")
    assert "max\\_total\\_draft\\_tokens: None -&gt; 3" in row
    assert "+aten::\\_scaled\\_dot\\_product\\_flash\\_attention\\_for\\_cpu x2" in row
    assert "-aten::bmm x4" in row
    assert "1.043x \\[1.021, 1.066\\] p=0.003 (slower)" in row
    # Everything else is folded.
    for cid in ("GEN-DSA-bs32-q4", "GEN-TRTLLM-bs64-q2", "GEN-DSA-bs32-q1", "GEN-TRTLLM-bs64-q1"):
        assert cid not in head and cid in folded
    assert "DG\\_HOST\\_ASSERT(" in folded
    assert "Other configs: 1 inconclusive, 1 expected, 3 unchanged" in folded
    assert text.rstrip().endswith("</details>")


def test_markdown_clean_run_reads_as_a_pass() -> None:
    result = make_result(summary={"configs": 5, "exit_code": 0})
    result.configs = [c for c in result.configs if c.verdict != "unintended"]
    text = markdown.render(result)
    assert "Unintended changes" not in text
    # an undecided latency keeps exit 0 but not the green mark, and says what would decide
    assert text.splitlines()[1] == (
        ":warning: **abdiff: no unintended change found, but latency undecided for 1 of the 4 "
        "configs timed on both sides; 4 measured, 1 inconclusive, 1 failed on one side**")
    for config in result.configs:
        if config.verdict == "inconclusive":
            config.verdict, config.latency.verdict = "unchanged", "unchanged"
    assert markdown.render(result).splitlines()[1] == (
        ":white_check_mark: **abdiff: no unintended change (4 measured, 1 failed on one "
        "side)**")


def test_markdown_first_line_when_nothing_was_measured() -> None:
    result = make_result(configs=[], summary={"configs": 12, "measured": 0, "exit_code": 3})
    assert markdown.render(result).splitlines()[1] == (
        ":warning: **abdiff: nothing measured (0 of 12 configs ran on both sides)**")


def _same_kernel_change(result: Result, count: int) -> list[str]:
    """Give `count` configs the unintended config's kernel diff; return their ids."""
    source = next(c for c in result.configs if c.verdict == "unintended")
    others = [c for c in result.configs if c is not source][: count - 1]
    for cfg in others:
        cfg.kernels_added, cfg.kernels_removed = dict(source.kernels_added), dict(
            source.kernels_removed)
    return [source.id, *(c.id for c in others)]


def test_identical_kernel_diffs_are_shown_once() -> None:
    result = make_result()
    ids = _same_kernel_change(result, 4)
    groups = common.kernel_groups(common.ordered(result))
    assert [(g.label, sorted(g.ids)) for g in groups] == [("K1", sorted(ids))]
    for text in (markdown.render(result), table_report.render(result, width=200, colour=False)):
        assert text.count("-aten::bmm x4") == 1, text
        assert "K1: same change in 4 configs" in text
    assert "same kernel change in 4 configs" in table_report.render(result, colour=False)


def test_absolute_times_when_present_and_absent() -> None:
    result = make_result()
    trt = next(c for c in result.configs if c.verdict == "unintended")
    assert common.times_cell(trt.latency) == ""  # a result from before the fields existed
    trt.latency.a_us, trt.latency.a_spread_us = 512.34, 4.1
    trt.latency.b_us, trt.latency.b_spread_us = 534.0, 3.04
    assert common.times_cell(trt.latency) == "A 512.3 µs ±4.1, B 534 µs ±3"
    # CPU-sized times: no exponent notation ("±4.6e+02" was hard to read beside "4744")
    trt.latency.a_us, trt.latency.a_spread_us = 4744.2, 463.0
    trt.latency.b_us, trt.latency.b_spread_us = 17398.4, 3612.0
    assert common.times_cell(trt.latency) == "A 4744 µs ±460, B 17398 µs ±3600"
    trt.latency.a_us, trt.latency.a_spread_us = 512.34, 4.1
    trt.latency.b_us, trt.latency.b_spread_us = 534.0, 3.04
    for text in (markdown.render(result), table_report.render(result, width=200, colour=False),
                 html_report.render(result)):
        assert "A 512.3 µs ±4.1" in text


def test_markdown_details_url() -> None:
    url = "https://ci.example/runs/42/artifacts?name=abdiff-report"
    text = markdown.render(make_result(), details_url=url)
    assert f"[Full report and run artifacts]({url})" in text.splitlines()[:8]
    for bad in ("javascript:alert(1)", "https://x.example/a)b", "https://x.example/ a",
                "ftp://x.example/"):
        with pytest.raises(InputError, match="--details-url"):
            markdown.check_url(bad)


HOSTILE = [
    "<script>alert(1)</script>",
    "</details><img src=x onerror=alert(1)>",
    "@someone please look, cc @org/team",
    "```\nrm -rf /\n```",
    "a | b || c",
    "`code` and ``double``",
    "[click](https://evil.example) ![img](x)",
    "line1\nline2\r\nline3",
    "\x1b[31mred\x1b[0m \u202etxet desrever",
    "fixes #123",
    "x" * 10_000,
]


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_escape_hostile(text: str) -> None:
    out = markdown.escape(text)
    assert "<" not in out and ">" not in out.replace("&gt;", "")
    assert "\n" not in out and "\r" not in out and "\x1b" not in out and "\u202e" not in out
    assert re.search(r"(?<!\\)[`|\[\]]", out) is None  # every backtick, pipe, bracket escaped
    assert re.search(r"@(?!\u200d)", out) is None  # no @mention can ping
    assert re.search(r"#(?!\u200d)\d", out) is None  # no issue cross-reference
    assert len(common.clip(text)) <= common.TEXT_LIMIT
    if len(text) > common.TEXT_LIMIT:
        assert out.endswith(common.ELLIPSIS) and len(out) < 2 * common.TEXT_LIMIT + 10


def _hostile_result() -> Result:
    evil = "<script>x</script> @someone ``` | " + "y" * 10_000
    result = make_result(a=Side("<b>main</b> @bob", "a" * 40), notes=[evil])
    cfg = result.configs[2]
    cfg.id = "TRT|<i>@alice"
    cfg.error_b = "```\n</details>\n@here |" + "z" * 10_000
    cfg.facts_changed = {"attn_metadata.x|<y>": ["<b>", "@carol"]}
    cfg.kernels_added = {"<svg onload=alert(1)>`|@dave": 1}
    return result


def test_markdown_report_with_hostile_strings() -> None:
    text = markdown.render(_hostile_result())
    assert text.splitlines()[0] == "<!-- abdiff -->"
    for bad in ("<script", "<b>", "<i>", "<svg", "<y>", "```"):
        assert bad not in text
    assert text.count("<details>") == 1 and text.count("</details>") == 1
    assert re.search(r"@(?!\u200d)\w", text) is None
    assert max(len(line) for line in text.splitlines()) < common.NOTE_LIMIT + 500
    # Every table row of the unintended table still has exactly its 5 cells.
    rows = [ln for ln in text.split("<details>")[0].splitlines() if ln.startswith("| ")]
    for row in rows:
        assert len(re.findall(r"(?<!\\)\|", row)) == 6


def test_markdown_stays_under_github_limit() -> None:
    result = make_result()
    base = result.configs[0]
    result.configs = [
        ConfigResult(**{**base.__dict__, "id": f"cfg-{i}-" + "k" * 150, "error_a": "e" * 5000,
                        "kernels_added": {f"k{j}" * 30: j for j in range(9)}})
        for i in range(800)
    ]
    text = markdown.render(result)
    assert len(text) <= markdown.MAX_CHARS
    assert "more not shown; see the JSON result." in text
    assert text.rstrip().endswith("</details>")


def test_json_round_trip_has_documented_keys() -> None:
    result = make_result()
    data = json.loads(json_report.render(result))
    assert data["schema"] == "abdiff.result/2"
    for key in ("a", "b", "expect", "configs", "summary"):
        assert key in data
    assert set(data["a"]) >= {"rev", "sha"}
    for cfg in data["configs"]:
        for key in ("id", "params", "status_change", "facts_changed", "kernels_added",
                    "kernels_removed", "latency", "in_scope", "verdict"):
            assert key in cfg
        assert set(cfg["latency"]) >= {"verdict", "ratio", "ci", "p"}
    trt = next(c for c in data["configs"] if c["verdict"] == "unintended")
    assert trt["facts_changed"] == {"attn_metadata.max_total_draft_tokens": [None, 3]}
    assert data["summary"]["exit_code"] == 1
    assert data == json.loads(json.dumps(result.to_json()))


def test_json_nan_becomes_null() -> None:
    result = make_result()
    result.configs[0].latency.ratio = float("nan")
    assert json.loads(json_report.render(result))["configs"][0]["latency"]["ratio"] is None


class _Balance(HTMLParser):
    """Checks that non-void tags nest and close properly."""

    VOID = {"br", "meta", "img", "hr", "input", "link"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.seen: set[str] = set()
        self.errors: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs) -> None:
        self.seen.add(tag)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs) -> None:
        self.seen.add(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(text: str) -> _Balance:
    parser = _Balance()
    parser.feed(text)
    parser.close()
    return parser


def test_html_is_well_formed_and_self_contained() -> None:
    result = make_result()
    text = html_report.render(result)
    parser = _parse(text)
    assert parser.errors == [] and parser.stack == []
    assert {"svg", "circle", "line", "section", "details"} <= parser.seen
    assert "script" not in parser.seen
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in text
    body = "".join(parser.text)
    assert SUMMARY in body
    # facts changed: a fact | A | B table, not the "name: A -> B" text of the other formats
    assert ('<td class="mono">attn_metadata.max_total_draft_tokens</td>'
            '<td class="mono">None</td><td class="mono">3</td>') in text
    assert "1.043x [1.021, 1.066] p=0.003 (slower)" in body
    assert DG_ASSERT in body and "Latency B/A" in body  # the failure line and the legend
    # the bar is the interval the table prints, at the family-wise level
    alpha = common.percent(common.run_facts(result).alpha)
    assert f"bar: its interval at the family-wise --alpha {alpha}" in body
    # The forest plot: one mark per decided config, coloured by direction, with the dashed
    # threshold lines at 1 +/- min_effect on each row.
    decided = [c for c in result.configs if c.latency.verdict in ("slower", "faster",
                                                                  "unchanged")]
    assert text.count('class="ratio-mark"') == len(decided) == 4
    assert text.count('stroke-dasharray="4 3"') == 2 * len(decided)
    assert text.count(f'fill="{html_report.DIRECTION_COLOURS["slower"]}"') == 1
    assert text.index("Unintended (1)") < text.index("Inconclusive (1)") < text.index("Expected")


def test_html_round_distributions_and_full_kernel_diff() -> None:
    result = make_result()
    for i, cfg in enumerate(result.configs):
        cfg.latency.a_rounds_us = [500.0 + i, 510.0, 505.0]
        cfg.latency.b_rounds_us = [520.0, 515.0 + i] if i % 2 else []
    trt = next(c for c in result.configs if c.verdict == "unintended")
    trt.kernels_added = {f"kernel_{j}": 1 for j in range(30)}
    text = html_report.render(result)
    marks = sum(len(c.latency.a_rounds_us) + len(c.latency.b_rounds_us) for c in result.configs)
    assert text.count('class="round-mark"') == marks
    assert "kernel_29 x1" in text and "more in the JSON" not in text
    assert "µs" in text


def test_html_escapes_hostile_strings() -> None:
    text = html_report.render(_hostile_result())
    parser = _parse(text)
    assert parser.errors == [] and parser.stack == []
    assert not {"script", "b", "i", "img", "y"} & parser.seen
    assert "&lt;script&gt;" in text


def test_html_without_any_ratio() -> None:
    result = make_result()
    for cfg in result.configs:
        cfg.latency = LatencyResult("n/a")
    text = html_report.render(result)
    parser = _parse(text)
    assert parser.errors == [] and 'class="ratio-mark"' not in text
    assert "GEN-TRTLLM-bs32-q4-kv2049" in "".join(parser.text)


def test_a_cut_kernel_diff_keeps_the_attention_kernels() -> None:
    """Cut to a few lines, the diff still shows the kernels that did the work."""
    from abdiff.store.records import ConfigResult, LatencyResult

    cfg = ConfigResult(
        "GEN-TRTLLM-bs8-q4-kv64", {}, "ok", "ok", "same", None, None, {},
        {"aten::_scaled_dot_product_flash_attention_for_cpu": 1, "aten::scalar_tensor": 2,
         "aten::where": 2, "aten::fill_": 1},
        {"aten::bmm": 2, "aten::_softmax": 1, "aten::bitwise_not": 1, "aten::_to_copy": 1},
        LatencyResult("n/a"))
    lines = common.kernel_changes(cfg, limit=4)
    assert lines == ["+aten::_scaled_dot_product_flash_attention_for_cpu x1",
                     "-aten::_softmax x1", "-aten::bmm x2", "(+5 more in the JSON result)"]


def _still_failing() -> ConfigResult:
    return _config("TRTLLM", 8, 1, "still-failing", status_a="failed", status_b="failed",
                   status_change="still-failing", error_a="ImportError: no module x",
                   error_b="ImportError: no module x", latency=LatencyResult("n/a"))


def test_still_failing_leads_every_format_and_is_never_folded() -> None:
    result = make_result()
    result.configs.append(_still_failing())
    measured = "5 of 7 configs measured; 1 failed on both sides; 1 failed on one side"
    assert common.ordered(result)[0].verdict == "still-failing"
    assert common.summary_sentence(result).startswith(measured)
    assert common.summary_sentence(result).endswith("1 inconclusive, 1 still-failing")
    md = markdown.render(result)
    assert md.splitlines()[3].startswith(measured)
    visible = md.split("<details>")[0]
    assert visible.index("Still failing") < visible.index("Unintended changes")
    assert "still-failing" not in md.split("<details>")[1].split("</summary>")[0]
    lines = table_report.render(result).splitlines()
    assert lines[lines.index(next(ln for ln in lines if ln.startswith("---"))) + 1].startswith(
        "STILL-FAILING")
    html = html_report.render(result)
    assert html.index('<section class="still-failing">') < html.index('<section class="unint')


def test_nothing_measured_is_never_a_green_headline() -> None:
    result = make_result(configs=[_still_failing()], summary={"exit_code": 3})
    assert common.verdict_line(result) == "nothing measured (0 of 1 configs ran on both sides)"
    md = markdown.render(result).splitlines()
    assert md[1] == ":warning: **abdiff: nothing measured (0 of 1 configs ran on both sides)**"
    assert md[3].startswith("0 of 1 config measured; 1 failed on both sides; ")
    # a hand-built result without an exit code gets the policy's rule
    assert common.exit_code(make_result(configs=[_still_failing()], summary={})) == 3


def test_every_format_says_which_timing_was_used() -> None:
    result = make_result(summary={**make_result().summary, "timing": "graph replay"})
    assert "timing: graph replay" in table_report.render(result)
    assert "timing: graph replay" in markdown.render(result)
    assert "graph replay" in html_report.render(result)
    assert json.loads(json_report.render(result))["summary"]["timing"] == "graph replay"


def test_headline_says_when_latency_was_undecided_and_what_would_decide() -> None:
    undecided = LatencyResult("inconclusive", 1.01, [0.9, 1.1], 0.5, 0.4, 5, 5,
                              rounds_needed=31)
    configs = [_config("TRTLLM", bs, 1, "inconclusive", latency=undecided) for bs in (8, 16, 32)]
    configs.append(_config("TRTLLM", 64, 1, "unchanged"))
    result = make_result(configs=configs, summary={"exit_code": 0})
    headline = ("no unintended change found, but latency undecided for 3 of the 4 configs "
                "timed on both sides; 4 measured, 3 inconclusive")
    assert common.verdict_line(result) == headline
    assert headline in markdown.render(result).splitlines()[1]  # the PR comment's first line
    assert markdown.render(result).splitlines()[1].startswith(":warning:")
    last = " ".join(table_report.render(result, width=100).split())
    assert last.endswith(common.final_line(result))
    assert common.final_line(result).startswith(
        "abdiff: no unintended change: 4 of 4 configs measured; 1 unchanged, 3 inconclusive "
        "(exit 0: ")
    assert (" ".join(common.next_step(result).split()) + " abdiff: no unintended change") in last
    assert common.next_step(result) == (
        "next: latency undecided for 3 of the 4 configs timed on both sides, after 5 rounds per "
        "side; about 31 rounds per side would decide them at the spread measured: re-run with "
        "--max-rounds 31 (a config whose spread grows stops early and says so)")
    flagged = make_result()  # an unintended change leads; the summary counts the undecided
    assert common.verdict_line(flagged) == "1 unintended change"


def test_still_failing_leads_the_table_and_markdown() -> None:
    result = make_result()
    cfg = next(c for c in result.configs if c.verdict == "expected")
    cfg.status_b, cfg.status_change, cfg.verdict = "aborted", "still-failing", "still-failing"
    cfg.error_b = cfg.error_a
    table = table_report.render(result, width=200, colour=False)
    rows = [ln.split()[0] for ln in table.splitlines() if ln.startswith(("STILL", "UNINT"))]
    assert rows == ["STILL-FAILING", "UNINTENDED"]
    assert [ln[:33] for ln in table.splitlines() if ln.startswith("[")] == [
        "[1] GEN-DSA-bs32-q4-kv2049 A: SIG", "[2] GEN-DSA-bs32-q4-kv2049 B: SIG"]
    md = markdown.render(result)
    head = md.split("<details>")[0]
    assert head.index("#### Still failing") < head.index("#### Unintended changes")
    assert cfg.id in head
    page = html_report.render(result)
    assert page.index("Still-failing (1)") < page.index("Unintended (1)")
    assert common.summary_sentence(result) == (
        "5 of 6 configs measured; 1 failed on both sides; "
        "1 unintended, 0 expected, 3 unchanged, 1 inconclusive, 1 still-failing")


def test_identical_failure_lines_are_one_footnote() -> None:
    result = make_result()
    other = next(c for c in result.configs if c.id == "GEN-TRTLLM-bs64-q1-kv2049")
    source = next(c for c in result.configs if c.error_a)
    other.status_a, other.status_change, other.error_a = "aborted", "fixed", source.error_a
    text = table_report.render(result, width=200, colour=False)
    notes = [ln for ln in text.splitlines() if ln.startswith("[")]
    assert notes == [f"[1] {source.id}, {other.id} A: SIGABRT: {DG_ASSERT}"]


def test_kernel_time_root_cause_in_every_format() -> None:
    result = make_result()
    trt = next(c for c in result.configs if c.verdict == "unintended")
    trt.kernel_deltas = [KernelDelta(SDPA, 0.0, 21.5, 21.5),
                         KernelDelta("aten::bmm", 14.25, 0.0, -14.25)]
    # a result/2 file without the profiled totals: the differences, named as the profiler's
    assert common.root_cause_lines(trt) == [f"Δ +21.5 µs {SDPA} (profiled call)",
                                            "Δ -14.2 µs aten::bmm (profiled call)"]
    # with them: shares of the profiled call, which cannot exceed it; its total per side
    # is said first. A profiled call on a busy CPU took 13612 µs of bmm alone, against a
    # timed step of 7399 µs: no line compares the two
    trt.kernel_deltas = [KernelDelta("aten::bmm", 13612.0, 0.0, -13612.0)]
    trt.latency.a_us, trt.latency.b_us = 7399.0, 4823.0
    trt.profiled_a_us, trt.profiled_b_us = 16000.0, 2500.0
    assert common.root_cause_lines(trt) == [
        "profiled call (one per round, not the timed step): A 16000 µs, B 2500 µs in kernels",
        "aten::bmm: 85% -> 0% (Δ -13600 µs)"]
    trt.kernel_deltas = [KernelDelta(SDPA, 0.0, 21.5, 21.5),
                         KernelDelta("aten::bmm", 14.25, 0.0, -14.25)]
    trt.profiled_a_us, trt.profiled_b_us = 100.0, 107.25
    for text in (markdown.render(result), table_report.render(result, width=200, colour=False),
                 html_report.render(result)):
        assert "+21.5 µs" in text and "aten::bmm: 14% -&gt; 0%" in text.replace("->", "-&gt;")
    data = json.loads(json_report.render(result))
    config = next(c for c in data["configs"] if c["verdict"] == "unintended")
    assert config["kernel_deltas"][0] == {"kernel": SDPA, "a_us": 0.0, "b_us": 21.5,
                                          "delta_us": 21.5}


def test_csv_has_rows_a_b_and_the_comparison_per_config() -> None:
    """--format csv: one header, rows A, B, B/A per config in reading order; the side rows
    hold what each side measured, the B/A row the verdict and the ratio."""
    result = make_result()
    broken = result.configs[3]
    broken.error_a = "=HYPERLINK(\"http://evil.invalid\") SIGABRT"  # benchmark text
    text = csv_report.render(result)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == csv_report.COLUMNS
    assert len(rows) == 3 * len(result.configs)
    assert [r["side"] for r in rows[:3]] == ["A", "B", "B/A"]
    assert [r["config"] for r in rows[::3]] == [c.id for c in common.ordered(result)]
    by = {(r["config"], r["side"]): r for r in rows}
    flagged = by[("GEN-TRTLLM-bs32-q4-kv2049", "B/A")]
    assert (flagged["verdict"], flagged["latency_verdict"], flagged["ratio"], flagged["ci_low"],
            flagged["ci_high"], flagged["in_scope"]) == ("unintended", "slower", "1.043", "1.021",
                                                        "1.066", "false")
    a_side = by[("GEN-TRTLLM-bs32-q4-kv2049", "A")]
    b_side = by[("GEN-TRTLLM-bs32-q4-kv2049", "B")]
    assert a_side["facts"] == "attn_metadata.max_total_draft_tokens=None"
    assert b_side["facts"] == "attn_metadata.max_total_draft_tokens=3"
    assert a_side["kernels_only_here"] == "aten::_softmax x2; aten::bmm x4"
    assert b_side["kernels_only_here"] == f"{SDPA} x2"
    assert (a_side["rev"], b_side["rev"], a_side["sha"]) == ("main", "pr-v1", "a" * 40)
    assert a_side["verdict"] == "" and flagged["status"] == ""  # each row its own columns
    fixed = by[(broken.id, "A")]
    assert fixed["status"] == "aborted" and fixed["error"].startswith("'=HYPERLINK")
    assert by[(broken.id, "B/A")]["status_change"] == "fixed"
    assert render(result, "csv") == text


def test_csv_cells_carry_no_escape_sequence_or_ci_command() -> None:
    """The benchmark's text (an error, a fact, a kernel name: an attacker's pull request
    wrote them) reaches a terminal that shows the file, or a CI log, with no escape
    sequence (a clipboard write, a cleared screen), no CR and no line that is a workflow
    command."""
    result = _hostile_result()
    payload = "K \x1b]52;c;ZXZpbA==\x07\x1b[2J\r::add-mask::x \u202e\n::error::y"
    cfg = result.configs[2]
    cfg.error_b, cfg.kernels_added = payload, {payload: 1}
    cfg.facts_changed = {"attn_metadata.x": [payload, "@carol"]}
    text = csv_report.render(result)
    for bad in ("\x1b", "\x07", "\r", "\u202e"):
        assert bad not in text
    assert not any(line.startswith("::") for line in text.splitlines())
    row = next(r for r in csv.DictReader(io.StringIO(text))
               if r["config"] == cfg.id and r["side"] == "B")
    assert row["error"].startswith("K ]52;c;ZXZpbA==[2J") and "add-mask" in row["error"]


def test_inconclusive_latency_ends_with_the_next_step_in_every_text_format() -> None:
    result = make_result()
    step = ("latency undecided for 1 of the 5 configs timed on both sides, after 4 rounds per "
            "side; more rounds would decide them: re-run with a larger --max-rounds")
    assert common.next_step(result) == f"next: {step}"
    assert f"Next: {step}" in markdown.render(result).splitlines()
    table_text = " ".join(table_report.render(result, width=240, colour=False).split())
    assert f"next: {step} abdiff: 1 unintended change" in table_text
    decided = make_result(configs=[c for c in make_result().configs
                                   if c.verdict != "inconclusive"])
    assert common.next_step(decided) is None and "next:" not in markdown.render(decided).lower()


def test_a_config_the_baselines_drift_leaves_undecided_is_not_sent_to_more_rounds() -> None:
    """Against a baseline whose sessions drift more than the threshold, more rounds cannot
    decide: the next step says so and what can, as the row does."""
    result = make_result()
    undecided = next(c for c in result.configs if c.verdict == "inconclusive")
    undecided.latency.drift = 1.7
    step = common.next_step(result)
    assert step is not None and "more rounds would decide" not in step
    assert "the drift between the baseline's sessions alone resolves over 100%, so more " \
           "rounds cannot decide +-2%: compare two revisions, measured interleaved (A..B)" in step
    other = dataclasses.replace(undecided, id="other", latency=dataclasses.replace(
        undecided.latency, drift=None, rounds_needed=40))
    result.configs.append(other)  # one config rounds can decide, beside the drifting one
    step = str(common.next_step(result))
    assert "resolves over 100% for 1 of them, so more rounds cannot decide +-2%" in step
    assert step.endswith("; for the others, about 40 rounds per side would decide them at "
                         "the spread measured: re-run with --max-rounds 40 (a config whose "
                         "spread grows stops early and says so)"), step
    result.configs.remove(other)
    undecided.latency.drift = 0.01  # a drift inside the threshold: rounds still decide
    assert "more rounds would decide them" in str(common.next_step(result))
    undecided.latency.rounds_needed = 6376  # as the row says it: over 100, not the number
    assert "(over 100 rounds per side would be needed, as their rows say)" in str(
        common.next_step(result))


def test_the_result_is_valid_against_its_documented_schema() -> None:
    """docs/schemas/result.json describes what --json writes, and docs/reports.md has a
    changelog row for the version written."""
    from pathlib import Path

    import jsonschema  # a test dependency ('.[test]'): the check never skips

    from abdiff.store.records import RESULT_SCHEMA

    docs = Path(__file__).resolve().parents[1] / "docs"
    schema = json.loads((docs / "schemas" / "result.json").read_text())
    assert RESULT_SCHEMA in schema["title"]
    document = json.loads(json_report.render(make_result()))
    jsonschema.validate(document, schema)
    document["configs"][0]["verdict"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema)
    changelog = (docs / "reports.md").read_text().split("### Changelog of the result schema")[1]
    assert f"| `{RESULT_SCHEMA}` | " in changelog


def test_a_long_note_is_cut_after_a_whole_clause() -> None:
    """Notes are shown whole (a 1000-character one too); only one a benchmark made huge is
    cut, after a whole clause."""
    whole = "; ".join(f"clause {i} says something about the rounds of this run" for i in range(20))
    assert common.notes(make_result(notes=[whole])) == [whole]
    long = "; ".join(f"clause {i} says something about the rounds of this run" for i in range(99))
    (note,) = common.notes(make_result(notes=[long]))
    assert note.endswith("this run … (whole in the JSON)") and len(note) <= common.NOTE_LIMIT
    assert note[: -len(" … (whole in the JSON)")] in long
    assert common.notes(make_result(notes=["short; whole"])) == ["short; whole"]


def test_hostile_kernel_names_keep_the_comment_under_githubs_limit() -> None:
    """Kernel names of the benchmark's choosing, 113 `&` each (five characters once
    escaped), in many kernel changes shared by pairs of configs: a reviewer's planted run
    rendered a 71,219-character comment that GitHub would refuse, so nothing was posted."""
    result = make_result()
    configs = []
    for i in range(40):
        for twin in range(2):  # two configs with the same change: one kernel group
            configs.append(_config("TRTLLM", 100 + i, 1 + twin, "unintended",
                                   kernels_added={f"{i}{'&' * 113}{k}": 1 for k in range(30)},
                                   kernels_removed={f":x: {i}ftp://evil.example/{k}": 1
                                                    for k in range(30)}))
    result.configs += configs
    text = markdown.render(result)
    assert len(text) < markdown.MAX_CHARS + 2000, len(text)
    assert "more kernel changes in the JSON result" in text or "more not shown" in text
    assert text.endswith("</details>\n")  # the structure is whole, never cut
    assert "ftp://" not in text and ":x: 0" not in text  # no link, no emoji of theirs


def test_headers_name_each_sides_environment() -> None:
    """The Markdown and HTML headers say where and with what each side was measured, from
    the run files' environments (in the result since 2026-12-05); hostile values are
    clipped, a result written before gets no such line."""
    machine = [{"name": "CPU load", "value": "1.9 of 2", "ok": False, "advice": "idle"},
               {"name": "CPU governor", "value": "performance", "ok": True, "advice": ""}]
    a = Side("main", "a" * 40, "rel-1", {
        "device": "cuda", "device_name": "NVIDIA H200", "device_count": 2, "driver": "570.1",
        "torch": "2.7.0", "tensorrt_llm.version": "1.1.0rc2", "target_package": "tensorrt_llm",
        "kernel_env": {"TRTLLM_ENABLE_PDL": "1"}, "sandbox": "off", "machine": machine},
        {"s1": {"started": "2026-12-02T20:06:00", "host": "node-1"},
         "s2": {"started": "2026-12-02T22:50:00", "host": "node-2"}})
    b = Side("pr", "b" * 40, None, {"device": "cpu", "kernel_env": "not a dict",
                                    "torch": "x" * 5000, "machine": [1, None]}, {})
    result = make_result(a=a, b=b)
    text = markdown.render(result)
    assert "A measured with: NVIDIA H200 x2" in text and "B measured with: cpu" in text
    line_a = common.environment_text(a)
    for part in ("NVIDIA H200 x2", "driver 570.1", "torch 2.7.0", "tensorrt_llm 1.1.0rc2",
                 "kernel env: TRTLLM_ENABLE_PDL=1", "sandbox: off",
                 "machine check: CPU load flagged",
                 "2 sessions on node-1, node-2 (2026-12-02 20:06 to 2026-12-02 22:50)"):
        assert part in line_a, part
    line_b = common.environment_text(b)
    assert "kernel env: none set" in line_b and len(line_b) < 400
    page = html_report.render(result)
    assert "A measured with" in page and "TRTLLM_ENABLE_PDL=1" in page
    assert "measured with" not in markdown.render(make_result())
    assert json.loads(json_report.render(result))["a"]["env"]["device_name"] == "NVIDIA H200"


# A long explanation of the statistics and a long note: the texts a report used to cut
LONG_NOTE = ("10 rounds resolve +-9.8%; over 100 would be needed: a quieter machine; A's "
             "processes sit on two levels 4.1% apart (6 and 4 rounds), which the rounds of B "
             "do not show")
MACHINE = ["CPU load: 1.9 of 2 cores in other processes; 1-min load average 1.8",
           "busy processes: pip (pid 7767) 97%, python (pid 8095) 97%"]


def _noisy_result() -> Result:
    """The demo's pr-v1 story measured on a busy machine: three unintended configs with an
    undecided latency beside the inconclusive ones, the note of the machine, kernel times
    from the profiled call, an assert under the table."""
    result = make_result()
    result.summary.update(machine=MACHINE, max_rounds=15)
    result.notes = ["where latency is undecided, round medians vary 4.6% to 63.9% between "
                    "worker processes, more than the 2% threshold", *MACHINE]
    for cfg in result.configs:
        if cfg.verdict in ("unintended", "inconclusive"):
            cfg.latency = LatencyResult("inconclusive", 0.948, [0.320, 2.813], 1.0, None, 10, 10,
                                        detectable=2.488, note=LONG_NOTE, rounds_needed=1459,
                                        a_us=13648.0, b_us=11971.0, a_spread_us=6600.0,
                                        b_spread_us=4100.0)
    trt = next(c for c in result.configs if c.verdict == "unintended")
    trt.kernel_deltas = [KernelDelta("aten::bmm", 17671.3, 0.0, -17671.3),
                         KernelDelta(SDPA, 0.0, 6318.6, 6318.6)]
    trt.profiled_a_us, trt.profiled_b_us = 19321.0, 6561.0
    return result


@pytest.mark.parametrize("width", [80, 100, 120, 160, 200])
def test_every_line_fits_and_nothing_is_cut_at_any_width(width: int) -> None:
    """The terminal report at 80 to 200 columns: no line wider, no "…", and every sentence
    there whole once the wrapping is undone (the note, the latency's explanation, the
    `next:` line, the verdict line)."""
    result = _noisy_result()
    text = table_report.render(result, width=width, colour=False)
    lines = text.splitlines()
    assert max(map(len, lines)) <= width, max(lines, key=len)
    # only a kernel name longer than two lines of its column is shortened, count kept (the
    # JSON and HTML have it whole); no sentence is
    assert common.ELLIPSIS not in re.sub(r"\S*… x\d+", "", text)
    flat = " ".join(text.split())
    for sentence in (*result.notes, common.next_step(result), common.final_line(result),
                     "undecidable at this noise (detects only changes over 100%)"):
        assert " ".join(str(sentence).split()) in flat, sentence
    if width >= table_report.WIDE:  # in a column the explanation breaks inside names too
        flat = "".join(text.split())
    assert "".join(LONG_NOTE.split()) in "".join(flat.split())
    # a sentence breaks at spaces only: the assert's identifier stays whole
    assert "DG_HOST_ASSERT(batch_size" in text


def test_the_pr_comment_and_the_page_keep_every_sentence_whole() -> None:
    """Markdown and HTML: GitHub and the browser wrap; nothing of ours is cut."""
    result = _noisy_result()
    comment = markdown.render(result)
    page = html_report.render(result)
    assert common.ELLIPSIS not in comment and common.ELLIPSIS not in page
    for sentence in (LONG_NOTE, common.next_step(result)[len("next: "):], *result.notes):
        assert markdown.escape(sentence, common.NOTE_LIMIT) in comment, sentence
        assert html_lib.escape(sentence, quote=False) in page.replace("&#39;", "'"), sentence


def test_one_source_for_every_count() -> None:
    """The headline, the `next:` line, the summary and the verdict line count the same
    configs the same way: 5 timed, 2 of them undecided (1 inconclusive, 1 of the 1
    unintended), whatever the format."""
    result = _noisy_result()
    facts = common.run_facts(result)
    assert (facts.measured, facts.total, facts.timed, len(facts.undecided)) == (5, 6, 5, 2)
    said = "latency undecided for 2 of the 5 configs timed on both sides"
    step = common.next_step(result)
    assert step.startswith(f"next: {said} (1 unintended, 1 inconclusive), after 10 "
                           "rounds per side; the machine was noisy")
    result.configs[0].verdict = "unintended"  # a second unintended config, decided
    assert "(1 of the 2 unintended, 1 inconclusive)" in common.next_step(result)
    texts = [markdown.render(result), html_report.render(result),
             table_report.render(result, width=100, colour=False)]
    for text in texts:
        flat = " ".join(text.replace("&#39;", "'").split())
        assert said in flat
        assert "5 of 6 configs measured" in flat and "1 failed on one side" in flat
        assert not re.search(r"latency (?:undecided|inconclusive) for (?!2 of the 5)\d", flat)


def test_units_are_in_the_header_of_every_format() -> None:
    result = _noisy_result()
    result.summary.update(min_effect=0.005, alpha=0.05)
    for text in (table_report.render(result, width=100, colour=False), markdown.render(result),
                 html_report.render(result)):
        flat = " ".join(text.split())
        assert "threshold: ±0.5% (--min-effect)" in flat.replace("</dt><dd>", ": ")
        assert "alpha: 5% family-wise (--alpha)" in flat.replace("</dt><dd>", ": ")


def test_no_advice_the_run_already_followed() -> None:
    """A projection within the run's own --max-rounds is not offered again."""
    result = make_result()
    undecided = next(c for c in result.configs if c.verdict == "inconclusive")
    undecided.latency.rounds_needed = 12
    assert common.next_step(result).endswith("re-run with --max-rounds 12 (a config whose "
                                             "spread grows stops early and says so)")
    result.summary["max_rounds"] = 15
    assert common.next_step(result).endswith(
        "the --max-rounds 15 of this run already allowed the 12 rounds their spread asks for: "
        "it grew as rounds came in, measure on an idle machine")


def test_a_detectable_change_over_100_percent_is_no_statement() -> None:
    """Undecided: "undecidable at this noise"; decided (the interval excludes 1 on a busy
    machine, 0.334x [0.148, 0.751]): a change that large was seen, nothing else is said."""
    undecided = LatencyResult("inconclusive", 0.948, [0.32, 2.81], 1.0, None, 10, 10,
                              detectable=2.488)
    assert common.latency_details(undecided) == [
        "undecidable at this noise (detects only changes over 100%)"]
    faster = LatencyResult("faster", 0.334, [0.148, 0.751], 0.003, None, 10, 10,
                           detectable=1.31)
    assert common.latency_cell(faster) == "0.334x [0.148, 0.751] p=0.003 (faster)"
    assert "detects" not in common.latency_cell(LatencyResult(
        "faster", 0.334, [0.148, 0.751], 0.003, None, 10, 10, detectable=1.0))
    assert common.latency_details(LatencyResult("slower", 1.2, [1.1, 1.3], 0.001, None, 10, 10,
                                                detectable=0.05)) == ["detects ≥ 5.0%"]


def test_a_config_stopped_below_max_rounds_says_why() -> None:
    """The plan found more rounds futile: the row says so, with the ceiling it was given."""
    stopped = LatencyResult("inconclusive", 1.01, [0.9, 1.1], 0.5, None, 20, 20,
                            detectable=0.08, rounds_needed=71)
    cell = common.latency_cell(stopped, max_rounds=39)
    assert cell.endswith("stopped at 20 of --max-rounds 39: at the spread measured by then, "
                         "more rounds could not decide it")
    assert "stopped" not in common.latency_cell(stopped, max_rounds=20)
    assert "stopped" not in common.latency_cell(stopped)  # a result without the ceiling


def test_grid_and_fit_stay_within_the_width() -> None:
    headers = ["component", "status", "what it costs without it"]
    rows = [["GPU", "MISSING", "everything: upstream's benchmark runs on CUDA only " * 2],
            ["torch", "ok", "-"]]
    wide = table_report.grid(headers, rows, 200)
    assert wide.splitlines()[0].split() == ["component", "status", "what", "it", "costs",
                                            "without", "it"]
    for width in (30, 40, 60, 80):
        text = table_report.grid(headers, rows, width)
        assert max(map(len, text.splitlines())) <= width
        assert " ".join(text.split()).count("everything: upstream's benchmark") == 2
    blocks = table_report.grid(headers, rows, 30, lead=2)
    assert blocks.splitlines()[0] == "GPU  MISSING" and "-" not in blocks.split()
    said = "abdiff doctor: target reference: ready: " + "every hook is present " * 6
    fitted = table_report.fit(f"  {said}", 50).splitlines()
    assert max(map(len, fitted)) <= 50 and fitted[1].startswith("      hook")


@pytest.mark.parametrize("width", [80, 100, 160])
def test_bisect_report_fits_the_terminal(width: int) -> None:
    """The culprit sentence, the path taken and the evidence within the width, whole."""
    from abdiff.reports import bisect as bisect_report
    from abdiff.verdict.bisection import BisectResult, Commit, Culprit, Step

    ids = [c.id for c in make_result().configs]
    commit = Commit("c" * 40, "Make the TRTLLM metadata's spec-decoding check also reach DSA "
                    "and the indexer's", "A. Developer <dev@example.com>", "2026-12-01")
    culprit = Culprit(commit, ids[:4], confirmed=True, latency_undecided=ids[:2],
                      evidence=make_result())
    result = BisectResult(Commit("a" * 40, "base"), Commit("b" * 40, "head"), ids[:4],
                          culprits=[culprit],
                          steps=[Step(commit, {i: "new" for i in ids[:4]}),
                                 Step(Commit("d" * 40, "an earlier commit"),
                                      {i: "old" for i in ids[:4]})])
    text = bisect_report.render(result, make_result(), "table", width=width)
    assert max(map(len, text.splitlines())) <= width
    flat = " ".join(text.split())
    assert bisect_report.culprit_sentence(culprit) in flat
    for sha, subject, outcomes in bisect_report.path_rows(result):
        assert f"{sha} {subject}: {outcomes}" in flat
    comment = bisect_report.render(result, make_result(), "markdown")
    assert markdown.escape(bisect_report.culprit_sentence(culprit), common.NOTE_LIMIT) in comment


def test_spreads_and_levels_over_100_percent_are_no_latency_statement() -> None:
    """"10 rounds resolve +-192.9%" and "two levels 313.3% apart" (a busy machine) say
    what they mean instead; the ordinary numbers stay numbers."""
    from abdiff.reports import latency_words
    from abdiff.verdict.stats import LatencyStatistics, Levels

    def undecided(resolves: float, gap: float) -> list[str]:
        s = LatencyStatistics("inconclusive", 10, 10, 100.0, 100.0, 1.0, 1.0,
                              Levels(gap, 6, 4, 0.0), None, ratio=1.0, ci=(0.5, 2.0),
                              threshold=3.0, rounds_needed=500, resolves=resolves)
        return latency_words.note_parts(s, 0.02)

    assert undecided(1.929, 3.133) == [
        "10 rounds cannot resolve a change under 100%; over 100 would be needed: a quieter "
        "machine",
        "A's processes sit on two levels, the slow one 4.1x the fast (6 and 4 rounds)"]
    assert undecided(0.098, 0.041) == [
        "10 rounds resolve +-9.8%; over 100 would be needed: a quieter machine",
        "A's processes sit on two levels 4.1% apart (6 and 4 rounds)"]


def test_a_config_the_plan_stopped_is_not_told_that_more_rounds_decide_it() -> None:
    """5 pairs cannot flag, however large the change: more rounds decide it, unless the
    plan stopped the config there (its row says more rounds could not decide it)."""
    from abdiff.reports import latency_words
    from abdiff.verdict.stats import LatencyStatistics

    s = LatencyStatistics("inconclusive", 5, 5, 100.0, 100.0, 1.0, 1.0, None, None,
                          ratio=1.02, ci=(0.91, 1.14), threshold=3.0, look_rounds=5)
    advice = "more rounds per side (--rounds, --max-rounds) decide it"
    assert any(advice in n for n in latency_words.note_parts(s, 0.02))
    assert any(advice in n for n in latency_words.note_parts(s, 0.02, max_rounds=5))
    stopped = latency_words.note_parts(s, 0.02, max_rounds=15)
    assert stopped[0] == "5 pairs have too few sign patterns to flag a change at this level, " \
                         "however large"


def test_compare_at_80_columns_fits_them_in_characters_and_bytes(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The H200 A/A's rows at COLUMNS=80: a latency line holding `≥` (three bytes) was 79
    characters and 81 bytes; each line now fits 80 counted either way."""
    from pathlib import Path

    from abdiff.cli import main
    data = Path(__file__).parent / "data" / "h200"
    monkeypatch.setenv("COLUMNS", "80")
    main(["compare", str(data / "graph-pr..pr-a.json"), str(data / "graph-pr..pr-b.json")])
    lines = capsys.readouterr().out.splitlines()
    assert any("≥" in line for line in lines)
    assert max(len(line.encode()) for line in lines) <= 80
    for width in range(30, 90):
        wrapped = table_report.wrap(["latency 1.000x (inconclusive); detects ≥ 0.7%; 5 pairs "
                                     "have too few sign patterns; Δ -593 µs"], width)
        assert max(len(line.encode()) for line in wrapped) <= width
