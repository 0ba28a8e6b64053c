"""The progress line: a total planned per phase, an ETA from the rounds measured so far."""

from __future__ import annotations

import io
import os
import pty

from abdiff.progress import Progress, duration_text


def test_total_is_planned_and_eta_comes_from_measured_rounds() -> None:
    stream = io.StringIO()
    progress = Progress(quiet=False, stream=stream, enabled=True)
    progress.plan("first rounds", 4 * 12)  # 2 sides x 2 rounds x 12 configs
    assert progress.eta() is None and "ETA after a round" in progress.line("")
    progress.step("A round 1 (kept)", 12, None)  # kept from an interrupted run: not timed
    assert progress.eta() is None
    progress.step("B round 1", 12, 60.0)  # 5 s per config-round
    assert progress.eta() == 24 * 5.0
    assert progress.line("B round 1") == (
        "abdiff: first rounds 24/48 config-rounds (50%) · B round 1 · ETA 2m00s")
    shares = []
    for label in ("B round 2", "A round 2"):
        progress.step(label, 12, 30.0)
        shares.append(progress.done / progress.planned)
    assert shares == sorted(shares) and progress.eta() == 0
    # Extra rounds for undecided configs are a new phase with their own planned total,
    # timed with what every earlier round measured (120 s for 36 config-rounds).
    progress.plan("rounds 3-4 for 2 undecided configs", 2 * 2 * 2)
    assert progress.done == 0 and progress.eta() == 8 * 120.0 / 36
    progress.close()
    assert stream.getvalue().count("\r\x1b[K") == 7  # 2 plans, 4 steps, the clearing close


def test_silent_off_a_terminal_and_when_quiet() -> None:
    stream = io.StringIO()
    for progress in (Progress(quiet=False, stream=stream), Progress(quiet=True, stream=stream)):
        progress.plan("first rounds", 2)
        progress.step("A round 1", 1, 1.0)
        progress.close()
    assert stream.getvalue() == ""
    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as tty:
        assert Progress(quiet=False, stream=tty).enabled
        assert not Progress(quiet=True, stream=tty).enabled
    os.close(leader)


def test_duration_text() -> None:
    assert [duration_text(s) for s in (0.4, 42, 185, 3725)] == ["0s", "42s", "3m05s", "1h02m"]
