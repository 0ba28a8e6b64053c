"""Plant a known slowdown in one config of the demo: a commit on top of a branch that adds
about PERCENT more work to that config only, for checking that abdiff flags it and nothing else.

    python benchmarks/plant_slowdown.py --repo DEMO [--base pr] [--branch pr-slow]
        [--config GEN-TRTLLM-bs32-q1-kv2049] [--percent 3] [--device auto] [--work spin|kv]
        [--share 1.0]

The extra work is sized on this machine: the config's run pack is built from the
base branch and timed here the way abdiff's worker times it (CUDA graph replays
on a GPU, eager calls on the CPU). Two kinds of work:

- `spin` (default): PERCENT of that median added after the attention step. On
  CUDA one `torch.cuda._sleep` kernel (its cycles per microsecond measured here
  too), so graph replays include it; on the CPU a spin on the clock. The kernel
  list gains `spin_kernel`, so abdiff also flags the config for its kernels.
- `kv`: a pure latency change: the config's KV cache is made longer, in steps of
  KV_STEP tokens, by what costs closest to PERCENT here (each length timed, and
  checked to run the same kernels the same number of times; no recorded fact
  changes): only the latency can show it.

`--share S` plants the work in a share S of the worker processes only (each
process draws once, when it imports the runner): a config made *sometimes*
slow, for checking that abdiff flags a bimodal change.

Prints what it planted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from abdiff.demo.builder import RUNNER_PATH
from abdiff.suites import load_suite
from abdiff.worker.measure import profile_kernels, resolve_device, time_iterations

# the one-rank run pack's step, a whole line (the tensor-parallel pack has its own)
STEP_LINE = "\n                    return attention.forward(metadata=attn_metadata, **inputs)\n"
PLANTED_STEP = """
                    out = attention.forward(metadata=attn_metadata, **inputs)
                if (self.backend, run_type, batch_size, seq_len_q) == _PLANTED and _PLANTED_HERE:
                    _planted_work(self.device)
                return out
