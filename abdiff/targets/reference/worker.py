"""The reference target's worker, run inside a checkout:
`python -m abdiff.targets.reference.worker JOB.json`.

It imports the harness of the checkout it was started in (the working folder is
first on sys.path), runs every config of the job in this one process, and
appends one record per config to the record log. A Python exception fails only
its config; an abort or a hang kills the process, and the launcher restarts a
worker for the configs that are left.

Under a multi-rank launcher (`job.ranks` > 1) every rank runs this module: it
joins the others through torch.distributed (gloo on the CPU, NCCL on CUDA),
builds the harness's tensor-parallel Runner (`tp_size`, `tp_rank`) and writes
its own record log (protocol.rank_record_path). Every rank times the configs in
the same seeded order and warms up by call count only, so their collective calls
line up.

Two passes: first every config is set up and timed, in an order shuffled with the
job's seed (so a position in the process, the first config's cold caches or the
last one's, cannot line up with one config); then, in kernel rounds, each one's
kernels are captured. Nothing of the profiler runs before or between timed
iterations.
"""

from __future__ import annotations

import hashlib
import os
import resource
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from abdiff.errors import exception_line
from abdiff.host.clocks import GpuSensor
from abdiff.launchers.guard import arm_parent_death
from abdiff.run.protocol import (
    KernelProfile,
    RecordWriter,
    RoundJob,
    rank_from_env,
    rank_record_path,
    redirect_rank_stderr,
)
from abdiff.store.files import path_under_root
from abdiff.store.records import RoundRecord
from abdiff.targets.reference.target import HARNESS_PACKAGE, RUNNER_MODULE
from abdiff.worker.measure import (
    WarmupRule,
    device_sync,
    environment,
    find_attn_metadata,
    gpu_sensor,
    profile_kernels,
    read_facts,
    resolve_device,
    time_iterations,
    timing_kind,
    warm_up,
    warmup_rule,
)


def _import_runner(checkout: Path) -> type:
    """The checkout's own Runner; refuses one imported from anywhere else."""
    import importlib

    sys.path.insert(0, str(checkout))
    package = importlib.import_module(HARNESS_PACKAGE)
    if package.__file__ is None:  # a namespace package: no __init__.py in the checkout
        raise RuntimeError(f"{HARNESS_PACKAGE} was imported as a namespace package, not from "
                           f"{checkout}")
    origin = Path(package.__file__).resolve()
    if not path_under_root(origin, checkout):
        raise RuntimeError(f"{HARNESS_PACKAGE} was imported from {origin}, not from {checkout}")
    return importlib.import_module(RUNNER_MODULE).Runner


# several ranks: exactly the suite's warm-up calls (no time-based batches, see run_config)
COUNT_ONLY_WARMUP = WarmupRule(tolerance=0.0, agreeing=1, batch_s=0.0, cap_s=0.0)
RENDEZVOUS_FILE = "rendezvous"  # torch.distributed's FileStore beside the record log


def join_ranks(job: RoundJob, device: str, rank: int, local_rank: int) -> None:
    """Join the launch's other ranks: torchrun's MASTER_ADDR/PORT when set, else a file
    store in the job's folder (which every rank reads: ABDIFF_RANK_PATHS on Slurm)."""
    import torch
    import torch.distributed as dist

    if device == "cuda":
        torch.cuda.set_device(local_rank)
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        init = "env://"
    else:
        init = (Path(job.record_path).parent / RENDEZVOUS_FILE).as_uri()
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=init,
                            rank=rank, world_size=job.ranks)


def create_run_pack(runner_cls: type, params: dict, device: str,
                    tensor_parallel: dict[str, Any]) -> Callable[[], Any]:
    runner = runner_cls(params["backend"], device=device, **tensor_parallel)
    return runner.create_run_pack(
        params["run_type"],
        batch_size=params["batch_size"],
        seq_len_q=params["seq_len_q"],
        seq_len_kv_cache=params["seq_len_kv_cache"],
    )


def run_config(
    run_pack: Callable[[], Any], config_id: str, job: RoundJob, device: str,
    writer: RecordWriter, sensor: GpuSensor | None = None, run_times: int | None = None,
    clock_up: bool = False,
) -> tuple[RoundRecord, KernelProfile | None]:
    """Read facts from the prepared run pack, warm it up and time its `run_times` iterations
    (None: the job's; with the GPU's clocks read just before and after them, where there is
    a `sensor`). `clock_up`: a config was timed just before in this process. With the
    record, the timed graph's kernels where the job names kernels from graphs (else None)."""
    run_times = job.run_times if run_times is None else run_times
    facts = read_facts({"attn_metadata": find_attn_metadata(run_pack)}, job.facts)
    writer.facts(config_id, facts)
    # with several ranks every call is a collective: a warm-up by time would let ranks
    # disagree on how many calls they make, and the one that makes more would wait forever
    rule = COUNT_ONLY_WARMUP if job.ranks > 1 else warmup_rule(device, clock_up)
    timed = time_iterations(run_pack, job.warmup_times, run_times, device, job.cuda_graph,
                            rule, sensor.read if sensor else None,
                            name_kernels=job.profile_kernels)
    return RoundRecord("ok", None, timed.latency_us, facts, round=job.round,
                       warmup=timed.warmup_json(), clocks=timed.clocks), timed.kernels


