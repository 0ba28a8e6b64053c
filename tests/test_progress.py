"""The progress line: rounds done of planned, the config being timed, an ETA that never
goes backwards, and nothing off a terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import time
from pathlib import Path

from abdiff.run.progress import Progress, duration_text, latest_started


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rounds_of_planned_and_an_eta_from_measured_rounds() -> None:
    stream, clock = io.StringIO(), Clock()
    progress = Progress(quiet=False, stream=stream, enabled=True, clock=clock)
    progress.plan("first rounds", 4, 4 * 12)  # 2 sides x 2 rounds x 12 configs, no extension
    assert progress.eta() is None and progress.line() == (
        "abdiff: first rounds: round 1/4 · ETA after a round")
    progress.step(12, None)  # kept from an interrupted run: counted, not timed
    assert progress.eta() is None
    clock.now += 60
    progress.step(12, 60.0)  # 5 s per config-round
    assert progress.eta() == 24 * 5.0
    assert progress.line() == "abdiff: first rounds: round 3/4 · ETA 2m00s"
    progress.close()
    assert stream.getvalue().count("\r\x1b[K") == 4  # the plan, 2 steps, the clearing close


def test_the_eta_never_goes_backwards() -> None:
    """A slow round, then a new phase: the ETA counts down or drops, never rises; "≤" while
    the run may still add rounds."""
    clock = Clock()
    progress = Progress(quiet=False, stream=io.StringIO(), enabled=True, clock=clock)
    # 2 sides x 5 rounds x 4 configs first; up to 10 more rounds per side for all 4 later
    progress.plan("first rounds", 10, 40, 2 * 10 * 4)
    etas = []
    for seconds in (4.0, 4.0, 12.0, 4.0, 20.0, 4.0, 4.0, 4.0, 4.0, 4.0):
        clock.now += seconds
        progress.step(4, seconds)
        etas.append(progress.eta())
        assert "ETA ≤ " in progress.line()
    # two configs stay undecided: a block of 2 more rounds per side for them
    progress.plan("rounds 6-7 for 2 undecided configs", 4, 4 * 2, 2 * 8 * 2)
    etas.append(progress.eta())
    for _ in range(4):
        clock.now += 30.0  # far slower than before: still no rise
        progress.step(2, 30.0)
        etas.append(progress.eta())
    assert all(later <= earlier for earlier, later in zip(etas, etas[1:], strict=False)), etas
    assert etas[-1] == 0.0
    progress.plan("rounds 8-9 for 1 undecided configs", 4, 4, 0)
    assert "ETA ≤" not in progress.line() and "round 1/4" in progress.line()


def test_the_config_being_timed_is_read_from_the_worker_log(tmp_path: Path) -> None:
    log = tmp_path / "worker0" / "records.jsonl"
    log.parent.mkdir()
    assert latest_started(tmp_path) is None
    events = [{"event": "env", "env": {}}, {"event": "start", "id": "GEN-DSA-bs8-q1-kv64"},
              {"event": "done", "id": "GEN-DSA-bs8-q1-kv64", "record": {}},
              {"event": "start", "id": "GEN-TRTLLM-bs8-q2-kv64"}]
    log.write_text("".join(json.dumps(e) + "\n" for e in events) + '{"event": "sta')
    assert latest_started(tmp_path) == "GEN-TRTLLM-bs8-q2-kv64"  # a half-written line skipped
    stream = io.StringIO()
    progress = Progress(quiet=False, stream=stream, enabled=True)
    progress.plan("first rounds", 2, 4)
    progress.watch(tmp_path, "B")
    deadline = time.monotonic() + 5
    while "B: GEN-TRTLLM-bs8-q2-kv64" not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    progress.watch(None)
    progress.close()
    assert "abdiff: first rounds: round 1/2 · B: GEN-TRTLLM-bs8-q2-kv64 · ETA after a round" \
        in stream.getvalue()


def test_silent_off_a_terminal_and_when_quiet(tmp_path: Path) -> None:
    stream = io.StringIO()
    for progress in (Progress(quiet=False, stream=stream), Progress(quiet=True, stream=stream)):
        progress.plan("first rounds", 2, 2)
        progress.watch(tmp_path, "A")
        progress.step(1, 1.0)
        progress.close()
        assert progress._thread is None  # nothing follows the workers either
    assert stream.getvalue() == ""
    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as tty:
        assert Progress(quiet=False, stream=tty).enabled
        assert not Progress(quiet=True, stream=tty).enabled
    os.close(leader)


def test_duration_text() -> None:
    assert [duration_text(s) for s in (0.4, 42, 185, 3725)] == ["0s", "42s", "3m05s", "1h02m"]
