"""abdiff.verdict.stats: paired rounds, Huber location, moderated t, sign-flip max-T, looks."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import special
from scipy import stats as sps

from abdiff.reports.latency_words import below_threshold_note, latency_result, method_text
from abdiff.store.records import LatencyResult
from abdiff.verdict import stats
from abdiff.verdict.sequential import Looks


def suite(rng: np.random.Generator, rounds: int = 12, configs: int = 6,
          shift: float = 0.0, sd: float = 0.005, state_sd: float = 0.0,
          two_level: tuple[int, ...] = ()) -> list[stats.ConfigRounds]:
    """Round medians of a suite; config 0 of B `shift` slower. `state_sd`: a machine state
    per ABBA block that hits both sides; `two_level`: configs whose processes land on
    either of two levels 4% apart."""
    state = rng.normal(0, state_sd, rounds) if state_sd else np.zeros(rounds)
    out = []

    def side(c: int, extra: float) -> dict[int, float]:
        levels = (rng.random(rounds) < 0.5) * math.log(1.04) if c in two_level else 0.0
        values = 100 * (1 + c) * np.exp(state + levels + rng.normal(0, sd, rounds) + extra)
        return {r: float(v) for r, v in enumerate(values)}

    for c in range(configs):
        out.append(stats.ConfigRounds(side(c, 0.0),
                                      side(c, math.log1p(shift) if c == 0 else 0.0)))
    return out


def test_a_clear_slowdown_is_slower_and_a_speedup_faster() -> None:
    rng = np.random.default_rng(1)
    slower = stats.latency_verdicts(suite(rng, shift=0.10))
    assert slower[0].verdict == "slower" and not slower[0].below_threshold
    assert slower[0].ratio == pytest.approx(1.10, rel=0.01)
    assert 1.02 < slower[0].ci[0] < slower[0].ratio < slower[0].ci[1]
    assert {r.verdict for r in slower[1:]} == {"unchanged"}
    faster = stats.latency_verdicts(suite(rng, shift=-0.10))
    assert faster[0].verdict == "faster" and faster[0].ci[1] < 0.98


def test_a_change_below_the_threshold_is_a_change_with_its_size() -> None:
    result = stats.latency_verdicts(suite(np.random.default_rng(2), rounds=15, shift=0.008,
                                          sd=0.001))[0]
    assert result.verdict == "slower" and result.below_threshold
    assert result.threshold_side == "below" and result.ci[1] < 1.02 and result.ci[0] > 1
    assert latency_result(result, 0.02, 0.01).note.startswith(below_threshold_note(0.02))


def test_unchanged_only_inside_the_threshold_with_the_power_to_see_it() -> None:
    quiet = stats.latency_verdicts(suite(np.random.default_rng(3), rounds=15))
    for r in quiet:
        assert r.verdict == "unchanged"
        assert 1 / 1.02 < r.ci[0] <= r.ratio <= r.ci[1] < 1.02 and r.detectable <= 0.02


def test_noise_leaves_latency_inconclusive_and_says_what_would_decide() -> None:
    result = stats.latency_verdicts(suite(np.random.default_rng(4), sd=0.015))[0]
    assert result.verdict == "inconclusive"
    assert result.detectable > 0.02 and 12 < result.rounds_needed <= 100
    note = latency_result(result, 0.02, 0.01).note
    assert note.startswith("12 rounds resolve +-")
    assert f"about {result.rounds_needed} would decide +-2% (--max-rounds " in note
    noisy = stats.latency_verdicts(suite(np.random.default_rng(4), sd=0.04))[0]
    assert noisy.rounds_needed > 100
    assert "over 100 would be needed: a quieter machine" in latency_result(noisy, 0.02, 0.01).note


@pytest.mark.parametrize("rounds", [1, 2])
def test_too_few_rounds_never_decide(rounds: int) -> None:
    result = stats.latency_verdicts(suite(np.random.default_rng(5), rounds=rounds,
                                          shift=0.5))[0]
    assert result.verdict == "inconclusive" and result.ci is None
    assert "needs at least 3 rounds per side" in latency_result(result, 0.02, 0.01).note


def test_rows_agree_with_themselves() -> None:
    """One estimator per row: at a look that can flag, p <= level exactly when the interval
    excludes 1; the ratio inside its interval; `unchanged` only with both the Huber and the
    mean's interval inside +-min_effect around 1 and detectable <= it."""
    rng = np.random.default_rng(6)
    seen = set()
    for shift in (0.0, 0.005, 0.01, 0.03, 0.3):
        for sd in (0.002, 0.01, 0.05):
            for r in stats.latency_verdicts(suite(rng, shift=shift, sd=sd)):
                seen.add(r.verdict)
                assert r.flags and r.p is not None and r.level is not None
                excludes = r.ci[0] > 1 or r.ci[1] < 1
                assert excludes == (r.p <= r.level) == (r.verdict in ("slower", "faster"))
                assert r.ci[0] <= r.ratio <= r.ci[1]
                assert r.mean_ci[0] <= r.mean_ratio <= r.mean_ci[1]
                assert math.isclose(math.log(r.ci[1]) - math.log(r.ratio),
                                    math.log(r.ratio) - math.log(r.ci[0]), rel_tol=1e-9)
                if r.verdict == "unchanged":
                    for low, high in (r.ci, r.mean_ci):
                        assert 1 / 1.02 < low <= 1 <= high < 1.02
                    assert r.detectable <= 0.02
                if r.verdict == "inconclusive":
                    assert r.rounds_needed is not None
    assert seen == {"slower", "unchanged", "inconclusive"}


