"""Round-to-round and iteration-to-iteration variation per config, from run files.

    python benchmarks/noise.py RUNFILE [RUNFILE ...]
    python benchmarks/noise.py --by-round RUNFILE [RUNFILE ...]
    python benchmarks/noise.py --summary RUNFILE [RUNFILE ...]

Round-to-round: coefficient of variation of the round medians (between-process
noise, what the statistics must cover). Iteration-to-iteration: the P10-P90
spread inside a round relative to its median (median over rounds).

`--summary`: one line, the median and the largest round-to-round CV over every
config-side with 3 or more rounds (how two ways of running compare).

`--by-round`: each round's median relative to the median of its config's round
medians on that side, summarised per round over every config and side. Rounds
0-1 capture kernels (rounds.KERNEL_ROUNDS); if capturing disturbed timing, their
deviations would stand out from the other rounds'.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from tabulate import tabulate

from abdiff.run.rounds import KERNEL_ROUNDS
from abdiff.store.records import load_run_file
from abdiff.verdict import stats


def variation(paths: list[str]) -> str:
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
    return tabulate(rows, headers=["rev", "config", "rounds", "median us",
                                   "round-to-round CV", "within-round P10-P90"])


def round_cv(paths: list[str]) -> tuple[int, float, float] | None:
    """(config-sides, median, largest) round-to-round CV over the run files' config-sides
    with 3 or more rounds; None when there is none."""
    cvs = []
    for path in paths:
        for config in load_run_file(Path(path)).configs:
            rounds = [np.asarray(r.latency_us) for r in config.rounds
                      if r.status == "ok" and r.latency_us]
            if len(rounds) >= 3:
                cvs.append(stats.round_variation(rounds))
    return (len(cvs), float(np.median(cvs)), float(np.max(cvs))) if cvs else None


def summary_line(paths: list[str]) -> str:
    cv = round_cv(paths)
    if cv is None:
        return "no config-side with 3 or more rounds"
    return f"{cv[0]} config-sides, round-to-round CV median {cv[1]:.2%}, max {cv[2]:.2%}"


def round_deviations(paths: list[str]) -> dict[int, list[float]]:
    """Round index -> each config's (round median / median of its round medians - 1)."""
    by_round: dict[int, list[float]] = defaultdict(list)
    for path in paths:
        for config in load_run_file(Path(path)).configs:
            rounds = [(r.round, stats.round_summary(np.asarray(r.latency_us)))
                      for r in config.rounds if r.status == "ok" and r.latency_us
                      and r.round is not None]
            if len(rounds) < 3:
                continue
            center = float(np.median([m for _, m in rounds]))
            for index, median in rounds:
                by_round[index].append(median / center - 1.0)
    return dict(sorted(by_round.items()))


def by_round_table(paths: list[str]) -> str:
    rows = []
    for index, devs in round_deviations(paths).items():
        values = np.asarray(devs)
        rows.append([index, "yes" if index < KERNEL_ROUNDS else "", len(values),
                     f"{np.mean(values):+.2%}", f"{np.median(np.abs(values)):.2%}",
                     f"{np.max(np.abs(values)):.2%}"])
    return tabulate(rows, headers=["round", "kernel capture", "config-sides",
                                   "mean deviation", "median |deviation|", "max |deviation|"])


def main(args: list[str]) -> int:
    if args[:1] == ["--by-round"]:
        print(by_round_table(args[1:]))
    elif args[:1] == ["--summary"]:
        print(summary_line(args[1:]))
    else:
        print(variation(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
