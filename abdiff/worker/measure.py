"""What is measured inside the benchmark process, for every target's in-process side.

Facts come from live objects (never from logs), kernels from torch.profiler,
latencies from perf_counter_ns (CPU) or CUDA events (GPU); `environment` is the
machine fingerprint. The results travel to the parent through abdiff.run.protocol.

torch is imported inside the functions that need it.
"""

from __future__ import annotations

import enum
import inspect
import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from abdiff.run.protocol import KernelProfile

if TYPE_CHECKING:
    from abdiff.host.clocks import GpuSensor

FACT_TEXT_LIMIT = 200
# CPU operators that only make views, allocate or reshape: no compute runs, and
# they would drown the operators that tell two kernel paths apart.
NO_COMPUTE_OPS = frozenset(
    f"aten::{name}" for name in (
        "view", "_reshape_alias", "reshape", "expand", "transpose", "permute", "as_strided",
        "unsqueeze", "squeeze", "select", "slice", "t", "alias", "detach", "lift_fresh",
        "resolve_conj", "resolve_neg", "empty", "empty_strided", "empty_like", "_unsafe_view",
        "unflatten", "flatten", "contiguous", "narrow", "split", "chunk", "unbind", "to",
        "numel", "size", "stride", "is_nonzero", "item", "_local_scalar_dense", "result_type",
    )
)


def find_attn_metadata(run_pack: Callable[[], Any]) -> Any:
    """The attention metadata a run pack closes over, as upstream's runner builds it.

    Upstream's `create_run_pack` returns a closure over a local `attn_metadata`;
    reading the closure finds the live object without changing the benchmark.
    Returns None when the run pack holds none.
    """
    if hasattr(run_pack, "attn_metadata"):
        return run_pack.attn_metadata
    if inspect.isfunction(run_pack):
        return inspect.getclosurevars(run_pack).nonlocals.get("attn_metadata")
    return None


def fact_value(value: Any) -> Any:
    """A JSON value for a live attribute: shapes as lists, tensors by shape and dtype."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, list | tuple):  # torch.Size is a tuple
        return [fact_value(v) for v in value]
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return {"shape": list(value.shape), "dtype": str(value.dtype)}
    text = repr(value)
    return text if len(text) <= FACT_TEXT_LIMIT else text[: FACT_TEXT_LIMIT - 3] + "..."


def read_facts(roots: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Resolve dotted names such as `attn_metadata.kv_lens_cuda_2d.shape` on live objects.

    A name whose object or attribute does not exist records None: the TRTLLM
    metadata has no `kv_lens_cuda_2d`, and that absence is itself a fact.
    """
    facts: dict[str, Any] = {}
    for name in names:
        head, *attrs = name.split(".")
        obj = roots.get(head)
        for attr in attrs:
            if obj is None:
                break
            obj = getattr(obj, attr, None)
        facts[name] = fact_value(obj)
    return facts


# Device nodes a GPU driver makes (NVIDIA; AMD's ROCm, which torch also reaches as "cuda").
# Without one torch cannot see a GPU, so `auto` needs no torch import (1.9 s in abdiff's
# own process on the 2-core VM, docs/performance.md).
GPU_DRIVER_NODES = ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/kfd")


def asks_torch(requested: str) -> bool:
    """Whether resolving `requested` imports torch: a device named other than the CPU, or
    `auto` on a host with a GPU driver."""
    if requested == "auto":
        return any(os.path.exists(node) for node in GPU_DRIVER_NODES)
    return requested != "cpu"


def resolve_device(requested: str) -> str:
    """`auto` means CUDA where torch sees a GPU, else the CPU."""
    if not asks_torch(requested):
        return "cpu" if requested == "auto" else requested
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was requested but torch sees no CUDA device")
    return requested


@dataclass(frozen=True)
class WarmupRule:
    """Warm up until the last `agreeing` batches' per-call times agree within `tolerance`.

    A GPU idles at a low clock and needs tens of milliseconds of steady load to
    reach its boost clock; caches and allocators settle within a few calls. A
    fixed wall time (0.3 s per config before) pays the worst case every time;
    this rule stops when the work has stopped getting faster, and `cap_s` bounds
    it where it never settles (a noisy neighbour).
    """

    tolerance: float  # max/min of the agreeing batches' per-call times, minus 1
    agreeing: int  # consecutive batches that must agree
    batch_s: float  # wall time one batch aims at
    cap_s: float  # stop here even when the batches never agreed


# GPU: replays of one config agree within 0.1-0.8% between rounds once warm
# (docs/performance.md), so 1% over three ~10 ms batches says the clock has
# settled; the cap is the fixed warm-up the H200 runs used before.
GPU_WARMUP = WarmupRule(tolerance=0.01, agreeing=3, batch_s=0.01, cap_s=0.3)
# CPU: a longer warm-up did not lower the 2-core machine's round-to-round
# variation (docs/performance.md), so the CPU rule only checks that the first
# calls' allocations are done: two batches within 10% (the 2-core machine's calls vary
# more than 5%, which took a config 3 to 23 calls to agree, one in ten to the cap), capped
# short.
CPU_WARMUP = WarmupRule(tolerance=0.10, agreeing=2, batch_s=0.005, cap_s=0.05)


