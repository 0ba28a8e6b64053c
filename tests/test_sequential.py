"""sequential.py: when a run looks at its configs, and the level each look has spent."""

from __future__ import annotations

import pytest

from abdiff.verdict.sequential import Looks, spent


def test_looks_follow_the_schedule() -> None:
    assert Looks(5, 15).rounds() == (5, 10, 15)
    assert Looks(5, 12).rounds() == (5, 10, 12)
    assert Looks(5, 5).rounds() == (5,)
    assert Looks.from_json(Looks(3, 9, 2).to_json()) == Looks(3, 9, 2)
    assert Looks.from_json(None) is None


def test_spending_reaches_alpha_at_the_plan_end_and_never_beyond() -> None:
    assert spent(0.01, 1.0) == 0.01 and spent(0.01, 2.0) == 0.01
    assert spent(0.01, 10 / 15) == pytest.approx(0.01 * (2 / 3) ** 2)
    assert spent(0.01, 0.0) == 0.0
