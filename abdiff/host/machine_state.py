"""The machine's state before measuring (pyperf's `system show`, read-only): what would
make round times vary. Printed before the rounds start, recorded in the run files
(`env.machine`), and named in the verdict when latencies stayed undecided.

Each reading is tri-state: `ok` True (suits benchmarks), False (likely noise, with
advice), None (unknown here). abdiff changes nothing on the machine.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from abdiff.host import procfs
from abdiff.host.clocks import open_nvml, throttled

BUSY_SHARE = 0.3  # another process using this much of a core while abdiff waits is busy
SAMPLE_S = 0.3  # how long process CPU use is sampled
HOT_C = 85  # GPU temperature at which clocks come down


@dataclass(frozen=True)
class Reading:
    """One check: what it read, whether that suits benchmarks, what to do if not."""

    name: str
    value: str
    ok: bool | None
    advice: str | None = None

    def line(self) -> str:
        mark = {True: "ok", False: "NOISY", None: "?"}[self.ok]
        advice = f" ({self.advice})" if self.advice and self.ok is False else ""
        return f"{self.name}: {self.value} [{mark}]{advice}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpu_times() -> dict[int, tuple[str, int, int]]:
    """pid -> (command name, parent pid, utime + stime in clock ticks) of every readable
    process."""
    times = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = procfs.read_stat(entry.name)
        try:
            if stat:
                times[int(entry.name)] = (stat.name, stat.parent, stat.cpu_ticks)
        except (IndexError, ValueError):
            continue
    return times


def _ours(processes: dict[int, tuple[str, int, int]]) -> set[int]:
    """abdiff's own process, its parent and its descendants (the fork server importing
    torch is busy by design)."""
    table: dict[int, list[int]] = {}
    for pid, (_, parent, _) in processes.items():
        table.setdefault(parent, []).append(pid)
    return {os.getppid(), *procfs.below([os.getpid()], table)}


@dataclass(frozen=True)
class CpuSample:
    """The first half of sampling other processes' CPU use (`start_sample`): the second
    half (`other_processes`) may come once the run's own set-up has filled the window."""

    started: float  # time.monotonic()
    before: dict[int, tuple[str, int, int]]  # _cpu_times()


def start_sample() -> CpuSample:
    return CpuSample(time.monotonic(), _cpu_times())


def other_processes(sample: CpuSample | None = None,
                    sample_s: float = SAMPLE_S) -> list[tuple[int, str, float]]:
    """(pid, name, share of one core) of every process outside abdiff's own tree that used
    the CPU since `sample` started (now, when None), over at least `sample_s`, busiest
    first."""
    sample = sample or start_sample()
    time.sleep(max(0.0, sample_s - (time.monotonic() - sample.started)))
    after = _cpu_times()
    window = time.monotonic() - sample.started
    tick = os.sysconf("SC_CLK_TCK")
    ours = _ours(after)
    used = []
    for pid, (name, _, ticks) in after.items():
        if pid in ours or pid not in sample.before:
            continue
        share = (ticks - sample.before[pid][2]) / tick / window
        if share > 0:
            used.append((pid, name, share))
    return sorted(used, key=lambda b: -b[2])


def cpu_readings(others: list[tuple[int, str, float]]) -> list[Reading]:
    """The load is what other processes used while sampled: the 1-min load average (shown
    beside it) also counts abdiff's own workers of a run that just ended and its fork
    server importing torch, which would name the machine noisy for abdiff's own work."""
    cores = os.cpu_count() or 1
    load = sum(share for _, _, share in others)
    readings = [Reading("CPU load", f"{load:.1f} of {cores} cores in other processes; 1-min "
                        f"load average {os.getloadavg()[0]:.1f}", load < 0.5 * cores,
                        "other work shares the cores; measure on an idle machine")]
    busy = [(pid, name, share) for pid, name, share in others if share >= BUSY_SHARE]
    listed = ", ".join(f"{name} (pid {pid}) {share:.0%}" for pid, name, share in busy[:3])
    readings.append(Reading("busy processes", listed or "none", not busy,
                            "stop them or measure elsewhere"))
    governors = {g for g in (_read(p) for p in
                             Path("/sys/devices/system/cpu").glob("cpu*/cpufreq/scaling_governor"))
                 if g}
    readings.append(Reading("CPU governor", ", ".join(sorted(governors)) or "unknown",
                            governors == {"performance"} if governors else None,
                            "the performance governor keeps clocks steady"))
    no_turbo = _read(Path("/sys/devices/system/cpu/intel_pstate/no_turbo"))
    boost = _read(Path("/sys/devices/system/cpu/cpufreq/boost"))
    turbo = {"0": "on", "1": "off"}.get(no_turbo or "") or {"1": "on", "0": "off"}.get(boost or "")
    readings.append(Reading("turbo", turbo or "unknown", None if turbo is None else turbo == "off",
                            "turbo makes clocks follow temperature"))
    return readings


def gpu_readings() -> list[Reading]:
    """Clocks, throttling, temperature and other processes of each GPU (NVML)."""
    nvml, why = open_nvml()
    if nvml is None:
        return [Reading("GPU", why or "NVML unavailable", None)]
    readings = []
    try:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            sm = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
            top = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)
            reasons = throttled({"throttle": nvml.nvmlDeviceGetCurrentClocksThrottleReasons(
                handle)})
            temperature = nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
            others = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            readings += [
                Reading(f"GPU {index} SM clock", f"{sm} of {top} MHz", None),
                Reading(f"GPU {index} throttling", ", ".join(reasons) or "none", not reasons,
                        "the GPU is slowing itself down"),
                Reading(f"GPU {index} temperature", f"{temperature} C", temperature < HOT_C,
                        "a hot GPU lowers its clocks"),
                Reading(f"GPU {index} other processes", str(len(others)), not others,
                        "another job shares the GPU"),
            ]
    except nvml.NVMLError as exc:
        readings.append(Reading("GPU", f"NVML: {exc}", None))
    return readings


def read_machine(device: str, sample: CpuSample | None = None) -> list[Reading]:
    """The readings for measuring on `device` ("cpu" or "cuda"); other processes' CPU use
    since `sample` started (a window of its own, when None)."""
    readings = cpu_readings(other_processes(sample))
    return readings + gpu_readings() if device == "cuda" else readings


def noisy(readings: list[Reading]) -> list[Reading]:
    return [r for r in readings if r.ok is False]


def summary_line(readings: list[Reading]) -> str:
    """One line for stderr before the rounds: the noisy readings first."""
    shown = noisy(readings) or readings[:1]
    return "machine: " + "; ".join(r.line() for r in shown)


def to_json(readings: list[Reading]) -> list[dict[str, Any]]:
    return [asdict(r) for r in readings]


def recorded_noise(env: dict[str, Any]) -> list[str]:
    """The noisy readings a run file recorded (`env.machine`), as `name: value` texts."""
    entries = env.get("machine")
    if not isinstance(entries, list):
        return []
    return [f"{e.get('name')}: {e.get('value')}" for e in entries
            if isinstance(e, dict) and e.get("ok") is False]
