"""lab/calibration.py --replay on rounds recorded on the H200 (tests/data/h200/)."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "data" / "h200"
CALIBRATION = ROOT / "lab" / "calibration.py"


@pytest.mark.slow
def test_replay_pools_both_sides_of_an_a_a_run() -> None:
    runs = [H200 / f"graph-pr..pr-{side}.json" for side in "ab"]
    done = subprocess.run(
        [sys.executable, str(CALIBRATION), "--replay", *map(str, runs),
         "--runs", "200", "--jobs", "2"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    # 5 rounds per side and file, pooled by commit and config: 10 per config
    assert done.stdout.count("(10 rounds)") == 12 and "5..5 rounds per side" in done.stdout
    fixed = _row(done.stdout, "abdiff (fixed 5)")
    assert fixed["A/A false alarms (95% CI)"].startswith("0/200")  # graph replays: no flag
    assert _percent(fixed["power +5%"]) > 80.0  # a 5% change is seen


@pytest.mark.slow
def test_replay_without_enough_rounds_is_one_line(tmp_path: Path) -> None:
    run = H200 / "baseline-graph..pr-b.json"  # 5 rounds per config
    done = subprocess.run(
        [sys.executable, str(CALIBRATION), "--replay", str(run),
         "--runs", "100"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "no config with 6+ ok rounds" in done.stderr


def _row(stdout: str, rule: str) -> dict[str, str]:
    """The cells of `rule`'s row of the first table, by the table's column headers."""
    lines = stdout.splitlines()
    header = [cell.strip() for cell in next(line for line in lines
                                            if line.startswith("rule ")).split("|")]
    line = next(line for line in lines if line.startswith(rule + " "))
    return dict(zip(header, (cell.strip() for cell in line.split("|")), strict=True))


def _percent(cell: str) -> float:
    return float(re.match(r"[\d.]+", cell).group())


@pytest.mark.slow
def test_one_slow_process_in_twelve_no_longer_makes_configs_undecidable() -> None:
    """Issue 23's profile: 0.3% process noise, 1% jitter, 8% of processes 25% slow, 5 rounds."""
    done = subprocess.run(
        [sys.executable, str(CALIBRATION), "--profiles", "gpu-odd",
         "--runs", "200", "--jobs", "2"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    fixed = _row(done.stdout, "abdiff (fixed 5)")
    before = _row(done.stdout, "abdiff (fixed 5, no odd rule)")
    assert fixed["A/A false alarms (95% CI)"].startswith(("0/200", "1/200", "2/200"))
    assert _percent(fixed["power +5%"]) >= 85.0
    inconclusive = "A/A inconclusive (median)"  # configs per A/A suite
    assert float(fixed[inconclusive]) <= 1 < float(before[inconclusive])
    def bimodal(rule: str, measure: str) -> float:
        line = next(line for line in done.stdout.splitlines()
                    if line.startswith(f"B slow in 40% of processes (bimodal): {rule}, {measure}"))
        return float(line.split("|")[-1].strip().rstrip("%"))

    assert bimodal("abdiff (fixed 5)", "flagged or noted") > 70.0
    # process speeds make a sometimes-slow config a flag, more so with adaptive rounds
    assert bimodal("abdiff (fixed 5, no process speeds)", "flagged slower") < 10.0
    assert bimodal("abdiff (fixed 5)", "flagged slower") > 20.0
    # 66.7% of 1000 suites with alpha spending (76.8% with the Haybittle-Peto boundary)
    assert bimodal("abdiff (adaptive 5-15)", "flagged slower") > 50.0


def test_a_clear_change_below_the_threshold_counts_as_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The +1% rows' "flagged or shown significant below the threshold" count: a significant
    slowdown under --min-effect carries the note and counts; a faster one or a bare
    `unchanged` does not."""
    monkeypatch.syspath_prepend(str(ROOT / "lab"))
    from calibration import shows_slowdown

    from abdiff import stats

    rng = np.random.default_rng(17)
    base = [list(100 * np.exp(rng.normal(0, 0.001, 20))) for _ in range(8)]

    def verdict(factor: float) -> stats.LatencyResult:
        b = [list(np.asarray(r) * factor * np.exp(rng.normal(0, 0.001))) for r in base]
        a = [list(np.asarray(r) * np.exp(rng.normal(0, 0.001))) for r in base]
        return stats.latency_verdicts([stats.compare_latency(a, b)])[0]

    small, large, faster, same = verdict(1.01), verdict(1.05), verdict(1 / 1.01), verdict(1.0)
    assert small.verdict == "unchanged" and "below the 2% threshold" in small.note
    assert shows_slowdown(small, 0.02) and shows_slowdown(large, 0.02)
    assert large.verdict == "slower"
    assert "below the 2% threshold" in faster.note and not shows_slowdown(faster, 0.02)
    assert same.verdict == "unchanged" and same.note is None and not shows_slowdown(same, 0.02)