def test_aa_suites_are_flagged_at_most_at_the_family_level() -> None:
    """200 A/A suites of 8 configs x 10 pairs (all 1024 sign patterns): the family's
    false-alarm rate is 1% by construction; 6 or more flags in 200 (p = 0.017 at 1%)
    would say otherwise."""
    rng = np.random.default_rng(7)
    flagged = sum(any(r.verdict in ("slower", "faster")
                      for r in stats.latency_verdicts(suite(rng, rounds=10, configs=8,
                                                            sd=0.01, state_sd=0.01)))
                  for _ in range(200))
    assert flagged <= 5


def test_pairs_cancel_a_machine_state_that_hits_both_sides() -> None:
    """A state of the machine that moves both rounds of a block by 2% buries a 3% change
    for an unpaired comparison; paired differences see it."""
    rounds = suite(np.random.default_rng(8), rounds=12, shift=0.03, sd=0.002, state_sd=0.02)
    assert stats.latency_verdicts(rounds)[0].verdict == "slower"
    assert stats.latency_verdicts(rounds, paired=False)[0].verdict == "inconclusive"


def test_two_level_processes_are_taken_off_and_reported() -> None:
    rounds = suite(np.random.default_rng(9), rounds=15, shift=0.03, sd=0.002,
                   two_level=(0, 3))
    results = stats.latency_verdicts(rounds)
    assert results[0].verdict == "slower" and results[0].statistic == "huber-levelled"
    assert results[0].ratio == pytest.approx(1.03, abs=0.005)
    assert "processes sit on two levels 4." in latency_result(results[0], 0.02, 0.01).note
    assert results[3].verdict != "slower" and results[3].verdict != "faster"


def test_b_sometimes_slow_is_a_change_not_a_level() -> None:
    rng = np.random.default_rng(10)
    rounds = suite(rng, rounds=15, sd=0.003)
    slow = {r: v * (1.25 if r % 3 else 1.0) for r, v in rounds[0].b.items()}
    rounds[0] = stats.ConfigRounds(rounds[0].a, slow)
    assert stats.latency_verdicts(rounds)[0].verdict == "slower"


def test_looks_spend_the_level_over_the_plan() -> None:
    """5 pairs (32 sign patterns) cannot resolve a level: that look flags nothing, however
    large the change, and spends nothing; the plan's last look has spent all of alpha."""
    rng = np.random.default_rng(11)
    looks = Looks(5, 15, 5)
    early = stats.latency_verdicts(suite(rng, rounds=5, shift=0.5), looks=looks)
    assert not early[0].flags and early[0].p is None and early[0].verdict == "inconclusive"
    assert early[0].level == pytest.approx(0.01 / 9)  # (5/15)**2 of alpha: not yet spent
    assert early[0].df == 4 and early[0].threshold == pytest.approx(sps.t.isf(0.01, 4))
    full = stats.latency_verdicts(suite(rng, rounds=15), looks=looks)
    assert full[0].level == pytest.approx(0.01) and (full[0].look, full[0].looks) == (2, 3)
    assert full[0].flags


def test_huber_location_ignores_a_slow_pair_and_its_variance_is_the_mean_s() -> None:
    x = np.array([[0.0, 0.01, -0.01, 0.005, -0.005, 0.5]])
    loc, _ = stats.huber(x, np.isfinite(x), np.array([0.01]))
    assert abs(loc[0]) < 0.01 < x.mean()
    normal = np.random.default_rng(12).normal(0, 1, (1, 4000))
    loc, unit = stats.huber(normal, np.ones_like(normal, bool), np.array([1.0]))
    assert unit[0] == pytest.approx(1 / 0.95, rel=0.05)  # 95% efficiency at the normal


def test_limma_prior_and_its_inverse_trigamma() -> None:
    y = np.array([0.1, 1.0, 10.0])
    assert special.polygamma(1, stats.trigamma_inverse(y)) == pytest.approx(y, rel=1e-6)
    d0, s0 = stats.fit_f_dist(np.full(6, 0.04), np.full(6, 9.0))
    assert d0 == math.inf and s0 == pytest.approx(0.04)
    rng = np.random.default_rng(13)
    draws = 0.04 * rng.chisquare(9, 20000) / 9 * (20 / rng.chisquare(20, 20000))
    d0, s0 = stats.fit_f_dist(draws, np.full(20000, 9.0))
    assert d0 == pytest.approx(20, rel=0.15) and s0 == pytest.approx(0.04, rel=0.05)


