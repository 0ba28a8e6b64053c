"""lab/pipeline.py: the split of a run's wall time, read from a state folder's worker
logs (written here as a worker writes them, with the job's hand-over time as its mtime)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from pytest import approx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lab"))
import pipeline  # noqa: E402 - lab/ is no package


def worker(state: Path, name: str, handed_over: float, events: list[dict]) -> None:
    folder = state / "logs" / name / "worker0"
    folder.mkdir(parents=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    job = folder / "job.json"
    job.write_text("{}")
    os.utime(job, (handed_over, handed_over))


def done(config: str, t: float, timed_s: float, warmup_s: float) -> dict:
    record = {"latency_us": [timed_s * 1e6], "warmup": {"seconds": warmup_s}}
    return {"event": "done", "id": config, "t": t, "record": record}


def test_each_part_and_the_time_between_workers(tmp_path: Path) -> None:
    t0 = 1_700_000_000.0
    # worker 1: started 2 s after its job, one config (1 s set-up, 0.5 s warm-up, 0.5 s
    # timed), a 1 s capture pass; its last event at t0 + 5
    worker(tmp_path, "A/r0", t0, [
        {"event": "env", "t": t0 + 2}, {"event": "start", "id": "c", "t": t0 + 2},
        done("c", t0 + 4, 0.5, 0.5), {"event": "kernels", "id": "c", "t": t0 + 5}])
    # worker 2 gets its job 0.25 s after worker 1's last event; no capture
    worker(tmp_path, "B/r0", t0 + 5.25, [
        {"event": "env", "t": t0 + 6.25}, {"event": "start", "id": "c", "t": t0 + 6.25},
        done("c", t0 + 7.25, 0.25, 0.25)])
    parts = pipeline.breakdown(tmp_path)
    assert parts["workers"] == 2
    assert parts[pipeline.START] == approx(3.0)
    assert parts[pipeline.SET_UP] == approx(1.5)
    assert parts[pipeline.WARM_UP] == approx(0.75) and parts[pipeline.TIMED] == approx(0.75)
    assert parts[pipeline.CAPTURE] == approx(1.0)
    assert parts[pipeline.BETWEEN] == approx(0.25)
    table = pipeline.breakdown_table(parts, 10.0)
    assert table.startswith("2 worker processes, 10.0 s wall, timed share 7.5%")
    assert "abdiff itself, checkouts, waits" in table  # the rest: 10 - 7.25 s


def test_state_without_wall_time_is_one_line(tmp_path: Path) -> None:
    done_ = subprocess.run([sys.executable, str(ROOT / "lab" / "pipeline.py"), "--state",
                            str(tmp_path)], capture_output=True, text=True, check=False)
    assert done_.returncode == 2 and "--state needs --wall" in done_.stderr
