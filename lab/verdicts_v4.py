"""Calibration of verdicts v4 (no regression hidden, robust to odd processes): the rule as shipped
(abdiff.verdict.stats) beside verdicts v3 (loaded from git, commit V3_COMMIT, not copied)
on the same rounds.

Suites: 12 configs x 15 interleaved rounds (A and B of round r in one ABBA block), every
config with the per-config round noise of the recorded 60+60-round H200 A/A (SD 0.1-2.3%,
Student-t with 3 df) and a machine state hitting both sides (two levels 3% apart,
switching), as `h200-like` of lab/verdicts.py, and:

- `two-level`: configs 0, 3, 6, 9 land per process on either of two levels 4% apart
  (0.3% within a level), independently on each side: the A/A family with
  two-level configs.
- `partial-30-8`: config 0 (0.3% noise, one level) runs 8% slower in a random 30% of B's
  processes (the mean +2.4%), the rest as `two-level`; `partial-30-6.7` (+2.0%),
  `partial-50-4` (4% in half of them, +2.0%).
- `level-80`: config 0 on two levels 8% apart, A's processes on the slow one half the
  time, B's 80% (+2.4%); `level-75` (+2.0%).
- `odd-process`: `h200-like` (configs 0 and 7 on two levels 4% apart) where 8% of the
  worker processes (one per side and round, all its configs) run 25% slow: the odd-process
  suites; its shifts move config 6 (0.82% noise, the median H200 config).
- `adaptive-n` (the plan of timed iterations per round): a round's statistic is the
  median of its own timed iterations (per-iteration noise Student-t 3 df, 1-8% by
  config), on a per-process offset (between-process SD 0.3-4% by config, Student-t 3 df)
  and the machine state; rounds 0-4 time 20 iterations, later ones the config's own
  count (5, 6, 20, 60 or 200, the same for A and B of a pair: abdiff.run.iterations),
  and in a third of the configs the count changes again from pair to pair:
  heteroscedastic pairs.
- `h200-like`: lab/verdicts.py's profile (the shift moves config 0, a two-level config);
  `h200-replay` and `cpu-2core`: its other two (verdicts v3's held-out suites).

Scenarios: A/A (`aa`), or the profile's change, or `+N%` (the shifted config's B rounds
N% slower). Rules: `v4` (adaptive, looks at 5/11/15: sequential.DEFAULT_STEP), `v4 fixed N`
(one look at N rounds), the same for `v3`, and `oracle 15`: v4's statistic of the changed
config on all the suite's rounds, judged by its own sign-flip distribution at alpha 1% (a
test that knows which config moved: no family, no looks; 15 rounds). `... earlier H`
(and `quieter F`): each config's noise borrowed from H earlier A/A runs of the profile,
15 rounds each, their noise F times the suite's (`earlier_noises`).

Columns: `flag` (A/A: any config slower/faster; else the changed config flagged slower),
`unch` (the changed config `unchanged`; A/A: median count of `unchanged` configs),
`inc` (A/A: median count of inconclusive configs; else the changed config inconclusive),
`cfg-rounds` (rounds per side summed over configs, mean per run).

Usage: python lab/verdicts_v4.py [--runs 400] [--jobs 2] [--cells two-level:aa:v4,...]
       [--log FILE] | --summarize FILE
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from abdiff.verdict import stats
from abdiff.verdict.sequential import Looks

sys.path.insert(0, str(Path(__file__).resolve().parent))
import verdicts  # noqa: E402  (lab/verdicts.py: its held-out profiles)

V3_COMMIT = "cf9b747"
HERE = Path(__file__).resolve().parent
CONFIGS = 12
ROUNDS = 15
H200_SD = (0.0206, 0.0032, 0.0020, 0.0016, 0.0013, 0.0010, 0.0082, 0.0099, 0.0232, 0.0143,
           0.0089, 0.0087)
CHANGED = {"odd-process": 6}  # the config a change moves (config 0 elsewhere)
DEFAULT_CELLS = [
    *(f"two-level:aa:{r}" for r in ("v4", "v4 fixed 5", "v4 fixed 8", "v4 fixed 15", "v3",
                                    "v3 fixed 5", "v3 fixed 8", "v3 fixed 15")),
    *(f"{p}:change:{r}" for p in ("partial-30-8", "partial-30-6.7", "partial-50-4",
                                   "level-80", "level-75")
      for r in ("v4", "v4 fixed 5", "v4 fixed 8", "v4 fixed 15", "v3 fixed 15")),
    *(f"h200-like:{s}:{r}" for s in ("aa", "+1%", "+2%", "+3%", "+5%")
      for r in ("v4", "v4 fixed 15", "v4 fixed 8", "v3", "v3 fixed 15", "oracle 15")),
    *(f"odd-process:{s}:{r}" for s in ("aa", "+5%")
      for r in ("v4 fixed 5", "v4 fixed 10", "v4", "v4 fixed 15", "v3 fixed 5", "v3")),
]


def load_v3() -> ModuleType:
    """abdiff/stats.py of V3_COMMIT as the module `v3_stats` (git show)."""
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=HERE, text=True,
                          capture_output=True, check=True).stdout.strip()
    folder = Path(tempfile.mkdtemp(prefix="abdiff-v3-"))
    text = subprocess.run(["git", "show", f"{V3_COMMIT}:abdiff/stats.py"], cwd=root, text=True,
                          capture_output=True, check=True).stdout
    # the package layout moved since (abdiff.records -> abdiff.store.records, ...)
    text = text.replace("from abdiff.records import", "from abdiff.store.records import")
    text = text.replace("from abdiff.sequential import", "from abdiff.verdict.sequential import")
    (folder / "v3_stats.py").write_text(text)
    spec = importlib.util.spec_from_file_location("v3_stats", folder / "v3_stats.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["v3_stats"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@functools.cache
def replay_data() -> dict[str, Any]:
    """The recorded 60+60-round H200 A/A (lab/verdicts.py's `h200-replay`)."""
    data: dict[str, Any] = json.loads((HERE / "data" / "h200-aa60-medians.json").read_text())
    return data["configs"]


def suite(profile: str, scenario: str, rng: np.random.Generator) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """(A, B) log round medians, (configs, rounds), of one suite run."""
    if profile in ("h200-replay", "cpu-2core"):  # lab/verdicts.py's held-out profiles
        log_a, log_b = (verdicts.replay(replay_data(), rng) if profile == "h200-replay"
                        else verdicts.synthetic(profile, rng))
        if scenario.startswith("+"):
            log_b = log_b.copy()
            log_b[0] += math.log1p(float(scenario[1:-1]) / 100)
        return log_a, log_b
    if profile == "adaptive-n":
        return adaptive_n(scenario, rng)
    sd = np.array(H200_SD)
    two_level = {"two-level": [0, 3, 6, 9], "h200-like": [0, 7], "odd-process": [0, 7]}.get(
        profile, [3, 6, 9])
    gap = np.full(CONFIGS, math.log(1.04))
    high_share = np.full((2, CONFIGS), 0.5)
    if profile.startswith("level-"):
        two_level = [0, 3, 6, 9]
        gap[0] = math.log(1.08)
        high_share[1, 0] = int(profile.split("-")[1]) / 100
    sd[two_level] = 0.003
    sd[0] = 0.003
    switch = rng.random(ROUNDS) < 0.1
    state = np.cumsum(switch) % 2 * math.log(1.03) * (rng.random() < 0.5)
    sides = []
    for s in range(2):
        noise = sd[:, None] * rng.standard_t(3, (CONFIGS, ROUNDS)) / math.sqrt(3)
        levels = np.zeros((CONFIGS, ROUNDS))
        for c in two_level:
            levels[c] = (rng.random(ROUNDS) < high_share[s, c]) * gap[c]
        x = state[None] + noise + levels
        if profile == "odd-process":
            x += (rng.random(ROUNDS) < 0.08)[None] * math.log(1.25)
        sides.append(x)
    log_a, log_b = sides
    changed = CHANGED.get(profile, 0)
    if profile.startswith("partial-"):
        _, share, size = profile.split("-")
        log_b[changed] += (rng.random(ROUNDS) < int(share) / 100) * math.log1p(
            float(size) / 100)
    if scenario.startswith("+"):
        log_b[changed] += math.log1p(float(scenario[1:-1]) / 100)
    return log_a, log_b


ADAPTIVE_COUNTS = (5, 6, 20, 60, 200)


def adaptive_n(scenario: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`adaptive-n`'s (A, B) log round medians: medians of simulated iterations, with the
    iteration count of each pair chosen as the adaptive plan does (same for A and B)."""
    within = np.linspace(0.01, 0.08, CONFIGS)
    between = np.geomspace(0.003, 0.04, CONFIGS)[rng.permutation(CONFIGS)]
    counts = np.full((CONFIGS, ROUNDS), 20)
    planned = rng.choice(ADAPTIVE_COUNTS, CONFIGS)
    counts[:, 5:] = planned[:, None]
    varying = rng.random(CONFIGS) < 1 / 3
    counts[varying, 5:] = rng.choice(ADAPTIVE_COUNTS, (int(varying.sum()), ROUNDS - 5))
    state = np.cumsum(rng.random(ROUNDS) < 0.1) % 2 * math.log(1.03) * (rng.random() < 0.5)
    sides = []
    for _ in range(2):
        x = np.empty((CONFIGS, ROUNDS))
        offsets = between[:, None] * rng.standard_t(3, (CONFIGS, ROUNDS)) / math.sqrt(3)
        for c in range(CONFIGS):
            for r in range(ROUNDS):
                iterations = within[c] * rng.standard_t(3, counts[c, r]) / math.sqrt(3)
                x[c, r] = np.median(iterations)
        sides.append(state[None] + offsets + x)
    log_a, log_b = sides
    if scenario.startswith("+"):
        log_b[0] += math.log1p(float(scenario[1:-1]) / 100)
    return log_a, log_b


def as_rounds(log_a: np.ndarray, log_b: np.ndarray, counts: list[int],
              earlier: list[Any] | None = None) -> list[Any]:
    extra = [{"earlier": e} for e in earlier] if earlier else [{}] * len(counts)
    return [stats.ConfigRounds({r: float(np.exp(log_a[c, r])) for r in range(counts[c])},
                               {r: float(np.exp(log_b[c, r])) for r in range(counts[c])},
                               **extra[c])
            for c in range(len(counts))]


def earlier_noises(profile: str, run: int, runs: int, quieter: float) -> list[Any]:
    """Each config's `EarlierNoise` from `runs` earlier A/A suites of the profile (15 rounds,
    seeds of their own), their noise `quieter` times the suite's: the machine measured
    its noise before, and may have been quieter then. Only the pairs timed like a plan of
    5 rounds (`adaptive-n`: its rounds 0-4, 20 iterations), as abdiff borrows."""
    parts = []
    for h in range(runs):
        rng = np.random.default_rng([zlib.crc32(f"earlier:{profile}".encode()), run, h])
        log_a, log_b = suite(profile, "aa", rng)
        d = stats.earlier_differences(log_a, log_b) * quieter
        parts.append(d[:, :5] if profile == "adaptive-n" else d)
    return [stats.earlier_noise([p[c] for p in parts]) for c in range(CONFIGS)]


def run_rule(module: ModuleType, log_a: np.ndarray, log_b: np.ndarray, first: int,
             most: int, earlier: list[Any] | None = None) -> tuple[list[str], int]:
    """Verdicts of `module`'s rule (an adaptive plan when most > first) and the rounds per
    side summed over configs, as abdiff's session runs the plan; `earlier`, each config's
    noise as earlier runs measured it."""
    looks = Looks(first, most) if most > first else None
    counts = [first] * len(log_a)
    while True:
        results = module.latency_verdicts(as_rounds(log_a, log_b, counts, earlier),
                                          looks=looks)
        open_ = [c for c, r in enumerate(results) if module.needs_more_rounds(r)
                 and not module.futile(r, most, configs=len(results)) and counts[c] < most]
        if not open_:
            return [r.verdict for r in results], sum(counts)
        for c in open_:
            counts[c] = min(most, counts[c] + Looks(first, most).step)


def oracle(log_a: np.ndarray, log_b: np.ndarray, changed: int, alpha: float = 0.01) -> str:
    """The changed config's verdict by a test that knows which config moved: v4's statistic
    on all the suite's rounds (moderation, odd processes, levels), its own sign-flip
    distribution at level alpha, no family, no looks (15 rounds)."""
    computed = stats.paired_statistics(log_a, log_b, stats.sign_patterns(log_a.shape[1]))
    t = np.abs(computed.location[:, changed]) / computed.se[:, changed]
    if (t >= t[0]).mean() > alpha:
        return "inconclusive"
    return "slower" if computed.location[0, changed] > 0 else "faster"


def cell(args: tuple[str, int, int]) -> tuple[str, dict[str, float]]:
    """One (profile:scenario:rule) cell over runs [start, stop) of its fixed-seed suites."""
    name, start, stop = args
    profile, scenario, rule = name.split(":")
    v3 = load_v3() if rule.startswith("v3") else None
    changed = CHANGED.get(profile, 0)
    flags = unchanged = inconclusive = rounds = 0.0
    counts_unchanged, counts_inconclusive = [], []
    for run in range(start, stop):
        rng = np.random.default_rng([zlib.crc32(f"{profile}:{scenario}".encode()), run])
        log_a, log_b = suite(profile, scenario, rng)
        if rule.startswith("oracle"):
            verdicts, used = [oracle(log_a, log_b, changed)] * CONFIGS, ROUNDS
        else:
            module = v3 if v3 is not None else stats
            words = rule.split()
            first, most = ((int(words[words.index("fixed") + 1]),) * 2 if "fixed" in words
                           else (5, ROUNDS))
            earlier = None
            if "earlier" in words:  # "earlier H" or "earlier H quieter F"
                count = int(words[words.index("earlier") + 1])
                quieter = float(words[words.index("quieter") + 1]) if "quieter" in words else 1.0
                earlier = earlier_noises(profile, run, count, quieter)
            verdicts, used = run_rule(module, log_a[:, :most], log_b[:, :most], first, most,
                                      earlier)
        rounds += used
        if scenario == "aa":
            flags += any(v in ("slower", "faster") for v in verdicts)
            counts_unchanged.append(sum(v == "unchanged" for v in verdicts))
            counts_inconclusive.append(sum(v == "inconclusive" for v in verdicts))
        else:
            flags += verdicts[changed] == "slower"
            unchanged += verdicts[changed] == "unchanged"
            inconclusive += verdicts[changed] == "inconclusive"
    out = {"runs": stop - start, "flag": flags, "unch": unchanged, "inc": inconclusive,
           "rounds": rounds}
    if scenario == "aa":
        out["unch_counts"] = counts_unchanged  # type: ignore[assignment]
        out["inc_counts"] = counts_inconclusive  # type: ignore[assignment]
    return name, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--first", type=int, default=0, help="the first run's seed index")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--cells", default=",".join(DEFAULT_CELLS))
    parser.add_argument("--log", help="append each chunk's counts to this file (JSON lines)")
    parser.add_argument("--summarize", metavar="LOG", help="only print the table of a --log")
    args = parser.parse_args()
    cells = args.cells.split(",")
    tasks = [(c, s, min(s + args.chunk, args.first + args.runs)) for c in cells
             for s in range(args.first, args.first + args.runs, args.chunk)]
    started = time.perf_counter()
    parts: list[tuple[str, dict[str, Any]]] = []
    if args.summarize:
        parts = [(line["cell"], line["part"]) for line in map(
            json.loads, Path(args.summarize).read_text().splitlines())]
        cells = list(dict.fromkeys(name for name, _ in parts))
    else:
        with multiprocessing.Pool(args.jobs) as pool, open(args.log or os.devnull, "a") as log:
            for name, part in pool.imap_unordered(cell, tasks):
                parts.append((name, part))
                log.write(json.dumps({"cell": name, "part": part}) + "\n")
                log.flush()
    totals: dict[str, dict[str, Any]] = {}
    for name, part in parts:
        total = totals.setdefault(name, {})
        for key, value in part.items():
            total[key] = total.get(key, 0) + value if not isinstance(value, list) \
                else total.get(key, []) + value
    print(f"{'profile':15} {'scenario':7} {'rule':12} {'runs':>5} {'flag':>6} {'unch':>6} "
          f"{'inc':>6} {'cfg-rounds':>10}")
    for name in cells:
        t = totals[name]
        profile, scenario, rule = name.split(":")
        runs = t["runs"]
        if scenario == "aa":
            unch = f"{np.median(t['unch_counts']):.0f}/12"
            inc = f"{np.median(t['inc_counts']):.0f}/12"
        else:
            unch, inc = f"{t['unch'] / runs:.1%}", f"{t['inc'] / runs:.1%}"
        print(f"{profile:15} {scenario:7} {rule:12} {runs:5d} {t['flag'] / runs:6.1%} "
              f"{unch:>6} {inc:>6} {t['rounds'] / runs:10.1f}")
    if not args.summarize:
        print(f"({time.perf_counter() - started:.0f} s, {args.jobs} processes)")


if __name__ == "__main__":
    main()
