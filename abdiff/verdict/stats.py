"""Latency verdicts: paired rounds, robust statistics, one family-wise test (verdicts v4).

Pure functions of numbers: round medians in, `LatencyStatistics` (numbers, no words)
out; compare.py is the only caller that knows configs and run files, and
reports/latency_words.py says the numbers in English. The method and its
calibration are in docs/statistics.md.

- **Unit of evidence: the round.** Each round (one fresh process per side) is
  reduced to the median of its timed iterations (`round_summary`).
- **Pairs.** A and B rounds with the same round number ran in the same ABBA
  block; the test works on d = log(B round) - log(A round), so a state of the
  machine that lasts several rounds cancels. A stored baseline was not
  interleaved with B: its comparison is unpaired (`paired=False`: each side's Huber
  location and moderated variance, Welch's df, the t quantile with Bonferroni). What
  moves between sessions lands on that ratio whole; where it was measured (`Drift`,
  baselines.session_drift) the intervals are widened by it, at a quantile of its own
  (`drift_half_width`).
- **The flag statistic**, computed anew under every sign pattern (so the
  permutation stays exact whatever it does): a worker process slow in every
  config (`odd_process_offsets`) is taken off the pair; Huber's location of d
  (HUBER_K) with its scale the normal-consistent median |d|, floored where ties
  would collapse it (`tie_floor`: a coarse timer); its variance moderated across
  the suite (limma, `moderate`); and the same with two-level processes taken off,
  the levels found inside each pattern (`levelled_differences`). The larger |t|
  of the two decides, and the row names which (`statistic`).
- **One family-wise test.** Under "no change" A and B are exchangeable within a
  pair, so every sign pattern of the pairs (the same for all configs) is as
  likely as the observed one; the largest |t| over the configs under each
  pattern (Westfall-Young max-T) sets the threshold `q`. Up to EXACT_FLIPS_UP_TO
  pairs all patterns are used, beyond that a fixed subgroup of 2**13
  (`sign_patterns`), so a look at 10 rounds has the same threshold whether the
  run has 10 or 15 rounds. A look whose patterns cannot resolve its level
  (5 pairs: 32 patterns, p >= 1/16) flags nothing: its threshold is
  Student's t quantile at alpha, used only for the intervals of `unchanged`;
  unless it is the plan's last look (a plan of 5 to 7 rounds), which flags by
  Student's t with Bonferroni where a robust and a plain statistic both reach it
  (`_few_pairs_look`).
- **Looks.** Thresholds of all looks are set jointly on the same patterns; look
  j may have flagged up to the cumulative level `sequential.spent` (a look that
  cannot flag spends nothing: its share is left to the next).
- **Verdicts.** `slower`/`faster`: |t| >= q, the interval exp(location +- q se)
  excludes 1; `threshold_side` says whether the whole interval lies above or
  below the threshold or straddles it. `unchanged`: not flagged, and both the
  Huber interval and the interval of the mean of the pairs (`mean`, odd
  processes taken off; the same q) contain 1 and lie inside +-min_effect (before
  the plan's last look, inside EARLY_EQUIVALENCE of it), with `detectable` <=
  min_effect, from at least MIN_UNCHANGED_ROUNDS pairs (fewer miss a change in 30% of
  B's processes too often). `inconclusive`: neither; `rounds_needed` says how many would decide.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal, Protocol

import numpy as np

from abdiff.store.records import DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, EarlierNoise, LatencyVerdict
from abdiff.verdict.sequential import Looks, spent


def _special() -> ModuleType:
    """scipy.special, imported at its first use: a command's start does not wait for it
    (session.py loads it while the fork servers import torch: `load_scipy`). The t and
    normal functions below are the ones scipy.stats calls, without importing scipy.stats
    (most of scipy's import time)."""
    from scipy import special

    return special


def load_scipy() -> None:
    """Import what the statistics need, ahead of their first use."""
    _special()


def _t_quantile(p: float, df: float) -> float:
    return float(_special().stdtrit(df, p))


def _t_above(x: float, df: float) -> float:
    """P(T > x), T Student's t with `df` degrees of freedom."""
    return float(_special().stdtr(df, -x))


def _normal_quantile(p: float) -> float:
    return float(_special().ndtri(p))


def _normal_below(x: float) -> float:
    return float(_special().ndtr(x))


def _normal_above(x: float) -> float:
    return float(_special().ndtr(-x))


MIN_ROUNDS = 3
"""Fewer pairs than this: no verdict (the variance of a difference needs some rounds)."""

FEW_PAIRS = 5
"""Fewest pairs a plan's last look flags with when its sign patterns cannot resolve the
level (`_few_pairs_look`): a config whose processes sit on two levels fakes a change
when every pair lands A low and B high, 2 * 4**-n of runs (3% at 3 pairs, 0.2% at 5)."""

FEW_PAIRS_LEVEL = 0.8
"""The share of its level a `_few_pairs_look` tests at: Student's t is approximate at 5-7
pairs of heavy-tailed rounds, and at the whole level the worst held-out A/A suites were
flagged in 1.1-1.2% of runs (docs/statistics.md)."""

BORROWED_DF = 4.0
"""The most df a borrowed variance adds (`borrow`): with the scale fixed, 5 pairs of
heavy-tailed rounds put the data's own tails into the statistic, which Student's t at
many df does not have (the caps tried: docs/statistics.md)."""

BORROW_MIN_DF = 10.0
"""Earlier df a config needs before its noise is borrowed: the variance of a few
heavy-tailed pairs is most often well below the law's (docs/statistics.md)."""

HUBER_K = 1.345
"""Huber's tuning constant (95% efficiency at the normal): differences farther than
1.345 robust scales from the location count as if they were that far."""

FEW_PAIRS_ODD_SHARE = 0.4
"""The share of its pairs a `_few_pairs_look` may take odd processes off (2 of 5; the
sign-flip looks ODD_PROCESS_SHARE), and only while the median pair is within ODD_PROCESS
of no shift: where 8% of processes run slow, about one suite of 5 pairs in six has two,
and left in they made every such run inconclusive (docs/statistics.md)."""

EXACT_FLIPS_UP_TO = 13
"""Up to this many pairs every sign pattern (2**13 = 8192) is used; beyond, a subgroup of
that size (`sign_patterns`)."""

TAIL_FLIPS = 2
"""A look flags only when its level leaves at least this many sign patterns in the
rejection region (5 pairs: 32 patterns, never at 1%)."""

UNSEEN_SHARE = 0.3
"""`unchanged` is a claim about every process B may run: a change that hits this share of
B's processes (a tactic choice, a memory layout) must show in the pairs. With n pairs it
hits none of B's n processes with chance (1 - UNSEEN_SHARE)**n."""

UNSEEN_RISK = 0.02
"""The chance, at most, that such a change hit none of B's processes of a run that says
`unchanged`: `unchanged` needs MIN_UNCHANGED_ROUNDS pairs."""

MIN_UNCHANGED_ROUNDS = math.ceil(math.log(UNSEEN_RISK) / math.log1p(-UNSEEN_SHARE))
"""Pairs `unchanged` needs (11): 0.7**10 = 2.8% of runs of 10 pairs see no process of a
change in 30% of them, 0.7**11 = 2.0%."""

EARLY_EQUIVALENCE = 0.5
"""Before the plan's last look, `unchanged` needs the intervals inside this share of
+-min_effect (a config a little off zero gets the rounds that can show it)."""

FUTILITY_POWER = 0.1
"""More rounds are futile when, given the rounds so far, they would flag a change of the
threshold (or the estimated one) with less than this chance (`futile`)..."""

FUTILITY_FRESH_POWER = 0.2
"""... and when a run of that many fresh pairs would flag such a change with less than this
chance: the statistic can change its form as rounds come in (a two-level config's levels
found at 15 pairs, its standard error a tenth of the plain one at 11), which the
projection from the rounds so far cannot see."""

FUTILITY_EARLY_POWER = 0.02
FUTILITY_EARLY_FRESH_POWER = 0.05
"""The same two chances before half of the plan's rounds (the first look), where only a
config whose estimate lies inside +-min_effect may stop: a few rounds' spread says little
(a two-level config's levels not found yet, an odd process not yet taken off). With the
late limits the first look lost an h200-like +2% run in eight; with these it loses none
(docs/statistics.md)."""

DETECTABLE_POWER = 0.8
"""Power at which `detectable` (the smallest change a run flags) is computed."""

BIMODAL_SHARE = 0.25
"""Each level of a two-level side holds at least this share of its rounds."""

OFFSET_CONFIGS = 6
"""Configs a round needs for its shared offset (a machine state) to be taken off."""

LEVELS_AGREE = 0.25
"""Levels are taken off only where both sides' gaps agree within this share."""

BIMODAL_SEPARATION = 6.0
"""Two levels are reported when their gap is this many within-level SDs (and >= 1%)."""

ODD_PROCESS = math.log1p(0.10)
"""A pair whose configs all moved together by more than this (log), and by more than
ODD_PROCESS_SPREADS spreads of the run's other pairs, had one worker process slow (or
fast) in every config: its shared part is taken off."""

ODD_PROCESS_SPREADS = 5.0
"""See ODD_PROCESS."""

ODD_PROCESS_SHARE = 0.2
"""Odd processes are taken off only while they are at most this share of the pairs: more
of them are how B runs, not an accident of a few processes."""

Statistic = Literal["huber", "huber-levelled", "welch-huber"]
"""Which statistic decided a config: Huber's location of the paired differences, the same
with two-level processes taken off, or (unpaired) the difference of each side's Huber
location."""

ThresholdSide = Literal["above", "below", "unsure"]
"""Where a flagged change's interval lies against +-min_effect: wholly beyond it, wholly
within it, or across it (cannot tell)."""


def round_summary(latencies_us: list[float]) -> float:
    """One round's latency: the median of its timed iterations (us).

    A median moves at most one rank for a stray iteration (a preemption, a page
    fault, an allocator growth), so one outlier cannot move a round.
    """
    if len(latencies_us) == 0:
        raise ValueError("a round with no timed iterations has no latency")
    values = np.asarray(latencies_us, dtype=float)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("latencies must be positive finite numbers")
    return float(np.median(values))


def round_variation(rounds: list[list[float]]) -> float | None:
    """Sample SD over mean of the round medians; None below two rounds."""
    if len(rounds) < 2:
        return None
    medians = np.array([round_summary(r) for r in rounds])
    return float(medians.std(ddof=1) / medians.mean())


@dataclass(frozen=True)
class ConfigRounds:
    """One config's round medians (us) per side, by round number, and what its earlier
    paired runs on this machine measured of its noise (a plan of few rounds borrows it)."""

    a: dict[int, float]
    b: dict[int, float]
    earlier: EarlierNoise | None = None


def huber(x: np.ndarray, mask: np.ndarray, scale: np.ndarray, iterations: int = 6
          ) -> tuple[np.ndarray, np.ndarray]:
    """Huber M-estimates of location over the last axis, where `mask` holds.

    Returns (location, unit variance): the variance of one observation's
    contribution, scale**2 * E[psi**2] / E[psi']**2 * n / (n - 1), so that
    unit variance / n is the location's squared standard error. `scale` is fixed
    (broadcast against the leading axes). Newton steps from the clipped mean.
    """
    n = mask.sum(axis=-1)
    safe_n = np.maximum(n, 1)
    s = np.maximum(scale, 1e-12)[..., None]
    whole = bool(mask.all())  # no pair missing: the masking below would change nothing

    def masked(values: np.ndarray, fill: float | bool) -> np.ndarray:
        return values if whole else np.where(mask, values, fill)

    x = masked(x, 0.0)
    loc = masked(np.clip(x / s, -HUBER_K, HUBER_K), 0.0).sum(axis=-1) / safe_n * s[..., 0]
    for _ in range(iterations):
        r = (x - loc[..., None]) / s
        inside = masked(np.abs(r) <= HUBER_K, False)
        psi = masked(np.clip(r, -HUBER_K, HUBER_K), 0.0)
        slope = np.maximum(inside.sum(axis=-1), 1)
        loc = loc + s[..., 0] * psi.sum(axis=-1) / slope
    r = (x - loc[..., None]) / s
    psi = masked(np.clip(r, -HUBER_K, HUBER_K), 0.0)
    slope = np.maximum(masked(np.abs(r) <= HUBER_K, False).sum(axis=-1), 1) / safe_n
    unit = s[..., 0] ** 2 * (psi ** 2).sum(axis=-1) / safe_n / slope ** 2
    return loc, unit * safe_n / np.maximum(n - 1, 1)


def trigamma_inverse(y: np.ndarray) -> np.ndarray:
    """x with trigamma(x) = y (Newton's method as in limma's trigammaInverse)."""
    y = np.asarray(y, dtype=float)
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = _special().polygamma(1, x)
        step = tri * (1 - tri / y) / _special().polygamma(2, x)
        x = x + step
        if np.all(-step / x < 1e-8):
            break
    return x


def corrected_log(variance: np.ndarray, df: np.ndarray) -> np.ndarray:
    """log s^2 - digamma(d/2) + log(d/2): the log of a variance on `df` degrees of freedom,
    its bias taken off (limma's e; a variance of 0 counts as 1e-300)."""
    return (np.log(np.maximum(variance, 1e-300)) - _special().digamma(df / 2)
            + np.log(df / 2))


def fit_f_dist(variance: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """limma's fitFDist over the last axis: the prior (d0, s0^2) of the variances.

    e = log s^2 - digamma(d/2) + log(d/2); the excess of var(e) over the mean
    trigamma(d/2) is trigamma(d0/2); s0^2 = exp(mean e + digamma(d0/2) - log(d0/2)).
    No excess: d0 = inf and s0^2 = the mean variance.
    """
    e = corrected_log(variance, df)
    excess = e.var(axis=-1, ddof=1) - _special().polygamma(1, df / 2).mean(axis=-1)
    positive = excess > 0
    d0 = np.full(excess.shape, np.inf)
    if positive.any():
        d0[positive] = 2 * trigamma_inverse(excess[positive])
    with np.errstate(over="ignore", invalid="ignore"):
        s0 = np.exp(e.mean(axis=-1) + _special().digamma(d0 / 2) - np.log(d0 / 2))
    s0 = np.where(positive, s0, np.maximum(variance, 1e-300).mean(axis=-1))
    return d0, s0


def borrowing(earlier: Sequence[EarlierNoise | None]) -> np.ndarray:
    """Which configs of a family borrow their noise from earlier runs: those with
    BORROW_MIN_DF earlier df, where 3 or more have them (the family's factor needs some)."""
    has = np.array([e is not None and e.df >= BORROW_MIN_DF and e.huber > 0 and e.mean > 0
                    for e in earlier], bool)
    return has if has.sum() >= 3 else np.zeros(len(has), bool)


def borrow(variance: np.ndarray, df: np.ndarray, earlier: np.ndarray, earlier_df: np.ndarray,
           has: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior variances and df of configs (last axis) whose own `variance` (`df`) is
    joined, where `has` (`borrowing`), by a variance measured in earlier runs (`earlier`,
    `earlier_df`): each config's earlier variance, times the factor by which the family's
    noise moved since, is its prior, with the df of its own estimate and the factor's
    together, at most BORROWED_DF. The factor is the median of the bias-corrected log
    ratios over the configs whose own variance is not 0, its variance the median's (pi/2
    the mean's). The other configs: `moderate`."""
    posterior, posterior_df = moderate(variance, df)
    if not has.any():
        return posterior, posterior_df
    special = _special()
    # the factor from the configs whose own rounds vary at all (a config whose pairs tie
    # would pull every other config's prior to nothing), its centre the median: one
    # config's odd history cannot move the others'
    varies = has & (variance > 0)
    if not varies.any():
        return posterior, posterior_df
    log_ratio = corrected_log(variance[varies], df[varies]) - corrected_log(
        earlier[varies], earlier_df[varies])
    factor = math.exp(float(np.median(log_ratio)))
    factor_variance = math.pi / 2 * float((special.polygamma(1, df[varies] / 2) + special.polygamma(
        1, earlier_df[varies] / 2)).mean()) / varies.sum()
    prior_df = np.minimum(2 * trigamma_inverse(special.polygamma(1, earlier_df[has] / 2)
                                               + factor_variance), BORROWED_DF)
    lent = (df[has] * variance[has] + prior_df * factor * earlier[has]) / (df[has] + prior_df)
    posterior, posterior_df = posterior.astype(float), np.broadcast_to(
        posterior_df, variance.shape).astype(float)
    posterior[has], posterior_df[has] = lent, df[has] + prior_df
    return posterior, posterior_df


def moderate(variance: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior variances (d s^2 + d0 s0^2) / (d + d0) and their degrees of freedom,
    the prior fitted over the last axis (configs); fewer than 3 configs: unchanged."""
    if variance.shape[-1] < 3:
        return variance, df
    d0, s0 = fit_f_dist(variance, df)
    d0 = np.minimum(d0, df.sum(axis=-1))[..., None]  # limma caps the prior at the pooled df
    posterior = (df * variance + d0 * s0[..., None]) / (df + d0)
    return posterior, df + d0


def round_offsets(log_medians: np.ndarray) -> np.ndarray:
    """How much slower each round ran in all configs: per round (column), the median over
    configs (rows) of their deviation from their own median; 0 where fewer than
    OFFSET_CONFIGS configs ran in that round."""
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: no offset
        deviation = log_medians - np.nanmedian(log_medians, axis=-1, keepdims=True)
        offsets = np.nanmedian(deviation, axis=0)
    # a median of a few configs would carry their own levels: none below OFFSET_CONFIGS
    known = np.isfinite(log_medians).sum(axis=0) >= OFFSET_CONFIGS
    return np.where(known, np.nan_to_num(offsets), 0.0)


def tie_floor(d: np.ndarray) -> np.ndarray:
    """Per config (rows of `d`, NaN where missing): the smallest scale ties may leave.

    Where pair differences repeat exactly (a coarse timer rounds every round median to a
    few values) the median |d| can be 0 and the location's standard error with it. The
    floor is the quantum of the values, the smallest gap between the distinct |d| and 0,
    over sqrt(12) (the SD of rounding to that quantum); 0 where no |d| repeats. It uses
    |d| only, so every sign pattern has the same floor.
    """
    floors = np.zeros(len(d))
    for c, row in enumerate(np.abs(d)):
        values = row[np.isfinite(row)]
        distinct = np.unique(np.concatenate([[0.0], values]))
        if len(values) and len(np.unique(values)) < len(values) and len(distinct) > 1:
            floors[c] = float(np.diff(distinct).min()) / math.sqrt(12)
    return floors


def odd_process_offsets(d: np.ndarray, signs: np.ndarray,
                        share: float = ODD_PROCESS_SHARE) -> np.ndarray:
    """(patterns, pairs): under each sign pattern, the shift of a pair shared by all its
    configs where it stands out from the run's other pairs, 0 elsewhere.

    A worker process that ran slow in every config (8% of GPU processes run 25% slow)
    moves every config's difference of its pair alike; the median over the configs
    (OFFSET_CONFIGS or more) measures it. Only a pair beyond ODD_PROCESS and
    ODD_PROCESS_SPREADS spreads of the pairs' medians, while such pairs are at most
    ODD_PROCESS_SHARE of them, is taken off; up to `share` of them where the median pair
    itself is within ODD_PROCESS of no shift (three slow processes of five must not make
    the two others look odd). The median over configs of a flipped pair is
    the flipped median, so each pattern's offsets are those of its own data.
    """
    known = np.isfinite(d).sum(axis=0) >= OFFSET_CONFIGS
    out = np.zeros(signs.shape)
    if known.sum() < 3:
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column
        shared = np.nanmedian(d, axis=0)[known]
    flipped = signs[:, known] * shared[None]
    centre = np.median(flipped, axis=1, keepdims=True)
    deviation = flipped - centre
    spread = 1.4826 * np.median(np.abs(deviation), axis=1, keepdims=True)
    odd = np.abs(deviation) > np.maximum(ODD_PROCESS_SPREADS * spread, ODD_PROCESS)
    count = odd.sum(axis=1, keepdims=True)
    few = ((count <= ODD_PROCESS_SHARE * known.sum())
           | ((count <= share * known.sum()) & (np.abs(centre) <= ODD_PROCESS)))
    out[:, known] = np.where(odd & few, deviation, 0.0)
    return out


def pattern_levels(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`two_levels` over the last axis of `x` (NaN where missing), for every leading index at
    once: (found, gap, cut), gap and cut in the units of x (log)."""
    values = np.sort(x, axis=-1)  # NaN last
    mask = np.isfinite(values)
    n = mask.sum(axis=-1)
    filled = np.where(mask, values, 0.0)
    total, squares = np.cumsum(filled, axis=-1), np.cumsum(filled ** 2, axis=-1)
    width = x.shape[-1]
    if width < 2:
        none = np.zeros(x.shape[:-1])
        return none.astype(bool), none, none
    low_n = np.arange(1, width, dtype=float)
    low_sum, low_squares = total[..., :-1], squares[..., :-1]
    all_sum, all_squares = total[..., -1:], squares[..., -1:]
    high_n = n[..., None] - low_n
    with np.errstate(divide="ignore", invalid="ignore"):
        within = (low_squares - low_sum ** 2 / low_n
                  + (all_squares - low_squares) - (all_sum - low_sum) ** 2 / high_n)
    least = np.maximum(2, np.ceil(BIMODAL_SHARE * n))[..., None]
    allowed = (low_n >= least) & (high_n >= least)
    within = np.where(allowed, within, np.inf)
    best = np.argmin(within, axis=-1)[..., None]
    best_within = np.take_along_axis(within, best, axis=-1)[..., 0]
    cut_n = low_n[best[..., 0]]
    low = np.take_along_axis(low_sum, best, axis=-1)[..., 0] / cut_n
    with np.errstate(divide="ignore", invalid="ignore"):
        high = (all_sum[..., 0] - low * cut_n) / (n - cut_n)
        sd = np.sqrt(np.maximum(best_within, 0.0) / np.maximum(n - 2, 1))
    gap = high - low
    found = (np.isfinite(best_within) & (gap >= math.log(1.01))
             & (gap >= BIMODAL_SEPARATION * sd))
    return found, np.where(found, gap, 0.0), (low + high) / 2


def levelled_differences(log_a: np.ndarray, log_b: np.ndarray, signs: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(patterns, configs, pairs) B - A under each sign pattern with two-level processes taken
    off, and (patterns, configs) whether they were.

    Each pattern swaps the A and B rounds of its flipped pairs; then, where both of its
    sides sit on two levels (`pattern_levels`) with gaps agreeing within LEVELS_AGREE, each
    side's rounds above its cut move down by the common gap. Levels are found inside
    each pattern, so the sign-flip distribution of the levelled statistic is exact. The
    rounds' shared offsets (a machine state) are to be taken off before.
    """
    centre = np.nanmedian(np.concatenate([log_a, log_b], axis=1), axis=1, keepdims=True)
    a, b = log_a - centre, log_b - centre
    flip = signs[:, None, :] < 0
    side_a, side_b = np.where(flip, b[None], a[None]), np.where(flip, a[None], b[None])
    found_a, gap_a, cut_a = pattern_levels(side_a)
    found_b, gap_b, cut_b = pattern_levels(side_b)
    with np.errstate(invalid="ignore"):
        agree = np.abs(np.expm1(gap_a) - np.expm1(gap_b)) <= LEVELS_AGREE * np.maximum(
            np.expm1(gap_a), np.expm1(gap_b))
    both = found_a & found_b & agree
    gap = ((gap_a + gap_b) / 2)[..., None]
    levelled = ((side_b - gap * (side_b > cut_b[..., None]))
                - (side_a - gap * (side_a > cut_a[..., None])))
    return np.where(both[..., None], levelled, side_b - side_a), both


def _median_abs(x: np.ndarray) -> np.ndarray:
    """Median |x| over the last axis, NaN (missing) left out; 0 where none is there."""
    values = np.sort(np.abs(x), axis=-1)  # NaN last
    n = np.isfinite(values).sum(axis=-1)
    low = np.take_along_axis(values, np.maximum((n - 1) // 2, 0)[..., None], axis=-1)[..., 0]
    high = np.take_along_axis(values, np.maximum(n // 2, 0)[..., None], axis=-1)[..., 0]
    return np.where(n > 0, (low + high) / 2, 0.0)


def _huber_unit(x: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(location, unit variance, n) per leading index of x (..., pairs): the Huber location
    about the scale 1.4826 median |x| (at least `floor`)."""
    mask = np.isfinite(x)
    filled = np.where(mask, x, 0.0)
    scale = np.maximum(1.4826 * _median_abs(x), floor)
    loc, unit = huber(filled, mask, scale)
    return loc, unit, mask.sum(axis=-1).astype(float)


def _huber_t(x: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(location, standard error, df) per leading index of x (patterns, configs, pairs): the
    Huber location (`_huber_unit`), its variance moderated over the configs."""
    loc, unit, n = _huber_unit(x, floor)
    variance, df = moderate(unit, np.maximum(n - 1, 1))
    return loc, np.sqrt(variance / np.maximum(n, 1)), np.broadcast_to(df, loc.shape)


def earlier_differences(log_a: np.ndarray, log_b: np.ndarray) -> np.ndarray:
    """(configs, pairs) pair differences of an earlier paired run, each pair's odd process
    (`odd_process_offsets`) taken off: what `earlier_noise` measures noise from."""
    d = log_b - log_a
    return d - odd_process_offsets(d, np.ones((1, d.shape[1])))[0][None]


def earlier_noise(runs: Sequence[np.ndarray]) -> EarlierNoise | None:
    """A config's `EarlierNoise` from its pair differences in earlier paired runs (one
    array per run, `earlier_differences`' row; NaN where a pair is missing), each about
    its own centre (an earlier run may have measured a change): the runs' variances
    pooled, or from 3 runs on their median, which one run cannot move (a run whose
    rounds were odd; the family's factor in `borrow` takes the median's bias off);
    None below 2 df."""
    huber, mean, dfs = [], [], []
    for d in runs:
        x = d[np.isfinite(d)]
        if len(x) < MIN_ROUNDS:
            continue
        x = x - np.median(x)
        _, unit, _ = _huber_unit(x, tie_floor(x[None])[0])
        huber.append(float(unit))
        mean.append(float(x.var(ddof=1)))
        dfs.append(len(x) - 1.0)
    df = sum(dfs)
    if df < 2:
        return None
    if len(dfs) >= 3:
        noise = EarlierNoise(float(np.median(huber)), float(np.median(mean)), df, len(dfs))
    else:
        noise = EarlierNoise(float(np.dot(huber, dfs)) / df, float(np.dot(mean, dfs)) / df,
                             df, len(dfs))
    return noise if noise.huber > 0 and noise.mean > 0 else None


@dataclass(frozen=True)
class PairedStatistics:
    """Per sign pattern (rows) and config (columns): the deciding statistic's location,
    standard error and df, and whether the levelled statistic decided."""

    location: np.ndarray
    se: np.ndarray
    df: np.ndarray
    levelled: np.ndarray
    odd: np.ndarray  # (pairs,) the shift taken off each pair under the first (observed) pattern


class _LookCache:
    """The statistics of the last few looks computed, by a digest of their inputs: a run's
    later comparisons recompute its earlier looks on the same rounds (a look decides from
    its own rounds). Holds no input; what it hands out is read-only."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict[bytes, PairedStatistics] = OrderedDict()
        self.hits = 0

    @staticmethod
    def key(*arrays: np.ndarray) -> bytes:
        digest = hashlib.blake2b(digest_size=20)
        for array in arrays:
            contiguous = np.ascontiguousarray(array, dtype=float)
            digest.update(repr(contiguous.shape).encode())
            digest.update(contiguous.tobytes())
        return digest.digest()

    def get(self, key: bytes) -> PairedStatistics | None:
        found = self.entries.get(key)
        if found is not None:
            self.entries.move_to_end(key)
            self.hits += 1
        return found

    def put(self, key: bytes, computed: PairedStatistics) -> PairedStatistics:
        for array in (computed.location, computed.se, computed.df, computed.levelled,
                      computed.odd):
            array.flags.writeable = False
        self.entries[key] = computed
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return computed

    def clear(self) -> None:
        self.entries.clear()
        self.hits = 0


# a run's looks (5, 11, 15 by default); an entry of a 12-config suite at 15 rounds: 3 MB
_LOOKS = _LookCache(4)


def paired_statistics(log_a: np.ndarray, log_b: np.ndarray, signs: np.ndarray
                      ) -> PairedStatistics:
    """The flag statistic of each config under each sign pattern (see the module text).

    `log_a`/`log_b` are (configs, pairs) log round medians, NaN where a pair is missing;
    `signs` (patterns, pairs). Under each pattern odd processes come off the pairs
    (`odd_process_offsets`), then the Huber t of the raw and of the
    levelled differences are computed, and the larger |t| is the config's statistic.
    Looks computed before on the same inputs come from `_LOOKS`.
    """
    key = _LookCache.key(log_a, log_b, signs)
    return _LOOKS.get(key) or _LOOKS.put(key, _paired_statistics(log_a, log_b, signs))


def _paired_statistics(log_a: np.ndarray, log_b: np.ndarray, signs: np.ndarray
                       ) -> PairedStatistics:
    d = log_b - log_a
    floor = tie_floor(d)
    offsets = odd_process_offsets(d, signs)[:, None, :]
    raw = signs[:, None, :] * d[None] - offsets
    loc, se, df = _huber_t(raw, floor)
    # each round's offset shared by the configs, from the pairs' means (the same under
    # every pattern), comes off before levels are looked for
    shared = round_offsets((log_a + log_b) / 2)[None]
    levelled_d, found = levelled_differences(log_a - shared, log_b - shared, signs)
    loc_l, se_l, df_l = _huber_t(levelled_d - offsets, floor)
    with np.errstate(invalid="ignore"):
        levelled = found & (np.abs(loc_l) * se > np.abs(loc) * se_l)  # |t_l| > |t|
    loc, se = np.where(levelled, loc_l, loc), np.where(levelled, se_l, se)
    df = np.where(levelled, df_l, df)
    return PairedStatistics(loc, se, df, levelled, offsets[0, 0].copy())


def paired_means(log_a: np.ndarray, log_b: np.ndarray, odd: np.ndarray,
                 unfloored: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(mean, standard error) of each config's paired differences with odd processes taken
    off (`odd`, each pair's shared shift under the observed signs, as the look found it):
    the location a user who averages rounds means.

    Its SD has two floors. Ties (`tie_floor`) cannot make it 0. And where either side's
    rounds sit on two levels, the pairs do not couple the levels (each process lands on
    one at random), so the SD is at least that of unpaired sides, sqrt(var A + var B),
    after each round's shared offset: with 5 pairs whose processes happened to land on
    the same levels, d is near 0 while B may sit on the high level far more often.
    """
    d = log_b - log_a
    x = d - odd[None]
    mask = np.isfinite(x)
    n = mask.sum(axis=-1).astype(float)
    mean = np.where(mask, x, 0.0).sum(axis=-1) / np.maximum(n, 1)
    squares = (np.where(mask, x - mean[:, None], 0.0) ** 2).sum(axis=-1)
    sd = np.maximum(np.sqrt(squares / np.maximum(n - 1, 1)), tie_floor(d))
    offsets = round_offsets((log_a + log_b) / 2)[None]
    own_a, own_b = log_a - offsets, log_b - offsets
    for c in range(len(d)):
        if unfloored is not None and unfloored[c]:
            continue
        a, b = own_a[c][np.isfinite(own_a[c])], own_b[c][np.isfinite(own_b[c])]
        if min(len(a), len(b)) >= 2 and (two_levels(a) or two_levels(b)):
            sd[c] = max(sd[c], math.sqrt(a.var(ddof=1) + b.var(ddof=1)))
    return mean, sd / np.sqrt(np.maximum(n, 1))


def _side_statistics(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                 np.ndarray]:
    """Per config (rows): Huber location, moderated unit variance, its df, and n."""
    mask = np.isfinite(x)
    centre = np.array([np.median(row[m]) if m.any() else 0.0
                       for row, m in zip(x, mask, strict=True)])
    scale = 1.4826 * np.array([np.median(np.abs(row[m] - c)) if m.any() else 0.0
                               for row, m, c in zip(x, mask, centre, strict=True)])
    loc, unit = huber(np.where(mask, x - centre[:, None], 0.0), mask, scale)
    n = mask.sum(axis=-1).astype(float)
    variance, df = moderate(unit[None], np.maximum(n - 1, 1)[None])
    return centre + loc, variance[0], df[0], n


def unpaired_statistics(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                              np.ndarray]:
    """(location of B - A, standard error, Welch-Satterthwaite df) per config, each side's
    Huber location and moderated variance on its own (shape (1, configs)).

    For sides measured apart (a stored baseline): their rounds are not exchangeable (a
    baseline spans sessions), so no relabelling is; the t quantile with Bonferroni over
    the configs sets the threshold.
    """
    loc_a, var_a, df_a, n_a = _side_statistics(a)
    loc_b, var_b, df_b, n_b = _side_statistics(b)
    part_a, part_b = var_a / np.maximum(n_a, 1), var_b / np.maximum(n_b, 1)
    se = np.sqrt(part_a + part_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (part_a + part_b) ** 2 / (part_a ** 2 / df_a + part_b ** 2 / df_b)
    return (loc_b - loc_a)[None], se[None], np.nan_to_num(df, nan=1.0)[None]


@dataclass(frozen=True)
class Drift:
    """How far the log latency of a session of one commit moves from the mean of the k
    sessions a stored side was measured in: the variance of the offset all configs share
    and of a config's own, each sigma^2 (1 + 1/k), k, and the own part's pooled df."""

    shared: float
    own: float
    sessions: int
    df: float


def drift_parts(drift: Drift, level: float, configs: int) -> tuple[float, float]:
    """The drift's parts of an interval (log scale) at a family `level` over `configs`,
    each at half the level: the shared offset is one draw for every config, its variance
    estimated from k sessions (t with k - 1 df, no Bonferroni); a config's own offsets are
    one a config (the pooled df, Bonferroni). Returns (shared, own) half-widths."""
    shared = _t_quantile(1 - level / 4, max(drift.sessions - 1, 1))
    own = _t_quantile(1 - level / (4 * max(configs, 1)), max(drift.df, 1.0))
    return shared * math.sqrt(drift.shared), own * math.sqrt(drift.own)


def drift_half_width(drift: Drift, level: float, configs: int,
                     rounds_half: float = 0.0) -> float:
    """The half-width of a baseline comparison's interval: the shared offset's part plus,
    in quadrature, a config's own offsets and its rounds' (`rounds_half`, taken at half the
    level too). The two halves of the level add up (a union bound): an interval this wide
    misses a shared offset with chance level / 2 for the whole family, and one config's own
    offset and noise with level / 2 over the configs (on a simulated 2% shared offset the
    parts in quadrature at the whole level gave 2.0% A/A false alarms)."""
    shared, own = drift_parts(drift, level, configs)
    return shared + math.hypot(own, rounds_half)


def sign_patterns(pairs: int) -> np.ndarray:
    """The sign patterns of `pairs` pairs, the observed (all +1) first: all 2**pairs up to
    EXACT_FLIPS_UP_TO pairs; beyond, the subgroup of 2**13 in which the first 13 pairs take
    every pattern and each later pair the product of a fixed subset of them.

    A subgroup keeps the test exact (the patterns are closed under composition), and its
    first 13 columns are every pattern, so an earlier look at up to 13 pairs sees exactly
    the distribution it saw when the run had no more rounds.
    """
    base = min(pairs, EXACT_FLIPS_UP_TO)
    bits = (np.arange(2 ** base)[:, None] >> np.arange(base)[None]) & 1
    patterns = 1.0 - 2.0 * bits
    if pairs <= base:
        return patterns
    subsets = np.random.default_rng(0).random((pairs - base, base)) < 0.5
    extra = np.prod(np.where(subsets[None], patterns[:, None, :], 1.0), axis=-1)
    return np.concatenate([patterns, extra], axis=1)


def permutation_reaches(patterns: int, level: float) -> bool:
    """Whether `patterns` equally likely sign patterns can resolve `level` (TAIL_FLIPS)."""
    return patterns * level >= TAIL_FLIPS


@dataclass(frozen=True)
class Look:
    """One look of the run: the pairs it uses (round numbers below `rounds`), its cumulative
    level, its threshold and df (one of each, for every config it judged)."""

    rounds: int
    level: float  # the cumulative level spent up to this look (alpha at the last)
    threshold: float  # q: the intervals are location +- q se; |t| >= q flags where `flags`
    df: float  # the t quantile's df where q is one (no permutation); else the smallest
    flags: bool  # the look can flag (else it only decides unchanged)
    family: int  # configs in the look's max (or Bonferroni)
    paired: bool
    permutation: bool = True  # it flags by the sign patterns (else `_few_pairs_look`)


@dataclass(frozen=True)
class Tested:
    """One config's statistics at its look."""

    location: float
    se: float
    mean: float
    mean_se: float
    p: float | None  # None at a look that cannot flag
    look: int
    levelled: bool  # the statistic with two levels taken off was the larger
    flagged: bool
    odd_pairs: tuple[tuple[int, float], ...] = ()  # (round, B/A ratio) of each shift taken off
    borrowed_runs: int = 0  # earlier runs whose noise its variance borrowed (`borrow`)
    df: float | None = None  # a `_few_pairs_look`: its own Huber df (else the look's)


def _spending_rounds(looks: Looks | None, rounds: int) -> list[int]:
    """The looks the run reached, in rounds per side: the plan's looks below the most
    rounds any config got, then that count (an interrupted plan spends its rest there)."""
    if looks is None:
        return [rounds]
    planned = [n for n in looks.rounds() if MIN_ROUNDS <= n < rounds]
    return [*planned, rounds]


@dataclass(frozen=True)
class LookStatistics:
    """One look's statistics of its family (columns), per sign pattern (rows) where paired
    (one row where not): the deciding location, its standard error and whether the
    levelled statistic decided; per config the mean of the pairs and its standard error;
    whether the look can flag, and the df of its t quantile."""

    location: np.ndarray
    se: np.ndarray
    levelled: np.ndarray
    mean: np.ndarray
    mean_se: np.ndarray
    flags: bool
    df: float
    permutation: bool = True  # flags by the sign patterns (else `_few_pairs_look`)
    threshold: float | None = None  # a `_few_pairs_look`'s q, its p per config
    p_values: tuple[float, ...] = ()
    odd: np.ndarray | None = None  # (pairs,) the observed shift taken off each pair (log)
    borrowed: np.ndarray | None = None  # (configs,) whose variances were borrowed
    config_df: np.ndarray | None = None  # (configs,) each config's Huber df (few pairs)


def few_pairs_plan(max_rounds: int, alpha: float) -> bool:
    """Whether a plan of `max_rounds` per side ends in a `_few_pairs_look` (5 to 7 rounds at
    1%), the look that borrows each config's noise from earlier runs."""
    return max_rounds >= FEW_PAIRS and not permutation_reaches(
        2 ** min(max_rounds, EXACT_FLIPS_UP_TO), alpha)


def _paired_look(a: np.ndarray, b: np.ndarray, patterns: np.ndarray, budget: float,
                 exceeded: np.ndarray, last: bool, earlier: Sequence[EarlierNoise | None]
                 ) -> LookStatistics:
    """A paired look's statistics over (configs, pairs) `a`/`b`: under every sign pattern
    where the patterns resolve what the look may spend (`budget` less what earlier looks
    spent under `exceeded`), else under the observed one only; the plan's `last` look
    then flags by `_few_pairs_look` (with each config's `earlier` noise where measured)."""
    rounds = a.shape[1]
    distinct = 2 ** min(rounds, EXACT_FLIPS_UP_TO)
    flags = permutation_reaches(distinct, budget - exceeded.mean())
    if not flags and last and rounds >= FEW_PAIRS and not exceeded.any():
        return _few_pairs_look(a, b, budget, len(patterns), earlier)
    # up to 13 pairs pattern i's first pairs are those of pattern i mod 2**pairs:
    # each distinct one is computed once
    signs = patterns[:distinct, :rounds] if flags else np.ones((1, rounds))
    computed = paired_statistics(a, b, signs)
    spread = np.arange(len(patterns)) % len(signs)
    mean, mean_se = paired_means(a, b, computed.odd)
    return LookStatistics(computed.location[spread], computed.se[spread],
                          computed.levelled[spread], mean, mean_se, flags, float(rounds - 1),
                          odd=computed.odd)


def _few_pairs_look(a: np.ndarray, b: np.ndarray, budget: float, patterns: int,
                    earlier: Sequence[EarlierNoise | None]) -> LookStatistics:
    """The plan's last look where the sign patterns cannot resolve its level (FEW_PAIRS to 7
    pairs at 1%): a plan of so few rounds could otherwise never flag a change. Student's t
    with Bonferroni over the family at FEW_PAIRS_LEVEL of the level, on two statistics
    that must both reach it: the Huber location of the pairs with odd processes off,
    which one slow process cannot move, and the mean of the pairs (`paired_means`: its SD
    floored by the sides' own where they sit on two levels), which a few pairs'
    coinciding levels cannot shrink to nothing. Both variances are moderated over the
    family, or, for configs whose `earlier` runs on this machine measured their noise,
    borrowed from those (`borrow`): 5 pairs' own spread is what limits such a plan. Each
    config's t at its own df; the intervals at the look's one threshold (the Huber's
    smallest df's), each config's standard errors scaled to it. The
    levelled statistic is not used: with 5 pairs, two odd pairs look like levels. Where
    the mean vetoes the Huber, its standard error is widened until the interval reaches
    1: the interval excludes 1 exactly when the config is flagged. A config's p is the
    larger of the two tests' (flagged: p <= the level)."""
    d = b - a
    odd = odd_process_offsets(d, np.ones((1, d.shape[1])), FEW_PAIRS_ODD_SHARE)[0]
    location, unit, n = _huber_unit(d - odd[None], tie_floor(d))
    borrowed = borrowing(earlier)
    # the earlier runs' pairs hold a two-level config's levels: no floor where borrowed
    mean, mean_se = paired_means(a, b, odd, borrowed)
    n = np.maximum(n, 1)
    own_df = np.maximum(n - 1, 1)
    earlier_df = np.array([e.df if e else 0.0 for e in earlier])
    variance, df = borrow(unit, own_df, np.array([e.huber if e else 0.0 for e in earlier]),
                          earlier_df, borrowed)
    mean_variance, mean_df = borrow(mean_se ** 2 * n, own_df,
                                    np.array([e.mean if e else 0.0 for e in earlier]),
                                    earlier_df, borrowed)
    family = len(d)
    share = FEW_PAIRS_LEVEL / (2 * family)
    df_look = float(df.min())
    q = -_t_quantile(share * budget, df_look)
    q_huber = np.array([-_t_quantile(share * budget, float(k)) for k in df])
    q_mean = np.array([-_t_quantile(share * budget, float(k)) for k in mean_df])
    se, mean_se = np.sqrt(variance / n), np.sqrt(mean_variance / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_huber = np.where(se > 0, np.abs(location) / se, np.inf)
        agreeing = np.where(np.sign(mean) == np.sign(location), np.abs(mean), 0.0)
        t_mean = np.where(mean_se > 0, agreeing / mean_se, np.inf)
    # each config's p is the larger of the two tests' (Bonferroni at the look's share)
    p_values = tuple(min(1.0, max(_t_above(float(h), float(kh)), _t_above(float(m), float(km)))
                         / share)
                     for h, m, kh, km in zip(t_huber, t_mean, df, mean_df, strict=True))
    # each interval at the one threshold q: se scaled by the config's own quantile over q
    se, mean_se = se * q_huber / q, mean_se * q_mean / q
    vetoed = (t_huber >= q_huber) & np.array([p > budget for p in p_values])
    se = np.where(vetoed, np.abs(location) * (1 + 1e-9) / q, se)
    rows = np.zeros((patterns, family), bool)
    return LookStatistics(np.broadcast_to(location, rows.shape), np.broadcast_to(se, rows.shape),
                          rows, mean, mean_se, True, df_look,
                          permutation=False, threshold=q, p_values=p_values, odd=odd,
                          borrowed=borrowed, config_df=df)


def _unpaired_look(a: np.ndarray, b: np.ndarray, budget: float, drift: Drift | None
                   ) -> LookStatistics:
    """An unpaired look's statistics (sides measured apart); `drift` widens the standard
    errors so that q se is the interval `drift_half_width` makes."""
    loc, se, df = unpaired_statistics(a, b)
    mean, mean_se = unpaired_means(a, b)
    df_one = float(df[0].min())
    if drift is not None:
        family = len(a)
        q_half = -_t_quantile(budget / (4 * family), df_one)
        q_full = -_t_quantile(budget / (2 * family), df_one)
        se = np.array([[drift_half_width(drift, budget, family, q_half * x)
                        for x in se[0]]]) / q_full
        mean_se = np.array([drift_half_width(drift, budget, family, q_half * x)
                            for x in mean_se]) / q_full
    return LookStatistics(loc, se, np.zeros(loc.shape, bool), mean, mean_se, True, df_one)


def _look_threshold(t: np.ndarray, look: LookStatistics, paired: bool, alpha: float,
                    budget: float, exceeded: np.ndarray
                    ) -> tuple[float, list[float | None], np.ndarray]:
    """(q, each config's p, the patterns under which this or an earlier look flagged) of a
    look whose |t| per pattern and config is `t`.

    Paired and able to flag: Westfall-Young max-T over the sign patterns, what earlier
    looks spent (`exceeded`) taken off `budget`. Paired, unable to flag: Student's t at
    alpha, for the intervals of `unchanged` only (a claim about each config on its own,
    at alpha on each side of the threshold). Paired at a last look too small for the
    patterns: its own q (`_few_pairs_look`), p with Bonferroni at its share of the level.
    Unpaired (a baseline): the t quantile with Bonferroni, one df for the look.
    """
    family = t.shape[-1]
    if paired and look.flags and look.permutation:
        peak = t.max(axis=-1)
        free = np.sort(peak[~exceeded])[::-1]
        allowed = int(math.floor(budget * len(t) + 1e-9)) - int(exceeded.sum())
        if allowed <= 0 or not len(free):
            q = math.inf
        elif allowed >= len(free):
            q = 0.0
        else:
            q = float(np.nextafter(free[allowed], np.inf))
        p_values: list[float | None] = [float((exceeded | (peak >= t[0, i])).mean())
                                        for i in range(family)]
        return q, p_values, exceeded | (peak >= q)
    if paired and not look.flags:
        return -_t_quantile(alpha, look.df), [None] * family, exceeded
    if look.threshold is not None:  # a few pairs' last look: its own q and p
        return look.threshold, list(look.p_values), exceeded
    q = -_t_quantile(budget / (2 * family), look.df)
    return q, [min(1.0, 2 * _t_above(float(t[0, i]), look.df) * family)
               for i in range(family)], exceeded


def _round_counts(matrix_a: np.ndarray, matrix_b: np.ndarray, paired: bool) -> np.ndarray:
    """Rounds each config has for the test: its pairs, or (unpaired) its smaller side's."""
    if paired:
        return np.isfinite(matrix_b - matrix_a).sum(axis=-1)
    return np.minimum(np.isfinite(matrix_a).sum(axis=-1), np.isfinite(matrix_b).sum(axis=-1))


def _pairs_reached(matrix_a: np.ndarray, matrix_b: np.ndarray) -> np.ndarray:
    """Per config, 1 + the index of its last pair (0 without one)."""
    finite = np.isfinite(matrix_b - matrix_a)
    return np.where(finite.any(axis=-1), finite.shape[-1] - np.argmax(finite[:, ::-1], axis=-1),
                    0)


def _look_rounds(matrix_a: np.ndarray, matrix_b: np.ndarray, judged: list[int],
                 counts: np.ndarray, looks: Looks | None, paired: bool
                 ) -> tuple[list[int], np.ndarray]:
    """(rounds per side at each look reached, the sign patterns of the most pairs); one look
    and the observed pattern alone for unpaired sides (a baseline has as many rounds as it
    has, more than B)."""
    if not paired:
        return [int(counts.max())], np.ones((1, 1))
    d = matrix_b - matrix_a
    most = max(int(np.flatnonzero(np.isfinite(d[c]))[-1]) + 1 for c in judged)
    return _spending_rounds(looks, most), sign_patterns(most)


def family_statistics(matrix_a: np.ndarray, matrix_b: np.ndarray, alpha: float,
                      looks: Looks | None, paired: bool, drift: Drift | None = None,
                      earlier: Sequence[EarlierNoise | None] = ()
                      ) -> tuple[list[Look], dict[int, Tested]]:
    """The looks and, per config with enough rounds, its statistics at the last look that
    judged it (whether it is flagged among them), the family-wise test over looks.
    `matrix_a`/`matrix_b` are (configs, rounds) log round medians by round number (NaN
    where missing; the same width when `paired`).

    Look j may have flagged up to the cumulative level `spent` of its share of the planned
    rounds (all of alpha at the last look reached). A config's p is the chance, over the
    sign patterns, that an earlier look flagged or this look's largest |t| reaches the
    config's: p <= the look's level exactly when |t| >= q. A look whose patterns cannot
    resolve what it may spend flags nothing and spends nothing; its q (Student's t at
    alpha, df = pairs - 1) sets the intervals `unchanged` needs. `drift` (sides measured
    apart only) widens the standard errors so that q se is the half-width
    `drift_half_width` makes of the rounds' part and the drift's. `earlier` (per config,
    or empty) is the noise earlier runs measured, which a few-pairs last look borrows.
    """
    earlier = list(earlier) or [None] * matrix_a.shape[0]
    counts = _round_counts(matrix_a, matrix_b, paired)
    judged = [c for c in range(matrix_a.shape[0]) if counts[c] >= MIN_ROUNDS]
    if not judged:
        return [], {}
    rounds_at, patterns = _look_rounds(matrix_a, matrix_b, judged, counts, looks, paired)
    total = rounds_at[-1] if looks is None else max(looks.max_rounds, rounds_at[-1])
    cumulative = [spent(alpha, n / total) for n in rounds_at]  # all of alpha at the plan's end
    exceeded = np.zeros(len(patterns), bool)  # an earlier look flagged under the pattern
    flagged: set[int] = set()
    found: list[Look] = []
    tested: dict[int, Tested] = {}
    # a config is measured at a look when it has a pair past the look before: one that
    # stopped there has none; a round missing in between (a crash) does not stop it
    reached = _pairs_reached(matrix_a, matrix_b) if paired else counts
    for n, (rounds, budget) in enumerate(zip(rounds_at, cumulative, strict=True)):
        before = rounds_at[n - 1] if n else 0
        # Every config not flagged before is in the look's max, those stopped earlier with
        # the rounds they have: which configs went on depends on the data, and a max over
        # only those would be one over configs chosen for their large |t|.
        family = [c for c in judged if c not in flagged]
        measured_here = {c for c in family if not paired or reached[c] > before}
        if not measured_here:
            continue
        look = (_paired_look(matrix_a[family, :rounds], matrix_b[family, :rounds], patterns,
                             budget, exceeded, n == len(rounds_at) - 1 and budget >= alpha,
                             [earlier[c] for c in family])
                if paired else
                _unpaired_look(matrix_a[family], matrix_b[family], budget, drift))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(look.se > 0, np.abs(look.location) / look.se,
                         np.where(look.location != 0, np.inf, 0.0))
        q, p_values, exceeded = _look_threshold(t, look, paired, alpha, budget, exceeded)
        odd_pairs = tuple((int(r), math.exp(float(look.odd[r])))
                          for r in np.flatnonzero(look.odd)) if look.odd is not None else ()
        found.append(Look(rounds, budget, q, look.df, look.flags, len(family), paired,
                          look.permutation))
        for i, c in enumerate(family):
            if c not in measured_here:  # stopped at an earlier look: its verdict is from there
                continue
            p_value = p_values[i]
            hit = look.flags and (bool(t[0, i] >= q) if look.permutation
                                  else p_value is not None and p_value <= budget)
            # the pairs taken off that this config has (a shift of the others' pairs only)
            own_odd = tuple((r, ratio) for r, ratio in odd_pairs
                            if math.isfinite(matrix_a[c, r] + matrix_b[c, r]))
            noise = earlier[c]
            borrowed_runs = (noise.runs if noise is not None and look.borrowed is not None
                             and look.borrowed[i] else 0)
            tested[c] = Tested(float(look.location[0, i]), float(look.se[0, i]),
                               float(look.mean[i]), float(look.mean_se[i]), p_value,
                               len(found) - 1, bool(look.levelled[0, i]), hit, own_odd,
                               borrowed_runs,
                               None if look.config_df is None else float(look.config_df[i]))
            if hit:
                flagged.add(c)
    return found, tested


@dataclass(frozen=True)
class Levels:
    """Rounds that sit on two levels: `gap` (fraction) apart, `low`/`high` rounds on each,
    `cut` the log value between them."""

    gap: float
    low: int
    high: int
    cut: float


def two_levels(log_medians: np.ndarray) -> Levels | None:
    """The two levels of a set of log round medians, or None when they are on one.

    The best split of the sorted values into two groups (1-D two-means); two levels
    when each holds BIMODAL_SHARE of the rounds and their gap is at least 1% and
    BIMODAL_SEPARATION pooled within-group SDs.
    """
    x = np.sort(log_medians[np.isfinite(log_medians)])
    n = len(x)
    least = max(2, math.ceil(BIMODAL_SHARE * n))
    best: tuple[float, int] | None = None
    for cut in range(least, n - least + 1):
        within = x[:cut].var() * cut + x[cut:].var() * (n - cut)
        if best is None or within < best[0]:
            best = (within, cut)
    if best is None:
        return None
    within, cut = best
    low, high = float(x[:cut].mean()), float(x[cut:].mean())
    sd = math.sqrt(within / max(n - 2, 1))
    if high - low < math.log(1.01) or high - low < BIMODAL_SEPARATION * sd:
        return None
    return Levels(math.expm1(high - low), cut, n - cut, (low + high) / 2)


def final_threshold(alpha: float, configs: int) -> float:
    """The last look's |t| threshold, approximated: the normal quantile with Bonferroni over
    `configs` (the sign-flip max-T's is a little smaller). Early looks and few pairs have
    far larger ones, which more rounds bring down to this."""
    return -_normal_quantile(alpha / (2 * max(configs, 1)))


def rounds_to_resolve(se: float, rounds: int, min_effect: float, alpha: float,
                      configs: int) -> int:
    """Rounds per side at which `detectable` would reach `min_effect` (and `unchanged` be
    possible: MIN_UNCHANGED_ROUNDS): the standard error
    shrinks as 1/sqrt(rounds), and the threshold becomes the final one (with 3 pairs the
    t quantile is huge, and projecting it advised hundreds of thousands of rounds)."""
    z = _normal_quantile(DETECTABLE_POWER)
    q = final_threshold(alpha, configs)
    needed = rounds * (se * (q + z) / math.log1p(min_effect)) ** 2
    return max(rounds + 1, math.ceil(needed), MIN_UNCHANGED_ROUNDS)


def unpaired_means(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean of B - mean of A, standard error) per config of sides measured apart."""
    def side(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mask = np.isfinite(x)
        n = np.maximum(mask.sum(axis=-1), 1).astype(float)
        mean = np.where(mask, x, 0.0).sum(axis=-1) / n
        squares = (np.where(mask, x - mean[:, None], 0.0) ** 2).sum(axis=-1)
        return mean, squares / np.maximum(n - 1, 1) / n

    mean_a, part_a = side(a)
    mean_b, part_b = side(b)
    return mean_b - mean_a, np.sqrt(part_a + part_b)


@dataclass(frozen=True)
class LatencyStatistics:
    """One config's latency comparison in numbers (ratios are B/A; no words: compare.py and
    reports/latency_words.py say them). `ci` is exp(location +- threshold * se) of the
    deciding statistic, `mean_ci` the same for the mean of the pairs."""

    verdict: LatencyVerdict
    rounds_a: int
    rounds_b: int
    a_us: float | None
    b_us: float | None
    a_spread_us: float | None
    b_spread_us: float | None
    levels_a: Levels | None
    levels_b: Levels | None
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    mean_ratio: float | None = None
    mean_ci: tuple[float, float] | None = None
    p: float | None = None
    level: float | None = None  # the family level spent up to the look that decided
    se: float | None = None  # standard error of log(ratio)
    detectable: float | None = None  # smallest change flagged with DETECTABLE_POWER
    statistic: Statistic | None = None
    threshold: float | None = None  # the look's q
    df: float | None = None  # the look's df (its t quantile's, where it has one)
    look: int | None = None  # 0-based index of the deciding look
    looks: int = 0  # looks the run reached
    look_rounds: int | None = None
    family: int = 0  # configs in the deciding look's max
    flags: bool = False  # the deciding look could flag
    permutation: bool = True  # ... by the sign patterns (else by `_few_pairs_look`)
    paired: bool = True
    threshold_side: ThresholdSide | None = None  # slower/faster: the interval against +-min_effect
    rounds_needed: int | None = None  # inconclusive: rounds per side that would decide it
    resolves: float | None = None  # the half-width of the wider interval, as a fraction
    drift: float | None = None  # sides measured apart: the drift's half-width, a fraction
    # the pairs whose shift shared by all configs (one odd process) the deciding look took
    # off: (round, B/A ratio of the shift)
    odd_pairs: tuple[tuple[int, float], ...] = ()
    # a few-pairs look: the earlier runs on this machine whose noise it borrowed (0: none)
    borrowed_runs: int = 0

    @property
    def below_threshold(self) -> bool:
        """A flagged change whose whole interval lies within +-min_effect."""
        return self.threshold_side == "below"


def robust_spread(values: np.ndarray) -> float:
    """Normal-consistent median absolute deviation around the median."""
    return 1.4826 * float(np.median(np.abs(values - np.median(values))))


def _number(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _side_location(values: np.ndarray) -> tuple[float, float]:
    """Huber location and robust spread (us) of one side's log round medians."""
    if len(values) == 0:
        return float("nan"), float("nan")
    centre = float(np.median(values))
    scale = robust_spread(values)
    loc, _ = huber(values[None] - centre, np.ones((1, len(values)), bool), np.array([scale]))
    level = float(np.exp(centre + loc[0]))
    return level, level * (math.expm1(scale) if scale > 0 else 0.0)


def _matrix(configs: list[ConfigRounds], side: str) -> np.ndarray:
    width = 1 + max((max(getattr(c, side), default=-1) for c in configs), default=-1)
    out = np.full((len(configs), max(width, 1)), np.nan)
    for i, c in enumerate(configs):
        for r, value in getattr(c, side).items():
            out[i, r] = math.log(value)
    return out


def threshold_side(low: float, high: float, margin: float) -> ThresholdSide:
    """Where an interval of log B/A that excludes 0 lies against +-margin (log)."""
    near, far = sorted((abs(low), abs(high)))
    if near > margin:
        return "above"
    return "below" if far < margin else "unsure"


@dataclass(frozen=True)
class _Rule:
    """What a run's verdicts are judged by: the smallest change that matters, the family
    level, the adaptive plan, the drift of sides measured apart, and the configs."""

    min_effect: float
    alpha: float
    looks: Looks | None
    drift: Drift | None
    configs: int


def log_matrices(configs: list[ConfigRounds], paired: bool) -> tuple[np.ndarray, np.ndarray]:
    """(configs, rounds) log round medians of A and B; one column per round number on both
    sides where `paired`."""
    log_a, log_b = _matrix(configs, "a"), _matrix(configs, "b")
    if paired:
        width = max(log_a.shape[1], log_b.shape[1])
        log_a = np.pad(log_a, ((0, 0), (0, width - log_a.shape[1])), constant_values=np.nan)
        log_b = np.pad(log_b, ((0, 0), (0, width - log_b.shape[1])), constant_values=np.nan)
    return log_a, log_b


def _side_numbers(c: ConfigRounds) -> dict[str, Any]:
    """A config's numbers of each side on its own: rounds, location, spread, levels."""
    a_values = np.log(np.array(list(c.a.values()), dtype=float))
    b_values = np.log(np.array(list(c.b.values()), dtype=float))
    a_us, a_spread = _side_location(a_values)
    b_us, b_spread = _side_location(b_values)
    return dict(rounds_a=len(c.a), rounds_b=len(c.b), a_us=_number(a_us), b_us=_number(b_us),
                a_spread_us=_number(a_spread), b_spread_us=_number(b_spread),
                levels_a=two_levels(a_values), levels_b=two_levels(b_values))


def _decide(s: Tested, look: Look, rule: _Rule, rounds: int, detectable: float,
            drift_half: float | None) -> tuple[LatencyVerdict, ThresholdSide | None, int | None]:
    """(verdict, where a flag's interval lies against +-min_effect, rounds per side that
    would decide an inconclusive config) of a config judged at `look`."""
    margin = math.log1p(rule.min_effect)
    half, mean_half = look.threshold * s.se, look.threshold * s.mean_se
    low, high = s.location - half, s.location + half
    mean_low, mean_high = s.mean - mean_half, s.mean + mean_half
    early = rule.looks is not None and look.rounds < rule.looks.max_rounds
    bound = margin * (EARLY_EQUIVALENCE if early else 1.0)
    if s.flagged:
        return ("slower" if s.location > 0 else "faster"), threshold_side(low, high, margin), None
    if (-bound < low <= 0 <= high < bound and -bound < mean_low <= 0 <= mean_high < bound
            and detectable <= rule.min_effect and look.rounds >= MIN_UNCHANGED_ROUNDS):
        return "unchanged", None, None
    needed = None
    if math.isfinite(half) and (drift_half is None or drift_half < margin):
        needed = rounds_to_resolve(max(s.se, s.mean_se), rounds, rule.min_effect, rule.alpha,
                                   rule.configs)
    return "inconclusive", None, needed


def _tested_statistics(s: Tested, look: Look, rule: _Rule, rounds: int, paired: bool,
                       sides: dict[str, Any]) -> LatencyStatistics:
    """A judged config's LatencyStatistics; `rounds` the fewer of its sides'."""
    q = look.threshold
    half, mean_half = q * s.se, q * s.mean_se
    low, high = s.location - half, s.location + half
    mean_low, mean_high = s.mean - mean_half, s.mean + mean_half
    z = _normal_quantile(DETECTABLE_POWER)
    detectable = math.expm1((q + z) * s.se) if math.isfinite(q) else math.inf
    drift_half = (drift_half_width(rule.drift, look.level, rule.configs) if rule.drift
                  else None)
    verdict, side, needed = _decide(s, look, rule, rounds, detectable, drift_half)
    finite = math.isfinite(half) and math.isfinite(mean_half)
    statistic: Statistic = ("welch-huber" if not paired else
                            "huber-levelled" if s.levelled else "huber")
    return LatencyStatistics(
        verdict,
        ratio=math.exp(s.location),
        ci=(math.exp(low), math.exp(high)) if finite else None,
        mean_ratio=math.exp(s.mean),
        mean_ci=(math.exp(mean_low), math.exp(mean_high)) if finite else None,
        p=s.p, level=look.level, se=s.se, detectable=_number(detectable),
        statistic=statistic, threshold=q, df=look.df if s.df is None else s.df, look=s.look,
        look_rounds=look.rounds, family=look.family, flags=look.flags,
        permutation=look.permutation,
        threshold_side=side, rounds_needed=needed,
        resolves=math.expm1(max(half, mean_half)) if finite else None,
        drift=math.expm1(drift_half) if drift_half is not None else None, paired=paired,
        odd_pairs=s.odd_pairs, borrowed_runs=s.borrowed_runs, **sides)


def latency_verdicts(configs: list[ConfigRounds], min_effect: float = DEFAULT_MIN_EFFECT,
                     alpha: float = DEFAULT_ALPHA, *, looks: Looks | None = None,
                     paired: bool = True, drift: Drift | None = None
                     ) -> list[LatencyStatistics]:
    """Verdicts for the configs of one run (see the module docstring); `drift` only where
    the sides were measured apart (`paired` False)."""
    if not 0 < min_effect < math.inf:
        raise ValueError(f"min_effect must be a positive fraction, got {min_effect}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be between 0 and 0.5, got {alpha}")
    log_a, log_b = log_matrices(configs, paired)
    rule = _Rule(min_effect, alpha, looks, None if paired else drift, len(configs))
    found, tested = family_statistics(log_a, log_b, alpha, looks, paired, rule.drift,
                                      [c.earlier for c in configs])
    results = []
    for i, c in enumerate(configs):
        sides = _side_numbers(c)
        if i in tested:
            results.append(_tested_statistics(tested[i], found[tested[i].look], rule,
                                              min(len(c.a), len(c.b)), paired,
                                              dict(sides, looks=len(found))))
            continue
        a_us, b_us = sides["a_us"], sides["b_us"]
        ratio = _number(b_us / a_us) if a_us is not None and b_us is not None else None
        results.append(LatencyStatistics("inconclusive", ratio=ratio, paired=paired,
                                         looks=len(found), **sides))
    return results


class Measured(Protocol):
    """What futility and the advice read of a result (a LatencyResult or LatencyStatistics)."""

    @property
    def verdict(self) -> str: ...
    @property
    def rounds_a(self) -> int: ...
    @property
    def rounds_b(self) -> int: ...
    @property
    def se(self) -> float | None: ...
    @property
    def detectable(self) -> float | None: ...
    @property
    def ratio(self) -> float | None: ...


def detectable_range(results: Sequence[Measured]) -> list[float] | None:
    """[smallest, largest] `detectable` of a run's configs; None if none."""
    values = [r.detectable for r in results if r.detectable is not None]
    return [min(values), max(values)] if values else None


def geometric_mean_ratio(results: Sequence[Measured]) -> tuple[float, int] | None:
    """(geometric mean of the B/A ratios, how many configs have one); None without any."""
    ratios = [r.ratio for r in results if r.ratio is not None and r.ratio > 0]
    if not ratios:
        return None
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)), len(ratios)


def needs_more_rounds(result: Measured) -> bool:
    """More rounds can decide only an inconclusive config; a flag or `unchanged` is final
    (the looks' levels have paid for stopping there)."""
    return result.verdict == "inconclusive"


def futility_chances(result: Measured, max_rounds: int,
                     min_effect: float = DEFAULT_MIN_EFFECT, alpha: float = DEFAULT_ALPHA,
                     configs: int = 1) -> tuple[float, float] | None:
    """(fresh, conditional) of `futile`: the chance that `max_rounds` fresh pairs flag a
    change of the threshold, or of the estimate where larger; and, given the rounds so far,
    the largest chance that the last look flags a change of +-min_effect or of the
    estimate. None without a standard error."""
    if result.se is None or result.se <= 0:
        return None
    rounds = min(result.rounds_a, result.rounds_b)
    share = min(rounds / max_rounds, 1.0)
    se_final = result.se * math.sqrt(share)
    q = final_threshold(alpha, configs)
    threshold = math.log1p(min_effect)
    estimate = math.log(result.ratio) if result.ratio is not None and result.ratio > 0 else 0.0
    fresh = _normal_above(q - max(threshold, abs(estimate)) / se_final)
    if share >= 1.0:
        return fresh, 0.0  # no rounds to come
    now = math.sqrt(share) * estimate / result.se  # the final z's part already measured
    spread = math.sqrt(1.0 - share)  # the SD of the part still to come

    def flag_chance(effect: float) -> float:
        drift = effect / se_final * (1.0 - share)
        return (_normal_above((q - now - drift) / spread)
                + _normal_below((-q - now - drift) / spread))

    return fresh, max(flag_chance(effect) for effect in (threshold, -threshold, estimate))


def futile(result: Measured, max_rounds: int, min_effect: float = DEFAULT_MIN_EFFECT,
           alpha: float = DEFAULT_ALPHA, configs: int = 1) -> bool:
    """True when `max_rounds` per side could not plausibly decide.

    A run of `max_rounds` fresh pairs would flag a change of the threshold, or of the
    estimate where larger, with chance below FUTILITY_FRESH_POWER (so its interval could
    not fit inside +-min_effect either), and, given the rounds so far (conditional power,
    stochastic curtailment), the last look would flag a change of exactly +-min_effect or
    of the estimate with chance below FUTILITY_POWER. The standard error is projected to
    `max_rounds` (~ 1/sqrt(rounds)), the rounds to come add a normal increment (Brownian
    motion in the information share), and the last look's threshold q is approximated by
    the normal quantile with Bonferroni over `configs`. A config whose 11 of 15 pairs put
    it at +1.2% with a 15-round half-width of 3.2% cannot reach the interval a 2% change
    needs in 4 more pairs, although 15 fresh pairs would flag that change one time in
    nine.
    Stopping never flags, so it spends no level. Before half of `max_rounds` (the first
    look) the limits are FUTILITY_EARLY_*, and a config only stops there with its estimate
    inside +-min_effect.
    """
    rounds = min(result.rounds_a, result.rounds_b)
    if rounds >= max_rounds:
        return True
    chances = futility_chances(result, max_rounds, min_effect, alpha, configs)
    if chances is None:
        return False
    fresh, conditional = chances
    if 2 * rounds < max_rounds:
        inside = (result.ratio is not None and result.ratio > 0
                  and abs(math.log(result.ratio)) < math.log1p(min_effect))
        return (inside and fresh < FUTILITY_EARLY_FRESH_POWER
                and conditional < FUTILITY_EARLY_POWER)
    return fresh < FUTILITY_FRESH_POWER and conditional < FUTILITY_POWER
