"""Latency statistics: round-level tests, equivalence, multiple-comparison control.

What a verdict means (DESIGN.md, "Statistics"; the method and its calibration
are in docs/statistics.md):

- The unit of evidence is the **round** (one fresh process). Iterations inside
  a process share its state (memory placement, clocks, caches, JIT), so they
  are not independent draws; pooling them overstates the evidence by the
  number of iterations. Each round is reduced to one number
  (`round_summary`: the median of its iterations), and the tests run on those
  per-round numbers, so between-round (between-process) variance is in every
  p-value and interval.
- Differences are tested on the log scale, where a slowdown is a ratio B/A and
  between-round noise is close to multiplicative.
- **slower/faster**: Welch's t-test (`scipy.stats.ttest_ind`, `equal_var=False`)
  on the log round medians, Holm-adjusted across the configs of one run, below
  the level of the config's look (alpha itself for a run without adaptive
  rounds, else its alpha-spending share: abdiff/sequential.py), *and* the
  point ratio beyond the practical threshold `min_effect`.
- **unchanged**: an equivalence test, TOST (two one-sided Welch tests against
  +-log(1 + min_effect)), below `equivalence_alpha`.
- **inconclusive**: neither; the scheduler adds rounds (`needs_more_rounds`).
- **odd rounds** (one process far slower than the side's others) are set
  aside before the tests (`odd_rounds`) and listed; a B side with more slow
  rounds than A is tested on its own and joins the Holm family, so a change
  that makes a config sometimes slow is a finding and not noise. Where the
  other configs of each process show how fast that process ran
  (`process_offsets`), only rounds slow *beyond their process* count, and the
  rate is tested against every other config's (`pooled_odd_rate_test`);
  elsewhere against A's alone (`odd_rate_test`, Fisher exact).
- Every result carries absolute times per side and the smallest change the
  run could have detected (`detectable_effect`).

scipy has no Holm procedure (only Benjamini-Hochberg/Yekutieli in
`scipy.stats.false_discovery_control`), so Holm's step-down is the few lines in
`holm` below; every test and interval is scipy's.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as sps

from abdiff.records import LatencyResult, LatencyVerdict
from abdiff.sequential import Looks, look_level

DEFAULT_MIN_EFFECT = 0.02
"""Practical threshold and equivalence margin: changes within +-2% are "unchanged"."""

DEFAULT_ALPHA = 0.005
"""Family-wise error rate for slower/faster across the configs of one run (Holm).

The target is at most 1 false alarm per 100 A/A suite runs. The adaptive
extension's looks (5 rounds, then +2 per side up to 15) share it through alpha
spending (abdiff/sequential.py), which bounds the family's error by alpha for
normal statistics; real rounds are not exactly normal (bimodal process states,
heavy tails), which is why the level is half the 1% target. Measured
(benchmarks/calibration.py, docs/statistics.md): with the Haybittle-Peto
boundary that came before the spending, 0.01 gave about 1.0% for independent
configs with normal round noise and 1.4% on real host-timed H200 rounds, 0.005
gave 0.4-0.7% and 0.9%; with the spending, 0.005 gives 0.0-0.1% on the
simulated profiles and on 15-round H200 graph replays (the fourth run).
"""

DEFAULT_EQUIVALENCE_ALPHA = 0.05
"""Level of the TOST for "unchanged" (the standard 90% interval inside the margin).

No multiplicity adjustment is needed for equivalence: the claim "every config
is unchanged" is an intersection-union test, which holds at the per-test level.
"""

MIN_ROUNDS = 3
"""Fewer rounds than this on a side: no decisive verdict, always inconclusive.

With two rounds the between-round variance rests on one degree of freedom per
side; the t-test is formally valid but a single odd process decides it.
"""

ODD_DISTANCE = 12.0
"""A round is odd when it lies this many robust scales above the other rounds' median.

The robust scale (`odd_rounds`) is floored at ODD_SCALE_FLOOR, so a round must
be at least 6% slow. Calibrated (docs/statistics.md; 1500 A/A suite runs of
the cpu-2core profile, 5 rounds per side): at 6 scales, trimming the heavy
tails of noisy CPU rounds raised A/A false alarms from 0.13% without the rule
to 0.60%; at 12 they are 0.27%, and the GPU-like profile with 8% of processes
25% slow is decided as well as at 6.
"""

ODD_SCALE_FLOOR = 0.005
"""Smallest robust scale (log units, about 0.5%) used by the odd-round rule.

Device-timed rounds can agree to 0.05%; without a floor, a round 0.5% off would
be "odd" and quiet configs would be over-trimmed. With the floor a round must be
at least ODD_DISTANCE * 0.5% = 6% slower than the others to be set aside.
"""

PROCESS_MIN_CONFIGS = 3
"""Other configs a process must have run for its speed to be known (`process_offsets`).

With three, one of them odd cannot move their median; with fewer the process's
speed is unknown and its rounds do not count towards `pooled_odd_rate_test`.
"""

ODD_PROMISING = 0.025
"""Adaptive runs: B's slow rounds with a raw `p_odd` below this ask for more rounds.

