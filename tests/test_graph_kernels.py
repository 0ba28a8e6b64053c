"""graph_kernels.py: kernel names from a CUDA graph's nodes, demangled as torch.profiler's.

The demangler is the C++ runtime's, real here; the graph's nodes need a GPU (test_gpu.py
compares them with torch.profiler's on the demo)."""

from __future__ import annotations

import json
from pathlib import Path

from abdiff.worker.graph_kernels import demangle

H200_RUN = Path(__file__).parent / "data" / "h200" / "pr..pr-slow-b.json"


def test_a_mangled_kernel_reads_as_torch_profiler_named_it_on_the_h200() -> None:
    # the driver's name of torch's bf16 multiply kernel; CUPTI's, demangled by
    # torch.profiler, is in a run file the H200 wrote
    mangled = ("_ZN2at6native29vectorized_elementwise_kernelILi8ENS0_13AUnaryFunctorIN3c108"
               "BFloat16ES4_S4_NS0_15binary_internal10MulFunctorIfEEEESt5arrayIPcLm2EEEEviT0_T1_")
    recorded = {name for config in json.loads(H200_RUN.read_text())["configs"]
                for record in config["rounds"] for name in record.get("kernel_us", {})}
    assert demangle(mangled) in recorded
    assert demangle(mangled).startswith("void at::native::vectorized_elementwise_kernel<8, ")


def test_names_that_are_not_cxx_symbols_stay_as_given() -> None:
    assert demangle("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn") == \
        "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn"
    assert demangle("_Z") == "_Z"  # not a whole symbol: kept, not an empty name
    assert demangle("_ZN3foo") == "_ZN3foo"