def test_sign_patterns_are_every_pattern_when_few_and_a_subgroup_beyond() -> None:
    patterns = stats.sign_patterns(4)
    assert len({tuple(p) for p in patterns}) == 16 and (patterns[0] == 1).all()
    many = stats.sign_patterns(15)
    assert many.shape == (2 ** 13, 15) and (many[0] == 1).all()
    # every pattern of the first 13 pairs, each once; closed under composition (a group, so
    # the test is exact), and pattern i's first pairs are those of pattern i mod 2**pairs
    assert len({tuple(p) for p in many[:, :13]}) == 2 ** 13
    rows = {tuple(p) for p in many}
    for i, j in ((3, 700), (1234, 8000), (5, 5)):
        assert tuple(many[i] * many[j]) in rows
    assert (many[np.arange(2 ** 13) % 2 ** 10, :10] == many[:, :10]).all()


def test_futility_stops_only_what_max_rounds_cannot_decide() -> None:
    noisy = LatencyResult("inconclusive", ratio=1.0, ci=[0.8, 1.25], rounds_a=10, rounds_b=10,
                          se=0.05)
    assert stats.futile(noisy, 15, configs=12)
    early = LatencyResult("inconclusive", ratio=1.0, ci=[0.8, 1.25], rounds_a=5, rounds_b=5,
                          se=0.05)
    assert stats.futile(early, 15, configs=12)  # hopeless at the first look already
    close = LatencyResult("inconclusive", ratio=1.01, ci=[0.99, 1.03], rounds_a=5, rounds_b=5,
                          se=0.004)
    assert not stats.futile(close, 15, configs=12)
    assert stats.futile(close, 5, configs=12)  # the budget is spent


def test_futility_at_the_first_look_stops_only_a_hopeless_config_inside_the_threshold(
) -> None:
    """The demo's TRTLLM bs32-q4 at the look at 5 of 15 (2-core VM): 1.006x with se 3.8%:
    15 fresh pairs would flag a 2% change one time in a hundred, the last look from here
    one in a thousand: it stops. DSA bs8-q1 of another run, 0.977x with se 3.7%, is as
    hopeless but its estimate lies beyond the threshold (a change that a few rounds, an
    odd process, blur): it goes on, as does TRTLLM bs8-q1 at 0.992x with se 1.9%, whose
    fresh chance (7%) is below the late limit but not the early one."""
    hopeless = LatencyResult("inconclusive", ratio=1.0058, rounds_a=5, rounds_b=5, se=0.0383)
    assert stats.futile(hopeless, 15, configs=8)
    beyond = LatencyResult("inconclusive", ratio=0.977, rounds_a=5, rounds_b=5, se=0.0365)
    assert not stats.futile(beyond, 15, configs=8)
    fresh, conditional = stats.futility_chances(beyond, 15, configs=8) or (1.0, 1.0)
    assert fresh < stats.FUTILITY_EARLY_FRESH_POWER and conditional < stats.FUTILITY_EARLY_POWER
    middling = LatencyResult("inconclusive", ratio=0.9921, rounds_a=5, rounds_b=5, se=0.0193)
    fresh, _ = stats.futility_chances(middling, 15, configs=8) or (0.0, 0.0)
    assert stats.FUTILITY_EARLY_FRESH_POWER < fresh < stats.FUTILITY_FRESH_POWER
    assert not stats.futile(middling, 15, configs=8)
    assert stats.futile(replace(middling, rounds_a=11, rounds_b=11, se=0.0138), 15, configs=8)


def test_futility_is_judged_at_the_threshold_not_at_the_estimate() -> None:
    """+0.8% with se 0.6% after 10 of 15 rounds: 15 rounds would flag a change of exactly 2%
    in most runs, so they can still decide; the rule that judged the point estimate (0.8%
    inside the projected half-width 1.6%, and 0.8 + 1.6 beyond 2%) stopped it. With se 2%
    15 rounds would flag a 2% change in under 10% of runs: futile."""
    middling = LatencyResult("inconclusive", ratio=1.008, rounds_a=10, rounds_b=10, se=0.006)
    assert not stats.futile(middling, 15, configs=12)
    assert stats.futile(LatencyResult("inconclusive", ratio=1.0, rounds_a=10, rounds_b=10,
                                      se=0.02), 15, configs=12)


def test_futility_judges_the_rounds_to_come_from_the_rounds_so_far() -> None:
    """The demo's DSA bs8-q1 on the idle VM: +1.2% with se 1.1% after 11 of 15 rounds. 15
    fresh rounds would flag a 2% change about one time in nine (the rule that judged only
    that went on to 15), but from +1.2% 4 more pairs cannot carry the interval past 1: the
    conditional chance is below 0.1%. A two-level config at +0.4% with se 0.75% (15 fresh
    rounds flag 2% two times in five, and found levels can shrink its se tenfold) goes on."""
    demo = LatencyResult("inconclusive", ratio=1.012, rounds_a=11, rounds_b=11, se=0.011)
    assert stats.futile(demo, 15, configs=12)
    assert not stats.futile(replace(demo, rounds_a=10, rounds_b=10, ratio=1.025), 15,
                            configs=12)  # a change the size of the threshold: it may show
    two_level = LatencyResult("inconclusive", ratio=1.004, rounds_a=11, rounds_b=11,
                              se=0.0075)
    assert not stats.futile(two_level, 15, configs=12)
    fresh, conditional = stats.futility_chances(demo, 15, configs=12) or (1.0, 1.0)
    assert 0.1 < fresh < stats.FUTILITY_FRESH_POWER and conditional < 0.001
    fresh, conditional = stats.futility_chances(two_level, 15, configs=12) or (0.0, 1.0)
    assert fresh > stats.FUTILITY_FRESH_POWER and conditional < stats.FUTILITY_POWER