"""
KV_STEP = 64  # tokens: keeps the KV length's alignment
# the line of create_run_pack before the KV cache is built
KV_LINE = "\n        s = self.local_shapes\n        kv_cache_manager = KVCacheManager(\n"
PLANTED_KV = """
        if (self.backend, run_type, batch_size, seq_len_q) == _PLANTED and _PLANTED_HERE:
            seq_len_kv_cache += _PLANTED_KV_EXTRA
        s = self.local_shapes
        kv_cache_manager = KVCacheManager(
"""
PLANTED_BLOCK = """\
# Planted by abdiff's benchmarks/plant_slowdown.py: {percent}% more work for {config} only.
_PLANTED = {key!r}
_PLANTED_CUDA_CYCLES = {cycles}
_PLANTED_CPU_S = {seconds!r}
_PLANTED_KV_EXTRA = {kv_extra!r}
# drawn once per process: the work is planted in a share {share!r} of the processes
_PLANTED_HERE = __import__("random").SystemRandom().random() < {share!r}


def _planted_work(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda._sleep(_PLANTED_CUDA_CYCLES)
    else:
        import time

        end = time.perf_counter() + _PLANTED_CPU_S
        while time.perf_counter() < end:
            pass


class Runner:
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def run_pack_of(checkout: Path, params: dict, device: str, kv_extra: int = 0):
    """The config's run pack at `checkout`, its KV cache `kv_extra` tokens longer."""
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    from tinyllm.tools.layer_wise_benchmarks import Runner

    return Runner(params["backend"], device=device).create_run_pack(
        params["run_type"], batch_size=params["batch_size"], seq_len_q=params["seq_len_q"],
        seq_len_kv_cache=params["seq_len_kv_cache"] + kv_extra)


def median_us(checkout: Path, params: dict, device: str, kv_extra: int = 0) -> float:
    """The config's median latency at `checkout`, timed as abdiff's worker times it."""
    run_pack = run_pack_of(checkout, params, device, kv_extra)
    return statistics.median(time_iterations(run_pack, 3, 200, device).latency_us)


def kv_extra_for(checkout: Path, params: dict, device: str, base_us: float,
                 percent: float) -> tuple[int, float]:
    """(extra KV tokens that cost about `percent` here, the percent they cost).

    Lengths grow in steps of KV_STEP tokens, so the KV length keeps its alignment
    (a length of another alignment made cuBLAS pick other kernels on an H200, 2.2x
    slower), and a length whose kernels differ from the base's is passed over: the
    change must show in the latency alone. The step count closest to `percent` wins.
    """
    base_kernels = profile_kernels(run_pack_of(checkout, params, device), device).counts
    tried: list[tuple[int, float]] = []
    for steps in range(1, 65):
        extra = steps * KV_STEP
        if profile_kernels(run_pack_of(checkout, params, device, extra), device).counts != \
                base_kernels:
            continue
        cost = 100 * (median_us(checkout, params, device, extra) / base_us - 1)
        tried.append((extra, cost))
        if cost >= percent:
            break
    if not tried:
        raise SystemExit("every longer KV cache ran other kernels here: use --work spin")
    return min(tried, key=lambda t: abs(t[1] - percent))


def sleep_cycles_per_us() -> float:
    """Cycles of torch.cuda._sleep per microsecond on this GPU (its clock, while busy)."""
    import torch

    torch.cuda._sleep(10_000_000)  # bring the clock up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    torch.cuda.synchronize()
    return 20_000_000 / (start.elapsed_time(end) * 1000.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="the demo repository")
    parser.add_argument("--base", default="pr")
    parser.add_argument("--branch", default="pr-slow")
    parser.add_argument("--suite", default="mtp")
    parser.add_argument("--config", default="GEN-TRTLLM-bs32-q1-kv2049")
    parser.add_argument("--percent", type=float, default=3.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--work", choices=["spin", "kv"], default="spin")
    parser.add_argument("--share", type=float, default=1.0,
                        help="plant the work in this share of the worker processes only")
    args = parser.parse_args()
    config = next((c for c in load_suite(args.suite).configs if c.id == args.config), None)
    if config is None:
        parser.error(f"--config {args.config}: not a config of suite {args.suite}")
    device = resolve_device(args.device)
    with tempfile.TemporaryDirectory(prefix="abdiff-plant-") as tmp:
        checkout = Path(tmp) / "checkout"
        git(args.repo, "worktree", "add", "-q", "-B", args.branch, str(checkout), args.base)
        median_us(checkout, config.params, device)  # the process's first timing runs cold
        base_us = median_us(checkout, config.params, device)
        extra_us = base_us * args.percent / 100
        p = config.params
        if args.work == "kv":
            kv_extra, measured = kv_extra_for(checkout, p, device, base_us, args.percent)
            cycles, seconds = 0, 0.0
            what = (f"KV cache {kv_extra} tokens longer (same kernels), timed here at "
                    f"{measured:+.2f}%")
        else:
            cycles = round(extra_us * sleep_cycles_per_us()) if device == "cuda" else 0
            kv_extra, seconds = 0, extra_us / 1e6
            what = (f"{cycles} cycles of torch.cuda._sleep" if device == "cuda"
                    else "spinning")
        runner = checkout / RUNNER_PATH
        text = runner.read_text()
        anchor = KV_LINE if args.work == "kv" else STEP_LINE
        if anchor not in text or "\nclass Runner:\n" not in text:
            raise SystemExit(f"{runner}: the line the planted work goes on was not found; "
                             "the demo harness changed, update plant_slowdown.py")
        block = PLANTED_BLOCK.format(percent=args.percent, config=args.config, cycles=cycles,
                                     seconds=seconds, kv_extra=kv_extra, share=args.share,
                                     key=(p["backend"], p["run_type"], p["batch_size"],
                                          p["seq_len_q"]))
        text = text.replace(anchor, PLANTED_KV if args.work == "kv" else PLANTED_STEP)
        text = text.replace("class Runner:\n", block, 1)
        runner.write_text(text)
        git(checkout, "-c", "user.name=abdiff benchmark", "-c", "user.email=abdiff@localhost",
            "commit", "-qam", f"plant {args.percent}% more work in {args.config}")
        git(args.repo, "worktree", "remove", "--force", str(checkout))
    share = f", in {args.share:.0%} of the processes" if args.share < 1 else ""
    print(f"planted on branch {args.branch} ({device}): {args.config} median {base_us:.1f} us "
          f"+ {extra_us:.2f} us ({args.percent}%) = {what}{share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
