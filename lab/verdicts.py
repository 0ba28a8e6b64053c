"""Calibration of the latency verdicts: the family false-alarm rate and the power of the
shipped rule (abdiff.verdict.stats) against the rule it replaced (loaded from git history, not
copied), on the same rounds.

Profiles (each a suite of configs measured in interleaved rounds, A and B of round r
in one ABBA block):

- `h200-like` (synthetic): 12 configs with the round-to-round noise of the 60+60-round
  H200 A/A (per config SD 0.1-2.7%, Student-t with 3 d.o.f.: heavy tails), a machine
  state that persists over rounds and hits both sides of a block (a level switching
  between two values 3% apart, as in the issue's runs), and two configs whose worker
  processes land on two levels 4% apart (each process on either, at random).
- `h200-replay`: the recorded 60+60-round H200 A/A (data/h200-aa60-medians.json):
  each suite run draws 15 of the 60 round numbers (pairs kept) for every config.
- `cpu-2core` (synthetic): 12 configs, 3% round noise with t tails, a drifting machine
  state of 2%: the noisy 2-core CPU.

Scenarios: A/A (family false alarm: any config flagged slower or faster), and a shift
of +1/+2/+3/+5% in one config (config 0: a two-level config in `h200-like`), counted
as power when that config is flagged slower (below the threshold counts: it is shown
as a change; the column "above" counts only flags beyond the 2% threshold).

Rules: `v3` (abdiff.verdict.stats as shipped, named for the rule this script was written
for; it now runs verdicts v4, and lab/verdicts_v4.py sets v4 beside v3 loaded
from git: adaptive 5/10/15 rounds, looks spending 1%), `v3 fixed N` (one look at N
rounds), `v2` (the previous rule, commit 1d19bd6: Welch on log round medians, odd rounds,
Holm, alpha 0.005 spent over looks 5..15 by 2, the 2% veto), and the oracle `paired t`
(Bonferroni over configs on the same pairs at 15 rounds,
no looks: the best simple test on the same rounds).

Usage: python lab/verdicts.py [--runs 300] [--profiles h200-like,...] | --speed
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np
from scipy import stats as sps

from abdiff.verdict import stats
from abdiff.verdict.sequential import Looks

OLD_COMMIT = "1d19bd6"
HERE = Path(__file__).resolve().parent
SHIFTS = (0.0, 0.01, 0.02, 0.03, 0.05)
CONFIGS = 12
H200_SD = (0.0206, 0.0032, 0.0020, 0.0016, 0.0013, 0.0010, 0.0082, 0.0099, 0.0232, 0.0143,
           0.0089, 0.0087)


def load_old_rule() -> ModuleType:
    """abdiff/stats.py and abdiff/sequential.py of OLD_COMMIT as one module (git show)."""
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=HERE, text=True,
                          capture_output=True, check=True).stdout.strip()
    folder = Path(tempfile.mkdtemp(prefix="abdiff-v2-"))
    for name in ("sequential", "stats"):
        text = subprocess.run(["git", "show", f"{OLD_COMMIT}:abdiff/{name}.py"], cwd=root,
                              text=True, capture_output=True, check=True).stdout
        text = text.replace("from abdiff.sequential import", "from v2_sequential import")
        # the package layout moved since (abdiff.records -> abdiff.store.records)
        text = text.replace("from abdiff.records import", "from abdiff.store.records import")
        (folder / f"v2_{name}.py").write_text(text)
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("v2_stats", folder / "v2_stats.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["v2_stats"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def synthetic(profile: str, rng: np.random.Generator, rounds: int = 15) -> tuple[np.ndarray,
                                                                                 np.ndarray]:
    """(A, B) log round medians, (configs, rounds), of one A/A suite run."""
    if profile == "h200-like":
        sd = np.array(H200_SD)
        sd[[0, 7]] = 0.003  # the two-level configs: quiet on each level
        switch = rng.random(rounds) < 0.1
        state = np.cumsum(switch) % 2 * math.log(1.03) * (rng.random() < 0.5)
        def side() -> np.ndarray:
            noise = sd[:, None] * rng.standard_t(3, (CONFIGS, rounds)) / math.sqrt(3)
            levels = np.zeros((CONFIGS, rounds))
            levels[[0, 7]] = (rng.random((2, rounds)) < 0.5) * math.log(1.04)
            return state[None] + noise + levels
    else:
        drift = np.cumsum(rng.normal(0, 0.02 / math.sqrt(rounds), rounds))
        def side() -> np.ndarray:
            return drift[None] + 0.03 * rng.standard_t(3, (CONFIGS, rounds)) / math.sqrt(3)
    return side(), side()


def replay(data: dict, rng: np.random.Generator, rounds: int = 15) -> tuple[np.ndarray,
                                                                             np.ndarray]:
    ids = sorted(rng.choice(60, rounds, replace=False))
    sides = []
    for side in ("A", "B"):
        sides.append(np.array([[math.log(data[c][side][str(r)]) for r in ids]
                               for c in sorted(data)]))
    return sides[0], sides[1]


def as_rounds(log_a: np.ndarray, log_b: np.ndarray, counts: list[int]) -> list[
        stats.ConfigRounds]:
    return [stats.ConfigRounds({r: float(np.exp(log_a[c, r])) for r in range(counts[c])},
                               {r: float(np.exp(log_b[c, r])) for r in range(counts[c])})
            for c in range(len(counts))]


def run_v3(log_a: np.ndarray, log_b: np.ndarray, first: int, most: int) -> tuple[list[str],
                                                                                list[bool], int]:
    """Verdicts, below-threshold flags and the most rounds any config got."""
    looks = Looks(first, most) if most > first else None
    counts = [first] * len(log_a)
    while True:
        results = stats.latency_verdicts(as_rounds(log_a, log_b, counts), looks=looks)
        open_ = [c for c, r in enumerate(results) if stats.needs_more_rounds(r)
                 and not stats.futile(r, most, configs=len(results))
                 and counts[c] < most]
        if not open_:
            return ([r.verdict for r in results], [r.below_threshold for r in results],
                    max(counts))
        for c in open_:
            counts[c] = min(most, counts[c] + Looks(first, most).step)


def run_v2(old: ModuleType, log_a: np.ndarray, log_b: np.ndarray) -> tuple[list[str], int]:
    looks = old.Looks(5, 15, 2) if hasattr(old, "Looks") else None
    counts = [5] * len(log_a)

    def rounds(x: np.ndarray, c: int) -> list[list[float]]:
        return [[float(np.exp(v))] for v in x[c, :counts[c]]]

    while True:
        per = [old.compare_latency(rounds(log_a, c), rounds(log_b, c)) for c in range(len(counts))]
        results = old.latency_verdicts(per, looks=looks)
        open_ = [c for c, r in enumerate(results) if old.needs_more_rounds(r)
                 and not old.futile(r, 15) and counts[c] < 15]
        if not open_:
            return [r.verdict for r in results], max(counts)
        for c in open_:
            counts[c] = min(15, counts[c] + 2)


def run_paired_t(log_a: np.ndarray, log_b: np.ndarray, alpha: float = 0.01) -> list[str]:
    d = log_b - log_a
    test = sps.ttest_1samp(d, 0.0, axis=-1)
    flagged = test.pvalue < alpha / len(d)
    return ["slower" if f and m > 0 else "faster" if f else "unchanged"
            for f, m in zip(flagged, d.mean(axis=-1), strict=True)]


def speed(repeats: int = 5) -> None:
    """Seconds of one comparison of 16 configs x 15 rounds (the issue's budget: 2 s)."""
    rng = np.random.default_rng(1)
    configs = [stats.ConfigRounds({r: float(v) for r, v in enumerate(100 * np.exp(
        rng.normal(0, 0.01, 15)))}, {r: float(v) for r, v in enumerate(100 * np.exp(
            rng.normal(0, 0.01, 15)))}) for _ in range(16)]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        stats.latency_verdicts(configs, looks=Looks(5, 15))
        times.append(time.perf_counter() - started)
    print(f"16 configs x 15 rounds, looks 5/10/15: {min(times):.2f} s best, "
          f"{float(np.median(times)):.2f} s median of {repeats}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--profiles", default="h200-like,h200-replay,cpu-2core")
    parser.add_argument("--shifts", default=",".join(str(s) for s in SHIFTS))
    parser.add_argument("--rules", default="v3,v3 fixed 15,v3 fixed 8,v2,paired t")
    parser.add_argument("--speed", action="store_true", help="time one 16 x 15 comparison")
    args = parser.parse_args()
    if args.speed:
        speed()
        return
    old = load_old_rule()
    data = json.loads((HERE / "data" / "h200-aa60-medians.json").read_text())["configs"]
    rules = args.rules.split(",")
    print(f"{'profile':12} {'rule':13} {'shift':>6} {'flagged':>8} {'above':>6} "
          f"{'rounds':>7} {'s/run':>6}")
    for profile in args.profiles.split(","):
        for shift in (float(s) for s in args.shifts.split(",")):
            rng = np.random.default_rng(7)
            suites = [replay(data, rng) if profile == "h200-replay" else synthetic(profile, rng)
                      for _ in range(args.runs)]
            for rule in rules:
                flagged = above = rounds_used = 0
                started = time.perf_counter()
                for log_a, log_b in suites:
                    log_b = log_b.copy()
                    log_b[0] += math.log1p(shift)
                    big = [True] * len(log_a)
                    if rule == "v3":
                        verdicts, below, used = run_v3(log_a, log_b, 5, 15)
                        big = [not b for b in below]
                    elif rule.startswith("v3 fixed"):
                        n = int(rule.split()[-1])
                        verdicts, below, used = run_v3(log_a[:, :n], log_b[:, :n], n, n)
                        big = [not b for b in below]
                    elif rule == "v2":
                        verdicts, used = run_v2(old, log_a, log_b)
                    else:
                        verdicts, used = run_paired_t(log_a, log_b), 15
                    rounds_used += used
                    if shift == 0:
                        hit = any(v in ("slower", "faster") for v in verdicts)
                        flagged += hit
                        above += hit and any(v in ("slower", "faster") and b
                                             for v, b in zip(verdicts, big, strict=True))
                    else:
                        flagged += verdicts[0] == "slower"
                        above += verdicts[0] == "slower" and big[0]
                seconds = (time.perf_counter() - started) / args.runs
                print(f"{profile:12} {rule:13} {shift:6.0%} {flagged / args.runs:8.1%} "
                      f"{above / args.runs:6.1%} {rounds_used / args.runs:7.1f} {seconds:6.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