def test_futility_does_not_stop_a_change_larger_than_the_threshold_that_max_rounds_can_flag(
) -> None:
    """The demo's main..pr-v1 on the idle VM: every B round 15% below every A round, se 4.6%
    (variance moderated over noisier configs) after 10 of 15 rounds. A 2% change would go
    unseen at 15 rounds, but one of 15% would be flagged: more rounds are not futile. The
    same spread around no change is."""
    faster = LatencyResult("inconclusive", ratio=0.858, rounds_a=10, rounds_b=10, se=0.046)
    assert not stats.futile(faster, 15, configs=8)
    assert stats.futile(LatencyResult("inconclusive", ratio=0.99, rounds_a=10, rounds_b=10,
                                      se=0.046), 15, configs=8)
    assert stats.futile(faster, 10, configs=8)  # the budget is spent


def test_round_summary_and_variation() -> None:
    assert stats.round_summary([3.0, 1.0, 100.0]) == 3.0
    assert stats.round_variation([[1.0], [3.0]]) == pytest.approx(np.std([1, 3], ddof=1) / 2)
    with pytest.raises(ValueError):
        stats.round_summary([1.0, -1.0])



def test_with_3_or_4_pairs_nothing_is_flagged_even_what_two_levels_fake() -> None:
    """3-4 pairs: the sign patterns cannot resolve 1%, and a Student t there flags a config
    whose processes sit on two levels whenever every pair lands A low, B high (2 * 4**-n of
    runs: 3% at 3 pairs). Nothing is flagged; the intervals serve `unchanged` only, and
    `unchanged` needs 11 pairs. At 5 pairs the plan's last look flags (the next test)."""
    rng = np.random.default_rng(5)
    for pairs in (3, 4):
        configs = [stats.ConfigRounds({r: float(100 * np.exp(rng.normal(0, 0.003)))
                                       for r in range(pairs)},
                                      {r: float(104 * np.exp(rng.normal(0, 0.003)))
                                       for r in range(pairs)}) for _ in range(12)]
        results = stats.latency_verdicts(configs)
        assert {r.verdict for r in results} == {"inconclusive"}
        assert all(not r.flags and r.p is None and r.ci[0] > 1 for r in results)
        assert results[0].threshold == pytest.approx(sps.t.isf(0.01, pairs - 1))


def _five_pairs_with_an_odd_process(shift: float, seed: int = 7, slow_b: tuple[int, ...] = (2,),
                                    slow_a: tuple[int, ...] = ()) -> list[stats.ConfigRounds]:
    """12 configs, 5 pairs, 0.5% noise; config 3's B `shift` slower; the B processes of the
    pairs `slow_b` and the A processes of `slow_a` 25% slow in every config."""
    rng = np.random.default_rng(seed)
    configs = []
    for c in range(12):
        a = 100 * np.exp(rng.normal(0, 0.005, 5))
        b = 100 * np.exp(rng.normal(0, 0.005, 5)) * (1 + shift * (c == 3))
        b[list(slow_b)] *= 1.25
        a[list(slow_a)] *= 1.25
        configs.append(stats.ConfigRounds(dict(enumerate(map(float, a))),
                                          dict(enumerate(map(float, b)))))
    return configs


def test_a_plan_of_five_rounds_flags_by_student_t_what_an_odd_process_cannot_fake() -> None:
    """A plan of 5 rounds per side (its last look; 32 sign patterns cannot resolve 1%) flags
    by Student's t with Bonferroni: +5% in one config, with one B process 25% slow in every
    config, is `slower` and nothing else is; its interval excludes 1 and its p is reported.
    The same 5 pairs as the first look of a 15-round plan flag nothing: that look spends
    nothing, the later ones spend the level by the sign patterns."""
    results = stats.latency_verdicts(_five_pairs_with_an_odd_process(0.05))
    assert [r.verdict for r in results].count("slower") == 1
    assert results[3].verdict == "slower" and results[3].flags
    assert results[3].ci is not None and results[3].ci[0] > 1
    assert results[3].p is not None and results[3].p <= 0.01
    assert results[3].statistic == "huber"
    assert all(r.verdict == "inconclusive" and r.ci is not None and r.ci[0] <= 1 <= r.ci[1]
               for i, r in enumerate(results) if i != 3)
    first_look = stats.latency_verdicts(_five_pairs_with_an_odd_process(0.05),
                                        looks=Looks(5, 15))
    assert {r.verdict for r in first_look} == {"inconclusive"}
    assert not any(r.flags for r in first_look)


