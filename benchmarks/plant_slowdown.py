"""Plant a known slowdown in one config of the demo: a commit on top of a branch that adds
about PERCENT more work to that config only, for checking that abdiff flags it and nothing else.

    python benchmarks/plant_slowdown.py --repo DEMO [--base pr] [--branch pr-slow]
        [--config GEN-TRTLLM-bs32-q1-kv2049] [--percent 3] [--device auto] [--work spin|kv]

The extra work is sized on this machine: the config's run pack is built from the
base branch and timed here the way abdiff's worker times it (CUDA graph replays
on a GPU, eager calls on the CPU). Two kinds of work:

- `spin` (default): PERCENT of that median added after the attention step. On
  CUDA one `torch.cuda._sleep` kernel (its cycles per microsecond measured here
  too), so graph replays include it; on the CPU a spin on the clock. The kernel
  list gains `spin_kernel`, so abdiff also flags the config for its kernels.
- `kv`: a pure latency change: the config's KV cache is made longer by the factor
  that costs PERCENT here (fitted to timings at +10%, +20% and +40% KV, then
  timed once more and printed). The same kernels run the same number of times and
  no recorded fact changes: only the latency can show it.

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
from abdiff.measure import resolve_device, time_iterations
from abdiff.suites import load_suite

# the one-rank run pack's step, a whole line (the tensor-parallel pack has its own)
STEP_LINE = "\n                    return attention.forward(metadata=attn_metadata, **inputs)\n"
PLANTED_STEP = """
                    out = attention.forward(metadata=attn_metadata, **inputs)
                if (self.backend, run_type, batch_size, seq_len_q) == _PLANTED:
                    _planted_work(self.device)
                return out
"""
# the line of create_run_pack before the KV cache is built
KV_LINE = "\n        s = self.local_shapes\n        kv_cache_manager = KVCacheManager(\n"
PLANTED_KV = """
        if (self.backend, run_type, batch_size, seq_len_q) == _PLANTED:
            seq_len_kv_cache = round(seq_len_kv_cache * _PLANTED_KV_FACTOR)
        s = self.local_shapes
        kv_cache_manager = KVCacheManager(
"""
PLANTED_BLOCK = """\
# Planted by abdiff's benchmarks/plant_slowdown.py: {percent}% more work for {config} only.
_PLANTED = {key!r}
_PLANTED_CUDA_CYCLES = {cycles}
_PLANTED_CPU_S = {seconds!r}
_PLANTED_KV_FACTOR = {kv_factor!r}


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


def median_us(checkout: Path, params: dict, device: str, kv_factor: float = 1.0) -> float:
    """The config's median latency at `checkout` (its KV cache `kv_factor` times as long),
    timed as abdiff's worker times it."""
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    from tinyllm.tools.layer_wise_benchmarks import Runner

    run_pack = Runner(params["backend"], device=device).create_run_pack(
        params["run_type"], batch_size=params["batch_size"], seq_len_q=params["seq_len_q"],
        seq_len_kv_cache=round(params["seq_len_kv_cache"] * kv_factor))
    return statistics.median(time_iterations(run_pack, 3, 200, device).latency_us)


def kv_factor_for(checkout: Path, params: dict, device: str, base_us: float,
                  percent: float) -> tuple[float, float]:
    """(KV length factor that costs `percent` here, the percent it cost when timed).

    The cost of extra KV length x = factor - 1 is fitted as slope * x through the origin
    (least squares over x = 0.1, 0.2, 0.4)."""
    xs = (0.1, 0.2, 0.4)
    costs = [median_us(checkout, params, device, 1 + x) / base_us - 1 for x in xs]
    slope = sum(x * c for x, c in zip(xs, costs, strict=True)) / sum(x * x for x in xs)
    if slope <= 0:
        raise SystemExit(f"a longer KV cache does not cost time here ({costs}): use --work spin")
    factor = 1 + percent / 100 / slope
    return factor, 100 * (median_us(checkout, params, device, factor) / base_us - 1)


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
            kv_factor, measured = kv_factor_for(checkout, p, device, base_us, args.percent)
            cycles, seconds = 0, 0.0
            what = f"KV cache x{kv_factor:.3f}, timed here at {measured:+.2f}%"
        else:
            cycles = round(extra_us * sleep_cycles_per_us()) if device == "cuda" else 0
            kv_factor, seconds = 1.0, extra_us / 1e6
            what = (f"{cycles} cycles of torch.cuda._sleep" if device == "cuda"
                    else "spinning")
        runner = checkout / RUNNER_PATH
        text = runner.read_text()
        anchor = KV_LINE if args.work == "kv" else STEP_LINE
        if anchor not in text or "\nclass Runner:\n" not in text:
            raise SystemExit(f"{runner}: the line the planted work goes on was not found; "
                             "the demo harness changed, update plant_slowdown.py")
        block = PLANTED_BLOCK.format(percent=args.percent, config=args.config, cycles=cycles,
                                     seconds=seconds, kv_factor=kv_factor,
                                     key=(p["backend"], p["run_type"], p["batch_size"],
                                          p["seq_len_q"]))
        text = text.replace(anchor, PLANTED_KV if args.work == "kv" else PLANTED_STEP)
        text = text.replace("class Runner:\n", block, 1)
        runner.write_text(text)
        git(checkout, "-c", "user.name=abdiff benchmark", "-c", "user.email=abdiff@localhost",
            "commit", "-qam", f"plant {args.percent}% more work in {args.config}")
        git(args.repo, "worktree", "remove", "--force", str(checkout))
    print(f"planted on branch {args.branch} ({device}): {args.config} median {base_us:.1f} us "
          f"+ {extra_us:.2f} us ({args.percent}%) = {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
