"""abdiff.stats: round-level tests, TOST, multiple-comparison control, adaptive rounds."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import numpy as np
import pytest
from scipy import stats as sps

from abdiff import stats
from abdiff.records import LatencyResult


def make_rounds(rng: np.random.Generator, n_rounds: int, factor: float = 1.0,
                round_sd: float = 0.005, within_sd: float = 0.01, iterations: int = 20,
                base: float = 800.0) -> list[list[float]]:
    """Rounds of iteration latencies (us): per-round offset, within-round jitter, one outlier."""
    rounds = []
    for _ in range(n_rounds):
        level = base * factor * math.exp(rng.normal(0, round_sd))
        lat = level * np.exp(rng.normal(0, within_sd, iterations))
        lat[rng.integers(iterations)] *= 3.0  # a heavy outlier iteration in every round
        rounds.append(lat.tolist())
    return rounds


def verdict(a, b, **kw) -> LatencyResult:
    return stats.latency_verdicts([stats.compare_latency(a, b)], **kw)[0]


def test_clear_ten_percent_slowdown_is_slower():
    rng = np.random.default_rng(1)
    result = verdict(make_rounds(rng, 5), make_rounds(rng, 5, factor=1.10))
    assert result.verdict == "slower"
    assert result.ratio == pytest.approx(1.10, rel=0.01)
    assert result.ci[0] < result.ratio < result.ci[1]
    assert result.ci[0] > 1.02
    assert result.p < stats.DEFAULT_ALPHA
    assert result.p_equivalence > 0.5
    assert (result.rounds_a, result.rounds_b) == (5, 5)


def test_clear_speedup_is_faster():
    rng = np.random.default_rng(2)
    result = verdict(make_rounds(rng, 5), make_rounds(rng, 5, factor=0.90))
    assert result.verdict == "faster"
    assert result.ratio == pytest.approx(0.90, rel=0.01)


def test_identical_distributions_with_enough_rounds_are_unchanged():
    rng = np.random.default_rng(3)
    result = verdict(make_rounds(rng, 15), make_rounds(rng, 15))
    assert result.verdict == "unchanged"
    assert result.p_equivalence < stats.DEFAULT_EQUIVALENCE_ALPHA
    lo, hi = result.ci
    assert 1 / 1.02 < lo < 1 < hi < 1.02


def test_not_significant_is_not_unchanged_when_noise_is_large():
    """Absence of evidence is not evidence of absence: 5% round noise, 3 rounds each."""
    rng = np.random.default_rng(4)
    result = verdict(make_rounds(rng, 3, round_sd=0.05), make_rounds(rng, 3, round_sd=0.05))
    assert result.verdict == "inconclusive"
    assert stats.needs_more_rounds(result)


@pytest.mark.parametrize("na,nb", [(1, 1), (1, 5), (2, 2), (5, 2), (0, 5)])
def test_few_rounds_are_inconclusive_even_for_a_huge_change(na, nb):
    rng = np.random.default_rng(5)
    a = make_rounds(rng, na)
    b = make_rounds(rng, nb, factor=2.0)
    s = stats.compare_latency(a, b)
    result = stats.latency_verdicts([s])[0]
    assert result.verdict == "inconclusive"
    assert result.p is None  # not part of the tested family
    assert (result.rounds_a, result.rounds_b) == (na, nb)
    if na and nb:
        assert result.ratio == pytest.approx(2.0, rel=0.05)
    json.dumps(asdict(result), allow_nan=False)  # numbers or null, never NaN


def test_empty_rounds_are_skipped_not_counted():
    rng = np.random.default_rng(6)
    a = make_rounds(rng, 5) + [[]]
    s = stats.compare_latency(a, make_rounds(rng, 5))
    assert s.rounds_a == 5


def test_unequal_round_and_iteration_counts():
    rng = np.random.default_rng(7)
    a = make_rounds(rng, 4, iterations=10) + make_rounds(rng, 2, iterations=35)
    b = make_rounds(rng, 11, factor=1.10, iterations=20)
    result = verdict(a, b)
    assert result.verdict == "slower"
    assert (result.rounds_a, result.rounds_b) == (6, 11)

    # A/A with unequal counts: unequal sample sizes are never evidence by themselves
    # (pyperf's rule calls them "significant").
    aa = verdict(make_rounds(rng, 4), make_rounds(rng, 12))
    assert aa.verdict in ("unchanged", "inconclusive")
    assert aa.p > 0.01


def test_round_level_not_pooled():
    """Pooled iterations look overwhelmingly significant; the rounds say otherwise."""
    rng = np.random.default_rng(8)
    # Four processes per side; each process lands at its own level (3% round noise),
    # iterations inside a process barely vary. Side B's processes happen to sit 2.5% higher.
    offsets_a = [-0.03, 0.01, -0.01, 0.03]
    offsets_b = [-0.005, 0.035, 0.015, 0.055]
    a = [(800 * math.exp(o) * np.exp(rng.normal(0, 0.002, 50))).tolist() for o in offsets_a]
    b = [(800 * math.exp(o) * np.exp(rng.normal(0, 0.002, 50))).tolist() for o in offsets_b]
    pooled = sps.ttest_ind(np.concatenate(b), np.concatenate(a))
    assert pooled.pvalue < 1e-6  # the pooled t-test (pyperf's rule) cries wolf
    s = stats.compare_latency(a, b)
    assert s.p_difference > 0.05  # with between-round variance, 4 vs 4 rounds prove nothing
    assert s.ci[0] < 1 < s.ci[1]
    result = stats.latency_verdicts([s])[0]
    assert result.verdict == "inconclusive"


def _borderline_pair() -> tuple[list[list[float]], list[list[float]]]:
    """A 5% slowdown with enough round noise that the raw p is about 0.0013."""
    a_meds = [100.0, 102.0, 98.0, 101.0, 99.0]
    b_meds = [105.0, 107.5, 103.0, 106.5, 104.0]
    return [[m] * 3 for m in a_meds], [[m] * 3 for m in b_meds]


def test_multiple_comparison_control_changes_a_borderline_verdict():
    a, b = _borderline_pair()
    borderline = stats.compare_latency(a, b)
    assert borderline.p_difference < stats.DEFAULT_ALPHA / 2
    assert 12 * borderline.p_difference > 2 * stats.DEFAULT_ALPHA
    assert borderline.ratio > 1.02
    alone = stats.latency_verdicts([borderline])[0]
    assert alone.verdict == "slower"
    assert alone.p == pytest.approx(borderline.p_difference)

    # The same config in a suite of 12 whose other 11 configs did not change.
    rng = np.random.default_rng(9)
    others = [stats.compare_latency(make_rounds(rng, 5), make_rounds(rng, 5)) for _ in range(11)]
    in_suite = stats.latency_verdicts([borderline, *others])
    assert in_suite[0].verdict == "inconclusive"
    assert in_suite[0].p == pytest.approx(min(1.0, 12 * borderline.p_difference))
    assert "Holm over 12" in in_suite[0].method


def test_holm_matches_definition_and_bh_is_scipys():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.06
    np.testing.assert_allclose(stats.holm(p), [0.03, 0.06, 0.06, 0.02])
    assert stats.holm(np.array([])).size == 0
    s = [stats.LatencyStats(1.05, (1.03, 1.07), pv, 0.9, 5, 5, "m") for pv in p]
    bh = stats.latency_verdicts(s, correction="bh")
    np.testing.assert_allclose([r.p for r in bh], sps.false_discovery_control(p))
    with pytest.raises(ValueError):
        stats.latency_verdicts(s, correction="bonferroni")


def test_significant_but_negligible_change_is_unchanged():
    """A real 0.5% change measured very precisely: significant, below min-effect, equivalent."""
    rng = np.random.default_rng(10)
    a = make_rounds(rng, 10, round_sd=0.0005, within_sd=0.001)
    b = make_rounds(rng, 10, factor=1.005, round_sd=0.0005, within_sd=0.001)
    result = verdict(a, b)
    assert result.p < stats.DEFAULT_ALPHA
    assert result.verdict == "unchanged"


def test_min_effect_gate():
    """A precise 3% slowdown is slower at the 2% default and unchanged-or-inconclusive at 5%."""
    rng = np.random.default_rng(11)
    a = make_rounds(rng, 8, round_sd=0.002)
    b = make_rounds(rng, 8, factor=1.03, round_sd=0.002)
    assert verdict(a, b).verdict == "slower"
    s = stats.compare_latency(a, b, min_effect=0.05)
    r = stats.latency_verdicts([s], min_effect=0.05)[0]
    assert r.verdict == "unchanged"


def test_interval_is_the_tost_interval():
    """The reported interval is the 90% one: inside the margin exactly when TOST succeeds."""
    rng = np.random.default_rng(12)
    a, b = make_rounds(rng, 6, round_sd=0.02), make_rounds(rng, 6, round_sd=0.02)
    s = stats.compare_latency(a, b)
    assert "90% CI" in s.method
    inside = s.ci[0] > 1 / 1.02 and s.ci[1] < 1.02
    assert inside == (s.p_equivalence < stats.DEFAULT_EQUIVALENCE_ALPHA)
    wide = stats.compare_latency(a, b, equivalence_alpha=0.005)
    assert wide.ci[0] < s.ci[0] < s.ratio < s.ci[1] < wide.ci[1]
    assert wide.p_difference == pytest.approx(s.p_difference)
    # alpha does not change the statistics, only the verdict level
    assert stats.compare_latency(a, b, alpha=0.2) == s


def test_slower_interval_excludes_one_and_unchanged_interval_is_inside_margin():
    rng = np.random.default_rng(14)
    seen = set()
    for _ in range(20):
        a, b = make_rounds(rng, 6, round_sd=0.01), make_rounds(rng, 6, 1.04, round_sd=0.01)
        c = make_rounds(rng, 10, round_sd=0.004)
        for r in stats.latency_verdicts([stats.compare_latency(a, b),
                                         stats.compare_latency(c, make_rounds(rng, 10, 1.005))]):
            seen.add(r.verdict)
            if r.verdict == "slower":
                assert r.ci[0] > 1
            if r.verdict == "unchanged":
                assert r.ci[0] > 1 / 1.02 and r.ci[1] < 1.02
    assert {"slower", "unchanged"} <= seen


def test_hand_written_constant_rounds():
    same = stats.latency_verdicts([stats.compare_latency([[500.0]] * 3, [[500.0, 500.0]] * 3)])[0]
    assert same.verdict == "unchanged" and same.ratio == 1.0 and same.ci == [1.0, 1.0]
    slower = stats.latency_verdicts([stats.compare_latency([[500.0]] * 3, [[550.0]] * 3)])[0]
    assert slower.verdict == "slower" and slower.ratio == pytest.approx(1.1)


def test_invalid_input_is_a_clear_error():
    with pytest.raises(ValueError, match="positive"):
        stats.compare_latency([[1.0, -2.0]] * 3, [[1.0]] * 3)
    with pytest.raises(ValueError, match="alpha"):
        stats.compare_latency([[1.0]] * 3, [[1.0]] * 3, alpha=1.5)
    with pytest.raises(ValueError, match="no timed iterations"):
        stats.round_summary([])


def test_round_summary_is_the_median():
    assert stats.round_summary([10.0, 11.0, 1000.0]) == 11.0


def test_round_variation_is_the_cv_of_round_medians():
    assert stats.round_variation([[100.0, 1.0, 1e6], [110.0], [90.0]]) == pytest.approx(0.1)
    assert stats.round_variation([[100.0]]) is None


def test_needs_more_rounds():
    def result(v: str, p: float | None = None) -> LatencyResult:
        return LatencyResult(v, ratio=1.0, p=p)

    assert stats.needs_more_rounds(result("inconclusive"))
    assert not stats.needs_more_rounds(result("unchanged", 0.5))
    assert not stats.needs_more_rounds(result("n/a"))
    # a marginal flag is confirmed on more rounds; an overwhelming one stops
    assert stats.needs_more_rounds(result("slower", 0.005))
    assert not stats.needs_more_rounds(result("slower", 1e-6))
    assert not stats.needs_more_rounds(result("slower", 0.005), confirm_p=None)


def test_aa_suite_false_alarms_are_rare():
    """200 A/A suites of 12 configs, 5 rounds each: Holm at alpha 0.01 keeps false alarms rare."""
    rng = np.random.default_rng(13)
    n_suites, n_cfg, n_rounds = 200, 12, 5
    log_meds = rng.normal(0, 0.02, (n_suites, n_cfg, 2, n_rounds))
    tests = stats.round_level_tests(log_meds[:, :, 0].reshape(-1, n_rounds),
                                    log_meds[:, :, 1].reshape(-1, n_rounds),
                                    stats.DEFAULT_MIN_EFFECT, 0.9)
    alarms = 0
    for s in range(n_suites):
        rows = range(s * n_cfg, (s + 1) * n_cfg)
        suite = [stats.LatencyStats(float(tests.ratio[i]), (0.0, 0.0),
                                    float(tests.p_difference[i]), float(tests.p_equivalence[i]),
                                    n_rounds, n_rounds, "t") for i in rows]
        alarms += any(r.verdict in ("slower", "faster") for r in stats.latency_verdicts(suite))
    assert alarms <= 4  # expected about 1% of 200 at most


def test_futility_stops_extension_only_when_nothing_can_be_decided() -> None:
    from abdiff.records import LatencyResult
    from abdiff.stats import futile

    hopeless = LatencyResult("inconclusive", ratio=1.01, ci=[0.80, 1.27], rounds_a=5, rounds_b=5)
    promising = LatencyResult("inconclusive", ratio=1.005, ci=[0.985, 1.025], rounds_a=5,
                              rounds_b=5)
    clear_shift = LatencyResult("inconclusive", ratio=1.30, ci=[1.02, 1.65], rounds_a=5,
                                rounds_b=5)
    assert futile(hopeless, max_rounds=15)
    assert not futile(promising, max_rounds=15)
    assert not futile(clear_shift, max_rounds=15)
    assert futile(promising, max_rounds=5)  # nothing left to add
    assert not futile(LatencyResult("inconclusive", rounds_a=2, rounds_b=2), max_rounds=15)
