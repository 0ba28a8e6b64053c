"""Kernel names from a CUDA graph's nodes: what the timed graph launches, named by the driver.

A GPU worker times its configs as CUDA graph replays. The graph it already captured
holds every kernel one call launches, so the kernels of a kernel round are read from
its nodes (`cuGraphGetNodes`, `cuGraphKernelNodeGetParams_v2`, `cuFuncGetName` or,
for a library's kernel, `cuKernelGetName`) in about 10 ms, where torch.profiler pays
CUPTI's start, seconds in every worker process that captures. The driver gives mangled
names; they are demangled by the C++ runtime's `__cxa_demangle`, as torch.profiler
demangles CUPTI's, so a name is the same string either way. What nodes cannot give is
each kernel's time: `kernel_us` stays empty, and a config whose latency changed has its
kernel times captured by torch.profiler afterwards (run/rounds.capture_kernel_times).

A graph holding a node that no kernel name stands for (a copy, a host call, a child
graph) is not named here: the caller captures that config with torch.profiler.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from abdiff.run.protocol import KernelProfile

# CUgraphNodeType (cuda.h)
_KERNEL, _MEMSET, _EMPTY, _WAIT_EVENT, _EVENT_RECORD = 0, 2, 5, 6, 7
_NO_WORK = frozenset({_EMPTY, _WAIT_EVENT, _EVENT_RECORD})  # launch nothing CUPTI records
MEMSET_NAME = "Memset (Device)"  # how torch.profiler names a device memset


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h): the launch's function, grid, block, arguments."""

    _fields_ = [("func", ctypes.c_void_p),
                *[(name, ctypes.c_uint) for name in ("grid_x", "grid_y", "grid_z", "block_x",
                                                      "block_y", "block_z", "shared_bytes")],
                ("params", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


@functools.cache
def _cxx_runtime() -> tuple[Any, Any]:
    """`__cxa_demangle` and the C library's `free` (the demangled text is malloc'ed)."""
    cxx = ctypes.CDLL("libstdc++.so.6")
    demangler = cxx.__cxa_demangle
    demangler.restype = ctypes.c_void_p
    demangler.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.POINTER(ctypes.c_int)]
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]
    return demangler, free


def demangle(name: str) -> str:
    """A C++ symbol as the C++ runtime writes it (`_Z...` only); any other name as given."""
    if not name.startswith("_Z"):
        return name
    demangler, free = _cxx_runtime()
    status = ctypes.c_int(-1)
    text = demangler(name.encode(), None, None, ctypes.byref(status))
    if not text:
        return name
    try:
        return ctypes.string_at(text).decode() if status.value == 0 else name
    finally:
        free(text)


def _kernel_name(cuda: Any, node: int | None) -> str | None:
    params, name = _KernelNodeParams(), ctypes.c_char_p()
    if cuda.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(node), ctypes.byref(params)):
        return None
    # a kernel of a library loaded by the CUDA runtime has a CUkernel, not a CUfunction
    if (not params.func or cuda.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(params.func))) \
            and cuda.cuKernelGetName(ctypes.byref(name), ctypes.c_void_p(params.kern)):
        return None
    return demangle(name.value.decode()) if name.value else None


def graph_kernel_profile(raw_graph: int) -> KernelProfile | None:
    """Names and counts of what one replay of the graph launches (no times); None where a
    node is neither a kernel, a memset nor one that launches nothing, or the driver cannot
    name one (the caller then captures with torch.profiler)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    graph = ctypes.c_void_p(raw_graph)
    count = ctypes.c_size_t(0)
    if cuda.cuGraphGetNodes(graph, None, ctypes.byref(count)):
        return None
    nodes = (ctypes.c_void_p * count.value)()
    if cuda.cuGraphGetNodes(graph, nodes, ctypes.byref(count)):
        return None
    counts: dict[str, int] = {}
    for node in nodes[:count.value]:
        kind = ctypes.c_int(-1)
        if cuda.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)):
            return None
        if kind.value in _NO_WORK:
            continue
        name = (_kernel_name(cuda, node) if kind.value == _KERNEL
                else MEMSET_NAME if kind.value == _MEMSET else None)
        if name is None:
            return None
        counts[name] = counts.get(name, 0) + 1
    return KernelProfile(dict(sorted(counts.items())), {})
