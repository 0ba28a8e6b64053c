"""Where abdiff's own time goes in one run, on the steady clock: from the command's start
to its first worker's first event, the gaps between one worker's last event and the
next one's first (abdiff's bookkeeping after a round, its looks, the next worker's start
and fork), and from the last worker's last event to the command's end. Read from the
state folder's record logs (`m`, the steady clock every event carries since 2026-12-06).

    s=$(python -c 'import time; print(time.monotonic())'); abdiff pr..pr ...; \\
    e=$(python -c 'import time; print(time.monotonic())'); \\
    python lab/timeline.py STATE_DIR --start $s --end $e
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def worker_spans(state_dir: Path) -> list[tuple[float, float, str]]:
    """(first event, last event, which) of every worker log in the run folder, by start."""
    spans = []
    for log in sorted(state_dir.glob("logs/*/*/worker*/records.jsonl")):
        stamps = []
        for line in log.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event.get("m"), int | float):
                stamps.append(float(event["m"]))
        if stamps:
            spans.append((min(stamps), max(stamps), str(log.parent.relative_to(state_dir))))
    return sorted(spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("--start", type=float, required=True, help="time.monotonic() before")
    parser.add_argument("--end", type=float, required=True, help="time.monotonic() after")
    args = parser.parse_args()
    spans = worker_spans(args.state_dir)
    if not spans:
        raise SystemExit(f"{args.state_dir}: no record log with steady stamps")
    gaps = [(nxt[0] - cur[1], nxt[2]) for cur, nxt in zip(spans, spans[1:], strict=False)]
    inside = sum(last - first for first, last, _ in spans)
    print(f"wall {args.end - args.start:.2f} s, {len(spans)} workers, their events span "
          f"{inside:.2f} s")
    print(f"before the first worker's first event: {spans[0][0] - args.start:.2f} s")
    print(f"between workers: {sum(g for g, _ in gaps):.2f} s in {len(gaps)} gaps "
          f"(median {statistics.median(g for g, _ in gaps):.3f} s)")
    for gap, before in sorted(gaps, reverse=True)[:5]:
        print(f"  {gap:.3f} s before {before}")
    print(f"after the last worker's last event: {args.end - spans[-1][1]:.2f} s")


if __name__ == "__main__":
    main()