def test_a_plan_of_five_rounds_takes_two_odd_processes_off_but_not_three() -> None:
    """Two of five pairs with an odd process (one slow on each side) are taken off at the
    plan's last look, so the +5% config is still `slower` and nothing else is flagged; the
    permutation looks take off one of five at most. Three slow B processes of five are
    how B ran, not two odd pairs at no shift: nothing is taken off and nothing flagged."""
    two = _five_pairs_with_an_odd_process(0.05, slow_b=(1,), slow_a=(3,))
    results = stats.latency_verdicts(two)
    assert [r.verdict for r in results].count("slower") == 1
    assert results[3].verdict == "slower" and results[3].p is not None
    assert results[3].p <= 0.01
    d = np.log([[c.b[r] / c.a[r] for r in range(5)] for c in two])
    ones = np.ones((1, 5))
    assert np.count_nonzero(stats.odd_process_offsets(d, ones, stats.FEW_PAIRS_ODD_SHARE)) == 2
    assert np.count_nonzero(stats.odd_process_offsets(d, ones)) == 0
    # each config's result says which pairs were taken off, and by how much (B/A, about
    # 1.25 and 1/1.25 less config 3's +5%: the shift is the median over the configs)
    for result in results:
        assert [number for number, _ in result.odd_pairs] == [1, 3]
        assert result.odd_pairs[0][1] == pytest.approx(1.25, rel=0.01)
        assert result.odd_pairs[1][1] == pytest.approx(1 / 1.25, rel=0.01)
    assert ("2 processes ran apart in every config (round 2: B 25.3% slower than in the other "
            "pairs; round 4: A 25.1% slower than in the other pairs): those pairs' shifts taken "
            "off before testing") in \
        str(latency_result(results[0], 0.02, 0.01).note)
    three = _five_pairs_with_an_odd_process(0.0, slow_b=(0, 2, 4))
    d = np.log([[c.b[r] / c.a[r] for r in range(5)] for c in three])
    assert np.count_nonzero(stats.odd_process_offsets(d, ones, stats.FEW_PAIRS_ODD_SHARE)) == 0
    assert {r.verdict for r in stats.latency_verdicts(three)} == {"inconclusive"}
    assert all(not r.odd_pairs for r in stats.latency_verdicts(three))


def test_six_pairs_flag_only_where_the_mean_of_the_pairs_agrees() -> None:
    """A config whose processes sit on two levels 10% apart, alike on both sides, with B
    1.5% above: the pairs cancel the levels, so the Huber location's t is large, but the
    sides' own spread floors the mean's SD and the mean's t stays small. The plan's last
    look (6 pairs) does not flag it: p above the level, the interval widened to reach 1.
    A 5% change in a quiet config of the same suite is flagged, and its row names the test."""
    rng = np.random.default_rng(1)
    levels = np.array([0.1, 0, 0, 0.1, 0, 0])
    log_a, log_b = rng.normal(0, 0.002, (11, 6)), rng.normal(0, 0.002, (11, 6))
    log_a[0] += levels
    log_b[0] += levels + 0.015
    log_b[3] += 0.05
    configs = [stats.ConfigRounds(dict(enumerate(np.exp(log_a[c] + 4.6).tolist())),
                                  dict(enumerate(np.exp(log_b[c] + 4.6).tolist())))
               for c in range(11)]
    results = stats.latency_verdicts(configs)
    vetoed = results[0]
    assert vetoed.verdict == "inconclusive" and vetoed.p is not None and vetoed.p > 0.01
    assert vetoed.ci is not None and vetoed.ci[0] <= 1 < vetoed.ci[1]
    assert results[3].verdict == "slower" and results[3].p is not None
    assert results[3].p <= results[3].level
    assert "too few for the sign flips: Student's t with Bonferroni over 11 configs" in \
        method_text(results[3], 0.01)


def test_a_round_missing_in_the_middle_leaves_the_config_judged() -> None:
    """A fixed plan of 12 rounds where one of A's rounds of one config is lost (its worker
    crashed): the config's 11 pairs are still judged at the look, and its 3% change flagged
    like the others'."""
    rng = np.random.default_rng(0)
    configs = [stats.ConfigRounds(dict(enumerate(100 * np.exp(rng.normal(0, 0.003, 12)))),
                                  dict(enumerate(103 * np.exp(rng.normal(0, 0.003, 12)))))
               for _ in range(5)]
    configs[1] = stats.ConfigRounds({k: v for k, v in configs[1].a.items() if k != 2},
                                    configs[1].b)
    results = stats.latency_verdicts(configs)
    assert [r.verdict for r in results] == ["slower"] * 5
    assert results[1].rounds_a == 11 and results[1].threshold is not None


