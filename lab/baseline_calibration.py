"""Calibration of comparisons against a stored baseline (`abdiff baseline:X..X`): the family
false-alarm rate when B is the baseline's own commit measured in a later session, and the
power at +5%.

Three parts (docs/baselines.md publishes what they print):

- `--real`: for real, on this machine. The demo repository is built in a temporary folder,
  `abdiff baseline refresh cal --rev pr` records a baseline of `pr` (its default
  sessions, `--session-gap` apart), then `abdiff baseline:cal..pr` runs PAIRS times, each
  a later session; per pair: the exit code, the configs flagged slower or faster, and
  whether latency gated (the baseline's drift measured). A small suite keeps it short
  (lab/data/small-mtp.yaml: four configs).
- `--replay`: the recorded H200 graph-replay sessions of the demo's `pr` (tests/data/h200:
  the refresh, the A/A, side B of main..pr, and `pr` against the baseline, minutes apart
  on 2026-12-02; their first 5 rounds, the ones that ran every config in each process):
  every session against a baseline of two or three of the others, with B's rounds
  subsampled (every 3, 4 and 5 of its 5 rounds), as measured and with every latency of
  B x 1.05. The same code path as `abdiff compare` (abdiff.verdict.compare.compare_runs with
  baselines.drift_allowance).
- `--simulate`: the method under its own model, many times: 12 configs, round noise of
  the H200 A/A's per-config SDs, a session offset common to all configs of SD `sigma`
  plus a per-config one, a baseline of `--sessions` sessions of 5 rounds and B one
  session of 5 rounds; the drift estimated from the baseline as abdiff does.

Usage (from the repository root):
    python lab/baseline_calibration.py --replay
    python lab/baseline_calibration.py --simulate [--runs 2000] [--scenario 3,0.02,0 ...]
    python lab/baseline_calibration.py --real [--pairs 20] [--rounds 5] [--session-gap 30]
        [--suite lab/data/small-mtp.yaml] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from abdiff.store.baselines import append_rounds, drift_allowance, session_drift
from abdiff.store.records import ConfigRuns, RoundRecord, RunFile, load_run_file
from abdiff.verdict.compare import compare_runs

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "data" / "h200"
# the recorded sessions of the demo's `pr` (eaf94e877c) on one H200, 2026-12-02
H200_SESSIONS = {"refresh": "baseline-graph-reference.json", "aa": "graph-pr..pr-a.json",
                 "main-pr": "graph-main..pr-b.json", "fresh": "baseline-graph..pr-b.json"}
FIRST_ROUNDS = 5
H200_SD = (0.0206, 0.0032, 0.0020, 0.0016, 0.0013, 0.0010, 0.0082, 0.0099, 0.0232, 0.0143,
           0.0089, 0.0087)  # per config round SD of the 60+60-round H200 A/A (lab/verdicts.py)
MIN_EFFECT, ALPHA = 0.02, 0.01


def recorded(path: str, session: str, scale: float = 1.0,
             keep: tuple[int, ...] | None = None) -> RunFile:
    """A recorded run file as one session's first rounds (`keep`: those round numbers)."""
    run = load_run_file(H200 / path)
    run.sessions = {session: {"started": "2026-12-02", "host": "h200"}}
    for config in run.configs:
        config.rounds = [r for r in config.rounds
                         if r.round is not None and r.round < FIRST_ROUNDS
                         and (keep is None or r.round in keep)]
        for record in config.rounds:
            record.session = session
            record.latency_us = [x * scale for x in record.latency_us]
    return run


def outcome(baseline: RunFile, b: RunFile) -> dict:
    """What `abdiff baseline:..` decides: flags, flags that gate, exit code."""
    allowed = drift_allowance(baseline, b, "baseline", {})
    result = compare_runs(baseline, b, {}, MIN_EFFECT, ALPHA, gates=allowed.gates,
                          drift=allowed.drift)
    flagged = [c for c in result.configs if c.latency.verdict in ("slower", "faster")]
    return {"exit": result.summary["exit_code"], "flagged": len(flagged),
            "slower": sum(c.latency.verdict == "slower" for c in result.configs),
            "configs": len(result.configs), "measured": allowed.drift is not None}


