"""machine_state.py: the machine read before measuring, recorded, and named in the verdict."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
from test_compare import suite_run

from abdiff.host import machine_state
from abdiff.host.machine_state import Reading
from abdiff.reports import common
from abdiff.verdict.compare import compare_runs

CHECKER = """
import json, subprocess, sys, time
from abdiff.host import machine_state
own = subprocess.Popen([sys.executable, "-c", "while True: pass"])
try:
    sample = machine_state.start_sample()  # as abdiff: its own set-up fills the window
    time.sleep(0.5)
    others = machine_state.other_processes(sample, sample_s=0.3)
    readings = machine_state.cpu_readings(others)
    print(json.dumps({"own": own.pid, "others": others,
                      "readings": machine_state.to_json(readings),
                      "summary": machine_state.summary_line(readings)}))
finally:
    own.kill()
"""


def test_a_busy_process_is_seen_by_its_pid_and_our_own_are_not() -> None:
    """The check runs as abdiff does, in a process of its own (pytest may have become a
    subreaper of its tests' processes): a spinner that is pytest's is another process's
    work to it; the spinner the checker started is its own. On a machine busy with other
    work the spinner may get less than BUSY_SHARE of a core, or not be among the three
    busiest: what is listed is checked against what was sampled, not against a quiet
    machine's numbers."""
    foreign = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        done = subprocess.run([sys.executable, "-c", CHECKER], capture_output=True, text=True,
                              check=True, timeout=120)
    finally:
        foreign.kill()
        foreign.wait()
    seen = json.loads(done.stdout)
    pids = [pid for pid, _, _ in seen["others"]]
    assert foreign.pid in pids and seen["own"] not in pids
    readings = seen["readings"]
    assert [r["name"] for r in readings] == ["CPU load", "busy processes", "CPU governor",
                                             "turbo"]
    busy = [(pid, share) for pid, _, share in seen["others"]
            if share >= machine_state.BUSY_SHARE]
    assert readings[1]["ok"] is (not busy)
    assert all(f"pid {pid}" in readings[1]["value"] for pid, _ in busy[:3])
    # the load is the others' shares summed: the foreign spinner's core is in it, the
    # checker's own spinner's is not
    used = float(readings[0]["value"].split()[0])
    assert abs(used - sum(share for _, _, share in seen["others"])) <= 0.05, readings[0]["value"]
    assert ("NOISY" in seen["summary"]) == any(r["ok"] is False for r in readings)


def test_without_nvml_the_gpu_is_unknown_not_a_failure() -> None:
    if importlib.util.find_spec("pynvml") is not None:
        pytest.skip("NVML is installed: the readings are the GPU's")
    readings = machine_state.read_machine("cuda")
    assert [r.name for r in readings][-1] == "GPU"
    assert readings[-1].ok is None and "nvidia-ml-py is not installed" in readings[-1].value
    assert "GPU" not in [r.name for r in machine_state.read_machine("cpu")]


def test_a_noisy_machine_is_named_in_the_notes_and_the_next_step() -> None:
    a, b = suite_run(1), suite_run(2)
    rng = np.random.default_rng(3)
    for run in (a, b):  # every round 10% off at random: latency undecidable
        for c in run.configs:
            for record in c.rounds:
                factor = float(np.exp(rng.normal(0, 0.1)))
                record.latency_us = [x * factor for x in record.latency_us]
    noisy = [Reading("CPU load", "3.2 on 2 cores", False, "measure on an idle machine"),
             Reading("turbo", "unknown", None)]
    b.env["machine"] = machine_state.to_json(noisy)
    result = compare_runs(a, b, {})
    assert result.summary["machine"] == ["CPU load: 3.2 on 2 cores"]
    assert any(n.startswith("the machine was noisy while measuring (CPU load: 3.2 on 2 cores)"
                            "; status, facts and kernels are checked all the same, latency "
                            "only where the noise let it be decided")
               for n in result.notes)
    assert "the machine was noisy (CPU load: 3.2 on 2 cores): measure on an idle machine" in \
        (common.next_step(result) or "")
    slower = suite_run(4, factor=1.5)  # a real 50% change on a noisy machine still gates
    slower.env["machine"] = b.env["machine"]
    shown = compare_runs(suite_run(3), slower, {})
    assert shown.configs[0].verdict == "unintended" and shown.summary["exit_code"] == 1
    b.env.pop("machine")
    assert "machine" not in compare_runs(a, b, {}).summary
