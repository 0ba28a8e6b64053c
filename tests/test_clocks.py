"""clocks.py: NVML readings around the timed iterations, the notes a comparison makes of
them, and what doctor says of the clocks. Run files recorded on an H200 (tests/data/h200/)
give the real readings; the CPU machine has no NVML, and that path is real too."""

from __future__ import annotations

import copy
from pathlib import Path

from abdiff.host.clocks import GpuSensor, clock_notes, open_sensor, pinning_text, throttled
from abdiff.host.doctor import Machine, machine_checks
from abdiff.store.records import ConfigRuns, RoundRecord, RunFile, load_run_file
from abdiff.targets import target_class

H200 = Path(__file__).parent / "data" / "h200"
STEADY = {"sm_mhz": 1980, "mem_mhz": 3201, "temp_c": 38, "power_w": 121.4, "throttle": []}


def run(readings: list[dict]) -> RunFile:
    rounds = [RoundRecord("ok", latency_us=[40.0], round=i,
                          clocks={"start": reading, "end": reading})
              for i, reading in enumerate(readings)]
    return RunFile("pr", "a" * 40, "reference", "mtp", {"device": "cuda"},
                   [ConfigRuns("GEN-TRTLLM-bs8-q1-kv2049", {}, rounds)])


def test_steady_clocks_on_both_sides_say_nothing() -> None:
    assert clock_notes(run([STEADY] * 5), run([STEADY] * 5)) == []
    cpu = RunFile("pr", "a" * 40, "reference", "mtp", {"device": "cpu"},
                  [ConfigRuns("c", {}, [RoundRecord("ok", latency_us=[1.0])])])
    assert clock_notes(cpu, cpu) == []  # nothing read, nothing claimed


def test_throttled_rounds_and_different_clocks_are_noted() -> None:
    hot = {**STEADY, "sm_mhz": 1755, "temp_c": 86, "throttle": ["sw thermal"]}
    assert throttled({"start": STEADY, "end": hot}) == ["sw thermal"]
    notes = clock_notes(run([STEADY] * 5), run([hot] * 3 + [STEADY] * 2))
    assert notes[0] == ("B: 3 of 5 config rounds were timed while the GPU throttled "
                        "(sw thermal); their latency may be the clock's")
    assert notes[1].startswith("A and B ran at different SM clocks (median A 1980 MHz, "
                               "B 1755 MHz)")


def test_a_clock_one_percent_apart_is_no_difference() -> None:
    near = copy.deepcopy(STEADY) | {"sm_mhz": 1965}
    assert clock_notes(run([STEADY] * 5), run([near] * 5)) == []


def test_without_nvml_nothing_is_read_and_the_reason_is_kept() -> None:
    sensor, why = open_sensor("GPU-00000000-0000-0000-0000-000000000000")
    assert sensor is None and why  # no NVML on this machine: the package or the driver


def test_doctor_says_whether_clocks_are_pinned_and_how() -> None:
    assert pinning_text({"app_mhz": 1980, "default_mhz": 1755, "max_mhz": 1980}) == \
        "application clock pinned at 1980 MHz (default 1755, max 1980)"
    free = pinning_text({"app_mhz": 1755, "default_mhz": 1755, "max_mhz": 1980})
    assert "not pinned" in free and "sudo nvidia-smi -lgc 1980,1980" in free
    machine = Machine(gpus=lambda: ["GPU 0: NVIDIA H200"], clocks=lambda: (["GPU 0: " + free],
                                                                           None))
    checks = {c.name: c for c in machine_checks([target_class("reference")], machine)}
    assert checks["GPU clocks"].present and "nvidia-smi -lgc" in checks["GPU clocks"].detail
    blind = Machine(gpus=lambda: ["GPU 0: NVIDIA H200"], clocks=lambda: ([], "NVML: no driver"))
    checks = {c.name: c for c in machine_checks([target_class("reference")], blind)}
    assert not checks["GPU clocks"].present and checks["GPU clocks"].detail == "NVML: no driver"
    no_gpu = Machine(gpus=lambda: [])
    assert "GPU clocks" not in {c.name for c in machine_checks([target_class("reference")],
                                                               no_gpu)}


def test_recorded_h200_rounds_carry_readings_and_raise_no_note() -> None:
    run_a, run_b = (load_run_file(H200 / f"pr..pr-slow-{side}.json") for side in "ab")
    assert run_b.env["clocks"] == "NVML"
    readings = [r.clocks for c in run_b.configs for r in c.rounds if r.status == "ok"]
    assert readings and all(set(r) == {"start", "end"} for r in readings)
    assert {r["start"]["sm_mhz"] for r in readings} == {1980}  # boost clock, never throttled
    assert clock_notes(run_a, run_b) == []
    # the same rounds with B's GPU held at a lower clock by its power cap
    for config in run_b.configs:
        for record in config.rounds:
            for reading in record.clocks.values():
                reading.update(sm_mhz=1650, throttle=["sw power cap"])
    notes = clock_notes(run_a, run_b)
    assert len(notes) == 2 and "throttled (sw power cap)" in notes[0]
    assert "median A 1980 MHz, B 1650 MHz" in notes[1]


class RefusingNvml:
    """NVML's interface where the driver refuses a query (no NVML here to refuse for real)."""

    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object) -> int:  # noqa: N802
        raise self.NVMLError("Not Supported")

    def nvmlSystemGetDriverVersion(self) -> bytes:  # noqa: N802
        raise self.NVMLError("Not Supported")


def test_a_refused_reading_is_kept_and_does_not_fail_the_config() -> None:
    reading = GpuSensor(RefusingNvml(), handle=None).read()
    assert reading == {"error": "NVML: Not Supported"}
    assert throttled({"start": reading, "end": reading}) == []
    refused = run([reading] * 3)
    assert clock_notes(refused, refused) == []  # no numbers, no claim


class AnsweringNvml(RefusingNvml):
    """NVML's answers as nvidia-ml-py gives them (bytes in older releases)."""

    NVML_CLOCK_GRAPHICS = 0

    def nvmlSystemGetDriverVersion(self) -> bytes:  # noqa: N802
        return b"580.159.04"

    def nvmlDeviceGetUUID(self, handle: object) -> str:  # noqa: N802
        return "GPU-87b0482f-151b-e54c-2146-22b683d6ea8f"

    def nvmlDeviceGetApplicationsClock(self, handle: object, clock: int) -> int:  # noqa: N802
        assert clock == self.NVML_CLOCK_GRAPHICS  # nvidia-smi's clocks.applications.graphics
        return 1755

    def nvmlDeviceGetMaxClockInfo(self, handle: object, clock: int) -> int:  # noqa: N802
        assert clock == self.NVML_CLOCK_SM
        return 1980


def test_the_identity_has_nvidia_smis_words() -> None:
    assert GpuSensor(AnsweringNvml(), handle=None).identity() == {
        "driver": "580.159.04", "gpu_uuid": "GPU-87b0482f-151b-e54c-2146-22b683d6ea8f",
        "clock_policy": "application clock 1755 MHz of max 1980 MHz"}


def test_a_refused_identity_is_empty() -> None:
    assert GpuSensor(RefusingNvml(), handle=None).identity() == {}
