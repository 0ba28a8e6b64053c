"""sequential.py: when a run looks at its configs, and the level each look has spent."""

from __future__ import annotations

import numpy as np
import pytest

from abdiff.verdict import stats
from abdiff.verdict.sequential import Looks, spent


def test_looks_follow_the_schedule() -> None:
    # the second look at 11, where `unchanged` (11 pairs) can first end a config
    assert Looks(5, 15).rounds() == (5, 11, 15)
    assert Looks(5, 15).rounds()[1] == stats.MIN_UNCHANGED_ROUNDS
    assert Looks(5, 12).rounds() == (5, 11, 12)
    assert Looks(5, 5).rounds() == (5,)
    assert Looks.from_json(Looks(3, 9, 2).to_json()) == Looks(3, 9, 2)
    assert Looks.from_json(None) is None


def test_spending_reaches_alpha_at_the_plan_end_and_never_beyond() -> None:
    assert spent(0.01, 1.0) == 0.01 and spent(0.01, 2.0) == 0.01
    assert spent(0.01, 10 / 15) == pytest.approx(0.01 * (2 / 3) ** 2)
    assert spent(0.01, 0.0) == 0.0


def test_a_look_decides_the_same_when_the_run_is_compared_again_later() -> None:
    """The look at 11 rounds, judged while the run had 11 rounds and again after 15: the
    same threshold, df, level and verdicts (v3's threshold of that look moved by up to 13%
    when 15 rounds drew other sign patterns)."""
    rng = np.random.default_rng(3)
    a = np.exp(rng.normal(0, 0.01, (8, 15)))
    b = np.exp(rng.normal(0, 0.01, (8, 15)))
    b[0] *= 1.03

    def configs(rounds: int) -> list[stats.ConfigRounds]:
        return [stats.ConfigRounds({r: float(a[c, r]) for r in range(rounds)},
                                   {r: float(b[c, r]) for r in range(rounds)})
                for c in range(8)]

    looks = Looks(5, 15)
    at_eleven = stats.latency_verdicts(configs(11), looks=looks)
    later = configs(15)
    for c in range(8):  # configs decided at 11 rounds get no more
        if not stats.needs_more_rounds(at_eleven[c]):
            later[c] = configs(11)[c]
    final = stats.latency_verdicts(later, looks=looks)
    for then, now in zip(at_eleven, final, strict=True):
        if now.look_rounds == 11:
            assert (now.threshold, now.df, now.level, now.verdict, now.ratio, now.p) == (
                then.threshold, then.df, then.level, then.verdict, then.ratio, then.p)
    assert at_eleven[0].verdict == "slower" and final[0].look_rounds == 11
