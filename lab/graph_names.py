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


def unnamed_nodes(pack: object) -> str:
    """The node types of a graph of `pack` and each copy node's memory types."""
    import ctypes
    from collections import Counter

    import torch

    from abdiff.worker.graph_kernels import _Memcpy3D

    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        pack()  # type: ignore[operator]
    cuda = ctypes.CDLL("libcuda.so.1")
    handle, count = ctypes.c_void_p(graph.raw_cuda_graph()), ctypes.c_size_t(0)
    cuda.cuGraphGetNodes(handle, None, ctypes.byref(count))
    nodes = (ctypes.c_void_p * count.value)()
    cuda.cuGraphGetNodes(handle, nodes, ctypes.byref(count))
    kinds: Counter[int] = Counter()
    copies: Counter[tuple[int, int]] = Counter()
    for node in nodes:
        kind = ctypes.c_int(-1)
        cuda.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind))
        kinds[kind.value] += 1
        if kind.value == 1:
            params = _Memcpy3D()
            cuda.cuGraphMemcpyNodeGetParams(ctypes.c_void_p(node), ctypes.byref(params))
            copies[(params.src_memory_type, params.dst_memory_type)] += 1
    return f"node types {dict(kinds)}; copies (source, destination memory type) {dict(copies)}"


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
        if named is None:  # which node could not be named: its type (and a copy's memory)
            print("    " + unnamed_nodes(pack))
        if not same and named is not None:
            for name in sorted(set(named) | set(profiled.counts)):
                if named.get(name) != profiled.counts.get(name):
                    print(f"    graph {named.get(name, 0)} profiler "
                          f"{profiled.counts.get(name, 0)}: {name[:150]}")
    print(f"{agree} of {len(configs)} configs: the same kernels and counts")
    sys.exit(0 if agree == len(configs) else 1)


if __name__ == "__main__":
    main()