def replay() -> None:
    names = list(H200_SESSIONS)
    subsets = [tuple(s) for n in (3, 4, 5) for s in itertools.combinations(range(5), n)]
    rows: dict[str, list[dict]] = {f"{label}, {size} sessions": [] for size in (2, 3)
                                   for label in ("A/A", "+5%")}
    sessions_pairs = 0
    for left_out in names:
        others = [n for n in names if n != left_out]
        for size in (2, 3):
            for chosen in itertools.combinations(others, size):
                sessions_pairs += 1
                for keep in subsets:
                    for label, scale in (("A/A", 1.0), ("+5%", 1.05)):
                        runs = [recorded(H200_SESSIONS[n], n) for n in chosen]
                        baseline = runs[0]
                        for run in runs[1:]:
                            baseline = append_rounds(baseline, run)
                        b = recorded(H200_SESSIONS[left_out], left_out, scale, keep)
                        rows[f"{label}, {size} sessions"].append(outcome(baseline, b))
    print(f"replay of the recorded H200 sessions: {sessions_pairs} (baseline sessions, B "
          f"session) pairs x {len(subsets)} subsets of B's rounds")
    for label, found in rows.items():
        runs = len(found)
        fails = sum(r["exit"] == 1 for r in found)
        any_flag = sum(r["flagged"] > 0 for r in found)
        all_slower = sum(r["slower"] == r["configs"] for r in found)
        print(f"  {label}: {runs} comparisons; exit 1 in {fails} ({fails / runs:.1%}); any "
              f"latency flagged in {any_flag} ({any_flag / runs:.1%}); every config slower "
              f"in {all_slower} ({all_slower / runs:.1%})")


def synthetic(rng: np.random.Generator, sessions: dict[str, float], shift: float,
              config_sd: float) -> RunFile:
    """A run of 12 configs: per session its common offset, per config and session an own
    offset of SD `config_sd`, FIRST_ROUNDS rounds of t(3) noise scaled to H200_SD."""
    configs = []
    for c, sd in enumerate(H200_SD):
        rounds = []
        for sid, offset in sessions.items():
            own = rng.normal(0, config_sd)
            for _ in range(FIRST_ROUNDS):
                noise = sd * rng.standard_t(3) / math.sqrt(3)
                rounds.append(RoundRecord("ok", latency_us=[100.0 * math.exp(
                    offset + own + noise + shift)], round=len(rounds), session=sid))
        configs.append(ConfigRuns(f"c{c}", {}, rounds))
    return RunFile("pr", "0" * 40, "reference", "sim", {}, configs,
                   sessions={sid: {"host": "sim"} for sid in sessions})


SCENARIOS = ((3, 0.0, 0.0), (3, 0.005, 0.0), (3, 0.005, 0.003), (3, 0.02, 0.0),
             (5, 0.005, 0.0), (2, 0.005, 0.0))  # sessions, shared SD, a config's own SD


def simulate(runs: int, seed: int, scenarios: tuple[tuple[int, float, float], ...]) -> None:
    rng = np.random.default_rng(seed)
    print(f"simulation: {runs} baseline comparisons per row (12 configs, 5 rounds a session)")
    for sessions, sigma, config_sd in scenarios:
        found: dict[str, list[dict]] = {"A/A": [], "+5%": []}
        for i in range(runs):
            offsets = {f"s{i}-{k}": rng.normal(0, sigma) for k in range(sessions)}
            baseline = synthetic(rng, offsets, 0.0, config_sd)
            offset_b = rng.normal(0, sigma)
            for label, shift in (("A/A", 0.0), ("+5%", math.log(1.05))):
                b = synthetic(np.random.default_rng(i + 10**6), {f"b{i}": offset_b}, shift,
                              config_sd)
                found[label].append(outcome(baseline, b))
        drift = session_drift(baseline)
        parts = []
        for label, rows in found.items():
            fails = sum(r["exit"] == 1 for r in rows)
            parts.append(f"{label} exit 1 in {fails / len(rows):.1%}")
        shared, own = (drift.shared, drift.own) if drift else (0.0, 0.0)
        print(f"  {sessions} sessions, session SD {sigma:.1%} common + {config_sd:.1%} per "
              f"config: {'; '.join(parts)} (last estimate: shared {shared:.2%}, own {own:.2%})")


