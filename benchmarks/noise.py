"""Round-to-round and iteration-to-iteration variation per config, from run files.

    python benchmarks/noise.py RUNFILE [RUNFILE ...]

Round-to-round: coefficient of variation of the round medians (between-process
noise, what the statistics must cover). Iteration-to-iteration: the P10-P90
spread inside a round relative to its median (median over rounds).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from tabulate import tabulate

from abdiff import stats
from abdiff.records import load_run_file


def main(paths: list[str]) -> int:
    rows = []
    for path in paths:
        run = load_run_file(Path(path))
        for config in run.configs:
            rounds = [np.asarray(r.latency_us) for r in config.rounds
                      if r.status == "ok" and r.latency_us]
            if len(rounds) < 2:
                continue
            medians = np.array([stats.round_summary(r) for r in rounds])
            spread = np.median([(np.percentile(r, 90) - np.percentile(r, 10)) / np.median(r)
                                for r in rounds])
            rows.append([f"{run.rev}", config.id, len(rounds), f"{np.median(medians):.1f}",
                         f"{stats.round_variation(rounds):.1%}",
                         f"{100 * spread:.1f}%"])
    print(tabulate(rows, headers=["rev", "config", "rounds", "median us",
                                  "round-to-round CV", "within-round P10-P90"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
