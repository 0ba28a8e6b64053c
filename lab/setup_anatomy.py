"""Where a worker's set-up time goes: process start, CUDA, and each config's set-up steps.

`benchmarks/pipeline.py` shows that per-config set-up is the largest part of a
GPU run's wall time. This splits it, in fresh processes that do what a worker
does (abdiff.targets.reference.worker's functions, in the demo's `pr` branch):
import torch, start CUDA (first tensor on the device), import the harness, then
for every config of the suite in order: build the run pack, read the facts, and
`time_iterations` split into its recorded warm-up, its timed iterations and the
rest (on CUDA with graphs: the pre-capture calls and the graph capture).

    python benchmarks/setup_anatomy.py [--suite mtp] [--processes 3] [--eager]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

STAGES = ("run pack", "facts", "warm-up", "timed", "capture and rest")


def one_process(checkout: Path, suite_name: str, cuda_graph: bool) -> dict:
    """Seconds of each step in this process (run as `--child`)."""
    started = time.perf_counter()
    import torch

    from abdiff.suites.loader import load_suite
    from abdiff.targets.reference.worker import _import_runner, create_run_pack
    from abdiff.worker.measure import (
        find_attn_metadata,
        read_facts,
        resolve_device,
        time_iterations,
    )

    steps = {"import torch and abdiff": time.perf_counter() - started}
    device = resolve_device("auto")
    mark = time.perf_counter()
    if device == "cuda":
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
    else:
        torch.set_num_threads(1)
    steps["start CUDA (first tensor)"] = time.perf_counter() - mark
    mark = time.perf_counter()
    runner_cls = _import_runner(checkout)
    steps["import the harness"] = time.perf_counter() - mark
    suite = load_suite(suite_name)
    configs = []
    for config in suite.configs:
        stage = {}
        mark = time.perf_counter()
        run_pack = create_run_pack(runner_cls, config.params, device, {})
        stage["run pack"] = time.perf_counter() - mark
        mark = time.perf_counter()
        read_facts({"attn_metadata": find_attn_metadata(run_pack)}, suite.facts)
        stage["facts"] = time.perf_counter() - mark
        mark = time.perf_counter()
        timed = time_iterations(run_pack, suite.warmup_times, suite.run_times, device,
                                cuda_graph)
        total = time.perf_counter() - mark
        stage["warm-up"] = timed.warmup.seconds
        stage["timed"] = sum(timed.latency_us) / 1e6
        stage["capture and rest"] = total - stage["warm-up"] - stage["timed"]
        configs.append({"id": config.id, **stage})
    return {"device": device, "steps": steps, "configs": configs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="mtp")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--eager", action="store_true", help="time eager calls, not graphs")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.child, args.suite, not args.eager)))
        return 0
    from abdiff.demo.builder import build_demo_repo
    from abdiff.repo.revs import run_git

    work = Path(tempfile.mkdtemp(prefix="abdiff-anatomy-"))
    build_demo_repo(work / "demo")
    run_git(work / "demo", "worktree", "add", "-q", str(work / "pr"), "pr")
    runs = []
    for _ in range(args.processes):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(work / "pr"), "--suite", args.suite,
             *(["--eager"] if args.eager else [])],
            capture_output=True, text=True, check=True)
        runs.append({**json.loads(done.stdout.splitlines()[-1]),
                     "wall": time.perf_counter() - started})
    print(f"device {runs[0]['device']}, suite {args.suite}, {args.processes} processes, "
          f"{'eager' if args.eager else 'graph replay where CUDA'}")
    rows = [[name, *(f"{r['steps'][name]:.2f}" for r in runs)] for name in runs[0]["steps"]]
    rows.append(["process wall (start to exit)", *(f"{r['wall']:.2f}" for r in runs)])
    print(tabulate(rows, headers=["seconds, per process", *map(str, range(1, len(runs) + 1))]))
    first = [r["configs"][0] for r in runs]
    later = [c for r in runs for c in r["configs"][1:]]
    rows = [[stage, f"{statistics.median(c[stage] for c in first) * 1e3:.1f}",
             f"{statistics.median(c[stage] for c in later) * 1e3:.1f}",
             f"{max(c[stage] for c in later) * 1e3:.1f}"] for stage in STAGES]
    print(tabulate(rows, headers=["ms per config", "first config (median)",
                                  "later configs (median)", "later (max)"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
