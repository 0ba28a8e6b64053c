"""What a worker's first kernel capture costs on a GPU, by how the profiler is asked: each
variant in a fresh process (CUPTI starts once per process), twice in turn, on the same
small attention step, after its warm-up; the seconds of the first and of a second capture, and the
kernels each saw (their names must agree).

- `cpu+cuda`: torch.profiler with CPU and CUDA activities (abdiff's capture before);
- `cuda`: CUDA activity alone (abdiff keeps only the kernels of a GPU capture);
- `graph`: no profiler: the kernel nodes of a CUDA graph of the same step, named by the
  CUDA driver (names only, mangled where CUPTI demangles them; no times).

    python lab/capture_cost.py            # on a GPU machine, about a minute
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

VARIANTS = ("cpu+cuda", "cuda", "graph")

CHILD = r'''
import ctypes, json, sys, time
import torch
variant = sys.argv[1]
x = torch.randn(32, 16, 2048, 128, device="cuda", dtype=torch.bfloat16)
w = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
h = torch.randn(512, 2048, device="cuda", dtype=torch.bfloat16)

def step():
    y = torch.nn.functional.scaled_dot_product_attention(x[:, :, :4], x, x)
    return (h @ w).relu().sum() + y.float().sum()

for _ in range(3):
    step()
torch.cuda.synchronize()

def capture():
    if variant == "graph":
        return graph_kernels()
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if variant == "cpu+cuda"
                                            else [])
    with profile(activities=activities) as prof:
        step()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA})

class NodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h)
    _fields_ = [("func", ctypes.c_void_p),
                *[(f, ctypes.c_uint) for f in ("gx", "gy", "gz", "bx", "by", "bz", "smem")],
                ("params", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]

def graph_kernels():
    """The kernel nodes of a CUDA graph of one step, named by the driver (cuFuncGetName;
    cuKernelGetName for library kernels); memset nodes as CUPTI names them."""
    cu = ctypes.CDLL("libcuda.so.1")
    graph = torch.cuda.CUDAGraph(keep_graph=True)  # the graph, not only its executable
    with torch.cuda.graph(graph):
        step()
    handle = ctypes.c_void_p(graph.raw_cuda_graph())
    count = ctypes.c_size_t(0)
    cu.cuGraphGetNodes(handle, None, ctypes.byref(count))
    nodes = (ctypes.c_void_p * count.value)()
    cu.cuGraphGetNodes(handle, nodes, ctypes.byref(count))
    names = set()
    for node in nodes:
        kind = ctypes.c_int(-1)
        cu.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind))
        if kind.value == 2:  # CU_GRAPH_NODE_TYPE_MEMSET
            names.add("Memset (Device)")
        if kind.value != 0:  # CU_GRAPH_NODE_TYPE_KERNEL
            continue
        params, name = NodeParams(), ctypes.c_char_p()
        cu.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(node), ctypes.byref(params))
        if not params.func or cu.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(params.func)):
            cu.cuKernelGetName(ctypes.byref(name), ctypes.c_void_p(params.kern))
        names.add((name.value or b"?").decode())
    return sorted(names)

times, names = [], None
for _ in range(2):
    start = time.perf_counter()
    names = capture()
    times.append(time.perf_counter() - start)
print(json.dumps({"variant": variant, "first_s": times[0], "second_s": times[1],
                  "kernels": names}))
'''


def main() -> None:
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for variant in (*VARIANTS, *VARIANTS):  # twice: the first process warms the disk
            done = subprocess.run([sys.executable, "-c", CHILD, variant], cwd=folder,
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{variant}: failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for r in results:
        print(f"{r['variant']:9} first capture {r['first_s']:6.2f} s, second "
              f"{r['second_s']:5.2f} s, {len(r['kernels'])} kernels")
    for r in results[:len(VARIANTS)]:
        print(r["variant"], [name[:60] for name in r["kernels"]])


if __name__ == "__main__":
    main()