def shuffled(configs: list[dict], seed: int | None) -> list[dict]:
    """The configs in the order a worker with this seed times them (None: as given): those
    the other side pairs first, then those marked `last` (RoundJob.configs), each group
    in an order drawn from the seed config by config (a hash of the seed and the id), so
    two workers of one seed time the configs they share in the same order, whatever
    else either has: where both pair the same configs (the others come last) those sit
    at the same positions on both sides (a worker restarted after a crash starts them
    again from the first position, with a seed of its own)."""
    groups = [c for c in configs if not c.get("last")], [c for c in configs if c.get("last")]
    if seed is None:
        return groups[0] + groups[1]
    return [config for group in groups for config in sorted(group, key=partial(_draw, seed))]


def _draw(seed: int, config: dict) -> bytes:
    return hashlib.sha256(f"{seed}:{config['id']}".encode()).digest()


def failure_reason(exc: BaseException) -> str:
    """One line for a config's exception: `Type: last line of the message`.

    A MemoryError says nothing by itself; it names the address-space limit
    (`--max-memory`) it ran into, where there is one.
    """
    line = exception_line(exc)
    if isinstance(exc, MemoryError):
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        limit = ("no address-space limit" if soft == resource.RLIM_INFINITY
                 else f"address-space limit {soft / 2**20:.0f} MiB, --max-memory")
        line += f" (out of memory; {limit})"
    return line


def capture_pass(
    runner_cls: type, timed: dict[str, tuple[Callable[[], Any], KernelProfile | None]],
    job: RoundJob, device: str, writer: RecordWriter, tensor_parallel: dict[str, Any],
) -> None:
    """Kernels of every config timed here: those its timed graph named, with the profiler's
    times where the job wants them (`kernel_times`), else the profiler's; then of those an
    earlier worker timed but could not capture (it died first, or it named them from a
    graph and their times are wanted), each from a fresh run pack warmed up by the job's
    warm-up calls first, so that no first call's set-up is what is timed. A failed capture
    leaves that config without kernels."""
    packs: list[tuple[str, Callable[[], Any] | None, KernelProfile | None]] = [
        (config_id, run_pack, named) for config_id, (run_pack, named) in timed.items()]
    packs += [(config["id"], None, None) for config in job.capture_only]
    params = {config["id"]: config["params"] for config in job.capture_only}
    for config_id, run_pack, named in packs:
        if named is not None and not job.kernel_times:
            writer.kernels(config_id, named)
            continue
        try:
            if run_pack is None:
                run_pack = create_run_pack(runner_cls, params[config_id], device, tensor_parallel)
                warm_up(run_pack, job.warmup_times, warmup_rule(device), device_sync(device))
            profile = profile_kernels(run_pack, device)
            # the timed graph's names and counts, so that a kept side's kernel set is read
            # as a compared side's is
            writer.kernels(config_id, profile if named is None
                           else KernelProfile(named.counts, profile.us))
        except Exception:  # noqa: BLE001 - the config was timed; only its kernels are missing
            traceback.print_exc()


def main(job_path: str) -> int:
    job = RoundJob.read(Path(job_path))
    device = resolve_device(job.device)
    if device == "cpu":
        # OpenMP spin-barriers across all cores turn any neighbouring load into
        # 10x outliers on a small machine; one thread keeps rounds comparable.
        import torch

        torch.set_num_threads(job.cpu_threads)
    # The record log is created once the worker's own set-up (job, torch, device) has
    # worked: a worker that dies before leaves none, and the launcher reports that
    # abdiff could not start it, instead of blaming every config of the benchmark.
    # torchrun starts each rank in a session of its own, out of reach of the process
    # group abdiff ends on a timeout: a rank must not outlive its launcher
    if job.ranks > 1 and not arm_parent_death(os.getppid()):
        sys.exit(1)
    rank, local_rank = rank_from_env() if job.ranks > 1 else (0, 0)
    tensor_parallel: dict[str, Any] = {}
    if job.ranks > 1:
        redirect_rank_stderr(job.record_path, rank)
        join_ranks(job, device, rank, local_rank)
        tensor_parallel = {"tp_size": job.ranks, "tp_rank": rank}
    writer = RecordWriter(rank_record_path(job.record_path, rank))
    timing = timing_kind(device, job.cuda_graph)
    sensor, clocks_env = gpu_sensor(device)
    writer.env({**environment(device, sensor), "cuda_graph": timing == "graph replay",
                "timing": timing, **clocks_env,
                **({"cpu_threads": job.cpu_threads} if device == "cpu" else {})})
    runner_cls = _import_runner(Path.cwd())
    order = shuffled(job.configs, job.order_seed)
    writer.order(job.order_seed, [config["id"] for config in order])
    # kept for the capture pass: each run pack, and the kernels its timed graph named
    timed: dict[str, tuple[Callable[[], Any], KernelProfile | None]] = {}
    clock_up = False
    for config in order:
        writer.start(config["id"])
        try:
            run_pack = create_run_pack(runner_cls, config["params"], device, tensor_parallel)
            record, named = run_config(run_pack, config["id"], job, device, writer, sensor,
                                       job.run_times_of(config), clock_up)
            clock_up = True
            if job.profile_kernels:
                timed[config["id"]] = (run_pack, named)
        except Exception as exc:  # noqa: BLE001 - one config's failure is its status, not the round's
            traceback.print_exc()
            record = RoundRecord("failed", failure_reason(exc),
                                 facts=writer.facts_written.get(config["id"], {}),
                                 round=job.round)
        writer.done(config["id"], record)
    capture_pass(runner_cls, timed, job, device, writer, tensor_parallel)
    writer.close()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    # every record is fsynced already; skipping interpreter teardown (torch's
    # is slow) saves a noticeable share of a CPU run's wall time per worker
    os._exit(code)
