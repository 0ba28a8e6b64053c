"""lab/power_bound.py: what tests that know the noise exactly could find."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # thousands of simulated suites in the lab's script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "lab" / "power_bound.py"
H200 = ROOT / "tests" / "data" / "h200"


def _rows(*args: str) -> dict[tuple[str, str, str], tuple[str, float]]:
    """(data, rounds, test) -> (A/A false alarms cell, power in percent)."""
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 5 and cells[1].isdigit():
            rows[tuple(cells[:3])] = (cells[3], float(cells[4].rstrip("%")))
    return rows


def test_no_test_finds_five_percent_in_ten_noisy_cpu_rounds() -> None:
    """Issue 17's synthetic goal (95% at +5%, 10 rounds per side) on the 2-core CPU's noise:
    beyond even tests calibrated on the exact null distribution; easy on a quiet CPU."""
    rows = _rows("--profiles", "cpu-2core,cpu-quiet", "--runs", "2000")
    oracles = [k for k in rows if k[2].startswith("oracle")]
    assert all(rows[k][0] == "1.0% (calibrated)" for k in oracles)
    noisy = max(power for k, (_, power) in rows.items() if k[0] == "cpu-2core")
    assert 20.0 < noisy < 80.0  # measured 58% (Huber); the goal is 95%
    assert all(power > 99.0 for k, (_, power) in rows.items() if k[0] == "cpu-quiet")
    welch_alarms, welch_power = rows[("cpu-2core", "10", "Welch, Bonferroni")]
    assert float(welch_alarms.rstrip("%")) <= 1.5 and welch_power < noisy


def test_medians_see_more_than_means_on_h200_process_states() -> None:
    """On the recorded H200 A/A (60 rounds a side, TRTLLM configs in two process states) a
    median-based test calibrated on the null finds +1% far more often than Welch's."""
    rows = _rows("--replay", str(H200 / "pr..pr-long-a.json"), str(H200 / "pr..pr-long-b.json"),
                 "--rounds", "15",
                 "--runs", "2000", "--shift", "0.01")
    median = rows[("replay", "15", "oracle median")][1]
    welch = rows[("replay", "15", "Welch, Bonferroni")][1]
    assert median > welch + 15.0  # measured 79% against 51%


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--profiles", "gpu-nope"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "unknown profile gpu-nope" in done.stderr
    assert done.stderr.strip().count("\n") == 0
    short = H200 / "baseline-graph..pr-b.json"  # 5 rounds per config
    done = subprocess.run([sys.executable, str(SCRIPT), "--replay", str(short), "--rounds", "10"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "no config with 20+ ok rounds" in done.stderr
    assert done.stderr.strip().count("\n") == 0
