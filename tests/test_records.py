"""records: a result written with dump_json reads back as the same Result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abdiff.errors import InputError
from abdiff.store import records
from abdiff.store.records import ConfigRuns, RoundRecord, RunFile
from abdiff.verdict.compare import compare_runs


def _rounds(latency: float, facts: dict, kernels: dict, n: int = 4) -> list[RoundRecord]:
    return [RoundRecord("ok", None, [latency * (1 + 0.001 * i + 0.0005 * j) for j in range(5)],
                        facts, kernels, i) for i in range(n)]


def _run(rev: str, sha: str, mtp: int | None, trtllm_us: float, dsa_ok: bool,
         configs: tuple[str, ...] = ("GEN-TRTLLM", "GEN-DSA")) -> RunFile:
    trtllm = ConfigRuns("GEN-TRTLLM", {"backend": "TRTLLM", "batch_size": 32}, _rounds(
        trtllm_us, {"max_total_draft_tokens": mtp}, {"aten::bmm": 4, "aten::softmax": 2}))
    dsa_rounds = _rounds(500.0, {"next_n": 1}, {"aten::mm": 2}) if dsa_ok else [
        RoundRecord("aborted", "DG_HOST_ASSERT(<b>@octocat</b>) | `x`", round=0)]
    dsa = ConfigRuns("GEN-DSA", {"backend": "DSA", "batch_size": 32}, dsa_rounds)
    only = ConfigRuns(f"ONLY-{rev}", {"backend": "TRTLLM"}, _rounds(100.0, {}, {}))
    by_id = {"GEN-TRTLLM": trtllm, "GEN-DSA": dsa}
    return RunFile(rev, sha, "reference", "mtp", {"device": "cpu"},
                   [by_id[c] for c in configs] + [only])


def test_result_round_trip() -> None:
    run_a = _run("main", "a" * 40, None, 800.0, dsa_ok=False)
    run_b = _run("pr", "b" * 40, 3, 880.0, dsa_ok=True)
    run_b.configs[0].rounds = [
        RoundRecord(r.status, r.error, r.latency_us, r.facts, {"aten::sdpa": 1}, r.round)
        for r in run_b.configs[0].rounds
    ]
    result = compare_runs(run_a, run_b, {"backend": ["DSA"]}, notes=["a note"])
    result.a.baseline = "nightly"
    # The fixture exercises what the parser must carry: numbers, nulls, diffs, lists.
    trtllm = result.configs[0]
    assert trtllm.latency.ratio is not None and trtllm.latency.ci is not None
    assert trtllm.facts_changed and trtllm.kernels_added and trtllm.kernels_removed
    assert result.configs[1].error_a and result.only_in_a and result.only_in_b

    data = json.loads(records.dump_json(result.to_json()))
    parsed = records.parse_result(data, "result.json")
    assert parsed == result
    assert records.dump_json(parsed.to_json()) == records.dump_json(result.to_json())


def test_load_result_and_tolerated_extras(tmp_path) -> None:
    result = compare_runs(_run("main", "a" * 40, None, 800.0, True),
                          _run("pr", "b" * 40, None, 800.0, True), {})
    data = result.to_json()
    data["future_field"] = {"anything": [1, 2]}
    data["configs"][0]["another"] = None
    path = tmp_path / "result.json"
    path.write_text(records.dump_json(data), encoding="utf-8")
    assert records.load_result(path) == result


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda d: d["configs"][0]["latency"].update(ratio="1.0"),
     "configs[0].latency.ratio must be float or null, got str"),
    (lambda d: d["configs"][0]["latency"].update(ci=[1.0]),
     "configs[0].latency.ci must have exactly 2 items"),
    (lambda d: d["configs"][0]["latency"].update(verdict="worse"),
     "configs[0].latency.verdict must be one of 'unchanged', 'slower'"),
    (lambda d: d["configs"][0].update(kernels_added={"k": -1}),
     "configs[0].kernels_added.k must be >= 0, got -1"),
    (lambda d: d["configs"][0].update(in_scope=1), "configs[0].in_scope must be bool, got int"),
    (lambda d: d["configs"][0].update(facts_changed={"x": 3}),
     "configs[0].facts_changed.x must be a list, got int"),
    (lambda d: d["configs"][0].pop("status_a"), "configs[0] is missing field 'status_a'"),
    (lambda d: d["b"].update(sha=None), "b.sha must be str, got null"),
    (lambda d: d.update(expect={"backend": "DSA"}), "expect.backend must be a list, got str"),
    (lambda d: d.update(notes=[1]), "notes[0] must be str, got int"),
    (lambda d: d["configs"].append(7), "configs[2] must be an object, got int"),
    (lambda d: d.update(schema="abdiff.run/1"), "schema is 'abdiff.run/1', expected"),
])
def test_parse_result_errors_are_one_line(mutate, needle: str) -> None:
    result = compare_runs(_run("main", "a" * 40, None, 800.0, True),
                          _run("pr", "b" * 40, None, 800.0, True), {})
    data = json.loads(records.dump_json(result.to_json()))
    mutate(data)
    with pytest.raises(InputError) as info:
        records.parse_result(data, "result.json")
    message = str(info.value)
    assert message.startswith("result.json: ") and needle in message and "\n" not in message


H200 = Path(__file__).resolve().parent / "data" / "h200"


def test_noise_note_on_recorded_h200_rounds() -> None:
    """Eager H200 rounds (A/A, 15-85% between processes) explain the inconclusive
    verdicts and point to graph replays (drop --eager); graph-replay rounds (0.1-2%) need no
    note."""
    eager = compare_runs(records.load_run_file(H200 / "eager-pr..pr-a.json"),
                         records.load_run_file(H200 / "eager-pr..pr-b.json"), {})
    note = [n for n in eager.notes if "round medians vary" in n]
    assert len(note) == 1 and "drop --eager" in note[0]
    assert note[0].startswith("where latency is undecided, round medians vary ")
    assert "12" not in note[0].split(" vary ")[0]  # no count: the reports count, once
    graph = compare_runs(records.load_run_file(H200 / "graph-main..pr-v1-a.json"),
                         records.load_run_file(H200 / "graph-main..pr-v1-b.json"), {})
    assert not [n for n in graph.notes if "round medians vary" in n]


def test_the_noise_notes_range_is_of_the_sides_beyond_the_threshold() -> None:
    """It said "vary 1.0% to 34.3% ..., more than the 2% threshold": the range now covers
    the sides that vary more than the threshold, and says how many of all they are."""
    def run(rev: str, phase: int) -> RunFile:
        def rounds(step: float) -> list[RoundRecord]:
            return [RoundRecord("ok", None, [100.0 * (1 + step * ((i + phase) % 2))] * 5, {}, {},
                                i) for i in range(4)]
        return RunFile(rev, rev * 40, "reference", "mtp", {"device": "cpu"},
                       [ConfigRuns("GEN-TRTLLM-a", {}, rounds(0.3)),
                        ConfigRuns("GEN-TRTLLM-b", {}, rounds(0.3)),
                        ConfigRuns("GEN-TRTLLM-c", {}, rounds(0.005))])

    (note,) = compare_runs(run("a", 0), run("b", 1), {}).notes
    low = float(note.split(" vary ")[1].split("%")[0])
    assert low > 2 and note.endswith("(4 of 6 sides; the others less)"), note


def test_noise_note_on_the_cpu_has_no_cuda_hint() -> None:
    def noisy(rev: str, phase: int) -> RunFile:
        rounds = [RoundRecord("ok", None, [100.0 * (1 + 0.3 * ((i + phase) % 2))] * 5, {}, {}, i)
                  for i in range(4)]
        return RunFile(rev, rev * 40, "reference", "mtp", {"device": "cpu"},
                       [ConfigRuns("GEN-TRTLLM", {}, rounds)])

    (note,) = compare_runs(noisy("a", 0), noisy("b", 1), {}).notes
    assert note.startswith("where latency is undecided, round medians vary") and "cuda" not in note



def test_json_has_null_for_nan_and_infinity_but_keeps_such_letters_in_strings() -> None:
    """JSON has no NaN: a run file's missing number is null, in both layouts; a string that
    holds those letters is kept as written."""
    run = RunFile(rev="main", sha="0" * 40, target="demo", suite="NaN-Infinity", env={},
                  configs=[ConfigRuns("c", {}, [RoundRecord(status="ok",
                                                            latency_us=[1.5, float("nan")],
                                                            round=0)])])
    for compact in (True, False):
        data = json.loads(records.dump_json(run.to_json(), compact=compact))
        assert data["configs"][0]["rounds"][0]["latency_us"] == [1.5, None]
        assert data["suite"] == "NaN-Infinity"
    assert json.loads(records.dump_json({"x": [float("inf"), -float("inf"), 2.0]})) \
        == {"x": [None, None, 2.0]}
    assert records.dump_json({"x": 1.0}, compact=True) == '{"x":1.0}\n'
