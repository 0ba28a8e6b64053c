"""Where a run's wall time went (what a user pays, said per run): per side, what its workers spent
starting, setting configs up, warming up, timing, capturing kernels and ending; the
rest of the wall time is abdiff's own (checkouts, fork servers' imports, scheduling,
statistics, reports). Computed from what the workers record: every record-log event
carries the wall clock `t` and the steady clock `m` (protocol.RecordWriter), and
rounds.py notes when it handed a worker its job and when it saw the worker end.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from abdiff.run.protocol import load_event
from abdiff.store.files import read_worker_file
from abdiff.store.records import SideTime, TimeSplit


@dataclass(frozen=True)
class Instant:
    """A moment on both clocks a record log stamps (protocol.RecordWriter): the wall clock
    (`t`) and this host's steady clock (`m`), which an NTP step does not move."""

    wall: float
    steady: float

    @classmethod
    def now(cls) -> Instant:
        return cls(time.time(), time.monotonic())


def _number(value: object) -> float | None:
    """`value` as a finite float, or None: the record log is the worker's, and its numbers
    may be anything JSON holds (10**400, 1e999)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def worker_time(record_path: Path, handed: Instant, ended: Instant) -> SideTime:
    """One worker's life, split by the events of its record log (`handed`, `ended`: when
    abdiff started it and saw it end). The events are read on the steady clock where they
    all lie inside the worker's life on it (a worker on this host), else on the wall
    clock (a rank on another host). A worker that wrote nothing counts its whole life as
    its start. The log is the worker's: a stamp that is no finite number is left out, a
    config's first `done` counts, and parts that add up to more than the life abdiff saw
    are scaled down to it."""
    events = []
    for line in read_worker_file(record_path).splitlines():
        try:
            event = load_event(line)
        except ValueError:
            continue  # a torn last line
        if isinstance(event, dict) and _number(event.get("t")) is not None:
            events.append(event)
    life = max(0.0, ended.steady - handed.steady)
    steady = [_number(e.get("m")) for e in events]
    clock = "m" if events and all(m is not None and handed.steady <= m <= ended.steady
                                  for m in steady) else "t"
    handed_at = handed.steady if clock == "m" else handed.wall
    stamped = [(e, float(e[clock])) for e in events]
    env = next((t for e, t in stamped if e.get("event") == "env"), None)
    if env is None:
        return SideTime(workers=1, start_s=life)
    starts: dict[object, float] = {}
    for event, t in stamped:
        if event.get("event") == "start":
            starts.setdefault(event.get("id"), t)
    # to its first config: Python, torch, the package under test (what a fork skips)
    begun = min(starts.values(), default=env)
    start_s = min(life, max(0.0, begun - handed_at))
    setup = warmup = timed = 0.0
    last_done = begun
    for event, t in stamped:
        record = event.get("record")
        if event.get("event") != "done" or event.get("id") not in starts \
                or not isinstance(record, dict):
            continue
        started = starts.pop(event.get("id"))
        latency = [v for v in map(_number, record.get("latency_us") or []) if v is not None]
        warm = _number((record.get("warmup") or {}).get("seconds", 0.0)) or 0.0
        spent = max(0.0, t - started)
        config_timed = min(spent, max(0.0, sum(latency)) / 1e6)
        config_warm = min(spent - config_timed, max(0.0, warm))
        timed += config_timed
        warmup += config_warm
        setup += spent - config_timed - config_warm
        last_done = max(last_done, t)
    if starts:  # a config begun and never done (hung until the timeout, or crashed): its
        # time to the worker's end is its set-up, not the worker's ending
        setup += max(0.0, handed_at + life - max(starts.values()))
    captures = [t for e, t in stamped if e.get("event") == "kernels"]
    capture = max(0.0, max(captures) - last_done) if captures else 0.0
    parts = [start_s, setup, warmup, timed, capture]
    scale = min(1.0, life / sum(parts)) if sum(parts) > 0 else 1.0
    start_s, setup, warmup, timed, capture = (part * scale for part in parts)
    return SideTime(workers=1, start_s=start_s, setup_s=setup, warmup_s=warmup, timed_s=timed,
                    capture_s=capture,
                    exit_s=max(0.0, life - start_s - setup - warmup - timed - capture))


def added(a: SideTime, b: SideTime) -> SideTime:
    return SideTime(workers=a.workers + b.workers, start_s=a.start_s + b.start_s,
                    setup_s=a.setup_s + b.setup_s, warmup_s=a.warmup_s + b.warmup_s,
                    timed_s=a.timed_s + b.timed_s, capture_s=a.capture_s + b.capture_s,
                    exit_s=a.exit_s + b.exit_s)


def time_split(wall_s: float, sides: dict[str, SideTime], devices: int = 1) -> TimeSplit:
    """The run's split: `sides` as measured; abdiff's own time is the wall time its
    workers did not cover (with several devices, workers run at once: their time is
    divided by how many ran side by side)."""
    workers = sum(side.total_s for side in sides.values()) / max(1, devices)
    return TimeSplit(wall_s=wall_s, sides=dict(sorted(sides.items())), devices=devices,
                     abdiff_s=max(0.0, wall_s - workers))
