"""Two comparison tests on the odd-process suites of lab/verdicts_v4.py at 5 rounds per side
(the same fixed seeds), beside abdiff's plan of 5 rounds:

- `student`: what a user would do by hand: each config's mean of the 5 pair differences
  (log), every pair whose shift shared by all configs stands 10% or more from the
  others' taken off (no cap), Student's t with 4 df, Bonferroni over the 12 configs at 1%.
- `known-scale`: the same mean over each config's true round SD (the suite's own, known
  only to the simulation), its family threshold the 99th percentile of the largest such
  |z| over the A/A suites themselves (so its A/A is 1% by construction): what knowing
  the noise, scale and law, would buy. It leaves out the two-level configs (0 and 7),
  whose SD says nothing of their levels.

Prints the A/A family rate and the share of +5% runs whose changed config (6) is found
slower, for each.

    python lab/few_pairs_bound.py [--runs 2000]
"""

from __future__ import annotations

import argparse
import math
import sys
import zlib
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import verdicts_v4  # noqa: E402  (its odd-process suites)

PAIRS = 5
LEVEL = 0.01
CHANGED = verdicts_v4.CHANGED["odd-process"]
TWO_LEVEL = (0, 7)


def differences(scenario: str, run: int) -> np.ndarray:
    """(configs, PAIRS) log pair differences of one suite, odd pairs' shared shift off."""
    seed = [zlib.crc32(f"odd-process:{scenario}".encode()), run]
    log_a, log_b = verdicts_v4.suite("odd-process", scenario, np.random.default_rng(seed))
    d = (log_b - log_a)[:, :PAIRS]
    shared = np.median(d, axis=0)
    off = shared - np.median(shared)
    return d - np.where(np.abs(off) > math.log1p(0.10), off, 0.0)[None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    runs = parser.parse_args().runs
    configs = len(verdicts_v4.H200_SD)
    sd = np.array(verdicts_v4.H200_SD)
    sd[list(TWO_LEVEL)] = 0.003
    others = [c for c in range(configs) if c not in TWO_LEVEL]
    counts = {(test, scenario): 0 for test in ("student", "known-scale")
              for scenario in ("aa", "+5%")}
    peaks, changed_z = [], []
    for scenario in ("aa", "+5%"):
        for run in range(runs):
            d = differences(scenario, run)
            mean = d.mean(axis=1)
            t = np.abs(mean) / (d.std(axis=1, ddof=1) / math.sqrt(PAIRS))
            student = 2 * scipy_stats.t.sf(t, PAIRS - 1) * configs <= LEVEL
            z = mean / (math.sqrt(2) * sd / math.sqrt(PAIRS))
            if scenario == "aa":
                counts["student", scenario] += bool(student.any())
                peaks.append(float(np.abs(z[others]).max()))
            else:
                counts["student", scenario] += bool(student[CHANGED] and mean[CHANGED] > 0)
                changed_z.append(float(z[CHANGED]))
    threshold = float(np.quantile(peaks, 1 - LEVEL))
    counts["known-scale", "aa"] = sum(peak > threshold for peak in peaks)
    counts["known-scale", "+5%"] = sum(z > threshold for z in changed_z)
    print(f"known-scale threshold |z| > {threshold:.2f}")
    for test in ("student", "known-scale"):
        print(f"{test:12} A/A {counts[test, 'aa'] / runs:6.1%}   "
              f"+5% found {counts[test, '+5%'] / runs:6.1%}   ({runs} runs each)")


if __name__ == "__main__":
    main()
