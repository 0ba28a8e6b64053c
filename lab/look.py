"""What the look at N rounds saw, per config, from a state folder's run files: why a run
stopped there or went on (the futility rule of abdiff.verdict.stats).

For each config measured on both sides it recomputes the latency verdicts from the rounds
before N (each round's median of its timed iterations, as abdiff does), with the plan's
looks (5, 11, 15), and prints the deciding statistic, B/A, the standard error, the chance
that 15 fresh pairs would flag a change of the threshold (or of the estimate, where
larger), the conditional chance that the last look flags it given the rounds so far, and
whether abdiff finds more rounds futile.

    python lab/look.py ~/.cache/abdiff/runs/KEY --at 11
"""

from __future__ import annotations

import argparse
from pathlib import Path

from abdiff.store.records import load_run_file
from abdiff.verdict import stats
from abdiff.verdict.sequential import Looks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("state", type=Path, help="a state folder (runs/KEY) with a.json, b.json")
    parser.add_argument("--at", type=int, default=11, help="the look's rounds per side")
    parser.add_argument("--most", type=int, default=15, help="--max-rounds of the run")
    args = parser.parse_args()
    a, b = (load_run_file(args.state / name) for name in ("a.json", "b.json"))
    ids, rounds = [], []
    for config_a in a.configs:
        config_b = b.config(config_a.id)
        sides = [{r.round: stats.round_summary(r.latency_us) for r in c.rounds
                  if r.status == "ok" and r.latency_us and r.round is not None
                  and r.round < args.at} for c in (config_a, config_b) if c is not None]
        if len(sides) == 2 and min(len(s) for s in sides) >= stats.MIN_ROUNDS:
            ids.append(config_a.id)
            rounds.append(stats.ConfigRounds(sides[0], sides[1]))
    results = stats.latency_verdicts(rounds, looks=Looks(5, args.most))
    for config_id, r in zip(ids, results, strict=True):
        chances = stats.futility_chances(r, args.most, configs=len(results))
        if chances is None or r.ratio is None:
            print(f"{config_id:30s} {r.verdict}")
            continue
        print(f"{config_id:30s} {r.verdict:12s} {r.statistic or '-':16s} B/A {r.ratio:.4f} "
              f"se {r.se:.4f} fresh {chances[0]:.2f} conditional {chances[1]:.3f} "
              f"futile {stats.futile(r, args.most, configs=len(results))}")

if __name__ == "__main__":
    main()
