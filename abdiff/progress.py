"""The progress line of a measurement: planned work, done work, and an ETA from measured rounds.

The work of a phase (the first rounds; then each block of extra rounds for the
configs still undecided) is planned before it starts, as config-rounds (one
config in one side's round), so the count and percentage only go forward
within a phase, and a new phase says so instead of moving the total. The ETA
is the remaining config-rounds times the seconds a config-round took so far in
this run (rounds kept from an interrupted run are counted as done but not
timed). Shown on a terminal only; logs and pipes get nothing.
"""

from __future__ import annotations

import sys
from typing import TextIO


def duration_text(seconds: float) -> str:
    """"42s", "3m05s", "1h02m"."""
    seconds = max(int(round(seconds)), 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """One status line on `stream` (stderr), rewritten in place; silent unless enabled."""

    def __init__(self, quiet: bool, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = (not quiet and self.stream.isatty()) if enabled is None else enabled
        self.phase = ""
        self.planned = 0  # config-rounds of the current phase
        self.done = 0
        self.timed_units = 0  # config-rounds measured (not kept) in this run, all phases
        self.timed_seconds = 0.0

    def plan(self, phase: str, config_rounds: int) -> None:
        """Start a phase of `config_rounds` units of work."""
        self.phase, self.planned, self.done = phase, config_rounds, 0
        self._show("")

    def step(self, label: str, configs: int, seconds: float | None) -> None:
        """One side's round of `configs` configs is done; `seconds` None when it was kept."""
        self.done += configs
        if seconds is not None and configs:
            self.timed_units += configs
            self.timed_seconds += seconds
        self._show(label)

    def eta(self) -> float | None:
        """Seconds left in this phase, or None before any round was timed."""
        if not self.timed_units:
            return None
        return (self.planned - self.done) * self.timed_seconds / self.timed_units

    def line(self, label: str) -> str:
        share = self.done / self.planned if self.planned else 1.0
        eta = self.eta()
        parts = [f"abdiff: {self.phase} {self.done}/{self.planned} config-rounds ({share:.0%})"]
        if label:
            parts.append(label)
        parts.append(f"ETA {duration_text(eta)}" if eta is not None else "ETA after a round")
        return " · ".join(parts)

    def _show(self, label: str) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[K" + self.line(label))
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
