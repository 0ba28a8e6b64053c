"""Whether a config's place in its worker process moves its latency, from run files.

For every config-round of the given runs (state folders with a.json and b.json, or pairs
of run files' folders), the round's median against the config's median on that side, by
the config's position in its worker's order (the run file's `orders`): the median and 95th
percentile of |deviation| and the share beyond 2% per position, the signed deviation of
the first position per config, and, per run, the robust spread of the pairs' differences
d = log B - log A (MAD x 1.4826, median over configs): what a pair's shared order cancels.

    python lab/position_effect.py STATE_DIR [STATE_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path


def round_medians(config: dict) -> dict[int, float]:
    return {r["round"]: statistics.median(r["latency_us"]) for r in config["rounds"]
            if r.get("status") == "ok" and r.get("latency_us") and r.get("round") is not None}


def positions(run: dict) -> dict[tuple[int, str], int]:
    return {(order["round"], cid): i for order in run.get("orders", [])
            for i, cid in enumerate(order["ids"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("states", nargs="+", type=Path)
    args = parser.parse_args()
    by_position: dict[int, list[float]] = defaultdict(list)
    first: dict[str, list[float]] = defaultdict(list)
    for state in args.states:
        runs = {side: json.loads((state / f"{side}.json").read_text()) for side in "ab"}
        spreads = []
        for run in runs.values():
            where = positions(run)
            for config in run["configs"]:
                medians = round_medians(config)
                if len(medians) < 5:
                    continue
                middle = statistics.median(medians.values())
                for number, value in medians.items():
                    position = where.get((number, config["id"]))
                    if position is None:
                        continue
                    by_position[position].append(abs(value / middle - 1))
                    if position == 0:
                        first[config["id"]].append(value / middle - 1)
        b_configs = {c["id"]: c for c in runs["b"]["configs"]}
        for config in runs["a"]["configs"]:
            if config["id"] not in b_configs:
                continue
            a, b = round_medians(config), round_medians(b_configs[config["id"]])
            d = [math.log(b[k] / a[k]) for k in a if k in b]
            if len(d) >= 5:
                middle = statistics.median(d)
                spreads.append(1.4826 * statistics.median(abs(x - middle) for x in d))
        if spreads:
            print(f"{state}: {len(spreads)} configs, robust SD of d: median "
                  f"{100 * statistics.median(spreads):.2f}%, mean "
                  f"{100 * statistics.mean(spreads):.2f}%")
    print("position  median |dev|  95th pct  beyond 2%  config-rounds")
    for position in sorted(by_position):
        values = sorted(by_position[position])
        print(f"{position:8d}  {100 * statistics.median(values):11.2f}%  "
              f"{100 * values[int(0.95 * (len(values) - 1))]:7.2f}%  "
              f"{100 * sum(v > 0.02 for v in values) / len(values):8.1f}%  {len(values):13d}")
    print("first position, signed deviation per config (median, %):")
    for config_id, values in sorted(first.items()):
        print(f"  {config_id:30s} {100 * statistics.median(values):+6.2f}  ({len(values)})")


if __name__ == "__main__":
    main()