def abdiff(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "abdiff.cli", *map(str, args)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)


def real(pairs: int, rounds: int, gap: float, suite: Path, out: Path | None) -> None:
    from abdiff.demo import build_demo_repo

    work = Path(tempfile.mkdtemp(prefix="abdiff-baseline-cal-"))
    out = out or work / "results"
    out.mkdir(parents=True, exist_ok=True)
    repo, cache = work / "demo", work / "cache"
    build_demo_repo(repo)
    common = ("--configs", suite.resolve(), "--cache-dir", cache, "--rounds", rounds)
    started = time.monotonic()
    done = abdiff("baseline", "refresh", "cal", "--rev", "pr", "--session-gap", gap, *common,
                  cwd=repo)
    if done.returncode:
        sys.exit(f"refresh failed ({done.returncode}): {done.stderr[-2000:]}")
    shown = abdiff("baseline", "show", "cal", cwd=repo)
    drift_line = next((line for line in shown.stdout.splitlines()
                       if line.startswith("session drift")), "")
    print(f"baseline of pr: {time.monotonic() - started:.0f} s; {drift_line}", flush=True)
    rows = []
    for i in range(pairs):
        time.sleep(gap)
        path = out / f"pair-{i}.json"
        done = abdiff("baseline:cal..pr", *common, "--json", path, cwd=repo)
        result = json.loads(path.read_text()) if path.exists() else None
        if result is None:
            print(f"pair {i}: exit {done.returncode}, no result: {done.stderr[-500:]}")
            continue
        flagged = [c["id"] for c in result["configs"]
                   if c["latency"]["verdict"] in ("slower", "faster")]
        drift = result["summary"].get("drift") or {}
        rows.append({"exit": done.returncode, "flagged": flagged,
                     "measured": drift.get("measured")})
        print(f"pair {i}: exit {done.returncode}, latency flagged in {len(flagged)} of "
              f"{len(result['configs'])} configs, drift "
              + ("measured" if drift.get("measured") else f"not measured: {drift.get('missing')}")
              + f" ({time.monotonic() - started:.0f} s)", flush=True)
    fails = sum(r["exit"] == 1 for r in rows)
    gated = [r for r in rows if r["measured"]]
    soft = [r for r in rows if not r["measured"]]
    print(f"real A/A against a baseline: {len(rows)} pairs; exit 1 (a false alarm) in {fails}; "
          f"drift measured (latency gated) in {len(gated)}, latency flagged in "
          f"{sum(bool(r['flagged']) for r in gated)} of those; drift not measured (latency "
          f"soft) in {len(soft)}, latency flagged (reported, not failing) in "
          f"{sum(bool(r['flagged']) for r in soft)} of those; results in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--real", action="store_true")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--scenario", action="append", metavar="SESSIONS,SHARED,OWN",
                        help="e.g. 3,0.02,0: a baseline of 3 sessions, SD 2%% shared by the "
                        "configs, none of their own (default: the SCENARIOS rows)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--session-gap", type=float, default=30.0)
    parser.add_argument("--suite", type=Path, default=ROOT / "lab" / "data" / "small-mtp.yaml")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.replay:
        replay()
    if args.simulate:
        chosen = tuple((int(n), float(a), float(b)) for n, a, b in
                       (text.split(",") for text in args.scenario)) if args.scenario else SCENARIOS
        simulate(args.runs, args.seed, chosen)
    if args.real:
        real(args.pairs, args.rounds, args.session_gap, args.suite, args.out)


if __name__ == "__main__":
    main()
