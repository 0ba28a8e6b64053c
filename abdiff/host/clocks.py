"""GPU clocks, temperature, power and throttling, read through NVML (`nvidia-ml-py`).

A worker reads its GPU just before and just after each config's timed iterations
(`GpuSensor.read`, outside the timed region) and keeps both readings in the
round's record (`RoundRecord.clocks`). A round timed while the GPU throttled
(power cap, thermal or hardware slowdown) is marked, and the comparison says so,
and says when A and B ran at different SM clocks: a latency change is then
possibly the clock's, not the code's. `abdiff doctor` tells whether the clocks
are pinned and how to pin them. Without NVML (no NVIDIA driver, the package
missing, the CPU) nothing is read and nothing is claimed.
"""

from __future__ import annotations

import statistics
from types import MappingProxyType
from typing import Any

from abdiff.store.records import RunFile

# NVML's clocks-event (throttle) reason bits that slow a GPU under load. Idle (0x1),
# application-clock setting (0x2), sync boost (0x10) and display (0x100) are no slowdown.
SLOWDOWN_REASONS = MappingProxyType({0x4: "sw power cap", 0x8: "hw slowdown", 0x20: "sw thermal",
                                     0x40: "hw thermal", 0x80: "power brake"})
CLOCK_DIFFERENCE = 0.01  # A and B's median SM clocks this far apart get a note


class GpuSensor:
    """One GPU's NVML handle."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle

    def read(self) -> dict[str, Any]:
        """SM and memory clock (MHz), temperature (C), power (W) and active slowdowns; a
        reading NVML refuses is kept as {"error": ...}: it must not fail the config."""
        try:
            return self._read()
        except self._nvml.NVMLError as exc:
            return {"error": f"NVML: {exc}"}

    def _read(self) -> dict[str, Any]:
        nvml, handle = self._nvml, self._handle
        reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        return {
            "sm_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "temp_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            "power_w": round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, 1),
            "throttle": [name for bit, name in SLOWDOWN_REASONS.items() if reasons & bit],
        }

    def identity(self) -> dict[str, str]:
        """Driver version, UUID and clock policy, as `nvidia-smi --query-gpu=driver_version,
        uuid,clocks.applications.graphics,clocks.max.sm` says them (the same words, so runs
        recorded either way compare), without starting nvidia-smi in every worker; {} where
        NVML refuses one."""
        nvml, handle = self._nvml, self._handle
        try:
            driver, uuid = nvml.nvmlSystemGetDriverVersion(), nvml.nvmlDeviceGetUUID(handle)
            app_clock = nvml.nvmlDeviceGetApplicationsClock(handle, nvml.NVML_CLOCK_GRAPHICS)
            max_clock = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)
        except self._nvml.NVMLError:
            return {}
        return {"driver": _text(driver), "gpu_uuid": _text(uuid),
                "clock_policy": f"application clock {app_clock} MHz of max {max_clock} MHz"}

    def pinning(self) -> dict[str, int]:
        """SM clocks that show whether they are pinned: the application clock in force, its
        default, and the maximum (MHz)."""
        nvml, handle = self._nvml, self._handle
        return {"app_mhz": nvml.nvmlDeviceGetApplicationsClock(handle, nvml.NVML_CLOCK_SM),
                "default_mhz": nvml.nvmlDeviceGetDefaultApplicationsClock(handle,
                                                                          nvml.NVML_CLOCK_SM),
                "max_mhz": nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)}


def _text(value: str | bytes) -> str:
    """NVML's strings: bytes from older nvidia-ml-py releases, str from newer ones."""
    return value.decode() if isinstance(value, bytes) else value


NO_PACKAGE = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"


def open_nvml() -> tuple[Any, str | None]:
    """(pynvml, None) once NVML is initialised, or (None, why not): the package missing, or NVML
    refusing to start (no NVIDIA driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, None
    except ImportError:
        return None, NO_PACKAGE
    except Exception as exc:  # noqa: BLE001 - pynvml raises its own NVMLError classes
        return None, f"NVML: {exc}"


def open_sensor(uuid: str) -> tuple[GpuSensor | None, str | None]:
    """(sensor, None) for the GPU named `GPU-<uuid>` (by UUID: CUDA_VISIBLE_DEVICES
    renumbers devices, NVML does not), or (None, why not)."""
    nvml, why = open_nvml()
    if nvml is None:
        return None, why
    try:
        return GpuSensor(nvml, nvml.nvmlDeviceGetHandleByUUID(uuid)), None
    except nvml.NVMLError as exc:
        return None, f"NVML: {exc}"


def all_pinning() -> tuple[list[str], str | None]:
    """(one `pinning_text` line per GPU, None), or ([], why NVML cannot tell)."""
    nvml, why = open_nvml()
    if nvml is None:
        return [], why
    try:
        return [f"GPU {i}: " + pinning_text(GpuSensor(nvml, nvml.nvmlDeviceGetHandleByIndex(i))
                                            .pinning())
                for i in range(nvml.nvmlDeviceGetCount())], None
    except nvml.NVMLError as exc:
        return [], f"NVML: {exc}"


def throttled(clocks: dict[str, Any]) -> list[str]:
    """The slowdown reasons active at the start or the end of a config's timed iterations."""
    return sorted({r for reading in clocks.values() if isinstance(reading, dict)
                   for r in reading.get("throttle") or []})


def _sm_clocks(run: RunFile) -> list[float]:
    return [reading["sm_mhz"] for config in run.configs for r in config.rounds
            for reading in (r.clocks or {}).values()
            if isinstance(reading, dict) and isinstance(reading.get("sm_mhz"), int | float)]


def clock_notes(run_a: RunFile, run_b: RunFile) -> list[str]:
    """Notes for the report: rounds timed while a GPU throttled, and A and B at different
    median SM clocks. Empty where no clocks were read."""
    notes = []
    for side, run in (("A", run_a), ("B", run_b)):
        read = [throttled(r.clocks) for config in run.configs for r in config.rounds
                if r.clocks]
        hit = [why for why in read if why]
        if hit:
            total = len(read)
            reasons = sorted({reason for why in hit for reason in why})
            notes.append(f"{side}: {len(hit)} of {total} config rounds were timed while the GPU "
                         f"throttled ({', '.join(reasons)}); their latency may be the clock's")
    clocks_a, clocks_b = _sm_clocks(run_a), _sm_clocks(run_b)
    if clocks_a and clocks_b:
        median_a, median_b = statistics.median(clocks_a), statistics.median(clocks_b)
        if abs(median_b / median_a - 1) > CLOCK_DIFFERENCE:
            notes.append(f"A and B ran at different SM clocks (median A {median_a:.0f} MHz, "
                         f"B {median_b:.0f} MHz): a latency change may be the clock's; pin the "
                         "clocks (abdiff doctor says how)")
    return notes


def pinning_text(pinning: dict[str, int]) -> str:
    """What doctor says of one GPU's clocks."""
    app, default, top = pinning["app_mhz"], pinning["default_mhz"], pinning["max_mhz"]
    if app != default:
        return f"application clock pinned at {app} MHz (default {default}, max {top})"
    return (f"application clock at its default {app} MHz (max {top}): not pinned, unless "
            f"locked with nvidia-smi -lgc (NVML does not show that). For steadier rounds: "
            f"sudo nvidia-smi -lgc {top},{top} (undo: nvidia-smi -rgc)")
