"""Kernel names from a CUDA graph's nodes: what the timed graph launches, named by the driver.

A GPU worker times its configs as CUDA graph replays. The graph it already captured
holds every kernel one call launches, so the kernels of a kernel round are read from
its nodes (`cuGraphGetNodes`, `cuGraphKernelNodeGetParams_v2`, `cuFuncGetName` or,
for a library's kernel, `cuKernelGetName`) in milliseconds, where torch.profiler pays
CUPTI's start, seconds in every worker process that captures. The driver gives mangled
names; they are demangled by the C++ runtime's `__cxa_demangle`, as torch.profiler
demangles CUPTI's, so a name is the same string either way. What nodes cannot give is
each kernel's time: `kernel_us` stays empty, and a config whose latency changed has its
kernel times captured by torch.profiler afterwards (run/rounds.capture_kernel_times).

A graph holding a node that no kernel name stands for (a copy from or to host memory, a
host call, a child graph) is not named here: the caller captures that config with
torch.profiler.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from abdiff.run.protocol import KernelProfile

# CUgraphNodeType (cuda.h)
_KERNEL, _MEMCPY, _MEMSET, _EMPTY, _WAIT_EVENT, _EVENT_RECORD = 0, 1, 2, 5, 6, 7
_NO_WORK = frozenset({_EMPTY, _WAIT_EVENT, _EVENT_RECORD})  # launch nothing CUPTI records
_DEVICE_MEMORY = 2  # CU_MEMORYTYPE_DEVICE
# how torch.profiler names a device memset and a copy between device buffers
MEMSET_NAME = "Memset (Device)"
DEVICE_COPY_NAME = "Memcpy DtoD (Device -> Device)"


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h): the launch's function, grid, block, arguments."""

    _fields_ = [("func", ctypes.c_void_p),
                *[(name, ctypes.c_uint) for name in ("grid_x", "grid_y", "grid_z", "block_x",
                                                      "block_y", "block_z", "shared_bytes")],
                ("params", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


class _Memcpy3D(ctypes.Structure):
    """CUDA_MEMCPY3D (cuda.h): a copy node's source and destination."""

    _fields_ = [*[(f"src_{name}", ctypes.c_size_t) for name in ("x", "y", "z", "lod")],
                ("src_memory_type", ctypes.c_int), ("src_host", ctypes.c_void_p),
                ("src_device", ctypes.c_uint64), ("src_array", ctypes.c_void_p),
                ("reserved0", ctypes.c_void_p), ("src_pitch", ctypes.c_size_t),
                ("src_height", ctypes.c_size_t),
                *[(f"dst_{name}", ctypes.c_size_t) for name in ("x", "y", "z", "lod")],
                ("dst_memory_type", ctypes.c_int), ("dst_host", ctypes.c_void_p),
                ("dst_device", ctypes.c_uint64), ("dst_array", ctypes.c_void_p),
                ("reserved1", ctypes.c_void_p), ("dst_pitch", ctypes.c_size_t),
                ("dst_height", ctypes.c_size_t),
                *[(name, ctypes.c_size_t) for name in ("width_bytes", "height", "depth")]]


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
    return demangle(name.value.decode(errors="replace")) if name.value else None


def _copy_name(cuda: Any, node: int | None) -> str | None:
    """A copy between device buffers as torch.profiler names it; None for any other (a
    host buffer's name depends on whether it is pinned, which the node does not say)."""
    params = _Memcpy3D()
    if cuda.cuGraphMemcpyNodeGetParams(ctypes.c_void_p(node), ctypes.byref(params)):
        return None
    device_to_device = params.src_memory_type == params.dst_memory_type == _DEVICE_MEMORY
    return DEVICE_COPY_NAME if device_to_device else None


def graph_kernel_profile(raw_graph: int) -> KernelProfile | None:
    """Names and counts of what one replay of the graph launches (no times); None where a
    node is neither a kernel, a copy between device buffers, a memset nor one that launches
    nothing, or the driver cannot name one: an older one lacks `cuFuncGetName` (the caller
    then captures with torch.profiler)."""
    try:
        return _graph_kernel_profile(ctypes.CDLL("libcuda.so.1"), raw_graph)
    except (OSError, AttributeError):  # no driver library, or a driver without the calls
        return None


def _graph_kernel_profile(cuda: Any, raw_graph: int) -> KernelProfile | None:
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
                else _copy_name(cuda, node) if kind.value == _MEMCPY
                else MEMSET_NAME if kind.value == _MEMSET else None)
        if name is None:
            return None
        counts[name] = counts.get(name, 0) + 1
    return KernelProfile(dict(sorted(counts.items())), {})
