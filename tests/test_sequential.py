"""sequential.py: the alpha-spending levels of the adaptive extension's looks, checked
against scipy's bivariate normal and against simulated sequential tests; and what they
do to a verdict (stats.latency_verdicts)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from abdiff import stats
from abdiff.sequential import Looks, look_level, nominal_levels, spent


def test_looks_follow_the_schedule() -> None:
    looks = Looks(5, 15)
    assert looks.rounds() == (5, 7, 9, 11, 13, 15)
    assert Looks(5, 14).rounds() == (5, 7, 9, 11, 13, 14)  # the last block is cut short
    assert Looks(5, 5).rounds() == Looks(5, 3).rounds() == (5,)
    # a config is at the last look its rounds reached; failed rounds leave it at the first
    assert [looks.index(n) for n in (3, 5, 6, 7, 14, 15, 20)] == [0, 0, 0, 1, 4, 5, 5]
    assert Looks.from_json(looks.to_json()) == looks
    assert Looks.from_json({}) is None and Looks.from_json(None) is None


def test_a_run_without_extension_is_tested_at_the_full_alpha() -> None:
    assert look_level(None, 9, 0.005) == 0.005
    assert look_level(Looks(5, 5), 5, 0.005) == 0.005
    one_look = stats.latency_verdicts([_one_config(1e-3, 5)], looks=Looks(5, 5))[0]
    assert one_look.verdict == "slower" and "alpha spending" not in one_look.method
    assert nominal_levels((10,), 0.01) == pytest.approx((0.01,), rel=1e-9)


@pytest.mark.parametrize("alpha", [0.05, 0.005 / 12])
def test_two_looks_spend_exactly_alpha(alpha: float) -> None:
    """P(|Z1| > c1 or |Z2| > c2) = alpha, Z1 and Z2 correlated sqrt(5/10)."""
    first, second = nominal_levels((5, 10), alpha)
    assert first == pytest.approx(spent(0.5, alpha), rel=1e-9)
    c1, c2 = sps.norm.isf(first / 2), sps.norm.isf(second / 2)
    r = np.sqrt(5 / 10)
    inside = sps.multivariate_normal([0, 0], [[1, r], [r, 1]]).cdf(
        [c1, c2], lower_limit=[-c1, -c2])
    assert 1 - inside == pytest.approx(alpha, rel=2e-3)
    assert first < second < alpha  # each look below alpha, the later one closer to it


def test_simulated_sequential_tests_reject_at_the_spent_rates() -> None:
    """Brownian motion under no change, observed at the default plan's looks: the share
    first rejected at each look matches the spending function's increments."""
    alpha = 0.05
    rounds = Looks(5, 15).rounds()
    bounds = sps.norm.isf(np.array(nominal_levels(rounds, alpha)) / 2)
    rng = np.random.default_rng(9)
    paths = 400_000
    steps = rng.normal(size=(paths, len(rounds))) * np.sqrt(np.diff((0, *rounds)))
    z = np.cumsum(steps, axis=1) / np.sqrt(rounds)
    crossed = np.abs(z) > bounds
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    share = np.array([np.mean(first == k) for k in range(len(rounds))])
    wanted = np.diff([0.0] + [spent(n / rounds[-1], alpha) for n in rounds])
    tolerance = 3 * np.sqrt(wanted / paths) + 1e-5
    assert np.all(np.abs(share - wanted) < tolerance), (share, wanted)
    assert abs(share.sum() - alpha) < 3 * np.sqrt(alpha / paths)


def _one_config(p: float, rounds: int) -> stats.LatencyStats:
    return stats.LatencyStats(1.10, (1.05, 1.15), p, 0.9, rounds, rounds, "Welch")


def test_a_flag_waits_for_its_look_level() -> None:
    """p = 0.001 is below alpha (0.005) but not below the first look's level (alpha/27):
    at 5 of 15 rounds it is inconclusive and extended; by the last look it is slower;
    a run planned without extension flags it at once."""
    looks = Looks(5, 15)
    early = stats.latency_verdicts([_one_config(1e-3, 5)], looks=looks)[0]
    assert early.verdict == "inconclusive" and stats.needs_more_rounds(early)
    assert "look 1 of 6" in early.method
    assert stats.latency_verdicts([_one_config(1e-3, 15)], looks=looks)[0].verdict == "slower"
    assert stats.latency_verdicts([_one_config(1e-3, 5)])[0].verdict == "slower"
    overwhelming = stats.latency_verdicts([_one_config(1e-7, 5)], looks=looks)[0]
    assert overwhelming.verdict == "slower" and not stats.needs_more_rounds(overwhelming)
