"""What kernel capture costs: one profiled call against one timed iteration.

The probe records kernels with torch.profiler on one extra call after the
timed iterations, so it never touches a latency sample; this measures what
that extra call costs in wall time per config and round, and checks that
iterations timed after a capture are not slower than before it.

    python benchmarks/kernel_capture_overhead.py --repo DEMO_REPO [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from tabulate import tabulate

from abdiff.worker.measure import profile_kernels, resolve_device, time_iterations

CONFIGS = [("TRTLLM", 1), ("TRTLLM", 4), ("DSA", 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="a demo repository checkout")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    sys.path.insert(0, str(args.repo))
    from tinyllm.tools.layer_wise_benchmarks import Runner

    device = resolve_device("auto")
    rows = []
    for backend, seq_len_q in CONFIGS:
        run_pack = Runner(backend, device=device).create_run_pack(
            "GEN", batch_size=args.batch_size, seq_len_q=seq_len_q, seq_len_kv_cache=2049)
        before = statistics.median(time_iterations(run_pack, 5, 30, device, False).latency_us)
        captures = []
        for _ in range(3):
            start = time.perf_counter()
            kernels = profile_kernels(run_pack, device).counts
            captures.append((time.perf_counter() - start) * 1e6)
        after = statistics.median(time_iterations(run_pack, 0, 30, device, False).latency_us)
        rows.append([f"GEN-{backend}-bs{args.batch_size}-q{seq_len_q}", f"{before:.1f}",
                     f"{after:.1f}", f"{captures[0] / 1000:.1f}",
                     f"{statistics.median(captures[1:]) / 1000:.1f}", len(kernels),
                     sum(kernels.values())])
    table = tabulate(rows, headers=["config", "iteration us (before)", "iteration us (after)",
                                    "first capture ms", "later capture ms", "kernel names",
                                    "kernel launches"])
    text = f"device {device}\n{table}\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
