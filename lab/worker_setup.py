"""Where a GPU worker's set-up goes, and whether a fork server could carry any of it.

A parent imports torch and the demo's harness (as a side's fork server does), then forks
one child per variant, several times each; each child times its steps as a worker
takes them: CUDA's start (`torch.cuda.init`), the machine and clock sensor the worker
reports first (`environment`, with nvidia-smi's query alone too, `gpu_sensor`), the CUDA
context (a first tensor), then for each config
of the suite its run pack (model build), one eager call, the graph capture and its first
replay. Variants:

- `fork`: the parent as abdiff's fork server leaves it (torch and the harness imported);
- `preload`: the parent also loads the CUDA libraries torch opens lazily (cuDNN's
  sub-libraries, cuBLAS, NVRTC) without creating a CUDA context, so a fork inherits them
  (tried in abdiff's fork servers on 2026-12-06 and dropped: docs/performance.md).

    python lab/worker_setup.py [--suite mtp] [--repeats 3]     # on a GPU machine
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("fork", "preload")


def preload_cuda_libraries() -> list[str]:
    """dlopen the CUDA libraries of torch's pip packages (no CUDA call: no context)."""
    import nvidia  # the pip wheels' namespace package: nvidia/<lib>/lib/*.so*

    loaded = []
    for root in nvidia.__path__:
        for path in sorted(glob.glob(os.path.join(root, "*", "lib", "lib*.so*"))):
            name = os.path.basename(path)
            if any(part in name for part in ("cudnn", "cublas", "nvrtc", "cusparse", "cufft")):
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                    loaded.append(name)
                except OSError:
                    pass
    return loaded


def child(configs: list[dict], runner_cls: type, out: int) -> None:
    import torch

    from abdiff.worker.measure import environment, gpu_identity, gpu_sensor

    steps: dict[str, float] = {}
    start = time.perf_counter()
    torch.cuda.init()
    steps["cuda init"] = time.perf_counter() - start
    # what a worker reports before its first config: the machine (with nvidia-smi's query of
    # the GPU's identity, timed alone too) and the clock sensor (NVML)
    t0 = time.perf_counter()
    env = environment("cuda")
    steps["identity"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    gpu_identity(env.get("gpu_uuid", "0"))
    steps["nvidia-smi"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    gpu_sensor("cuda")
    steps["sensor"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    steps["context"] = time.perf_counter() - t0
    for name in ("build", "eager", "capture"):
        steps[name] = 0.0
    for config in configs:
        params = config["params"]
        t0 = time.perf_counter()
        pack = runner_cls(params["backend"], device="cuda").create_run_pack(
            params["run_type"], batch_size=params["batch_size"], seq_len_q=params["seq_len_q"],
            seq_len_kv_cache=params["seq_len_kv_cache"])
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        pack()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            pack()
        graph.replay()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        steps["build"] += t1 - t0
        steps["eager"] += t2 - t1
        steps["capture"] += t3 - t2
    steps["total"] = time.perf_counter() - start
    os.write(out, json.dumps(steps).encode())


def demo_suite(suite: str, prefix: str) -> tuple[Path, list[dict]]:
    """The demo repository at `pr` in a new temporary folder, and `suite`'s configs (id,
    params) as a worker's job lists them (also lab/worker_teardown.py's)."""
    from abdiff.demo.builder import build_demo_repo
    from abdiff.suites.loader import load_suite

    repo = Path(tempfile.mkdtemp(prefix=prefix)) / "demo"
    build_demo_repo(repo)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "pr"], check=True)
    return repo, [{"id": c.id, "params": c.params} for c in load_suite(suite).configs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="mtp")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from abdiff.targets.reference.worker import _import_runner

    repo, configs = demo_suite(args.suite, "worker-setup.")
    started = time.perf_counter()
    runner_cls = _import_runner(repo)  # torch and the harness, as a fork server imports them
    print(f"parent: torch and the harness imported in {time.perf_counter() - started:.2f} s")
    results: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for variant in VARIANTS:  # a parent cannot unload libraries: `fork` goes first
        if variant == "preload":
            t0 = time.perf_counter()
            names = preload_cuda_libraries()
            print(f"parent: {len(names)} CUDA libraries loaded in "
                  f"{time.perf_counter() - t0:.2f} s")
        for _ in range(args.repeats):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                child(configs, runner_cls, write)
                os._exit(0)
            os.close(write)
            data = b""
            while chunk := os.read(read, 65536):
                data += chunk
            os.close(read)
            os.waitpid(pid, 0)
            results[variant].append(json.loads(data))
    for variant, runs in results.items():
        for run in runs:
            print(f"{variant:8} " + ", ".join(f"{k} {v:.3f} s" for k, v in run.items()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
