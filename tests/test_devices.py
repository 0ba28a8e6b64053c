"""--devices (devices.py, schedule.run_spread): the syntax, and ABBA blocks spread over
devices with every pair on one device, recorded in the run file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_abdiff, write_suite
from fake_target import CONFIGS, FakeLauncher, fake_measurement

from abdiff.errors import InputError
from abdiff.launchers.process import run_process
from abdiff.launchers.spec import LaunchSpec
from abdiff.run.devices import Device, compact, parse_devices
from abdiff.run.schedule import Plan, abba_slots, blocks_of
from abdiff.verdict.compare import compare_runs


def test_gpu_indices_and_cpu_sets() -> None:
    assert parse_devices("0:1", gpu=True) == [Device("GPU 0", {"CUDA_VISIBLE_DEVICES": "0"}),
                                              Device("GPU 1", {"CUDA_VISIBLE_DEVICES": "1"})]
    assert parse_devices("0,1:2-3", gpu=True)[1] == Device("GPU 2-3",
                                                            {"CUDA_VISIBLE_DEVICES": "2,3"})
    cpus = sorted(os.sched_getaffinity(0))
    first = parse_devices(f"{cpus[0]}", gpu=False)
    assert first == [Device(f"CPUs {cpus[0]}", cpus=(cpus[0],))]
    assert compact([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


@pytest.mark.parametrize(("text", "says"), [
    ("0-a", "'0-a' is not a number or a range like 0-3"),
    ("3-1", "'3-1' is not a range of numbers from low to high"),
    ("0::1", "device 2 is empty"),
    ("0-1:1", "1 is in two devices"),
])
def test_bad_device_lists_are_one_clear_line(text: str, says: str) -> None:
    with pytest.raises(InputError, match=says):
        parse_devices(text, gpu=True)


def test_a_cpu_this_process_may_not_use_is_refused() -> None:
    beyond = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(InputError, match=f"CPU {beyond} is not one this process may run on"):
        parse_devices(f"{beyond}", gpu=False)


def test_the_command_line_refuses_a_bad_list_with_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "abdiff", "main..pr", "--configs", "mtp",
                           "--repo", str(tmp_path), "--devices", "0-x"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("abdiff: error: --devices 0-x:")


def test_blocks_are_the_abba_pairs_of_rounds() -> None:
    import random
    slots = abba_slots(5, random.Random(3))
    blocks = blocks_of(slots)
    assert [sorted({r for _, r in block}) for block in blocks] == [[0, 1], [2, 3], [4]]
    assert [len(block) for block in blocks] == [4, 4, 2]
    assert blocks_of(abba_slots(4, random.Random(1), start=5))[1][0][1] == 7


def test_blocks_run_on_every_device_with_each_pair_on_one(tmp_path: Path) -> None:
    """CPU set 1 makes the benchmark 20% slower on both sides: each A round is paired with
    the B round of its own device, so an A/A run stays unchanged."""
    devices = [Device("CPUs 0", cpus=(0,)), Device("CPUs 1", cpus=(1,))]
    launcher = FakeLauncher(lambda side, cid, r: 100.0 + r % 2, slower_on={(1,): 1.2})
    run_state = fake_measurement(tmp_path / "state", launcher, Plan(6, 6), devices=devices)
    a, b = (run_state.sides[side].run for side in "AB")
    assert a.env["devices"] == ["CPUs 0", "CPUs 1"]
    for config_a, config_b in zip(a.configs, b.configs, strict=True):
        by_round = {r.round: r.device for r in config_a.rounds}
        assert by_round == {r.round: r.device for r in config_b.rounds}  # pairs on one device
        # blocks of two rounds dealt to the devices in turn
        assert by_round == {0: "CPUs 0", 1: "CPUs 0", 2: "CPUs 1", 3: "CPUs 1", 4: "CPUs 0",
                            5: "CPUs 0"}
    # every worker was given its round's CPU set
    assert {(r, cpus) for _, r, cpus in launcher.pinned} == {
        (0, (0,)), (1, (0,)), (2, (1,)), (3, (1,)), (4, (0,)), (5, (0,))}
    result = compare_runs(a, b, {}, 0.02, 0.01)
    assert all(c.latency.verdict != "slower" and c.latency.verdict != "faster"
               for c in result.configs)
    assert all(c.latency.rounds_a == 6 for c in result.configs)
    assert len(CONFIGS) == len(result.configs)


def test_a_cold_worker_is_pinned_to_its_cpu_set(tmp_path: Path) -> None:
    cpu = min(os.sched_getaffinity(0))
    spec = LaunchSpec([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                      tmp_path, cpus=(cpu,))
    outcome = run_process(spec, tmp_path / "log", tmp_path / "log" / "progress", 60)
    assert outcome.returncode == 0
    assert (tmp_path / "log" / "stdout.txt").read_text().strip() == f"[{cpu}]"


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_every_lane_forks_its_workers_from_servers_that_stay_up(faulty_repo: Path,
                                                                tmp_path: Path) -> None:
    """Two CPU sets, the default warm start: every worker of both lanes is forked, and no
    fork server is killed between the waves (servers started from a lane's thread got
    that thread's parent-death signal when it ended, and the workers after went cold)."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    done = run_abdiff("main..pr", "--configs", write_suite(tmp_path / "s.yaml", [1]),
                      "--repo", faulty_repo, "--cache-dir", tmp_path / "cache", "--target",
                      "reference", "--rounds", 4, "--max-rounds", 4, "--devices",
                      f"{cpus[0]}:{cpus[1]}", "--prestart", "fork", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "fork server stopped" not in done.stderr, done.stderr
    line = next(ln for ln in done.stderr.splitlines() if "worker processes this run" in ln)
    workers, forked = re.search(r"(\d+) worker processes this run \((\d+) forked", line).groups()
    assert workers == forked, line
