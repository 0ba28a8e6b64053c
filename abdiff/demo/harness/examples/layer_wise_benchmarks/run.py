"""Layer-wise attention benchmark: a YAML config plus command-line overrides.

A miniature of TensorRT-LLM's `examples/layer_wise_benchmarks/run.py`:

    python examples/layer_wise_benchmarks/run.py examples/layer_wise_benchmarks/config_gen.yaml \\
        --backend DSA --batch-size 32 --seq-len-q 4 --seq-len-kv-cache 2049

Command-line values override the YAML file's. After warm-up, each timed
iteration is one `run_pack()` call, timed with CUDA events on a GPU and
`perf_counter_ns` on the CPU; one line per rank reports the statistics in us.

Under mpirun, srun or torchrun with more than one rank, the ranks run the layer
tensor-parallel (heads split, output all-reduced): they meet at MASTER_ADDR and
MASTER_PORT (torchrun sets them; elsewhere 127.0.0.1:29500 unless exported).
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line first, then the YAML config fills whatever was not given."""
    import yaml

    parser = argparse.ArgumentParser(description="Layer-wise attention benchmark.")
    parser.add_argument("config_path", type=str)
    parser.add_argument("--backend", type=str, choices=["TRTLLM", "DSA"])
    parser.add_argument("--run-type", type=str, choices=["CTX", "GEN"])
    parser.add_argument("--device", type=str, choices=["auto", "cpu", "cuda"])
    # Per iteration args
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--seq-len-q", type=int)
    parser.add_argument("--seq-len-kv-cache", type=int)
    # Schedule
    parser.add_argument("--warmup-times", type=int)
    parser.add_argument("--run-times", type=int)
    args = parser.parse_args(argv)
    with open(args.config_path, encoding="utf-8") as f:
        config = yaml.safe_load(f) or {}
    unknown = set(config) - set(vars(args))
    if unknown:
        parser.error(f"unknown keys in {args.config_path}: {', '.join(sorted(unknown))}")
    for key, value in vars(args).items():
        if value is None and key in config:
            setattr(args, key, config[key])
    defaults = {"backend": "TRTLLM", "device": "auto", "warmup_times": 20, "run_times": 100}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    required = ("run_type", "batch_size", "seq_len_q", "seq_len_kv_cache")
    missing = [k for k in required if getattr(args, k) is None]
    if missing:
        parser.error(f"missing settings: {', '.join(missing)}")
    return args


def mpi_rank() -> tuple[int, int, int]:
    """(rank, local rank, world size) from the launcher's environment (mpirun, srun, torchrun)."""
    for rank_var, local_var, size_var in (
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
        ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
        ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ):
        if rank_var in os.environ:
            return (int(os.environ[rank_var]), int(os.environ.get(local_var, "0")),
                    int(os.environ.get(size_var, "1")))
    return 0, 0, 1


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO_ROOT))
    import torch
    from tinyllm.tools.layer_wise_benchmarks import Runner

    args = parse_args(argv)
    print(args, flush=True)
    rank, local_rank, world_size = mpi_rank()
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    if world_size > 1:
        import torch.distributed as dist

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank,
                                world_size=world_size)
        # a gloo group left to the interpreter's teardown can abort the rank (SIGABRT,
        # "terminate called without an active exception"): end it while Python still runs
        atexit.register(dist.destroy_process_group)

    runner = Runner(args.backend, device=device, tp_size=world_size, tp_rank=rank)
    run_pack = runner.create_run_pack(
        args.run_type,
        batch_size=args.batch_size,
        seq_len_q=args.seq_len_q,
        seq_len_kv_cache=args.seq_len_kv_cache,
    )

    total = args.warmup_times + args.run_times
    if device == "cuda":
        events = [torch.cuda.Event(enable_timing=True) for _ in range(total + 1)]
        for e in events:  # Explicitly warm up events because torch is lazy
            e.record()
        torch.cuda.synchronize()
        for i in range(total):
            events[i].record()
            run_pack()
        events[-1].record()
        torch.cuda.synchronize()
        times_us = [a.elapsed_time(b) * 1000 for a, b in zip(events[:-1], events[1:], strict=True)]
    else:
        times_us = []
        for _ in range(total):
            start = time.perf_counter_ns()
            run_pack()
            times_us.append((time.perf_counter_ns() - start) / 1000)
    times_us = times_us[args.warmup_times :]
    if not times_us:
        return 0

    t = torch.tensor(times_us, dtype=torch.float64)
    print(
        f"[RANK {rank}]"
        f"  backend {args.backend}"
        f"  run_type {args.run_type}"
        f"  batch_size {args.batch_size}"
        f"  seq_len_q {args.seq_len_q}"
        f"  seq_len_kv_cache {args.seq_len_kv_cache}"
        f"  min {t.min().item():.1f}"
        f"  max {t.max().item():.1f}"
        f"  mean {t.mean().item():.1f}"
        f"  median {t.quantile(0.5).item():.1f}"
        f"  P90 {t.quantile(0.9).item():.1f}"
        f"  (us)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
