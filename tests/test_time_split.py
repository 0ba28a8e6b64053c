"""time_split.py: where a run's wall time went, from the workers' record logs, in the
result and its one line."""

from __future__ import annotations

import math
import time
from pathlib import Path

from fake_target import FakeLauncher, fake_measurement

from abdiff.reports import common, table
from abdiff.run.protocol import KernelProfile, RecordWriter, read_round_log
from abdiff.run.schedule import Plan
from abdiff.run.time_split import Instant, time_split, worker_time
from abdiff.store.records import RoundRecord, SideTime, parse_result
from abdiff.verdict.compare import compare_runs


def test_a_workers_life_is_split_by_its_events(tmp_path: Path) -> None:
    """A real record log (RecordWriter), its `t` stamps set to known times."""
    path = tmp_path / "records.jsonl"
    writer = RecordWriter(path)
    writer.env({"device": "cpu"})
    writer.start("c1")
    writer.done("c1", RoundRecord("ok", None, [100_000.0] * 5, warmup={"seconds": 0.25}))
    writer.kernels("c1", KernelProfile({"k": 1}, {"k": 1.0}))
    writer.close()
    lines = path.read_text().splitlines()
    stamps = [10.5, 11.0, 12.5, 13.0]  # env, start, done, kernels
    import json
    events = [json.loads(line) for line in lines]
    for event, t in zip(events, stamps, strict=True):
        event["t"] = t
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    spent = worker_time(path, handed=Instant(10.0, 0.0), ended=Instant(13.5, 3.5))
    assert spent == SideTime(workers=1, start_s=1.0, setup_s=0.75, warmup_s=0.25, timed_s=0.5,
                             capture_s=0.5, exit_s=0.5)
    assert abs(spent.total_s - 3.5) < 1e-9
    # a worker that wrote nothing spent its whole life starting
    assert worker_time(tmp_path / "none.jsonl", Instant(1.0, 1.0), Instant(3.0, 3.0)) \
        == SideTime(workers=1, start_s=2.0)
    # NaN and infinities are not JSON: a worker's infinite stamp or warm-up is no number
    events[2]["record"]["warmup"]["seconds"] = float("inf")
    events[3]["t"] = float("inf")
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    forged = worker_time(path, handed=Instant(10.0, 0.0), ended=Instant(13.5, 3.5))
    assert all(math.isfinite(v) for v in (forged.setup_s, forged.warmup_s, forged.capture_s,
                                          forged.exit_s, forged.total_s))
    assert read_round_log(path).malformed  # the done line is refused, not parsed


def test_a_config_that_hangs_until_the_timeout_is_its_set_up_not_the_ending(
        tmp_path: Path) -> None:
    """c1 done, c2 begun and never done (killed at the timeout, 8 s later): the 8 s are
    c2's, not the worker's ending."""
    path = tmp_path / "records.jsonl"
    writer = RecordWriter(path)
    writer.env({"device": "cpu"})
    writer.start("c1")
    writer.done("c1", RoundRecord("ok", None, [100_000.0] * 5, warmup={"seconds": 0.25}))
    writer.start("c2")
    writer.close()
    import json
    events = [json.loads(line) for line in path.read_text().splitlines()]
    for event, t in zip(events, [10.5, 11.0, 12.5, 12.5], strict=True):
        event["t"] = t
        event.pop("m", None)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    spent = worker_time(path, handed=Instant(10.0, 0.0), ended=Instant(20.5, 10.5))
    assert spent == SideTime(workers=1, start_s=1.0, setup_s=0.75 + 8.0, warmup_s=0.25,
                             timed_s=0.5, exit_s=0.0)


def test_a_clock_step_during_a_worker_moves_no_part_of_its_split(tmp_path: Path) -> None:
    """The VM's wall clock stepped 40 s forward while a worker set its config up (seen on
    the 2-core VM: a run's line said set-up 44.6 s in a run of 32.6 s): its events are read
    on the steady clock, which the step does not move. A rank on another host, whose steady
    clock is not this host's, is read on the wall clock."""
    path = tmp_path / "records.jsonl"
    writer = RecordWriter(path)
    writer.env({"device": "cpu"})
    writer.start("c1")
    writer.done("c1", RoundRecord("ok", None, [100_000.0] * 5, warmup={"seconds": 0.25}))
    writer.close()
    import json
    events = [json.loads(line) for line in path.read_text().splitlines()]
    for event, (t, m) in zip(events, [(100.5, 0.5), (101.0, 1.0), (142.5, 2.5)], strict=True):
        event["t"], event["m"] = t, m
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    spent = worker_time(path, handed=Instant(100.0, 0.0), ended=Instant(143.0, 3.0))
    assert spent == SideTime(workers=1, start_s=1.0, setup_s=0.75, warmup_s=0.25,
                             timed_s=0.5, exit_s=0.5)
    for event in events:
        event["m"] += 5000.0  # another host's steady clock
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    remote = worker_time(path, handed=Instant(100.0, 0.0), ended=Instant(143.0, 43.0))
    assert remote.start_s == 1.0 and remote.setup_s == 40.75 and remote.exit_s == 0.5
    # a real log of this host carries both stamps, its steady ones inside its life
    handed = Instant.now()
    RecordWriter(tmp_path / "real.jsonl").env({"device": "cpu"})
    real = [json.loads(line) for line in (tmp_path / "real.jsonl").read_text().splitlines()]
    assert handed.steady <= real[0]["m"] <= Instant.now().steady


