"""benchmarks/calibration.py --replay on the rounds recorded on the H200 (results/h200/)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_replay_pools_both_sides_of_an_a_a_run() -> None:
    runs = [ROOT / "results" / "h200" / "graph-pr..pr" / f"{side}.json" for side in "ab"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "calibration.py"), "--replay", *map(str, runs),
         "--runs", "200", "--jobs", "1"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    # 5 rounds per side and file, pooled by commit and config: 10 per config
    assert done.stdout.count("(10 rounds)") == 12 and "5..5 rounds per side" in done.stdout
    row = next(line for line in done.stdout.splitlines() if line.startswith("abdiff (fixed 5)"))
    cells = [cell.strip() for cell in row.split("|")]
    false_alarms, power_5 = cells[2], cells[4]
    assert false_alarms.startswith("0/200")  # graph-replay A/A rounds: nothing flagged
    assert float(re.match(r"[\d.]+", power_5).group()) > 80.0  # a 5% change is seen


def test_replay_without_enough_rounds_is_one_line(tmp_path: Path) -> None:
    run = ROOT / "results" / "h200" / "baseline-graph..pr" / "b.json"  # 5 rounds per config
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "calibration.py"), "--replay", str(run),
         "--runs", "100"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "no config with 6+ ok rounds" in done.stderr
