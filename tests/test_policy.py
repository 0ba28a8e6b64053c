"""Policy: expect scopes, verdicts and the exit code."""

import pytest

from abdiff.errors import InputError
from abdiff.store.records import ConfigResult, LatencyResult
from abdiff.verdict.policy import apply_policy, in_scope, parse_expect, summary_disagreements


def config(backend: str, change: str = "same", facts=None, latency: str = "unchanged",
           status_b: str | None = None) -> ConfigResult:
    status_a = "ok" if change in ("same", "broken") else "aborted"
    status_b = status_b or ("ok" if change in ("same", "fixed") else "aborted")
    return ConfigResult(f"GEN-{backend}", {"backend": backend, "seq_len_q": 4}, status_a,
                        status_b, change, None, None, facts or {}, {}, {},
                        LatencyResult(latency))


def test_parse_expect() -> None:
    assert parse_expect(["backend=DSA", "seq_len_q=2,4"], ["backend", "seq_len_q"]) == {
        "backend": ["DSA"], "seq_len_q": ["2", "4"]}
    with pytest.raises(InputError, match="unknown key 'colour'"):
        parse_expect(["colour=red"], ["backend"])
    with pytest.raises(InputError, match="KEY=VALUE"):
        parse_expect(["backend"], ["backend"])


def test_scope_matches_every_key() -> None:
    params = {"backend": "DSA", "seq_len_q": 4}
    assert in_scope(params, {"backend": ["DSA"]})
    assert in_scope(params, {"backend": ["DSA"], "seq_len_q": ["2", "4"]})
    assert not in_scope(params, {"backend": ["DSA"], "seq_len_q": ["1"]})
    assert not in_scope(params, {})


def test_verdicts_and_exit_code() -> None:
    expect = {"backend": ["DSA"]}
    fixed_dsa = config("DSA", "fixed")
    changed_trtllm = config("TRTLLM", facts={"max_total_draft_tokens": [None, 3]})
    slower_trtllm = config("TRTLLM", latency="slower")
    broken_dsa = config("DSA", "broken")  # in scope, but a crash is never intended
    quiet = config("TRTLLM")
    unsure = config("TRTLLM", latency="inconclusive")
    configs = [fixed_dsa, changed_trtllm, slower_trtllm, broken_dsa, quiet, unsure]
    summary = apply_policy(configs, expect)
    assert [c.verdict for c in configs] == [
        "expected", "unintended", "unintended", "unintended", "unchanged", "inconclusive"]
    assert summary["exit_code"] == 1 and summary["unintended"] == 3
    assert apply_policy([fixed_dsa, quiet, unsure], expect)["exit_code"] == 0


def test_fixed_outside_scope_is_unintended() -> None:
    fixed = config("TRTLLM", "fixed")
    apply_policy([fixed], {"backend": ["DSA"]})
    assert fixed.verdict == "unintended"


def test_the_same_failure_on_both_sides_is_still_failing_never_unchanged() -> None:
    still = config("TRTLLM", "still-failing")
    quiet = config("TRTLLM")
    summary = apply_policy([still, quiet], {})
    assert still.verdict == "still-failing"
    assert (summary["still-failing"], summary["measured"], summary["configs"]) == (1, 1, 2)
    assert summary["exit_code"] == 0
    assert apply_policy([still, quiet], {}, require_all=True)["exit_code"] == 1
    # configs with no rounds on a side are not measured either
    assert apply_policy([quiet], {}, require_all=True, not_compared=1)["exit_code"] == 1
    assert apply_policy([quiet], {}, require_all=True)["exit_code"] == 0


def test_a_different_failure_goes_through_the_scope() -> None:
    outside = config("TRTLLM", "failure-changed")
    inside = config("DSA", "failure-changed")
    summary = apply_policy([outside, inside, config("DSA")], {"backend": ["DSA"]})
    assert (outside.verdict, inside.verdict) == ("unintended", "expected")
    assert summary["exit_code"] == 1


def test_nothing_ran_on_either_side_is_exit_3() -> None:
    both = [config("DSA", "still-failing"), config("TRTLLM", "failure-changed")]
    assert apply_policy(both, {})["exit_code"] == 3
    assert apply_policy([], {})["exit_code"] == 3
    # one side ran: a measured regression, not an infrastructure failure
    assert apply_policy([config("DSA", "broken")], {})["exit_code"] == 1


def test_a_summary_that_leaves_out_a_count_or_claims_soft_changes_disagrees() -> None:
    """What a forged result file can say of itself: a summary without a count says nothing
    the configs could contradict (it disagrees), and one that lists a hard change among
    the soft-only ones, with exit code 0, disagrees (soft_only is recomputed from the soft
    gates it names). The control: the summary apply_policy wrote agrees."""
    configs = [config("TRTLLM", latency="slower"),
               config("DSA", facts={"max_total_draft_tokens": [None, 3]})]
    summary = apply_policy(configs, {}, gates={"latency": "soft"})
    assert summary["exit_code"] == 1 and summary["soft_only"] == ["GEN-TRTLLM"]
    assert summary_disagreements(summary, configs) == []
    for key in ("unintended", "measured", "configs"):
        missing = {k: v for k, v in summary.items() if k != key}
        assert [w for w in summary_disagreements(missing, configs)
                if w.startswith(f"{key} 'missing' but ")], key
    assert summary_disagreements({**summary, "unintended": True}, configs) != []
    forged = {**summary, "exit_code": 0, "soft_only": ["GEN-TRTLLM", "GEN-DSA"]}
    assert summary_disagreements(forged, configs) == [
        "soft_only ['GEN-TRTLLM', 'GEN-DSA'] but ['GEN-TRTLLM'] in its configs",
        "exit code 0 with 1 unintended change(s) that fail"]
    assert summary_disagreements({**summary, "soft_only": "GEN-DSA"}, configs) != []