def test_a_hostile_record_log_cannot_make_the_split_longer_than_the_life_or_crash_it(
        tmp_path: Path) -> None:
    """The record log is the benchmark's to write: a stamp of 10**400 or 1e999, a thousand
    `done` lines for one config, a negative warm-up. The split stays finite, non-negative
    and within the life abdiff saw (3.5 s)."""
    import json
    path = tmp_path / "records.jsonl"
    done = {"event": "done", "id": "c1", "t": 12.5, "m": 2.5,
            "record": {"status": "ok", "latency_us": [10**400, 1e6], "warmup": {"seconds": -5}}}
    lines = [{"event": "env", "env": {}, "t": 10.5, "m": 0.5},
             {"event": "start", "id": "c1", "t": 11.0, "m": 1.0},
             {"event": "start", "id": "c1", "t": 10**400, "m": 1.0}, *[done] * 1000,
             {"event": "kernels", "id": "c1", "t": 13.0, "m": 3.0}]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines)
                    + '{"event": "kernels", "t": 1e999}\n')
    for handed, ended in ((Instant(10.0, 0.0), Instant(13.5, 3.5)),
                          (Instant(10.0, 100.0), Instant(13.5, 103.5))):  # wall clock
        spent = worker_time(path, handed, ended)
        parts = (spent.start_s, spent.setup_s, spent.warmup_s, spent.timed_s, spent.capture_s,
                 spent.exit_s)
        assert all(math.isfinite(p) and p >= 0 for p in parts), parts
        assert abs(spent.total_s - 3.5) < 1e-9 and spent.timed_s <= 1.0 + 1e-9, parts


def test_a_line_abdiff_cannot_decode_is_malformed_not_a_crash(tmp_path: Path) -> None:
    """JSON that Python refuses: an integer of 5000 digits (ValueError from the int
    conversion) and 100000 nested arrays (RecursionError). Either is a malformed line of
    the config it came in, and the time split reads past it; abdiff ended with an internal
    error (exit 3) on both before."""
    path = tmp_path / "records.jsonl"
    writer = RecordWriter(path)
    writer.env({})
    writer.start("c1")
    with open(path, "a", encoding="utf-8") as log:
        log.write('{"event": "facts", "id": "c1", "facts": {"x": ' + "1" * 5000 + "}}\n")
        log.write("[" * 100_000 + "]" * 100_000 + "\n")
    writer.done("c1", RoundRecord("ok", latency_us=[1.0, 2.0], round=0))
    writer.close()
    log = read_round_log(path)
    assert "c1" in log.malformed and "not JSON" in log.malformed["c1"]
    spent = worker_time(path, Instant.now(), Instant(time.time() + 1, time.monotonic() + 1))
    assert spent.workers == 1 and math.isfinite(spent.total_s)


def test_a_measured_run_carries_its_split_into_the_result_and_the_report(
        tmp_path: Path) -> None:
    started = time.monotonic()
    launcher = FakeLauncher(lambda side, cid, r: 100.0)
    run_state = fake_measurement(tmp_path / "state", launcher, Plan(2, 2))
    a, b = (run_state.sides[side].run for side in "AB")
    result = compare_runs(a, b, {}, 0.02, 0.01)
    result.time = time_split(time.monotonic() - started, run_state.time)
    assert [name for name in result.time.sides] == ["A", "B"]
    assert result.time.sides["A"].workers == 2 and result.time.sides["B"].workers == 2
    # timed: 5 iterations of ~100 us per config, 3 configs, 2 rounds, at most (the fake
    # worker does not spend them: a config's timed part is capped by its start-to-done)
    assert 0 < result.time.sides["A"].timed_s < 0.0031
    assert result.time.sides["A"].total_s <= result.time.wall_s
    line = common.time_line(result)
    assert line is not None and line.startswith(f"time: {result.time.wall_s:.1f} s; A 2 workers: ")
    assert "abdiff itself" in line
    rendered = table.render(result, width=200, colour=False).splitlines()
    assert rendered[-1] == common.final_line(result)  # the verdict stays last, the time above
    assert " ".join(" ".join(rendered[-3:-1]).split()).endswith(" ".join(line.split()))
    # kept in the result JSON, read back as typed
    assert parse_result(result.to_json(), "result").time == result.time

