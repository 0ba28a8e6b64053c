"""A fixed-seed fingerprint of abdiff.verdict.stats.latency_verdicts, for refactors that
must not change a number: the SHA-256 of every result's fields over suites of 8 configs
(plain, +5% on half of them, two-level, an odd process, missing rounds, a coarse timer) at
2, 5, 10, 15 and 17 rounds, without looks and with two plans, paired, unpaired and
unpaired with a drift. Run it before and after the change: the same line, or a change.

Usage: python lab/verdicts_fingerprint.py [--repeats 2]  (about 30 s a repeat on 2 cores)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib

import numpy as np

from abdiff.verdict import stats
from abdiff.verdict.sequential import Looks

KINDS = ("plain", "shift", "bimodal", "odd", "missing", "coarse")


def suite(rng: np.random.Generator, kind: str, rounds: int, configs: int = 8
          ) -> list[stats.ConfigRounds]:
    """Round medians (us) of one suite of `kind`."""
    out = []
    for c in range(configs):
        base = 100.0 * (1 + c)
        a: dict[int, float] = {}
        b: dict[int, float] = {}
        for r in range(rounds):
            if kind == "coarse":  # a timer that rounds to 1 us
                a[r] = float(round(100 + rng.normal(0, 1)))
                b[r] = float(round(101 + rng.normal(0, 1)))
                continue
            ra = base * np.exp(rng.normal(0, 0.02))
            rb = base * np.exp((0.05 if kind == "shift" else 0.0) * (c % 2)
                               + rng.normal(0, 0.02))
            if kind == "bimodal":
                ra *= 1.1 if rng.random() < 0.4 else 1.0
                rb *= 1.1 if rng.random() < 0.4 else 1.0
            if kind == "odd" and r == 3:
                rb *= 1.3
            missing = 0.15 if kind == "missing" else 0.0
            if rng.random() >= missing:
                a[r] = float(ra)
            if rng.random() >= missing:
                b[r] = float(rb)
        out.append(stats.ConfigRounds(a, b))
    return out


def fingerprint(repeats: int) -> tuple[int, str]:
    """(results fingerprinted, their SHA-256)."""
    rng = np.random.default_rng(12345)
    drift = stats.Drift(shared=0.0001, own=0.00005, sessions=4, df=20.0)
    lines = []
    for _ in range(repeats):
        for rounds in (2, 5, 10, 15, 17):
            for kind in KINDS:
                configs = suite(rng, kind, rounds)
                for looks in (None, Looks(5, 15), Looks(5, 17, 5)):
                    for paired, side_drift in ((True, None), (False, None), (False, drift)):
                        results = stats.latency_verdicts(configs, looks=looks, paired=paired,
                                                         drift=side_drift)
                        lines.append(repr([dataclasses.astuple(r) for r in results]))
    return len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    count, digest = fingerprint(parser.parse_args().repeats)
    print(count, digest)


if __name__ == "__main__":
    main()
