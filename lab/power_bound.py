"""How much power a test could have on simulated or recorded rounds: tests that know the noise.

Issue 17 asks for 95% power at +5% with 10 rounds per side and family-wise A/A false
alarms <= 1% on synthetic data at the noise measured on real CPU rounds. abdiff's rule
finds 20.8% there (docs/statistics.md). This script asks whether any rule could do
better, by giving rules what no real rule has: the exact null distribution.

Data: benchmarks/calibration.py's generator (`simulate`, its PROFILES), 12 configs, the
round medians (log) of `--rounds` rounds per side, one look. For each statistic T per
config, standardized by its sd over A/A suites, the critical value c is the (1 - fwer)
quantile of the largest |T| over the configs of an A/A suite, so every test below has
family-wise false alarms of exactly `fwer` (the configs' dependence through shared
process noise and drift included); its power is the share of suites in which T > c for
the config whose B was shifted by `--shift` (each config in turn).

- mean: difference of the sides' mean log round medians. For normal round noise of
  known variance this is the most powerful test of a shift (Neyman-Pearson); no test
  that must estimate the variance from the same rounds does better.
- median, Huber: robust location differences (Huber's M-estimate with the config's
  round sd as known scale, k = 1.345), which gain where the round noise is heavy-tailed
  (the generator draws process and config offsets from Student t with 4 d.o.f.) or
  falls into process states (recorded GPU rounds).
- paired median: the median of B - A per round index; in a simulated run A's and B's
  round i share a block of the ABBA schedule, so the difference cancels drift over the
  run (a replay shuffles the recorded rounds: its pairs are random). The paired mean is
  the mean difference itself.

With `--replay`, each recorded config's rounds are split at random into the two sides
(at `--rounds` per side, at most half its rounds), as calibration.py's replay does.

Real rules must also estimate the variance: "Welch, Bonferroni" is Welch's t-test at
fwer / configs two-sided without a practical threshold, the plain test abdiff's verdict
builds on.

    python benchmarks/power_bound.py                          # cpu-2core, 10 rounds
    python benchmarks/power_bound.py --profiles cpu-2core,cpu-quiet --rounds 10,20,30
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibration import (  # noqa: E402
    N_CONFIGS,
    PROFILES,
    Budget,
    format_table,
    load_replay,
    simulate,
)

from abdiff.errors import InputError  # noqa: E402

HUBER_K = 1.345  # 95% efficiency at the normal


def huber_location(x: np.ndarray, scale: float, steps: int = 30) -> np.ndarray:
    """Huber's M-estimate of location along the last axis, scale known (IRLS from the median)."""
    mu = np.median(x, axis=-1)
    for _ in range(steps):
        r = (x - mu[..., None]) / scale
        w = np.minimum(1.0, HUBER_K / np.maximum(np.abs(r), 1e-12))
        mu = (w * x).sum(-1) / w.sum(-1)
    return mu


def location_differences(log_a: np.ndarray, log_b: np.ndarray,
                         scale: np.ndarray) -> dict[str, np.ndarray]:
    """Each oracle statistic per (run, config), from log round medians (runs, configs, rounds);
    `scale` is each config's round sd (the Huber estimate's known scale)."""
    scale = scale[None, :, None]
    return {
        "mean": log_b.mean(-1) - log_a.mean(-1),
        "median": np.median(log_b, -1) - np.median(log_a, -1),
        "Huber": huber_location(log_b, scale) - huber_location(log_a, scale),
        "paired median": np.median(log_b - log_a, -1),
    }


