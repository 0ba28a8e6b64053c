"""The progress line of a measurement: rounds done of planned, the config being timed,
and an ETA that never goes backwards.

    abdiff: first rounds: round 3/10 · B: GEN-TRTLLM-bs8-q2-kv2049 · ETA ≤ 1m40s

A phase (the first rounds; then each block of extra rounds for the configs still
undecided) plans its side-rounds before it starts, so "round 3/10" only goes
forward within a phase. The ETA is the work still possible (this phase's
config-rounds left, plus every extra round the run may still add: the worst
case, up to --max-rounds for every config) times the seconds a config-round took
so far in this run (kept rounds count as done, not timed). Since later phases
only ever plan less than that worst case, the finish time it implies is kept as
a deadline that only moves earlier: the ETA counts down, or drops when configs
are decided, never up. "≤" says more rounds may still be added; without it the
last phase is running. The config being timed is read from the running worker's
record log (its latest `start` event) by a thread that redraws the line.

Shown on a terminal only; logs and pipes get nothing, and `--quiet` silences it.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from abdiff.reports.printable import printable
from abdiff.store.files import read_worker_file, worker_json

WATCH_INTERVAL_S = 0.5
TAIL_BYTES = 16384  # the end of a record log holds its latest start event


def duration_text(seconds: float) -> str:
    """"42s", "3m05s", "1h02m"."""
    seconds = max(int(round(seconds)), 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def latest_started(folder: Path) -> str | None:
    """The config id of the latest `start` event in the newest record log under `folder`."""
    logs = sorted(folder.rglob("records.jsonl"), key=lambda p: p.stat().st_mtime)
    if not logs:
        return None
    lines = read_worker_file(logs[-1], tail=TAIL_BYTES).splitlines()
    for line in reversed(lines):
        if '"start"' not in line:
            continue
        try:
            event = worker_json(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "start":
            return printable(event.get("id"), lines=False)
    return None


class Progress:
    """One status line on `stream` (stderr), rewritten in place; silent unless enabled."""

    def __init__(self, quiet: bool, stream: TextIO | None = None, enabled: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.enabled = (not quiet and self.stream.isatty()) if enabled is None else enabled
        self.clock = clock
        self.phase = ""
        self.rounds_planned = 0  # side-rounds of the current phase
        self.rounds_done = 0
        self.planned = 0  # config-rounds of the current phase
        self.done = 0
        self.later = 0  # config-rounds later phases may still add (worst case)
        self.timed_units = 0  # config-rounds measured (not kept) in this run, all phases
        self.timed_seconds = 0.0
        self.deadline: float | None = None  # clock time the ETA counts down to
        self.current = ""  # "B: GEN-TRTLLM-bs8-q2-kv2049", the config being timed
        self._lock = threading.Lock()
        self._watched: tuple[Path, str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def plan(self, phase: str, rounds: int, config_rounds: int, later: int = 0) -> None:
        """Start a phase of `rounds` side-rounds holding `config_rounds` units of work;
        `later`: the config-rounds the phases after it may add at most."""
        with self._lock:
            self.phase, self.rounds_planned, self.rounds_done = phase, rounds, 0
            self.planned, self.done, self.later = config_rounds, 0, later
            self._show()

    def step(self, configs: int, seconds: float | None) -> None:
        """One side's round of `configs` configs is done; `seconds` None when it was kept."""
        with self._lock:
            self.rounds_done += 1
            self.done += configs
            if seconds is not None and configs:
                self.timed_units += configs
                self.timed_seconds += seconds
            self._show()

    def eta(self) -> float | None:
        """Seconds left at most, never more than the last ETA minus the time since; None
        before any round was timed."""
        if not self.timed_units:
            return None
        now = self.clock()
        left = (self.planned - self.done + self.later) * self.timed_seconds / self.timed_units
        self.deadline = now + left if self.deadline is None else min(self.deadline, now + left)
        return max(self.deadline - now, 0.0)

    def line(self) -> str:
        parts = [f"abdiff: {self.phase}: round {min(self.rounds_done + 1, self.rounds_planned)}"
                 f"/{self.rounds_planned}"]
        if self.current:
            parts.append(self.current)
        eta = self.eta()
        bound = "≤ " if self.later else ""
        parts.append(f"ETA {bound}{duration_text(eta)}" if eta is not None
                     else "ETA after a round")
        return " · ".join(parts)

    def watch(self, folder: Path | None, side: str = "") -> None:
        """Follow the worker records under `folder` (one side's round) for the config being
        timed; None: the round is over."""
        if not self.enabled:
            return
        with self._lock:
            self._watched = (folder, side) if folder is not None else None
            self.current = ""
        if folder is not None and self._thread is None:
            self._thread = threading.Thread(target=self._follow, name="abdiff-progress",
                                            daemon=True)
            self._thread.start()

    def _follow(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            watched = self._watched
            if watched is None:
                continue
            try:
                started = latest_started(watched[0])
            except OSError:
                continue  # the round's folder is being replaced: the next look finds it
            with self._lock:
                text = f"{watched[1]}: {started}" if started else ""
                if started and text != self.current and self._watched == watched:
                    self.current = text
                    self._show()

    def _show(self) -> None:
        if self.enabled:  # one line: a wrapped one would not be rewritten in place
            width = shutil.get_terminal_size((160, 24)).columns - 1
            self.stream.write("\r\x1b[K" + self.line()[:width])
            self.stream.flush()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.enabled:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