# GPU, once an earlier config of the process has brought the clock up: only the config's
# own first calls (allocations, caches) are left to settle; the batches still have to agree
GPU_WARM_WARMUP = WarmupRule(tolerance=0.01, agreeing=2, batch_s=0.005, cap_s=0.3)


def warmup_rule(device: str, clock_up: bool = False) -> WarmupRule:
    """The warm-up of a config on `device`; `clock_up`: a config was timed just before in
    this process."""
    if device != "cuda":
        return CPU_WARMUP
    return GPU_WARM_WARMUP if clock_up else GPU_WARMUP


def settled(per_call_s: list[float], rule: WarmupRule) -> bool:
    """True when the last `rule.agreeing` batches' per-call times agree within the tolerance."""
    if len(per_call_s) < rule.agreeing:
        return False
    last = per_call_s[-rule.agreeing:]
    return max(last) <= min(last) * (1.0 + rule.tolerance)


@dataclass
class Warmup:
    """What a warm-up took: recorded with each round (`RoundRecord.warmup`)."""

    calls: int
    seconds: float
    settled: bool  # False: stopped at the cap with batches still disagreeing
    batches: int


def warm_up(
    step: Callable[[], Any], count: int, rule: WarmupRule, sync: Callable[[], Any]
) -> Warmup:
    """At least `count` calls, each timed alone, then batches of calls until the last
    batches agree (`settled`) or `rule.cap_s` has passed.

    Each batch ends with `sync`, so its time measures executed work; after the
    first `count` calls a batch is sized from the previous one to last about
    `rule.batch_s`. Work that is steady from the start stops after `count` calls.
    """
    start = time.perf_counter()
    per_call: list[float] = []
    calls = 0
    size = 1
    while True:
        batch_start = time.perf_counter()
        for _ in range(size):
            step()
        sync()
        took = time.perf_counter() - batch_start
        calls += size
        per_call.append(took / size)
        if calls >= count:
            done = settled(per_call, rule)
            if done or time.perf_counter() - start >= rule.cap_s:
                return Warmup(calls, time.perf_counter() - start, done, len(per_call))
            size = max(1, min(1000, math.ceil(rule.batch_s / max(per_call[-1], 1e-9))))


@dataclass
class Timed:
    """One config's timed iterations and how it was warmed up."""

    latency_us: list[float]
    warmup: Warmup
    timing: str  # "graph replay" or "eager"
    clocks: dict[str, Any] = field(default_factory=dict)  # {"start", "end"} sensor readings
    # with `name_kernels`: what the timed graph launches (graph_kernels.py); None: not named
    kernels: KernelProfile | None = None

    def warmup_json(self) -> dict[str, Any]:
        return {**asdict(self.warmup), "seconds": round(self.warmup.seconds, 4)}


def device_sync(device: str) -> Callable[[], Any]:
    """What waits for the work a call queued on `device`: torch.cuda.synchronize on a GPU,
    nothing on the CPU (its calls return when done)."""
    if device != "cuda":
        return lambda: None
    import torch

    return torch.cuda.synchronize


def timing_kind(device: str, cuda_graph: bool) -> str:
    """What is timed: CUDA graph replays where asked for and possible, else eager calls."""
    return "graph replay" if device == "cuda" and cuda_graph else "eager"


def time_iterations(
    fn: Callable[[], Any], warmup: int, runs: int, device: str, cuda_graph: bool = True,
    rule: WarmupRule | None = None, sensor: Callable[[], dict[str, Any]] | None = None,
    name_kernels: bool = False,
) -> Timed:
    """Per-iteration latency in microseconds after the warm-up (`warm_up`).

    CPU: perf_counter_ns around each call. CUDA: an event pair around each call,
    read after one synchronize at the end, so timing does not serialize the
    stream. With `cuda_graph` on CUDA, the run pack is captured once and replays
    are timed, as upstream's run.py does with use_cuda_graph: eager steps of a few
    hundred microseconds time the host's kernel launches instead of the GPU.
    `sensor` (CUDA) is read just before the first timed call and after the last one
    has finished (abdiff/host/clocks.py): `Timed.clocks`. `name_kernels` (graph replays):
    the graph's kernels, read from its nodes after the timed replays (`Timed.kernels`).
    """
    rule = rule or warmup_rule(device)
    if device != "cuda":
        warmed = warm_up(fn, warmup, rule, device_sync(device))
        out = []
        for _ in range(runs):
            started_ns = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - started_ns) / 1000.0)
        return Timed(out, warmed, "eager")
    import torch

    step = fn
    graph = None
    if cuda_graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(warmup, 1)):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        # kept, not only instantiated, where its nodes are to be named after the timing (a
        # torch before `keep_graph` cannot: its kernels are captured by the profiler)
        name_kernels = name_kernels and "keep_graph" in inspect.signature(
            torch.cuda.CUDAGraph.__new__).parameters
        graph = torch.cuda.CUDAGraph(keep_graph=True) if name_kernels else torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        if name_kernels:
            graph.instantiate()
        step = graph.replay
    warmed = warm_up(step, warmup, rule, device_sync(device))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(runs)]
    clocks = {"start": sensor()} if sensor else {}
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    if sensor:
        clocks["end"] = sensor()
    kernels = None
    if graph is not None and name_kernels:
        from abdiff.worker.graph_kernels import graph_kernel_profile

        kernels = graph_kernel_profile(graph.raw_cuda_graph())
    return Timed([start.elapsed_time(end) * 1000.0 for start, end in events], warmed,
                 timing_kind(device, cuda_graph), clocks, kernels)


