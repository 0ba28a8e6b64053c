"""Make the small run files under tests/data/ from the lab's raw H200 runs.

The raw runs (57 MB) are not in the repository: `bash lab/h200_run.sh` records
them again, and git history keeps them (results/h200/ at commit 1d19bd6). Each
fixture is one raw run file less what its tests do not read (tests/data/README.md;
a result file is kept whole):

- always: per-kernel counts (`kernels`, 15 kB per config), per-kernel times
  (`kernel_us`, 15 kB) except for the configs a fixture keeps them for, and
  latencies below 1 ns (CUDA events resolve about 0.5 us);
- "lean": of each round only status, error, round, session, companion, latencies
  (the run's `orders` stay: compare.py reads each process's speed from them);
- "medians": of each round only status, round and the median of its latencies
  (lab/power_bound.py --replay reads nothing else).

    python lab/make_test_data.py RAW_DIR   # RAW_DIR: the results/h200 folder
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "h200"
PLANTED = "GEN-TRTLLM-bs32-q1-kv2049"  # lab/plant_slowdown.py: +3% of torch.cuda._sleep
UNPLANTED = "GEN-TRTLLM-bs8-q1-kv2049"
SLOW = "issue16/prestart/import-standby/pr..pr-slow"
# fixture -> (raw run file under RAW_DIR, configs whose kernel times are kept, trimming)
FIXTURES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "baseline-graph-reference.json": ("baseline-graph/reference-h200.json", (), ""),
    "baseline-graph..pr-b.json": ("baseline-graph..pr/b.json", (), ""),
    "graph-pr..pr-a.json": ("graph-pr..pr/a.json", (), ""),
    "graph-pr..pr-b.json": ("graph-pr..pr/b.json", (), ""),
    "graph-pr..pr-result.json": ("graph-pr..pr/result.json", (), "result"),
    "graph-main..pr-b.json": ("graph-main..pr/b.json", (), ""),
    "eager-pr..pr-a.json": ("pr..pr/a.json", (), ""),
    "eager-pr..pr-b.json": ("pr..pr/b.json", (), ""),
    "graph-main..pr-v1-a.json": ("cuda-graph-main..pr-v1/a.json", (), ""),
    "graph-main..pr-v1-b.json": ("cuda-graph-main..pr-v1/b.json", (), ""),
    "companions-pr..pr-a.json": ("issue16/companions/pr..pr/a.json", (), "lean"),
    "companions-pr..pr-b.json": ("issue16/companions/pr..pr/b.json", (), "lean"),
    "pr..pr-slow-a.json": (f"{SLOW}/a.json", (PLANTED, UNPLANTED), "no facts"),
    "pr..pr-slow-b.json": (f"{SLOW}/b.json", (PLANTED, UNPLANTED), "no facts"),
}
LEAN_KEYS = {"status", "error", "latency_us", "round", "session", "companion"}
MEDIAN_KEYS = {"status", "latency_us", "round"}


def trimmed(run: dict, keep_kernels: tuple[str, ...], trimming: str) -> dict:
    for config in run["configs"]:
        for record in config["rounds"]:
            record.pop("kernels", None)
            if config["id"] not in keep_kernels:
                record.pop("kernel_us", None)
            latencies = [round(x, 3) for x in record["latency_us"]]
            if trimming == "medians" and latencies:
                latencies = [round(statistics.median(record["latency_us"]), 3)]
            record["latency_us"] = latencies
            if trimming in ("lean", "medians"):
                for key in set(record) - (LEAN_KEYS if trimming == "lean" else MEDIAN_KEYS):
                    del record[key]
            if trimming == "no facts":
                record.pop("facts", None)
                record.pop("warmup", None)
    if trimming == "medians":
        run.pop("orders", None)  # which worker timed which round: compare's process speeds
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw_dir", type=Path, help="the results/h200 folder of the raw runs")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (source, keep_kernels, trimming) in FIXTURES.items():
        path = args.raw_dir / source
        if not path.is_file():
            print(f"make_test_data: {path} is missing: give the results/h200 folder of the raw "
                  "runs (git history before they were removed)", file=sys.stderr)
            return 2
        document = json.loads(path.read_text())
        # a result (abdiff.result) is small and kept whole; a run file is trimmed
        run = document if trimming == "result" else trimmed(document, keep_kernels, trimming)
        (OUT / name).write_text(json.dumps(run, separators=(",", ":")) + "\n")
        print(f"{name}: {(OUT / name).stat().st_size // 1024} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
