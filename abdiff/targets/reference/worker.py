"""The reference target's worker, run inside a checkout:
`python -m abdiff.targets.reference.worker JOB.json`.

It imports the harness of the checkout it was started in (the working folder is
first on sys.path), runs every config of the job in this one process, and
appends one record per config to the record log. A Python exception fails only
its config; an abort or a hang kills the process, and the launcher restarts a
worker for the configs that are left.
"""

from __future__ import annotations

import os
import resource
import sys
import traceback
from pathlib import Path

from abdiff.errors import exception_line
from abdiff.files import path_under_root
from abdiff.measure import (
    GPU_MIN_WARMUP_S,
    environment,
    find_attn_metadata,
    profile_kernels,
    read_facts,
    resolve_device,
    time_iterations,
)
from abdiff.protocol import RecordWriter, RoundJob
from abdiff.records import RoundRecord
from abdiff.targets.reference.target import HARNESS_PACKAGE, RUNNER_MODULE


def _import_runner(checkout: Path) -> type:
    """The checkout's own Runner; refuses one imported from anywhere else."""
    import importlib

    sys.path.insert(0, str(checkout))
    package = importlib.import_module(HARNESS_PACKAGE)
    origin = Path(package.__file__).resolve()
    if not path_under_root(origin, checkout):
        raise RuntimeError(f"{HARNESS_PACKAGE} was imported from {origin}, not from {checkout}")
    return importlib.import_module(RUNNER_MODULE).Runner


def run_config(
    runner_cls: type, config_id: str, params: dict, job: RoundJob, device: str,
    writer: RecordWriter,
) -> RoundRecord:
    """Create and prepare the run pack, read facts, time iterations, then profile one call."""
    runner = runner_cls(params["backend"], device=device)
    run_pack = runner.create_run_pack(
        params["run_type"],
        batch_size=params["batch_size"],
        seq_len_q=params["seq_len_q"],
        seq_len_kv_cache=params["seq_len_kv_cache"],
    )
    facts = read_facts({"attn_metadata": find_attn_metadata(run_pack)}, job.facts)
    writer.facts(config_id, facts)
    min_warmup_s = job.min_warmup_s
    if min_warmup_s is None:
        min_warmup_s = GPU_MIN_WARMUP_S if device == "cuda" else 0.0
    latencies = time_iterations(run_pack, job.warmup_times, job.run_times, device, job.cuda_graph,
                                min_warmup_s)
    kernels = profile_kernels(run_pack, device) if job.profile_kernels else {}
    return RoundRecord("ok", None, latencies, facts, kernels, job.round)


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
    writer = RecordWriter(Path(job.record_path))
    writer.env({**environment(device), "cuda_graph": job.cuda_graph,
                **({"cpu_threads": job.cpu_threads} if device == "cpu" else {})})
    runner_cls = _import_runner(Path.cwd())
    for config in job.configs:
        writer.start(config["id"])
        try:
            record = run_config(runner_cls, config["id"], config["params"], job, device, writer)
        except Exception as exc:  # noqa: BLE001 - one config's failure is its status, not the round's
            traceback.print_exc()
            record = RoundRecord("failed", failure_reason(exc),
                                 facts=writer.facts_written.get(config["id"], {}),
                                 round=job.round)
        writer.done(config["id"], record)
    writer.close()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    # every record is fsynced already; skipping interpreter teardown (torch's
    # is slow) saves a noticeable share of a CPU run's wall time per worker
    os._exit(code)