def test_ties_of_a_coarse_timer_cannot_collapse_the_scale() -> None:
    """A timer that rounds every round median to 1 us of 20 us: 8 of 15 pairs tie at 0 and B
    is 20% slower in the other 7. The median |d| is 0; the scale was clamped to 1e-12 and
    read `unchanged` [0.999999, 1.000001]. The floor (the quantum over sqrt(12)) keeps it
    an interval that says what the rounds hold."""
    quiet = [stats.ConfigRounds({r: 100.0 + c for r in range(15)},
                                {r: 100.0 + c for r in range(15)}) for c in range(5)]
    coarse = stats.ConfigRounds({r: 20.0 for r in range(15)},
                                {r: 24.0 if r % 2 else 20.0 for r in range(15)})
    result = stats.latency_verdicts([coarse, *quiet])[0]
    assert result.verdict != "unchanged"
    assert result.ci[1] - result.ci[0] > 0.02 and result.mean_ratio > 1.08
    assert stats.tie_floor(np.log([[1.2, 1.0, 1.0, 1.2]])) == pytest.approx(
        [math.log(1.2) / math.sqrt(12)])
    assert stats.tie_floor(np.array([[0.01, -0.02, 0.03]])) == pytest.approx([0.0])


def test_a_regression_in_some_of_b_processes_is_never_unchanged() -> None:
    """A quiet config whose B runs 8% slower in 5 of its 15 processes (a tactic choice): the
    mean moved +2.7%, the Huber location follows the 10 unchanged pairs. v3 read it
    `unchanged`; the mean's interval must lie inside +-2% too."""
    rng = np.random.default_rng(21)
    rounds = suite(rng, rounds=15, sd=0.002)
    b = {r: v * (1.08 if r in (1, 4, 8, 11, 13) else 1.0) for r, v in rounds[0].b.items()}
    rounds[0] = stats.ConfigRounds(rounds[0].a, b)
    result = stats.latency_verdicts(rounds)[0]
    assert result.verdict != "unchanged"
    assert result.ci[1] < 1.02 and result.mean_ci[1] > 1.02  # the Huber interval alone: inside
    assert "mean of the rounds 1.02" in latency_result(result, 0.02, 0.01).note


def test_unchanged_needs_eleven_pairs() -> None:
    """With 10 pairs a change in 30% of B's processes hits none of them in 2.8% of runs."""
    ten = stats.latency_verdicts(suite(np.random.default_rng(3), rounds=10, sd=0.001))
    assert {r.verdict for r in ten} == {"inconclusive"}
    assert all(r.rounds_needed == stats.MIN_UNCHANGED_ROUNDS == 11 for r in ten)
    eleven = stats.latency_verdicts(suite(np.random.default_rng(3), rounds=11, sd=0.001))
    assert {r.verdict for r in eleven} == {"unchanged"}


def test_a_process_slow_in_every_config_is_taken_off_the_pair() -> None:
    """One of B's worker processes ran every config 25% slow (8% of GPU processes do): it is
    taken off its pair, so the mean still decides `unchanged` and a +5% change still flags."""
    rng = np.random.default_rng(22)
    rounds = suite(rng, rounds=12, configs=8, sd=0.002, shift=0.05)
    rounds = [stats.ConfigRounds(c.a, {r: v * (1.25 if r == 3 else 1.0) for r, v in c.b.items()})
              for c in rounds]
    results = stats.latency_verdicts(rounds)
    assert results[0].verdict == "slower" and results[0].ratio == pytest.approx(1.05, abs=0.01)
    assert {r.verdict for r in results[1:]} == {"unchanged"}
    d = np.log([[c.b[r] / c.a[r] for r in range(12)] for c in rounds])
    offsets = stats.odd_process_offsets(d, stats.sign_patterns(12)[:3])
    assert offsets[0, 3] == pytest.approx(math.log(1.25), abs=0.01)
    assert np.count_nonzero(offsets[0]) == 1


def test_a_change_near_the_threshold_says_it_cannot_tell_the_side() -> None:
    """A true +2% change: whether its point estimate lands at 1.9% or 2.1% is a coin flip;
    the interval straddles 2%, so the side is `unsure` and the row is not a small change."""
    rng = np.random.default_rng(23)
    result = stats.latency_verdicts(suite(rng, rounds=15, shift=0.02, sd=0.003))[0]
    assert result.verdict == "slower" and result.threshold_side == "unsure"
    assert not result.below_threshold
    assert "cannot tell above or below" in latency_result(result, 0.02, 0.01).note
    assert stats.threshold_side(0.025, 0.03, math.log(1.02)) == "above"
    assert stats.threshold_side(-0.03, -0.025, math.log(1.02)) == "above"
    assert stats.threshold_side(0.005, 0.015, math.log(1.02)) == "below"


def test_rounds_needed_project_the_final_threshold_not_the_first_looks() -> None:
    """3 pairs of 1% noise: the t quantile of that look is large (df 2), but
    more rounds bring the threshold down: the advice is a dozen rounds, not 10**5."""
    rng = np.random.default_rng(2)
    configs = [stats.ConfigRounds({r: float(100 * np.exp(rng.normal(0, 0.01))) for r in range(3)},
                                  {r: float(100 * np.exp(rng.normal(0, 0.01))) for r in range(3)})
               for _ in range(12)]
    undecided = [r for r in stats.latency_verdicts(configs) if r.verdict == "inconclusive"]
    assert undecided and all(4 <= (r.rounds_needed or 0) <= 40 for r in undecided), \
        [r.rounds_needed for r in undecided]
    assert not any("quieter machine" in (latency_result(r, 0.02, 0.01).note or "")
                   for r in undecided)


