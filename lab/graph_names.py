"""Do the kernels named from a timed CUDA graph's nodes agree with torch.profiler's (CUPTI's)?

For every config of a suite, in the demo repository's `pr` checkout and one process (as a
worker runs them): the config is timed as graph replays with `name_kernels` (the worker's
default kernel round, abdiff/worker/graph_kernels.py), then captured by torch.profiler
(`profile_kernels`: the kernel round before, and the capture of kernel times after a
change). Prints, per config, whether the names and counts agree and what differs, and the
seconds each took (the profiler's first capture pays CUPTI's start).

    python lab/graph_names.py [--suite mtp]        # on a GPU machine, about a minute
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from abdiff.demo.builder import build_demo_repo
from abdiff.suites.loader import load_suite
from abdiff.targets.reference.worker import _import_runner, create_run_pack
from abdiff.worker.measure import profile_kernels, time_iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="mtp")
    args = parser.parse_args()
    repo = Path(tempfile.mkdtemp(prefix="graph-names.")) / "demo"
    build_demo_repo(repo)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "pr"], check=True)
    runner_cls = _import_runner(repo)
    agree = 0
    configs = load_suite(args.suite).configs
    for config in configs:
        pack = create_run_pack(runner_cls, config.params, "cuda", {})
        started = time.perf_counter()
        timed = time_iterations(pack, 3, 20, "cuda", True, name_kernels=True)
        graph_s = time.perf_counter() - started
        started = time.perf_counter()
        profiled = profile_kernels(pack, "cuda")
        profile_s = time.perf_counter() - started
        named = timed.kernels.counts if timed.kernels else None
        same = named == profiled.counts
        agree += same
        print(f"{config.id:32} graph {'-' if named is None else len(named):>3} kernels "
              f"({graph_s:5.2f} s with the timing), profiler {len(profiled.counts):3} "
              f"({profile_s:5.2f} s): {'same' if same else 'DIFFERENT'}")
        if not same and named is not None:
            for name in sorted(set(named) | set(profiled.counts)):
                if named.get(name) != profiled.counts.get(name):
                    print(f"    graph {named.get(name, 0)} profiler "
                          f"{profiled.counts.get(name, 0)}: {name[:150]}")
    print(f"{agree} of {len(configs)} configs: the same kernels and counts")
    sys.exit(0 if agree == len(configs) else 1)


if __name__ == "__main__":
    main()