def profile_kernels(fn: Callable[[], Any], device: str) -> KernelProfile:
    """Names, counts and total times of what one call ran: CUDA kernels on a GPU (each
    kernel's device time, from CUPTI), operators on the CPU (each one's self time, so
    that nested operators are not counted twice).

    On the CPU, operators that only make views or allocate are left out
    (NO_COMPUTE_OPS), and the profiler is torch's own operator profiler
    (`use_kineto=False`): it records the same operators, counts and self times,
    without Kineto's start (1.3-1.4 s per worker process on the 2-core machine).
    One extra call under the profiler. Workers call it in a capture pass after
    every config of the round has been timed, so neither the profiler nor CUPTI's
    start (4.4 s on an H200) comes before or between timed iterations.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device == "cuda"
    if on_gpu:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        events = prof.events()
    else:
        with torch.autograd.profiler.profile(use_kineto=False) as prof:
            fn()
        events = prof.function_events
    counts: Counter[str] = Counter()
    us: dict[str, float] = {}
    for event in events:
        is_kernel = event.device_type == torch.autograd.DeviceType.CUDA
        if is_kernel == on_gpu and (on_gpu or event.name not in NO_COMPUTE_OPS):
            counts[event.name] += 1
            spent = event.time_range.elapsed_us() if on_gpu else event.self_cpu_time_total
            us[event.name] = us.get(event.name, 0.0) + max(float(spent), 0.0)
    return KernelProfile(dict(sorted(counts.items())),
                         {name: round(us[name], 3) for name in sorted(us)})


def cpu_model() -> str:
    """The host CPU's model name (Linux /proc/cpuinfo; the platform string elsewhere)."""
    import platform

    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def gpu_identity(gpu: str) -> dict[str, str]:
    """Driver version, UUID and clock policy of one GPU (`GPU-<uuid>` or an nvidia-smi index)
    from nvidia-smi, where it exists: the clock policy is the application clock against the
    maximum (equal values with `nvidia-smi -lgc`/`-ac` set mean locked clocks)."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    query = "driver_version,uuid,clocks.applications.graphics,clocks.max.sm"
    done = subprocess.run([smi, f"--query-gpu={query}", "--format=csv,noheader,nounits",
                           f"--id={gpu}"], capture_output=True, text=True, timeout=30,
                          check=False)
    fields = [f.strip() for f in done.stdout.strip().split(",")]
    if done.returncode != 0 or len(fields) != 4:
        return {}
    driver, uuid, app_clock, max_clock = fields
    return {"driver": driver, "gpu_uuid": uuid,
            "clock_policy": f"application clock {app_clock} MHz of max {max_clock} MHz"}


def gpu_sensor(device: str) -> tuple[GpuSensor | None, dict[str, Any]]:
    """The clock sensor of torch's current GPU (clocks.GpuSensor, or None) and the env
    entry saying whether it reads: {"clocks": "NVML"} or why not; (None, {}) off CUDA."""
    if device != "cuda":
        return None, {}
    from abdiff.host.clocks import open_sensor

    sensor, why = open_sensor(current_gpu_uuid())
    return sensor, {"clocks": "NVML" if sensor else why}


def current_gpu_uuid() -> str:
    """`GPU-<uuid>` of torch's current CUDA device: how nvidia-smi and NVML name it."""
    import torch

    return f"GPU-{torch.cuda.get_device_properties(torch.cuda.current_device()).uuid}"


def environment(device: str, sensor: GpuSensor | None = None) -> dict[str, Any]:
    """The machine a round ran on: the environment fingerprint of run files and baselines.
    `sensor` (gpu_sensor's): the GPU's driver and clock policy read through it, else from
    nvidia-smi (a process of its own, in every worker)."""
    import platform

    import torch

    from abdiff.launchers.process import kernel_selecting_environment

    env: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "host": platform.node(),
        "kernel_env": kernel_selecting_environment(os.environ),
    }
    if device == "cuda":
        env.update(
            device_name=torch.cuda.get_device_name(),
            device_count=torch.cuda.device_count(),
            cuda=torch.version.cuda,
            # by UUID: CUDA_VISIBLE_DEVICES renumbers torch's devices, not nvidia-smi's
            **((sensor.identity() if sensor is not None else {})
               or gpu_identity(current_gpu_uuid())),
        )
    return env
