"""abdiff.stats: round-level tests, TOST, multiple-comparison control, adaptive rounds."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from conftest import git_env, run_abdiff
from scipy import stats as sps

from abdiff import stats
from abdiff.errors import InputError
from abdiff.records import LatencyResult, load_result


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
    # a flag at its look's level is final: the spending function paid for the looks
    assert not stats.needs_more_rounds(result("slower", 0.004))
    assert not stats.needs_more_rounds(result("faster", 1e-6))
    # B's slow rounds that are promising but not yet significant are measured further
    promising = LatencyResult("unchanged", ratio=1.0, p=0.5, p_odd=0.01)
    assert stats.needs_more_rounds(promising)
    assert not stats.needs_more_rounds(LatencyResult("unchanged", ratio=1.0, p=0.5, p_odd=0.2))
    assert not stats.needs_more_rounds(LatencyResult("slower", ratio=1.2, p=1e-6, p_odd=0.01))


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


# --------------------------------------------------------------------------- issue 17: explain


ROOT = Path(__file__).resolve().parents[1]


def test_absolute_times_are_medians_of_round_medians_with_a_robust_spread():
    rng = np.random.default_rng(21)
    a, b = make_rounds(rng, 7, base=41.1), make_rounds(rng, 7, base=36.9)
    result = verdict(a, b)
    med_a = np.array([np.median(r) for r in a])
    med_b = np.array([np.median(r) for r in b])
    assert result.a_us == pytest.approx(np.median(med_a))
    assert result.b_us == pytest.approx(np.median(med_b))
    assert result.a_spread_us == pytest.approx(sps.median_abs_deviation(med_a, scale="normal"))
    assert result.b_spread_us == pytest.approx(sps.median_abs_deviation(med_b, scale="normal"))
    assert result.verdict == "faster" and 0 < result.b_spread_us < 1


def test_detectable_effect_shrinks_with_rounds_and_never_undercuts_the_threshold():
    rng = np.random.default_rng(22)
    few = verdict(make_rounds(rng, 3, round_sd=0.02), make_rounds(rng, 3, round_sd=0.02))
    many = verdict(make_rounds(rng, 15, round_sd=0.02), make_rounds(rng, 15, round_sd=0.02))
    assert few.detectable > many.detectable > stats.DEFAULT_MIN_EFFECT
    quiet = verdict(make_rounds(rng, 5, round_sd=0.0005), make_rounds(rng, 5, round_sd=0.0005))
    assert stats.DEFAULT_MIN_EFFECT < quiet.detectable < 0.025


def test_detectable_effect_is_seen_with_about_80_percent_power():
    """Shift B by the reported detectable effect: about 80% of such runs are flagged."""
    rng = np.random.default_rng(23)
    a, b = make_rounds(rng, 5, round_sd=0.01), make_rounds(rng, 5, round_sd=0.01)
    target = verdict(a, b).detectable
    hits = 0
    for _ in range(300):
        a = make_rounds(rng, 5, round_sd=0.01)
        b = make_rounds(rng, 5, factor=1 + target, round_sd=0.01)
        hits += verdict(a, b).verdict == "slower"
    assert 0.6 < hits / 300 < 0.97


def test_clear_change_below_the_threshold_says_so():
    rng = np.random.default_rng(24)
    result = verdict(make_rounds(rng, 9, round_sd=0.0005, within_sd=0.001),
                     make_rounds(rng, 9, factor=1.008, round_sd=0.0005, within_sd=0.001))
    assert result.verdict == "unchanged" and result.p < stats.DEFAULT_ALPHA
    assert result.note == "below the 2% threshold"
    assert 1.006 < result.ci[0] < result.ratio < result.ci[1] < 1.01


def test_nothing_measured_reports_no_times_and_no_detectable_effect():
    result = stats.latency_verdicts([stats.compare_latency([], make_rounds(
        np.random.default_rng(25), 5))])[0]
    assert result.verdict == "inconclusive"
    assert (result.a_us, result.b_us, result.detectable, result.p) == (None, None, None, None)
    assert result.set_aside_a == result.set_aside_b == []
    assert stats.detectable_range([result]) is None


# --------------------------------------------------------------------------- issue 23: odd rounds


def gpu_rounds(rng: np.random.Generator, n: int, slow: tuple[int, ...] = (),
               factor: float = 1.0) -> list[list[float]]:
    """GPU-like rounds (0.3% between processes, 1% jitter); rounds in `slow` run 25% slow."""
    rounds = make_rounds(rng, n, factor=factor, round_sd=0.003, within_sd=0.01, base=41.0)
    return [[x * 1.25 for x in r] if i in slow else r for i, r in enumerate(rounds)]


def test_one_slow_process_is_set_aside_and_reported_with_its_value():
    rng = np.random.default_rng(31)
    a, b = gpu_rounds(rng, 5), gpu_rounds(rng, 5, slow=(2,))
    result = stats.latency_verdicts([stats.compare_latency(a, b, b_round_ids=[0, 2, 4, 6, 8])])[0]
    assert result.verdict == "unchanged"
    assert result.set_aside_a == []
    assert [r["round"] for r in result.set_aside_b] == [4]
    assert result.set_aside_b[0]["median_us"] == pytest.approx(np.median(b[2]))
    assert result.rounds_b == 5  # set aside, still counted
    assert re.fullmatch(r"1 of 5 B rounds 2[4-6]% slow, 0 of 5 A rounds", result.note)
    # without the rule, the same data was undecidable
    log_a = np.log([np.median(r) for r in a])
    log_b = np.log([np.median(r) for r in b])
    plain = stats.round_level_tests(log_a, log_b, stats.DEFAULT_MIN_EFFECT, 0.9)
    assert plain.p_equivalence[0] > stats.DEFAULT_EQUIVALENCE_ALPHA


def test_quiet_rounds_are_not_trimmed_and_fast_rounds_never():
    # 2% apart while the noise is 0.05%: below the floor's 6%, so nothing is odd
    quiet = np.log([100.0, 100.05, 99.95, 102.0, 100.02])
    assert not stats.odd_rounds(quiet).any()
    assert stats.odd_rounds(np.log([100.0, 100.05, 99.95, 125.0, 100.02])).tolist() == [
        False, False, False, True, False]
    assert not stats.odd_rounds(np.log([100.0, 100.05, 99.95, 80.0, 100.02])).any()
    # three slow processes of five are a second mode, not odd: they stay
    assert not stats.odd_rounds(np.log([100.0, 125.0, 125.1, 124.9, 100.1])).any()


def test_odd_rounds_are_a_bounded_minority():
    x = np.log([100.0, 100.1, 99.9, 100.05, 130.0, 131.0, 129.0])
    assert stats.odd_rounds(x).sum() == 3  # (7 - 1) // 2
    assert stats.odd_rounds(x[[0, 1, 2, 4]]).sum() == 1  # 3 must remain
    assert not stats.odd_rounds(x[[0, 4, 5]]).any()


def test_a_change_that_makes_a_config_sometimes_slow_is_flagged():
    rng = np.random.default_rng(32)
    a = gpu_rounds(rng, 20)
    b = gpu_rounds(rng, 20, slow=(1, 4, 6, 9, 12, 14, 17, 19))
    result = verdict(a, b)
    assert result.verdict == "slower"
    assert re.fullmatch(r"8 of 20 B rounds 2[4-6]% slow, 0 of 20 A rounds", result.note)
    assert "Fisher" in result.method
    assert len(result.set_aside_b) == 8
    # fewer slow B rounds: not significant, not hidden either
    result = verdict(a[:5], gpu_rounds(rng, 5, slow=(1, 3)))
    assert result.verdict != "slower" and result.note.startswith("2 of 5 B rounds 2")


def test_odd_rate_test_is_fishers():
    assert stats.odd_rate_test(3, 7, 0, 7) == pytest.approx(
        sps.fisher_exact([[3, 4], [0, 7]], alternative="greater").pvalue)


def gpu_suite(seed: int, configs: int = 12, rounds: int = 5, slow_processes: tuple[int, ...] = (),
              own_slow: tuple[int, ...] = ()) -> list[list[list[float]]]:
    """One side of a GPU-like suite: per config its rounds (round i = process i). Processes
    in `slow_processes` run every config 25% slow; config 0 also runs 25% slow in the
    processes `own_slow`."""
    rng = np.random.default_rng(seed)
    suite = [gpu_rounds(rng, rounds, slow=slow_processes) for _ in range(configs)]
    suite[0] = [[x * 1.25 for x in r] if i in own_slow else r for i, r in enumerate(suite[0])]
    return suite


def suite_verdicts(a: list, b: list) -> list[LatencyResult]:
    """Verdicts with the processes' offsets (`stats.process_offsets` over both sides)."""
    logs = np.log([[np.median(r) for r in config_a + config_b]
                   for config_a, config_b in zip(a, b, strict=True)])
    offsets = stats.process_offsets(logs)
    n = len(a[0])
    return stats.latency_verdicts([
        stats.compare_latency(ra, rb, a_offsets=dict(enumerate(offsets[c, :n])),
                              b_offsets=dict(enumerate(offsets[c, n:])))
        for c, (ra, rb) in enumerate(zip(a, b, strict=True))])