def test_session_drift_widens_an_unpaired_interval_at_its_own_quantiles() -> None:
    """Against a baseline, each interval is at least `drift_half_width` wide: an offset
    shared by every config is one draw whose variance 3 sessions estimate with 2 df (t(2)
    at half the level, no Bonferroni), a config's own offsets and its rounds one a config
    (Bonferroni at the other half), the two added; a 10% change the rounds alone flag is
    then undecided under a 1% shared drift SD, and still flagged with paired rounds."""
    shared = stats.Drift(shared=0.01 ** 2, own=0.0, sessions=3, df=24)
    assert stats.drift_half_width(shared, 0.01, 6) == pytest.approx(sps.t.ppf(0.9975, 2) * 0.01)
    own = stats.Drift(shared=0.0, own=0.01 ** 2, sessions=3, df=24)
    assert stats.drift_half_width(own, 0.01, 6, 0.02) == pytest.approx(
        math.hypot(sps.t.ppf(1 - 0.01 / 24, 24) * 0.01, 0.02))
    both = stats.Drift(shared=0.01 ** 2, own=0.01 ** 2, sessions=3, df=24)
    assert stats.drift_half_width(both, 0.01, 6) == pytest.approx(
        stats.drift_half_width(shared, 0.01, 6) + stats.drift_half_width(own, 0.01, 6))
    rounds = suite(np.random.default_rng(11), rounds=5, shift=0.10, sd=0.003)
    plain = stats.latency_verdicts(rounds, paired=False)
    widened = stats.latency_verdicts(rounds, paired=False, drift=shared)
    assert plain[0].verdict == "slower" and widened[0].verdict == "inconclusive"
    for before, after in zip(plain, widened, strict=True):
        assert after.ratio == pytest.approx(before.ratio)  # the estimate is the same
        assert after.ci is not None and before.ci is not None
        half = math.log(after.ci[1] / after.ci[0]) / 2
        assert half > stats.drift_half_width(shared, 0.01, 6) > math.log(
            before.ci[1] / before.ci[0]) / 2
    assert "the drift alone is" in (latency_result(widened[0], 0.02, 0.01).note or "")
    paired = suite(np.random.default_rng(11), rounds=12, shift=0.10, sd=0.003)  # 5 pairs
    # cannot flag at 1%: 12
    assert stats.latency_verdicts(paired, paired=True, drift=shared)[0].verdict == "slower"


def test_unpaired_sides_may_have_different_round_counts() -> None:
    """A baseline of 3 sessions holds 15 rounds, B 5: the unpaired test takes each side's
    rounds as they are (a broadcast of B - A once made every baseline comparison fail)."""
    rng = np.random.default_rng(5)
    rounds = [stats.ConfigRounds({r: float(100 * math.exp(rng.normal(0, 0.01)))
                                  for r in range(15)},
                                 {r: float(100 * math.exp(rng.normal(0, 0.01)))
                                  for r in range(5)}) for _ in range(4)]
    results = stats.latency_verdicts(rounds, paired=False)
    assert [r.rounds_a for r in results] == [15] * 4 and [r.rounds_b for r in results] == [5] * 4
    assert all(r.ci is not None for r in results)