In a quiet 12-config suite one slow B round of 5 is p = 0.021 and gets one more
block, where one of 7 (p = 0.029) stops; two of n stay below it, and their config
is measured until B's share decides (companions keep its process speed known).
Calibration (gpu-odd, B slow in 40% of processes): flagged in 33% of suites at 5
rounds, 77% adaptive at 0.025, 84% at 0.05 (a 600-suite check), where one stray
slow round would be extended for four blocks instead of one (docs/statistics.md).
"""

DETECTABLE_POWER = 0.8
"""Power at which `detectable` (the smallest change a run could see) is computed."""

CORRECTIONS = ("holm", "bh")

_METHOD = "Welch t on log round medians"


@dataclass
class LatencyStats:
    """One config's latency comparison before multiple-comparison control.

    `ratio` is B/A (the geometric mean of B's kept round medians over A's);
    `ci` is its 90% confidence interval (the TOST's); `p_difference` the raw
    two-sided Welch p-value; `p_equivalence` the TOST p-value against the
    margin (+-`min_effect`); `se` and `df` the standard error and Welch degrees
    of freedom of the log difference (for `detectable_effect`). NaN where the
    rounds do not define them. `rounds_a`/`rounds_b` count every round,
    set-aside ones included; `set_aside_a`/`_b` are the odd rounds left out of
    the test ({"round": index, "median_us": value}); `p_odd` is the one-sided
    Fisher exact p-value that B has more slow rounds (`slow_rounds`) than A,
    `odd_note` says so in words and `odd_excess` is how much slower they are.
    Where process speeds are known (`process_offsets`), `known_a`/`_b` count the
    rounds whose process speed is known and `specific_a`/`_b` those among them
    slow beyond their process; `latency_verdicts` then tests B's share against
    the other configs' (`pooled_odd_rate_test`) and replaces `p_odd`.
    """

    ratio: float
    ci: tuple[float, float]
    p_difference: float
    p_equivalence: float
    rounds_a: int
    rounds_b: int
    method: str
    se: float = float("nan")
    df: float = float("nan")
    a_us: float = float("nan")
    b_us: float = float("nan")
    a_spread_us: float = float("nan")
    b_spread_us: float = float("nan")
    set_aside_a: list[dict] = field(default_factory=list)
    set_aside_b: list[dict] = field(default_factory=list)
    p_odd: float = 1.0
    odd_note: str | None = None
    odd_excess: float = 0.0
    known_a: int = 0
    known_b: int = 0
    specific_a: int = 0
    specific_b: int = 0


@dataclass(frozen=True)
class RoundTests:
    """Vectorized results of `round_level_tests` (one entry per row)."""

    ratio: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    p_difference: np.ndarray
    p_equivalence: np.ndarray
    se: np.ndarray
    df: np.ndarray


def round_summary(latencies_us: list[float]) -> float:
    """One round's latency: the median of its timed iterations (us).

    The median, not the mean: heavy-tailed outlier iterations (a preemption, a
    page fault, a GC pause, an allocator growth) shift a mean by their size
    but a median by at most one rank, so one stray iteration cannot move a
    round. Warm-up iterations are assumed already excluded by the worker.
    """
    if len(latencies_us) == 0:
        raise ValueError("a round with no timed iterations has no latency")
    values = np.asarray(latencies_us, dtype=float)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("latencies must be positive finite numbers")
    return float(np.median(values))


def round_variation(rounds: list[list[float]]) -> float | None:
    """Round-to-round variation: sample standard deviation over mean of the round medians.

    The between-process noise the verdicts must see through; None below two rounds.
    """
    if len(rounds) < 2:
        return None
    medians = np.array([round_summary(r) for r in rounds])
    return float(medians.std(ddof=1) / medians.mean())


def odd_rounds(log_medians: np.ndarray, log_other: np.ndarray | None = None) -> np.ndarray:
    """Which rounds of one side are odd: far slower than the median of the side's other rounds.

    `log_medians` is 1-D (one side) or 2-D (rows of sides, rounds along the
    last axis); `log_other` the other side's rounds (same rows), which only
    lend the scale more rounds. Round i is odd when x_i - median(others) >
    ODD_DISTANCE * max(scale, ODD_SCALE_FLOOR), `others` being the side's
    other rounds and `scale` the normal-consistent median absolute deviation
    (`scipy.stats.median_abs_deviation`, scale="normal") of their residuals
    around that median, pooled with the other side's residuals around its
    median: leaving the round itself out keeps one slow process from widening
    the scale it is judged by, and pooling keeps a scale from four rounds from
    being small by chance. At most a minority of rounds is odd
    ((n - 1) // 2, the farthest first) and never so many that fewer than
    MIN_ROUNDS remain. Only slow rounds are odd: what makes a process odd (a
    noisy neighbour, a clock dip, an unlucky memory placement) slows it down;
    when most rounds of a side are slow, the fast ones are not set aside and
    the side's spread keeps its verdict undecided (calibration: setting aside
    fast rounds too turned 3 slow processes out of 5 into a false alarm).
    Fewer than MIN_ROUNDS + 1 rounds: none is odd.
    """
    x = np.atleast_2d(np.asarray(log_medians, dtype=float))
    rows, n = x.shape
    odd = np.zeros((rows, n), dtype=bool)
    cap = min((n - 1) // 2, n - MIN_ROUNDS)
    if cap <= 0:
        return odd.reshape(np.shape(log_medians))
    others = x[:, np.array([[j for j in range(n) if j != i] for i in range(n)])]  # (rows, n, n-1)
    center = np.median(others, axis=-1)
    residuals = others - center[..., None]
    if log_other is not None:
        y = np.atleast_2d(np.asarray(log_other, dtype=float))
        y = y - np.median(y, axis=-1, keepdims=True)
        residuals = np.concatenate(
            [residuals, np.broadcast_to(y[:, None, :], (rows, n, y.shape[-1]))], axis=-1)
    scale = np.maximum(sps.median_abs_deviation(residuals, axis=-1, scale="normal"),
                       ODD_SCALE_FLOOR)
    distance = (x - center) / scale  # slow side only: see the docstring
    order = np.argsort(-distance, axis=-1, kind="stable")[:, :cap]
    farthest = np.take_along_axis(distance, order, axis=-1) > ODD_DISTANCE
    np.put_along_axis(odd, order, farthest, axis=-1)
    return odd.reshape(np.shape(log_medians))


def robust_spread(values: np.ndarray) -> float:
    """Normal-consistent median absolute deviation (`scipy.stats.median_abs_deviation`)."""
    return float(sps.median_abs_deviation(values, scale="normal"))


@functools.lru_cache(maxsize=4096)
def odd_rate_test(slow_b: int, rounds_b: int, slow_a: int, rounds_a: int) -> float:
    """One-sided Fisher exact p-value that B's share of slow rounds exceeds A's.

    `scipy.stats.fisher_exact` on the 2x2 table (slow, other) x (B, A),
    alternative "greater": a PR that makes a config *sometimes* slow shows as
    more slow processes on B than on A, even when the odd rounds are set aside
    from the shift test.
    """
    table = [[slow_b, rounds_b - slow_b], [slow_a, rounds_a - slow_a]]
    return float(sps.fisher_exact(table, alternative="greater").pvalue)


def process_offsets(log_medians: np.ndarray) -> np.ndarray:
    """How much slower each round's process ran, judged by the process's other configs.

    `log_medians` is (..., configs, processes): log round medians of the
    processes of *both* sides, NaN where a config did not run in that process.
    A config's deviation in a process is its value minus its median over all
    processes; the offset of config c in process p is the median of the *other*
    configs' deviations in p (so an odd value of c itself is not in it), NaN
    where fewer than PROCESS_MIN_CONFIGS others ran there. A process that ran
    every config 25% slow has offset log(1.25) for each; a config slow only in
    itself keeps its slowness after the offset is taken off. Both sides share
    one reference so that, with the offsets taken off, A's and B's rounds of a
    config are on one level again: per side, a config's median would carry
    that side's share of the process noise, and a quiet config would differ
    between A and B by more than its own noise.
    """
    x = np.asarray(log_medians, dtype=float)
    configs = x.shape[-2]
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: NaN is the answer
        deviation = x - np.nanmedian(x, axis=-1, keepdims=True)
        others = np.repeat(deviation[..., None, :, :], configs, axis=-3)  # (..., c, c', p)
        others[..., np.arange(configs), np.arange(configs), :] = np.nan
        offsets = np.nanmedian(others, axis=-2)
    enough = np.isfinite(others).sum(axis=-2) >= PROCESS_MIN_CONFIGS
    return np.where(enough, offsets, np.nan)


def pooled_odd_rate_test(slow_b: np.ndarray, rounds_b: np.ndarray, slow_a: np.ndarray,
                         rounds_a: np.ndarray) -> np.ndarray:
    """One-sided p-value, per config, that B's share of rounds slow beyond their process is
    higher than this config's share would be without a change, judged by all the others.

    Inputs are per config (1-D, or rows of configs): B's and A's counts of such
    rounds (`specific_b`, `specific_a`) among those whose process speed is known.
    For config c the reference is an empirical Bayes prior: the pooled share m of
    every other config's A and B counts (with half a round added each way, so that
    none in hundreds is not taken for "never"), and how much the counts of those
    sides and c's own A side spread beyond what binomial draws give (Pearson
    dispersion, a beta-binomial intra-class correlation rho): prior Beta(m k,
    (1 - m) k) with k = (1 - rho) / rho, at most the pooled rounds + 1. That prior
    is updated with c's own A rounds, and p is the chance of B's count or more
    under the resulting beta-binomial (`scipy.stats.betabinom`). When every
    config is quiet, three of five B rounds slow is far outside what a hundred
    quiet rounds let happen by chance; when sides differ in how often they have
    odd rounds (c's A side among them), the prior widens and c's A rounds weigh
    more, so an odd-prone config is not flagged for being itself. A config with
    none on B gets 1.
    """
    xb, nb, xa, na = (np.atleast_2d(np.asarray(v, dtype=float))
                      for v in (slow_b, rounds_b, slow_a, rounds_a))
    cell_x = np.concatenate([xa, xb], axis=0)  # (2, configs)
    cell_n = np.concatenate([na, nb], axis=0)
    ref_x = cell_x.sum() - cell_x.sum(axis=0)  # leave config c out, both its sides
    ref_n = cell_n.sum() - cell_n.sum(axis=0)
    share = (ref_x + 0.5) / (ref_n + 1)
    configs = cell_x.shape[1]
    p = np.ones(configs)
    for c in range(configs):
        others = (np.arange(configs) != c) & (cell_n > 0).all(axis=0)
        x = np.append(cell_x[:, others].ravel(), xa[0, c])
        n = np.append(cell_n[:, others].ravel(), na[0, c])
        m = share[c]
        rho = 0.0
        if len(n) > 1 and n.mean() > 1:
            pearson = float(np.sum((x - n * m) ** 2 / (n * m * (1 - m))))
            rho = max(0.0, (pearson / (len(n) - 1) - 1) / (n.mean() - 1))
        weight = min((1 - rho) / rho if rho > 0 else math.inf, ref_n[c] + 1)
        if xb[0, c] > 0:
            p[c] = sps.betabinom.sf(xb[0, c] - 1, nb[0, c], m * weight + xa[0, c],
                                    (1 - m) * weight + na[0, c] - xa[0, c])
    return p


def detectable_effect(se: np.ndarray, df: np.ndarray, level: float | np.ndarray,
                      min_effect: float, power: float = DETECTABLE_POWER) -> np.ndarray:
    """Smallest relative slowdown a test with this se and df flags with `power`.

    A slowdown delta (log) is flagged when the two-sided test at `level`
    rejects and the ratio exceeds 1 + min_effect. With the usual normal-shift
    approximation of the noncentral t (Welch's statistic ~ t_df + delta/se),
    each holds with probability `power` from delta = se * (t_{1-level/2} +
    t_power) and delta = log(1 + min_effect) + se * t_power respectively
    (quantiles: `scipy.stats.t.ppf`); the larger is returned as a fraction
    (exp(delta) - 1). `level` may differ per config (its look's level). NaN
    where se or df are not finite.
    """
    se = np.asarray(se, dtype=float)
    df = np.asarray(df, dtype=float)
    with np.errstate(invalid="ignore"):
        t_power = sps.t.ppf(power, df)
        significant = se * (sps.t.ppf(1 - np.asarray(level) / 2, df) + t_power)
        practical = math.log1p(min_effect) + se * t_power
    return np.expm1(np.maximum(significant, practical))


def _compact(x: np.ndarray, kept: int) -> np.ndarray:
    """Rows' finite values first (NaN marks a set-aside round), cut to `kept` columns."""
    return np.sort(x, axis=-1)[:, :kept]


def round_level_tests(
    log_a: np.ndarray, log_b: np.ndarray, margin: float, confidence: float
) -> RoundTests:
    """Welch's t-test, its confidence interval and a TOST on per-round log summaries.

    `log_a` and `log_b` are 1-D (one comparison) or 2-D (rows of independent
    comparisons, rounds along the last axis; rows must match, round counts
    may differ between the sides). NaN marks a round left out (set aside);
    each side needs at least 2 rounds that are not NaN.

    Method: `scipy.stats.ttest_ind(log_b, log_a, equal_var=False)` (Welch,
    Welch-Satterthwaite degrees of freedom) for the difference of mean log
    round medians; its `confidence_interval(confidence)` exponentiated gives
    the ratio interval. Equivalence: two one-sided Welch tests (TOST) of
    H0: diff >= +log(1+margin) and H0: diff <= -log(1+margin); the TOST
    p-value is the larger of the two. `se` is the standard error of the
    difference (the sides' `scipy.stats.sem` combined), `df` Welch's.

    Assumptions: rounds are independent (each a fresh process, interleaved
    with the other side so slow drift hits both alike); log round medians are
    roughly normal within a side (the median of many iterations is close to
    normal; Welch's test is robust to moderate departures and does not assume
    equal variances or equal round counts). It is NOT robust to a systematic
    difference between sides that is not the code (e.g. running all A rounds
    before all B rounds while the machine heats up): the schedule's
    interleaving is what makes that assumption hold.

    Rows in which both sides are constant (no round-to-round variation at all,
    e.g. hand-written run files) have no variance to test against; for them the
    difference is exact: p_difference is 0 if the means differ and 1 if not,
    the interval is the point, and p_equivalence is 0 inside the margin, 1
    outside.
    """
    a = np.atleast_2d(np.asarray(log_a, dtype=float))
    b = np.atleast_2d(np.asarray(log_b, dtype=float))
    if a.shape[0] != b.shape[0]:
        raise ValueError("log_a and log_b must have the same number of rows")
    kept_a = np.isfinite(a).sum(axis=-1)
    kept_b = np.isfinite(b).sum(axis=-1)
    if kept_a.min(initial=2) < 2 or kept_b.min(initial=2) < 2:
        raise ValueError("each side needs at least 2 rounds for a round-level test")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be between 0 and 1")
    delta = math.log1p(margin)
    rows = a.shape[0]
    out = {name: np.empty(rows) for name in ("diff", "p_diff", "p_eq", "low", "high", "se", "df")}
    # Rows with the same kept counts are tested together (NaNs compacted away).
    for na, nb in set(zip(kept_a.tolist(), kept_b.tolist(), strict=True)):
        rows_here = (kept_a == na) & (kept_b == nb)
        va, vb = _compact(a[rows_here], na), _compact(b[rows_here], nb)
        diff = vb.mean(axis=-1) - va.mean(axis=-1)
        p_diff = np.empty(len(diff))
        p_eq = np.empty(len(diff))
        low = diff.copy()
        high = diff.copy()
        se = np.hypot(sps.sem(va, axis=-1), sps.sem(vb, axis=-1))
        df = np.full(len(diff), np.nan)
        constant = (np.ptp(va, axis=-1) == 0) & (np.ptp(vb, axis=-1) == 0)
        p_diff[constant] = np.where(diff[constant] != 0, 0.0, 1.0)
        p_eq[constant] = np.where(np.abs(diff[constant]) < delta, 0.0, 1.0)
        var = ~constant
        if var.any():
            va, vb = va[var], vb[var]
            welch = sps.ttest_ind(vb, va, equal_var=False, axis=-1)
            interval = welch.confidence_interval(confidence_level=confidence)
            # H1: diff < +delta, and H1: diff > -delta (shifting B shifts the mean only).
            upper = sps.ttest_ind(vb - delta, va, equal_var=False, axis=-1, alternative="less")
            lower = sps.ttest_ind(vb + delta, va, equal_var=False, axis=-1, alternative="greater")
            p_diff[var] = welch.pvalue
            p_eq[var] = np.maximum(upper.pvalue, lower.pvalue)
            low[var] = interval.low
            high[var] = interval.high
            df[var] = welch.df
        for name, value in (("diff", diff), ("p_diff", p_diff), ("p_eq", p_eq), ("low", low),
                            ("high", high), ("se", se), ("df", df)):
            out[name][rows_here] = value
    return RoundTests(np.exp(out["diff"]), np.exp(out["low"]), np.exp(out["high"]),
                      out["p_diff"], out["p_eq"], out["se"], out["df"])


def _round_medians(rounds: list[list[float]], round_ids: list[int] | None) -> tuple[np.ndarray,
                                                                                   list[int]]:
    """Each non-empty round's summary (us) and its round index; empty rounds are skipped."""
    ids = list(range(len(rounds))) if round_ids is None else list(round_ids)
    kept = [(round_summary(r), i) for r, i in zip(rounds, ids, strict=True) if len(r) > 0]
    return np.array([m for m, _ in kept]), [i for _, i in kept]


def set_aside(log_medians: np.ndarray, log_other: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Odd rounds of each side (row) set aside: (log medians with them as NaN, `odd_rounds`)."""
    x = np.atleast_2d(np.asarray(log_medians, dtype=float))
    odd = odd_rounds(x, log_other)
    return np.where(odd, np.nan, x), odd


def slow_rounds(log_medians: np.ndarray, kept_other: np.ndarray,
                pooled_scale: bool = False) -> np.ndarray:
    """Rounds of one side that are odd against the *other* side: per row, how many.

    The `odd_rounds` rule with the other side's kept rounds as reference:
    x_i - median(other) > ODD_DISTANCE * max(MAD(other), ODD_SCALE_FLOOR). It
    counts B's slow processes even when they are most of B's rounds (a PR that
    makes a config sometimes slow), and A's against B alike, so that under no
    change both counts have the same distribution (`odd_rate_test`). With
    `pooled_scale` the MAD is of both sides' residuals around their own medians:
    where the count is tested against the whole suite (`pooled_odd_rate_test`),
    a scale from the other side's five rounds alone that is small by chance
    would let ordinary noisy rounds count. NaN rounds (unknown) count for neither.
    """
    x = np.atleast_2d(np.asarray(log_medians, dtype=float))
    other = np.atleast_2d(np.asarray(kept_other, dtype=float))
    center = np.nanmedian(other, axis=-1, keepdims=True)
    spread = other - center
    if pooled_scale:
        spread = np.concatenate([spread, x - np.nanmedian(x, axis=-1, keepdims=True)], axis=-1)
    scale = np.maximum(sps.median_abs_deviation(spread, axis=-1, scale="normal",
                                                nan_policy="omit"), ODD_SCALE_FLOOR)
    return ((x - center) / scale[:, None] > ODD_DISTANCE).sum(axis=-1)


def slow_excess(log_b: np.ndarray, slow_b: int, kept_a: np.ndarray) -> float:
    """How much slower B's `slow_b` slowest rounds are than A: median over A's kept median, - 1."""
    if slow_b == 0:
        return 0.0
    return float(np.expm1(np.median(np.sort(log_b)[-slow_b:]) - np.nanmedian(kept_a)))


def _odd_note(slow_a: int, slow_b: int, rounds_a: int, rounds_b: int,
              excess: float, beyond: str = "") -> str | None:
    """'3 of 7 B rounds 25% slow, 0 of 7 A rounds' when B has more slow rounds than A."""
    if slow_b <= slow_a:
        return None
    return (f"{slow_b} of {rounds_b} B rounds {excess:.0%} slow{beyond}, "
            f"{slow_a} of {rounds_a} A rounds")


def _check_levels(min_effect: float, alpha: float) -> None:
    if not (math.isfinite(min_effect) and min_effect >= 0):
        raise ValueError(f"min_effect must be a non-negative number, got {min_effect}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")


def compare_latency(
    a_rounds: list[list[float]],
    b_rounds: list[list[float]],
    min_effect: float = DEFAULT_MIN_EFFECT,
    alpha: float = DEFAULT_ALPHA,
    *,
    equivalence_alpha: float = DEFAULT_EQUIVALENCE_ALPHA,
    a_round_ids: list[int] | None = None,
    b_round_ids: list[int] | None = None,
    a_offsets: dict[int, float] | None = None,
    b_offsets: dict[int, float] | None = None,
) -> LatencyStats:
    """Compare one config's latency, B against A, at the level of rounds.

    `a_rounds`/`b_rounds` hold each round's timed iteration latencies (us);
    rounds may have different iteration counts and the sides different round
    counts; `a_round_ids`/`b_round_ids` name the rounds (schedule positions,
    default 0, 1, ...). Each round becomes its median (`round_summary`). Odd
    rounds (`odd_rounds`: one slow process) are set aside per side and listed;
    `round_level_tests` compares the remaining log medians with Welch's t-test
    (two sided, `p_difference`) and a TOST against +-log(1 + min_effect)
    (`p_equivalence`). `p_odd` (`odd_rate_test`) asks whether B has more slow
    odd rounds than A: a change that makes a config only sometimes slow.
    `a_offsets`/`b_offsets` map round ids to their process's offset
    (`process_offsets`; missing or NaN: unknown); with them, slow rounds are
    counted after the offset is taken off (`specific_a`/`_b` of `known_a`/`_b`),
    so a process that ran every config slow is no finding of this config's, and
    `latency_verdicts` tests the counts against the other configs'.
    Iterations are never pooled across rounds.

    Absolute times: `a_us`/`b_us` are the median of the side's kept round
    medians, `a_spread_us`/`b_spread_us` their normal-consistent MAD.

    `ci` is the (1 - 2 * equivalence_alpha) interval of the ratio B/A, 90% by
    default: the interval the TOST uses, so "unchanged" is exactly "the
    interval lies inside +-min_effect", and every "slower"/"faster" (raw
    p < alpha < 2 * equivalence_alpha) has an interval that excludes 1.
    `alpha` is only validated here: the p-values do not depend on it, the
    family-wise level is applied by `latency_verdicts`.

    Few rounds never crash and never decide: with fewer than 2 rounds on a
    side there is no between-round variance, so `ci`, `p_difference` and
    `p_equivalence` are NaN (the ratio is still the ratio of round medians);
    `latency_verdicts` calls anything under MIN_ROUNDS inconclusive. Empty
    rounds are ignored; a non-positive or non-finite latency is a ValueError.
    """
    _check_levels(min_effect, alpha)
    if not 0 < equivalence_alpha < 0.5:
        raise ValueError(f"equivalence_alpha must be between 0 and 0.5, got {equivalence_alpha}")
    confidence = 1 - 2 * equivalence_alpha
    medians_a, ids_a = _round_medians(a_rounds, a_round_ids)
    medians_b, ids_b = _round_medians(b_rounds, b_round_ids)
    na, nb = len(medians_a), len(medians_b)
    nan = float("nan")
    if na == 0 or nb == 0:
        return LatencyStats(nan, (nan, nan), nan, nan, na, nb, f"{_METHOD}: no rounds")
    all_a, all_b = np.log(medians_a), np.log(medians_b)
    (log_a,), (odd_a,) = set_aside(all_a, all_b)
    (log_b,), (odd_b,) = set_aside(all_b, all_a)
    kept_a, kept_b = log_a[~odd_a], log_b[~odd_b]
    off_a = np.array([(a_offsets or {}).get(i, np.nan) for i in ids_a], dtype=float)
    off_b = np.array([(b_offsets or {}).get(i, np.nan) for i in ids_b], dtype=float)
    known_a, known_b = int(np.isfinite(off_a).sum()), int(np.isfinite(off_b).sum())
    process: dict[str, int] = {}
    if known_a >= MIN_ROUNDS and known_b >= 1:
        # rounds of a known process, its speed taken off: only slowness of this config counts
        own_a, own_b = all_a - off_a, all_b - off_b
        slow_a = int(slow_rounds(own_a, own_b, pooled_scale=True)[0])
        slow_b = int(slow_rounds(own_b, own_a, pooled_scale=True)[0])
        process = dict(known_a=known_a, known_b=known_b, specific_a=slow_a, specific_b=slow_b)
        odd_excess = slow_excess(own_b[np.isfinite(own_b)], slow_b, own_a)
        odd_note = _odd_note(slow_a, slow_b, known_a, known_b, odd_excess,
                             " beyond the rest of their process")
    else:
        slow_a = int(slow_rounds(all_a, kept_b)[0])
        slow_b = int(slow_rounds(all_b, kept_a)[0])
        odd_excess = slow_excess(all_b, slow_b, kept_a)
        odd_note = _odd_note(slow_a, slow_b, na, nb, odd_excess)
    sides: dict[str, Any] = dict(
        a_us=float(np.exp(np.median(kept_a))), b_us=float(np.exp(np.median(kept_b))),
        a_spread_us=robust_spread(np.exp(kept_a)), b_spread_us=robust_spread(np.exp(kept_b)),
        set_aside_a=[{"round": ids_a[i], "median_us": float(medians_a[i])}
                     for i in np.flatnonzero(odd_a)],
        set_aside_b=[{"round": ids_b[i], "median_us": float(medians_b[i])}
                     for i in np.flatnonzero(odd_b)],
        p_odd=odd_rate_test(slow_b, nb, slow_a, na), odd_note=odd_note, odd_excess=odd_excess,
        **process,
    )
    ratio = float(np.exp(kept_b.mean() - kept_a.mean()))
    if na < 2 or nb < 2:
        return LatencyStats(ratio, (nan, nan), nan, nan, na, nb,
                            f"{_METHOD}: needs 2+ rounds per side for a test", **sides)
    tests = round_level_tests(log_a, log_b, min_effect, confidence)
    method = f"{_METHOD}, {100 * confidence:g}% CI; TOST +-{100 * min_effect:g}%"
    if (np.ptp(kept_a) == 0) and (np.ptp(kept_b) == 0):
        method += " (no round-to-round variation: exact)"
    if odd_a.any() or odd_b.any():
        method += (f"; odd rounds set aside (>{ODD_DISTANCE:g} robust scales): "
                   f"{odd_a.sum()} A, {odd_b.sum()} B")
    return LatencyStats(
        ratio=float(tests.ratio[0]),
        ci=(float(tests.ci_low[0]), float(tests.ci_high[0])),
        p_difference=float(tests.p_difference[0]),
        p_equivalence=float(tests.p_equivalence[0]),
        rounds_a=na,
        rounds_b=nb,
        method=method,
        se=float(tests.se[0]),
        df=float(tests.df[0]),
        **sides,
    )


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (strong family-wise error control).

    Sorted ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j)).
    Valid under any dependence between the tests. (scipy.stats has no Holm.)
    """
    p = np.asarray(p_values, dtype=float)
    m = len(p)
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def _decidable(s: LatencyStats) -> bool:
    return (
        s.rounds_a >= MIN_ROUNDS
        and s.rounds_b >= MIN_ROUNDS
        and math.isfinite(s.p_difference)
        and math.isfinite(s.ratio)
    )


def _number(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def latency_verdicts(
    stats: list[LatencyStats],
    min_effect: float = DEFAULT_MIN_EFFECT,
    alpha: float = DEFAULT_ALPHA,
    *,
    equivalence_alpha: float = DEFAULT_EQUIVALENCE_ALPHA,
    correction: str = "holm",
    looks: Looks | None = None,
) -> list[LatencyResult]:
    """Verdicts for the configs of one run, with multiple-comparison control.

    The family is every config with a decidable test (at least MIN_ROUNDS
    rounds per side and a finite p-value). A config's p-value in the family
    is Welch's `p_difference`; when B has more slow odd rounds than A it is
    the Bonferroni combination 2 * min(p_difference, p_odd), so a change that
    makes a config only sometimes slow can be flagged too. Where process speeds
    are known for more than PROCESS_MIN_CONFIGS configs, p_odd is
    `pooled_odd_rate_test` of their counts, else `compare_latency`'s Fisher test.
    `correction`
    "holm" (default) controls the family-wise error rate strongly: even when
    some configs really change (the expected scope of a PR), the chance of
    flagging any unchanged config stays below alpha; "bh" (Benjamini-Hochberg,
    `scipy.stats.false_discovery_control`) controls only the false discovery
    rate and lets the unchanged configs be flagged more often when others
    change (calibration: docs/statistics.md).

    `looks`: the run's adaptive plan (`sequential.Looks`). A config is then tested
    at the level of the look its round count has reached, not at alpha: the
    family's level there is m times `sequential.look_level` at alpha / m (m the
    family size, so Holm's first step is exactly the spending design's per-config
    test; its later steps are at the same ratio of their own level). None: one
    look, the full alpha. `level` below means that level.

    Per config, in this order:
    - slower: adjusted p < level and ratio > 1 + min_effect, or adjusted p <
      level driven by p_odd with B's slow rounds more than min_effect slower
      than A (`note` says how many and by how much);
    - faster: adjusted p < level and ratio < 1 / (1 + min_effect);
    - unchanged: TOST p < equivalence_alpha (the ratio's 1 - 2*equivalence_alpha
      interval lies inside [1/(1+min_effect), 1+min_effect]); a significant but
      negligible change is also "unchanged", with `note` "below the 2% threshold";
    - inconclusive: anything else, including fewer than MIN_ROUNDS rounds.

    `detectable` is `detectable_effect` at level / (family size), the strictest
    level Holm tests a config at. `min_effect` must be the one given
    to `compare_latency` (it set the TOST margin). The result's `p` is the
    **adjusted** p-value (None when the config is not in the family),
    `p_equivalence` the raw TOST p (no adjustment, see
    DEFAULT_EQUIVALENCE_ALPHA), `ci` the per-config 90% interval of
    `compare_latency`.
    """
    _check_levels(min_effect, alpha)
    if not 0 < equivalence_alpha < 1:
        raise ValueError(f"equivalence_alpha must be between 0 and 1, got {equivalence_alpha}")
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    family = [i for i, s in enumerate(stats) if _decidable(s)]
    pooled = [i for i, s in enumerate(stats) if s.known_b > 0]
    p_odd = [s.p_odd for s in stats]
    if len(pooled) > PROCESS_MIN_CONFIGS:  # process speeds known: B's share against the others'
        counts = np.array([[stats[i].specific_b, stats[i].known_b, stats[i].specific_a,
                            stats[i].known_a] for i in pooled])
        for i, p in zip(pooled, pooled_odd_rate_test(*counts.T).tolist(), strict=True):
            p_odd[i] = p
    by_odd = {i for i in family if stats[i].odd_note and p_odd[i] < stats[i].p_difference
              and stats[i].odd_excess > min_effect}
    raw = np.array([min(1.0, 2 * min(stats[i].p_difference, p_odd[i]))
                    if stats[i].odd_note else stats[i].p_difference for i in family], dtype=float)
    if correction == "holm":
        adjusted_family = holm(raw)
    else:
        adjusted_family = sps.false_discovery_control(raw, method="bh") if len(raw) else raw
    adjusted = dict(zip(family, adjusted_family.tolist(), strict=True))
    label = f"Holm over {len(family)}" if correction == "holm" else f"BH over {len(family)}"
    size = max(1, len(family))
    spending = looks is not None and len(looks.rounds()) > 1
    looked = [min(s.rounds_a, s.rounds_b) for s in stats]
    # each config's level at Holm's first step; the family's level is `size` times it
    config_levels = np.array([look_level(looks, n, alpha / size) for n in looked])
    detectable = detectable_effect(np.array([s.se for s in stats]),
                                   np.array([s.df for s in stats]), config_levels, min_effect)

    upper = 1 + min_effect
    lower = 1 / (1 + min_effect)
    results = []
    for i, s in enumerate(stats):
        ci_low, ci_high = _number(s.ci[0]), _number(s.ci[1])
        p = adjusted.get(i)
        notes = [s.odd_note] if s.odd_note else []
        level = float(config_levels[i]) * size if spending else alpha
        verdict: LatencyVerdict
        if p is None:
            verdict = "inconclusive"
            method = f"{s.method}; fewer than {MIN_ROUNDS} rounds on a side: no verdict"
        else:
            method = f"{s.method}; {label}"
            if spending and looks is not None:
                method += (f"; look {looks.index(looked[i]) + 1} of {len(looks.rounds())} at "
                           f"level {level:.2g} (alpha spending)")
            if p < level and i in by_odd:
                verdict = "slower"
                method += "; flagged by B's share of slow rounds (Fisher exact, one-sided)"
            elif p < level and s.ratio > upper:
                verdict = "slower"
            elif p < level and s.ratio < lower:
                verdict = "faster"
            else:
                verdict = "unchanged" if s.p_equivalence < equivalence_alpha else "inconclusive"
                if p < level:
                    notes.append(below_threshold_note(min_effect))
        results.append(LatencyResult(
            verdict=verdict,
            ratio=_number(s.ratio),
            ci=[ci_low, ci_high] if ci_low is not None and ci_high is not None else None,
            p=p,
            p_equivalence=_number(s.p_equivalence),
            rounds_a=s.rounds_a,
            rounds_b=s.rounds_b,
            method=method,
            a_us=_number(s.a_us),
            b_us=_number(s.b_us),
            a_spread_us=_number(s.a_spread_us),
            b_spread_us=_number(s.b_spread_us),
            detectable=_number(detectable[i]) if p is not None else None,
            set_aside_a=s.set_aside_a,
            set_aside_b=s.set_aside_b,
            note="; ".join(notes) or None,
            p_odd=p_odd[i] if s.odd_note and p is not None else None,
        ))
    return results


def below_threshold_note(min_effect: float) -> str:
    """The note of a significant change within the practical threshold: "below the 2%
    threshold" (one of the `; `-joined parts of `LatencyResult.note`)."""
    return f"below the {min_effect:.0%} threshold"


def detectable_range(results: list[LatencyResult]) -> list[float] | None:
    """[smallest, largest] `detectable` of a run's configs (the summary's range); None if none."""
    values = [r.detectable for r in results if r.detectable is not None]
    return [min(values), max(values)] if values else None


def needs_more_rounds(result: LatencyResult) -> bool:
    """True when this config should get more interleaved rounds (if the budget allows).

    - inconclusive: yes, more rounds may decide it (a change that is significant at the
      full alpha but not yet at its look's level, `sequential.look_level`, is
      inconclusive until a later look decides it);
    - not flagged slower while B's share of slow rounds is promising (`p_odd` below
      ODD_PROMISING): yes, more rounds decide whether B is sometimes slow;
    - otherwise no: a flag at a look's level is final (the spending function has paid
      for the looks), and so is `unchanged`.

    The scheduler must ask this for every config with a latency result, whatever
    its policy verdict.
    """
    if result.verdict == "inconclusive":
        return True
    return result.verdict != "slower" and result.p_odd is not None and result.p_odd < ODD_PROMISING


def futile(result: LatencyResult, max_rounds: int, min_effect: float = DEFAULT_MIN_EFFECT) -> bool:
    """True when more rounds, up to `max_rounds` per side, could not plausibly decide.

    A futility boundary for the adaptive extension: the interval's half-width
    on the log scale is projected to `max_rounds` rounds per side
    (half-width ~ 1/sqrt(rounds), the t quantile's shrinkage ignored, which
    errs towards extending). `unchanged` needs |log ratio| + half-width below
    log(1 + min_effect); `slower`/`faster` needs |log ratio| above the
    half-width. When neither can happen, extending spends time and cannot
    change the answer. A change significant at the full alpha but not yet at its
    look's level has a difference within reach, so it is still extended.
    """
    if result.ci is None or result.ratio is None or result.ratio <= 0:
        return False
    rounds = min(result.rounds_a, result.rounds_b)
    if rounds < MIN_ROUNDS or rounds >= max_rounds:
        return rounds >= max_rounds
    low, high = result.ci
    if low <= 0:
        return False
    half_width = (math.log(high) - math.log(low)) / 2 * math.sqrt(rounds / max_rounds)
    distance = abs(math.log(result.ratio))
    equivalence_reachable = distance + half_width < math.log1p(min_effect)
    difference_reachable = distance > half_width
    return not (equivalence_reachable or difference_reachable)