def test_process_offsets_come_from_the_other_configs_of_the_process():
    logs = np.log([[100.0, 100.2, 125.0, 99.9], [50.0, 50.1, 62.6, 50.0],
                   [20.0, 20.0, 25.0, 30.0], [80.0, 80.1, 100.0, 80.0]])
    offsets = stats.process_offsets(logs)
    # process 2 ran everything 25% slow: every config's offset there says so
    assert np.allclose(offsets[:, 2], math.log(1.25), atol=0.01)
    # config 2 alone was 50% slow in process 3: the others' offset for it stays near 0
    assert abs(offsets[2, 3]) < 0.01
    # with fewer than PROCESS_MIN_CONFIGS others in a process its speed is unknown
    logs[1:, 3] = np.nan
    assert np.isnan(stats.process_offsets(logs)[0, 3])


def test_a_process_slow_in_every_config_is_no_finding_of_any_config():
    a = gpu_suite(1, slow_processes=(3,))
    b = gpu_suite(2, slow_processes=(1, 4))  # more slow processes on B, by chance
    results = suite_verdicts(a, b)
    assert {r.verdict for r in results} == {"unchanged"}
    assert all(r.note is None for r in results)
    assert all(len(r.set_aside_b) == 2 for r in results)  # still set aside from the shift test