def _noisy_suite(rng: np.random.Generator, pairs: int, shift: float = 0.0, odd: int = 0
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) log round medians of 12 configs with the H200's spread of round noise
    (0.1-2.3%, Student-t 3 df); config 6 (0.82%) `shift` slower on B; `odd` of B's
    processes (the first) 25% slow in every config."""
    sd = np.array([0.0206, 0.0032, 0.0020, 0.0016, 0.0013, 0.0010, 0.0082, 0.0099, 0.0232,
                   0.0143, 0.0089, 0.0087])
    a, b = (sd[:, None] * rng.standard_t(3, (12, pairs)) / math.sqrt(3) for _ in range(2))
    b[6] += math.log1p(shift)
    b[:, :odd] += math.log(1.25)
    return a, b


def _few_pairs_verdicts(a: np.ndarray, b: np.ndarray,
                        earlier: list[stats.EarlierNoise | None]) -> list[str]:
    configs = [stats.ConfigRounds(dict(enumerate(np.exp(a[c] + 4.6).tolist())),
                                  dict(enumerate(np.exp(b[c] + 4.6).tolist())), earlier[c])
               for c in range(len(a))]
    return [r.verdict for r in stats.latency_verdicts(configs)]


def test_a_plan_of_five_rounds_borrows_its_noise_from_earlier_runs() -> None:
    """With each config's noise from three earlier 15-pair runs, 5 pairs of which two ran
    in slow processes find a +5% change that their own spread leaves undecided, and A/A
    suites stay unflagged."""
    rng = np.random.default_rng(42)
    found = {"own": 0, "borrowed": 0}  # over 30 suites
    aa_flags = 0
    for _ in range(30):
        earlier_runs = [stats.earlier_differences(*_noisy_suite(rng, 15)) for _ in range(3)]
        earlier = [stats.earlier_noise([run[c] for run in earlier_runs]) for c in range(12)]
        assert all(e is not None and e.df == 42 and e.runs == 3 for e in earlier)
        changed = _noisy_suite(rng, 5, shift=0.05, odd=2)
        found["own"] += _few_pairs_verdicts(*changed, [None] * 12)[6] == "slower"
        found["borrowed"] += _few_pairs_verdicts(*changed, earlier)[6] == "slower"
        aa = _few_pairs_verdicts(*_noisy_suite(rng, 5, odd=2), earlier)
        aa_flags += any(v in ("slower", "faster") for v in aa)
    assert found["borrowed"] >= found["own"] + 5 and found["borrowed"] >= 25
    assert aa_flags <= 1


def test_a_borrowed_variance_follows_how_noisy_the_machine_is_now() -> None:
    """Earlier runs on a quieter machine lend their per-config shape, scaled by the
    family's factor now: four times the variance everywhere gives posteriors near four
    times the earlier ones, not the earlier ones; at most BORROWED_DF df are added."""
    rng = np.random.default_rng(3)
    earlier = np.geomspace(1e-6, 1e-3, 12)
    own = 4 * earlier * rng.chisquare(4, 12) / 4
    has = np.ones(12, bool)
    posterior, df = stats.borrow(own, np.full(12, 4.0), earlier, np.full(12, 40.0), has)
    ratio = posterior / earlier
    assert 2.5 < float(np.exp(np.log(ratio).mean())) < 6.5
    assert np.all(df == 4 + stats.BORROWED_DF)
    # a config whose pairs tie (own variance 0) does not move the others' prior
    tied = own.copy()
    tied[3] = 0.0
    posterior_tied, _ = stats.borrow(tied, np.full(12, 4.0), earlier, np.full(12, 40.0), has)
    assert np.allclose(np.delete(posterior_tied, 3), np.delete(posterior, 3), rtol=0.3)
    # a config without earlier noise keeps the family's moderation
    has[0] = False
    posterior0, df0 = stats.borrow(own, np.full(12, 4.0), earlier, np.full(12, 40.0), has)
    moderated, moderated_df = stats.moderate(own, np.full(12, 4.0))
    assert posterior0[0] == pytest.approx(moderated[0]) and df0[0] == moderated_df[0]


def test_earlier_noise_needs_enough_df_and_three_configs_to_be_borrowed() -> None:
    """One earlier plan of 5 pairs (4 df) is too little: the variance of a few
    heavy-tailed pairs is most often well below the law's; and fewer than 3 configs
    with earlier noise cannot say how the family's noise moved since."""
    rng = np.random.default_rng(5)
    one_plan = [stats.earlier_noise([rng.normal(0, 0.01, 5)]) for _ in range(12)]
    assert all(e is not None and e.df == 4 for e in one_plan)
    assert not stats.borrowing(one_plan).any()
    enough = [stats.earlier_noise([rng.normal(0, 0.01, 11)]) for _ in range(12)]
    assert stats.borrowing(enough).all()
    assert not stats.borrowing(enough[:2] + [None] * 10).any()
    # an earlier run that measured a change lends its noise, not its change
    d = rng.normal(0, 0.01, 15)
    shifted = stats.earlier_noise([d + 0.2])
    plain = stats.earlier_noise([d])
    assert shifted is not None and plain is not None
    assert shifted.mean == pytest.approx(plain.mean) and shifted.huber == pytest.approx(plain.huber)
    assert stats.earlier_noise([np.array([0.01, np.nan])]) is None


def test_a_later_comparison_takes_its_earlier_looks_from_the_cache_unchanged() -> None:
    """A run compares at each look and once more at its end, and each comparison recomputes
    the looks before it (a look decides from its own rounds): those are computed once,
    handed out read-only, and decide exactly as a fresh computation does."""
    rng = np.random.default_rng(5)
    rounds = suite(rng, rounds=15, configs=8, shift=0.04, two_level=(2,))
    looks = Looks(5, 15, 6)

    def at(n: int) -> list[stats.ConfigRounds]:
        return [stats.ConfigRounds({r: v for r, v in c.a.items() if r < n},
                                   {r: v for r, v in c.b.items() if r < n}) for c in rounds]

    stats._LOOKS.clear()
    fresh = stats.latency_verdicts(at(15), looks=looks)
    stats._LOOKS.clear()
    stats.latency_verdicts(at(11), looks=looks)
    before = stats._LOOKS.hits
    again = stats.latency_verdicts(at(15), looks=looks)
    assert stats._LOOKS.hits > before  # the looks at 5 and 11
    assert again == fresh and again[0].flags
    a = np.log([list(c.a.values()) for c in rounds])
    b = np.log([list(c.b.values()) for c in rounds])
    computed = stats.paired_statistics(a, b, stats.sign_patterns(15))
    with pytest.raises(ValueError):
        computed.location[0, 0] = 0.0
    b[0, 0] += 0.5  # other rounds: computed anew
    assert stats.paired_statistics(a, b, stats.sign_patterns(15)).location[0, 0] \
        != computed.location[0, 0]