def simulated(profile_name: str, runs: int, rounds: int, iterations: int,
              seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log round medians (runs, configs, rounds) of simulated A/A suites, and each config's
    round sd (the profile's), in chunks of 500 suites to bound memory."""
    budget = Budget(rounds, rounds, 2, iterations)
    parts_a, parts_b = [], []
    for child in seed.spawn(max(1, runs // 500)):
        a, b = simulate(PROFILES[profile_name], np.zeros(N_CONFIGS), min(500, runs), budget,
                        np.random.default_rng(child))
        parts_a.append(np.log(np.median(a, -1)))
        parts_b.append(np.log(np.median(b, -1)))
    return (np.concatenate(parts_a), np.concatenate(parts_b),
            np.full(N_CONFIGS, PROFILES[profile_name].round_sd))


def replayed(paths: list[Path], runs: int, rounds: int,
             seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A/A suites from recorded rounds: every recorded config's log round medians split at
    random into two sides of `rounds` (at most half its rounds), and each config's round sd."""
    pool = [np.log([np.median(r) for r in rec]) for _, rec in load_replay(paths, 2 * rounds)]
    if not pool:
        raise InputError(f"no config with {2 * rounds}+ ok rounds in "
                         + " ".join(map(str, paths)))
    rng = np.random.default_rng(seed)
    a = np.empty((runs, len(pool), rounds))
    b = np.empty_like(a)
    for c, medians in enumerate(pool):
        order = rng.permuted(np.tile(np.arange(len(medians)), (runs, 1)), axis=1)
        a[:, c], b[:, c] = medians[order[:, :rounds]], medians[order[:, rounds:2 * rounds]]
    return a, b, np.array([np.std(m, ddof=1) for m in pool])


def bound_rows(label: str, log_a: np.ndarray, log_b: np.ndarray, scale: np.ndarray,
               shift: float, fwer: float) -> list[list[str]]:
    """One row per test: its family-wise A/A false alarms and its power at +shift.

    Every statistic is shift-equivariant (B + d moves it by d), so the shifted suites are
    the A/A suites with config k's B moved by log(1 + shift), k rotating over the configs.
    Statistics are standardized by each config's A/A sd, so one critical value serves
    configs of different noise.
    """
    rounds = str(log_a.shape[-1])
    rows = []
    for name, t in location_differences(log_a, log_b, scale).items():
        sd = t.std(0)
        critical = np.quantile(np.abs(t / sd).max(-1), 1 - fwer)
        power = float(((t + np.log1p(shift)) / sd > critical).mean())
        rows.append([label, rounds, f"oracle {name}", f"{fwer:.1%} (calibrated)",
                     f"{power:.1%}"])
    level = fwer / log_a.shape[1]
    null = sps.ttest_ind(log_b, log_a, axis=-1, equal_var=False).pvalue
    shifted = [sps.ttest_ind(log_b[:, k] + np.log1p(shift), log_a[:, k], axis=-1,
                             equal_var=False) for k in range(log_a.shape[1])]
    power = float(np.mean([(w.pvalue < level) & (w.statistic > 0) for w in shifted]))
    rows.append([label, rounds, "Welch, Bonferroni", f"{(null < level).any(-1).mean():.1%}",
                 f"{power:.1%}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", default="cpu-2core",
                        help=f"comma-separated, from {', '.join(PROFILES)}")
    parser.add_argument("--replay", type=Path, nargs="+",
                        help="abdiff.run/1 files or folders of them, instead of simulated suites")
    parser.add_argument("--rounds", default="10", help="rounds per side, comma-separated")
    parser.add_argument("--runs", type=int, default=10000, help="A/A suites per row")
    parser.add_argument("--shift", type=float, default=0.05)
    parser.add_argument("--fwer", type=float, default=0.01)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args(argv)
    unknown = [p for p in args.profiles.split(",") if p not in PROFILES]
    if unknown and not args.replay:
        print(f"power_bound: unknown profile {unknown[0]}; choose from {', '.join(PROFILES)}",
              file=sys.stderr)
        return 2
    started = time.perf_counter()
    rows = []
    for rounds in map(int, args.rounds.split(",")):
        seed = np.random.SeedSequence([args.seed, rounds])
        if args.replay:
            try:
                rows += bound_rows("replay", *replayed(args.replay, args.runs, rounds, seed),
                                   args.shift, args.fwer)
            except InputError as exc:
                print(f"power_bound: {exc}", file=sys.stderr)
                return 2
            continue
        for name in args.profiles.split(","):
            rows += bound_rows(name, *simulated(name, args.runs, rounds, args.iterations, seed),
                               args.shift, args.fwer)
    print(f"{args.runs} A/A suites per row; power: one config +{args.shift:.0%}, one look\n")
    print(format_table(["data", "rounds/side", "test", "A/A false alarms",
                        f"power +{args.shift:.0%}"], rows))
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