def test_a_config_slow_in_two_of_five_b_processes_of_a_quiet_suite():
    b = gpu_suite(4, slow_processes=(2,), own_slow=(0, 3, 4))
    results = suite_verdicts(gpu_suite(3, slow_processes=(1,)), b)
    assert results[0].verdict == "slower" and results[0].p_odd < 1e-4
    assert re.fullmatch(r"3 of 5 B rounds 2[4-6]% slow beyond the rest of their process, "
                        r"0 of 5 A rounds", results[0].note)
    assert {r.verdict for r in results[1:]} == {"unchanged"}
    # the same counts in a suite whose other configs have odd rounds of their own are
    # weaker evidence: the pooled share and its spread rise, and the p-value with them
    quiet = stats.pooled_odd_rate_test([3, 0, 0, 0, 0], [5] * 5, [0] * 5, [5] * 5)
    noisy = stats.pooled_odd_rate_test([3, 2, 0, 1, 0], [5] * 5, [0, 1, 2, 0, 0], [5] * 5)
    assert quiet[0] < 1e-3 < 1e-2 < noisy[0] and quiet[1:].tolist() == [1.0] * 4
    # a config whose own A rounds are often slow is not flagged for B being alike
    prone = stats.pooled_odd_rate_test([3, 0, 0, 0, 1], [5] * 5, [3, 0, 1, 0, 0], [5] * 5)
    assert prone[0] > 0.05


def test_recorded_h200_graph_replays_with_one_slow_process(tmp_path: Path):
    """tests/data/h200/graph-pr..pr-*: an A/A run in which one B process ran 64% slow on one
    config."""
    run = ROOT / "tests" / "data" / "h200" / "graph-pr..pr"
    out = tmp_path / "result.json"
    done = run_abdiff("compare", f"{run}-a.json", f"{run}-b.json", "--json", out)
    assert done.returncode == 0, done.stderr
    result = load_result(out)
    latency = {c.id: c.latency for c in result.configs}
    assert {lat.verdict for lat in latency.values()} == {"unchanged"}
    odd = latency["GEN-TRTLLM-bs8-q1-kv2049"]
    assert odd.set_aside_b == [{"round": 1, "median_us": pytest.approx(67.584, abs=0.01)}]
    assert odd.note == "1 of 5 B rounds 65% slow, 0 of 5 A rounds"
    assert odd.a_us == pytest.approx(40.99, abs=0.01) and odd.a_spread_us < 0.2
    for lat in latency.values():
        assert lat.detectable is not None and 0.02 < lat.detectable < 0.04
    low, high = result.summary["detectable"]
    assert low == min(lat.detectable for lat in latency.values()) and 0.02 < low < high < 0.04
    assert sum(bool(lat.set_aside_a or lat.set_aside_b) for lat in latency.values()) == 1


@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_every_format_shows_times_detectable_effect_and_set_aside_rounds(fmt: str):
    run = ROOT / "tests" / "data" / "h200" / "graph-pr..pr"
    # wide enough that the table does not wrap the note inside its latency cell
    done = run_abdiff("compare", f"{run}-a.json", f"{run}-b.json", "--format", fmt,
                      env={**git_env(), "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    # absolute times have their own column (the table puts each side on its own line)
    times = ["A 40.99 µs ±0.14", "B 41.14 µs ±0.012"]
    for text in times if fmt == "table" else [", ".join(times)]:
        assert text in done.stdout
    assert "detects ≥ 2.2%" in done.stdout
    assert "set aside B r1 67.58 µs" in done.stdout
    assert "1 of 5 B rounds 65% slow, 0 of 5 A rounds" in done.stdout


def test_result_file_with_malformed_set_aside_rounds_is_one_clear_error(tmp_path: Path):
    run = ROOT / "tests" / "data" / "h200" / "graph-pr..pr"
    data = json.loads(Path(f"{run}-result.json").read_text())
    data["configs"][0]["latency"]["set_aside_b"] = [{"round": "one", "median_us": 67.6}]
    bad = tmp_path / "result.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError, match="field 'set_aside_b' must be a list of"):
        load_result(bad)
    done = run_abdiff("comment", "--repo", "o/r", "--pr", "1", "--result", bad, "--dry-run")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
