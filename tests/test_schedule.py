"""Schedule: balanced, randomized ABBA blocks."""

import random
from collections import Counter

from abdiff.schedule import schedule


def test_abba_blocks_balance_both_sides() -> None:
    slots = schedule(5, random.Random(1))
    assert Counter(side for side, _ in slots) == {"A": 5, "B": 5}
    for r in range(5):
        assert {side for side, rr in slots if rr == r} == {"A", "B"}
    blocks = ["".join(side for side, _ in slots[i:i + 4]) for i in range(0, 8, 4)]
    assert all(block in ("ABBA", "BAAB") for block in blocks)


def test_order_is_randomized_and_reproducible() -> None:
    orders = {tuple(schedule(8, random.Random(seed))) for seed in range(20)}
    assert len(orders) > 1
    assert schedule(8, random.Random(7)) == schedule(8, random.Random(7))


def test_extension_starts_at_the_next_round() -> None:
    slots = schedule(2, random.Random(3), start=5)
    assert sorted({r for _, r in slots}) == [5, 6]
