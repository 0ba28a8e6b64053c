"""Latency verdicts: paired rounds, a robust moderated statistic, one family-wise test.

Pure functions of numbers (round medians in, `LatencyResult`s out); compare.py is
the only caller that knows configs and run files. The method and its calibration
are in docs/statistics.md.

- **Unit of evidence: the round.** Each round (one fresh process per side) is
  reduced to the median of its timed iterations (`round_summary`); iterations of
  one process share its state and are not independent draws.
- **Pairs.** A and B rounds with the same round number ran in the same ABBA
  block, next to each other in time. The test works on the paired differences
  d = log(B round) - log(A round), so a state of the machine that lasts several
  rounds (a clock level, a neighbour's job) hits both members of a pair and
  cancels instead of inflating the variance. A stored baseline was not
  interleaved with B: its comparison is unpaired (`paired=False`, each side's
  location and variance on its own, Welch's degrees of freedom, the t quantile
  with Bonferroni over the configs: a baseline's sessions are not exchangeable
  with B's rounds, so no permutation is). What moves between sessions lands on
  that ratio whole; where it was measured (`Drift`, baselines.session_drift) the
  interval is widened by it, at a quantile of its own (`drift_half_width`).
- **A location a slow round cannot drag**: Huber's M-estimate of the
  differences (HUBER_K), its scale the normal-consistent median of |d| (the
  same for every sign pattern, so the permutation below keeps it), its standard
  error from the influence function.
- **Variance borrowed across the suite** (limma's moderated t, `moderate`): each
  config's variance is shrunk toward a prior fitted to all configs' variances
  (`fit_f_dist`), so a config with few rounds is not decided by one lucky small
  variance.
- **One family-wise test at the promised level.** Under "no change" A and B are
  exchangeable within a pair, so flipping the sign of pair k for every config at
  once is as likely as what was measured; the distribution of the largest
  |t| over the suite's configs under all such flips (Westfall-Young max-T) gives
  the threshold `q` that is exceeded by chance with probability `alpha` for the
  whole family, the correlation between configs included (no Holm, no
  Bonferroni). Sign patterns are enumerated when there are few enough
  (EXACT_FLIPS_UP_TO pairs), else drawn (FLIPS). With too few pairs for the
  permutation to reach the level (`permutation_reaches`), the threshold is the t
  quantile with Bonferroni over the configs (valid, conservative).
- **Looks.** An adaptive run looks at its configs at the plan's looks
  (sequential.Looks). The level is spent over the looks (`sequential.spent`):
  the thresholds of all looks are set jointly on the same sign flips, so the
  chance of any false flag at any look is the cumulative spending.
- **One estimator per row.** ratio = exp(location), interval = exp(location +-
  q * se), p = the share of sign flips whose max |t| reaches this config's |t|;
  p <= the look's level exactly when the interval excludes 1. `detectable` =
  exp((q + z_0.8) * se) - 1, `a_us`/`b_us` are the Huber locations of each
  side's log round medians (their ratio is close to, not equal to, `ratio`:
  the ratio is the paired estimate).
- **Verdicts.** `slower`/`faster`: the interval excludes 1 (when the ratio is
  within `min_effect`, `below_threshold` is set: a real change, small; the
  policy decides whether it fails the gate). `unchanged`: the interval lies
  inside +-min_effect and `detectable` <= min_effect. `inconclusive`: neither;
  the note says how far the run resolves and how many rounds would decide.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special
from scipy import stats as sps

from abdiff.store.records import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_EFFECT,
    MOST_ROUNDS_ADVISED,
    LatencyResult,
    LatencyVerdict,
)
from abdiff.verdict.sequential import Looks, spent

MIN_ROUNDS = 3
"""Fewer pairs than this: no verdict (the variance of a difference needs some rounds)."""

HUBER_K = 1.345
"""Huber's tuning constant (95% efficiency at the normal): differences farther than
1.345 robust scales from the location count as if they were that far."""

EXACT_FLIPS_UP_TO = 13
"""Up to this many pairs every sign pattern (2**13 = 8192) is enumerated."""

FLIPS = 8192
"""Above EXACT_FLIPS_UP_TO, this many sign patterns are drawn (the observed one first)."""

TAIL_FLIPS = 2
"""The permutation decides a look only when its level leaves at least this many sign
patterns in the rejection region; otherwise the t quantile with Bonferroni does."""

EARLY_EQUIVALENCE = 0.5
"""Before the plan's last look, `unchanged` needs the interval inside this share of
+-min_effect (calibration: a +1% change stopped as unchanged at 10 rounds half the time
at 1.0, where 15 rounds flag it in 90% of runs)."""

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
    """One config's round medians (us) per side, by round number."""

    a: dict[int, float]
    b: dict[int, float]


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
    x = np.where(mask, x, 0.0)
    loc = (np.clip(x / s, -HUBER_K, HUBER_K) * mask).sum(axis=-1) / safe_n * s[..., 0]
    for _ in range(iterations):
        r = (x - loc[..., None]) / s
        inside = (np.abs(r) <= HUBER_K) & mask
        psi = np.where(mask, np.clip(r, -HUBER_K, HUBER_K), 0.0)
        slope = np.maximum(inside.sum(axis=-1), 1)
        loc = loc + s[..., 0] * psi.sum(axis=-1) / slope
    r = (x - loc[..., None]) / s
    psi = np.where(mask, np.clip(r, -HUBER_K, HUBER_K), 0.0)
    slope = np.maximum(((np.abs(r) <= HUBER_K) & mask).sum(axis=-1), 1) / safe_n
    unit = s[..., 0] ** 2 * (psi ** 2).sum(axis=-1) / safe_n / slope ** 2
    return loc, unit * safe_n / np.maximum(n - 1, 1)


def trigamma_inverse(y: np.ndarray) -> np.ndarray:
    """x with trigamma(x) = y (Newton's method as in limma's trigammaInverse)."""
    y = np.asarray(y, dtype=float)
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = special.polygamma(1, x)
        step = tri * (1 - tri / y) / special.polygamma(2, x)
        x = x + step
        if np.all(-step / x < 1e-8):
            break
    return x


def fit_f_dist(variance: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """limma's fitFDist over the last axis: the prior (d0, s0^2) of the variances.

    e = log s^2 - digamma(d/2) + log(d/2); the excess of var(e) over the mean
    trigamma(d/2) is trigamma(d0/2); s0^2 = exp(mean e + digamma(d0/2) - log(d0/2)).
    No excess: d0 = inf and s0^2 = the mean variance.
    """
    v = np.maximum(variance, 1e-300)
    e = np.log(v) - special.digamma(df / 2) + np.log(df / 2)
    excess = e.var(axis=-1, ddof=1) - special.polygamma(1, df / 2).mean(axis=-1)
    positive = excess > 0
    d0 = np.full(excess.shape, np.inf)
    if positive.any():
        d0[positive] = 2 * trigamma_inverse(excess[positive])
    with np.errstate(over="ignore", invalid="ignore"):
        s0 = np.exp(e.mean(axis=-1) + special.digamma(d0 / 2) - np.log(d0 / 2))
    s0 = np.where(positive, s0, v.mean(axis=-1))
    return d0, s0


def moderate(variance: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior variances (d s^2 + d0 s0^2) / (d + d0) and their degrees of freedom,
    the prior fitted over the last axis (configs); fewer than 3 configs: unchanged."""
    if variance.shape[-1] < 3:
        return variance, df
    d0, s0 = fit_f_dist(variance, df)
    d0 = np.minimum(d0, df.sum(axis=-1))[..., None]  # limma caps the prior at the pooled df
    posterior = (df * variance + d0 * s0[..., None]) / (df + d0)
    return posterior, df + d0


def _paired_once(d: np.ndarray, signs: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                             np.ndarray]:
    mask = np.isfinite(d)
    scale = 1.4826 * np.array([np.median(np.abs(row[m])) if m.any() else 0.0
                               for row, m in zip(d, mask, strict=True)])
    x = signs[:, None, :] * np.where(mask, d, 0.0)[None]
    loc, unit = huber(x, np.broadcast_to(mask, x.shape), scale)
    n = mask.sum(axis=-1).astype(float)
    own_df = np.broadcast_to(np.maximum(n - 1, 1), unit.shape)
    variance, df = moderate(unit, own_df)
    return loc, np.sqrt(variance / np.maximum(n, 1)), np.broadcast_to(df, loc.shape)


def paired_means(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, standard error, df) of each config's paired differences, shape (1, configs):
    Student's t, the statistic the t quantile is exact for under normal rounds. The
    Huber location's standard error rests on its scale, the median |d|: with 3-5 pairs
    two close ones make it tiny, and a t quantile on it flagged an A/A run."""
    mask = np.isfinite(d)
    n = mask.sum(axis=-1).astype(float)
    mean = np.where(mask, d, 0.0).sum(axis=-1) / np.maximum(n, 1)
    squares = (np.where(mask, d - mean[:, None], 0.0) ** 2).sum(axis=-1)
    sd = np.sqrt(squares / np.maximum(n - 1, 1))
    return mean[None], (sd / np.sqrt(np.maximum(n, 1)))[None], np.maximum(n - 1, 1)[None]


def paired_statistics(d: np.ndarray, signs: np.ndarray, d_levelled: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(location, standard error, df, levelled) of each config under each sign pattern.

    `d` is (configs, pairs), NaN where a pair is missing; `signs` (patterns, pairs).
    `d_levelled`: the same differences with two-level processes taken off
    (`take_off_levels`); per config and pattern the larger |t| of the two is the
    statistic (`levelled` says which), so a shift within the levels and a change in
    how often B sits on the high level are both seen, and every sign pattern is judged
    by the same rule. Arrays of shape (patterns, configs).
    """
    loc, se, df = _paired_once(d, signs)
    if d_levelled is None:
        return loc, se, df, np.zeros(loc.shape, bool)
    loc_l, se_l, df_l = _paired_once(d_levelled, signs)
    with np.errstate(divide="ignore", invalid="ignore"):
        levelled = np.abs(loc_l) * se > np.abs(loc) * se_l  # |t_l| > |t| without dividing
    return (np.where(levelled, loc_l, loc), np.where(levelled, se_l, se),
            np.where(levelled, df_l, df), levelled)


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


def take_off_levels(log_a: np.ndarray, log_b: np.ndarray) -> tuple[np.ndarray,
                                                                   list[Levels | None]]:
    """B - A per pair with two-level processes taken off, and the levels found per config.

    Each round's offset shared by all configs (`round_offsets`: a machine state) is taken
    off first; then, where *both* sides' rounds sit on two levels (`two_levels`, each
    side on its own, so a shift of B does not blur them), each side's rounds above its
    midpoint are moved down by its gap. A config on one level on either side keeps its
    differences: B sitting on a level A never reaches is a change, not noise. Under no
    change the sides are alike, so the levelled differences stay symmetric about 0
    (calibrated: docs/statistics.md).
    """
    d = log_b - log_a
    own_a = log_a - round_offsets(log_a)[None]
    own_b = log_b - round_offsets(log_b)[None]
    found: list[Levels | None] = []
    for c in range(len(d)):
        level_a, level_b = two_levels(own_a[c]), two_levels(own_b[c])
        if level_a is None or level_b is None or not math.isclose(
                level_a.gap, level_b.gap, rel_tol=LEVELS_AGREE):
            found.append(None)
            continue
        found.append(level_a)
        gap = math.log1p((level_a.gap + level_b.gap) / 2)  # one gap: the sides stay alike
        d[c] -= gap * ((own_b[c] > level_b.cut).astype(float)
                       - (own_a[c] > level_a.cut).astype(float))
    return d, found


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
    shared = float(sps.t.ppf(1 - level / 4, max(drift.sessions - 1, 1)))
    own = float(sps.t.ppf(1 - level / (4 * max(configs, 1)), max(drift.df, 1.0)))
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


def sign_patterns(pairs: int, rng: np.random.Generator) -> np.ndarray:
    """All 2**pairs sign patterns (few pairs) or FLIPS random ones; the observed first."""
    if pairs <= EXACT_FLIPS_UP_TO:
        bits = (np.arange(2 ** pairs)[:, None] >> np.arange(pairs)[None]) & 1
        return 1.0 - 2.0 * bits
    drawn = rng.choice([-1.0, 1.0], size=(FLIPS, pairs))
    drawn[0] = 1.0
    return drawn


def permutation_reaches(patterns: int, level: float) -> bool:
    """Whether `patterns` equally likely sign patterns can resolve `level` (TAIL_FLIPS)."""
    return patterns * level >= TAIL_FLIPS


@dataclass(frozen=True)
class Look:
    """One look of the run: the pairs it uses (round numbers below `rounds`), its
    cumulative level, and its threshold."""

    rounds: int
    level: float  # the cumulative level spent up to this look (alpha at the last)
    threshold: float  # q: |t| at or above it flags
    method: str
    permutation: bool  # q from the sign patterns (else the t quantile with Bonferroni)


@dataclass(frozen=True)
class Tested:
    """One config's statistics at its look."""

    location: float
    se: float
    p: float
    look: int
    levelled: bool  # the statistic with two levels taken off was the larger


def _spending_rounds(looks: Looks | None, rounds: int) -> list[int]:
    """The looks the run reached, in rounds per side: the plan's looks below the most
    rounds any config got, then that count (an interrupted plan spends its rest there)."""
    if looks is None:
        return [rounds]
    planned = [n for n in looks.rounds() if MIN_ROUNDS <= n < rounds]
    return [*planned, rounds]


def test_family(matrix_a: np.ndarray, matrix_b: np.ndarray, alpha: float, looks: Looks | None,
                paired: bool, seed: int = 0, drift: Drift | None = None
                ) -> tuple[list[Look], dict[int, Tested]]:
    """The family-wise test over looks. `matrix_a`/`matrix_b` are (configs, rounds) log
    round medians by round number (NaN where missing; the same width when `paired`).
    Returns the looks and, per config with enough rounds, its statistics at the last
    look that judged it.

    Look j spends the cumulative level `spent` up to its share of the planned rounds
    (all of alpha at the last look reached). Its p-value for a config is the chance,
    over the sign patterns, that an earlier permutation look flagged or this look's
    largest |t| reaches the config's (plus what earlier Bonferroni looks spent): the
    config is flagged when p is at most the look's cumulative level, which is exactly
    when |t| >= q, the threshold that sets the interval.
    """
    rng = np.random.default_rng(seed)
    configs = matrix_a.shape[0]
    d = matrix_b - matrix_a if paired else np.full((configs, 0), np.nan)
    if paired:
        counts = np.isfinite(d).sum(axis=-1)
    else:
        counts = np.minimum(np.isfinite(matrix_a).sum(axis=-1),
                            np.isfinite(matrix_b).sum(axis=-1))
    judged = [c for c in range(configs) if counts[c] >= MIN_ROUNDS]
    if not judged:
        return [], {}
    if paired:
        most = max(int(np.flatnonzero(np.isfinite(d[c]))[-1]) + 1 for c in judged)
        rounds_at = _spending_rounds(looks, most)
        patterns = sign_patterns(most, rng)
    else:
        most = int(counts.max())
        rounds_at = [most]
        patterns = np.ones((1, 1))  # no permutation: the t quantile decides
    total = rounds_at[-1] if looks is None else max(looks.max_rounds, rounds_at[-1])
    cumulative = [spent(alpha, n / total) for n in rounds_at]  # all of alpha at the plan's end
    exceeded = np.zeros(len(patterns), bool)  # an earlier permutation look flagged
    permutation_spent = 0.0
    flagged: set[int] = set()
    found: list[Look] = []
    tested: dict[int, Tested] = {}
    for j, rounds in enumerate(rounds_at):
        before = cumulative[j - 1] if j else 0.0
        share = cumulative[j] - before
        # Every config not flagged before is in the look's max, those stopped earlier with
        # the rounds they have: which configs went on depends on the data, and a max over
        # only those would be one over configs chosen for their large |t|.
        family = tuple(c for c in judged if c not in flagged)
        measured_here = {c for c in family if not paired or counts[c] >= rounds}
        if not measured_here:
            continue
        rows = list(family)
        if paired:
            # levels from this look's rounds alone: a look decides the same way whenever
            # the run is compared again, later rounds or not
            distinct = 2 ** rounds if rounds <= EXACT_FLIPS_UP_TO else len(patterns)
            if permutation_reaches(distinct, share):
                d_levelled, levels = take_off_levels(matrix_a[:, :rounds],
                                                     matrix_b[:, :rounds])
                loc, se, df, levelled = paired_statistics(
                    d[rows, :rounds], patterns[:, :rounds],
                    d_levelled[rows] if any(levels[c] is not None for c in rows) else None)
            else:  # the t quantile decides: Student's t of each config's own mean and
                # variance, no levels (a max of two t's, a borrowed variance or a robust
                # location would each need a correction of their own)
                loc, se, df = paired_means(d[rows, :rounds])
                levelled = np.zeros(loc.shape, bool)
        else:
            loc, se, df = unpaired_statistics(matrix_a[rows], matrix_b[rows])
            levelled = np.zeros(loc.shape, bool)
            distinct = 1
            if drift is not None:  # the interval drift_half_width makes, as q x se
                q_half = float(sps.t.ppf(1 - share / (4 * len(family)), df[0].min()))
                q_full = float(sps.t.ppf(1 - share / (2 * len(family)), df[0].min()))
                se = np.array([[drift_half_width(drift, share, len(family), q_half * x)
                                for x in se[0]]]) / q_full
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(se > 0, np.abs(loc) / se, np.where(loc != 0, np.inf, 0.0))
        if permutation_reaches(distinct, share):
            peak = t.max(axis=-1)
            budget = permutation_spent + share
            free = np.sort(peak[~exceeded])[::-1]
            allowed = int(math.floor(budget * len(patterns) + 1e-9)) - int(exceeded.sum())
            if allowed <= 0 or not len(free):
                q = math.inf
            elif allowed >= len(free):
                q = 0.0
            else:
                q = float(np.nextafter(free[allowed], np.inf))
            p_values = [before - permutation_spent
                        + float((exceeded | (peak >= t[0, i])).mean()) for i in range(len(rows))]
            exceeded |= peak >= q
            permutation_spent = budget
            method = f"sign-flip max-T over {len(family)} configs"
        else:
            q = float(sps.t.ppf(1 - share / (2 * len(family)), df[0].min()))
            p_values = [before + min(1.0, 2 * float(sps.t.sf(t[0, i], df[0, i])) * len(family))
                        for i in range(len(rows))]
            method = (f"{'Student' if paired else 'Welch'} t, Bonferroni over "
                      f"{len(family)} configs")
        found.append(Look(rounds, cumulative[j], q, method, permutation_reaches(distinct, share)))
        for i, c in enumerate(rows):
            if c not in measured_here:  # stopped at an earlier look: its verdict is from there
                continue
            tested[c] = Tested(float(loc[0, i]), float(se[0, i]),
                               min(1.0, p_values[i]), len(found) - 1, bool(levelled[0, i]))
            if t[0, i] >= q:
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


def final_threshold(alpha: float, configs: int) -> float:
    """The last look's |t| threshold, approximated: the normal quantile with Bonferroni over
    `configs` (the sign-flip max-T's is a little smaller). Early looks and few pairs have
    far larger ones, which more rounds bring down to this."""
    return float(sps.norm.isf(alpha / (2 * max(configs, 1))))


def rounds_to_resolve(se: float, rounds: int, min_effect: float, alpha: float,
                      configs: int) -> int:
    """Rounds per side at which `detectable` would reach `min_effect`: the standard error
    shrinks as 1/sqrt(rounds), and the threshold becomes the final one (with 3 pairs the
    t quantile is huge, and projecting it advised hundreds of thousands of rounds)."""
    z = sps.norm.ppf(DETECTABLE_POWER)
    q = final_threshold(alpha, configs)
    needed = rounds * (se * (q + z) / math.log1p(min_effect)) ** 2
    return max(rounds + 1, math.ceil(needed))


def latency_verdicts(configs: list[ConfigRounds], min_effect: float = DEFAULT_MIN_EFFECT,
                     alpha: float = DEFAULT_ALPHA, *, looks: Looks | None = None,
                     paired: bool = True, drift: Drift | None = None) -> list[LatencyResult]:
    """Verdicts for the configs of one run (see the module docstring); `drift` only
    where the sides were measured apart (`paired` False)."""
    if not 0 < min_effect < math.inf:
        raise ValueError(f"min_effect must be a positive fraction, got {min_effect}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be between 0 and 0.5, got {alpha}")
    log_a, log_b = _matrix(configs, "a"), _matrix(configs, "b")
    if paired:  # one column per round number on both sides
        width = max(log_a.shape[1], log_b.shape[1])
        log_a = np.pad(log_a, ((0, 0), (0, width - log_a.shape[1])), constant_values=np.nan)
        log_b = np.pad(log_b, ((0, 0), (0, width - log_b.shape[1])), constant_values=np.nan)
    found, tested = test_family(log_a, log_b, alpha, looks, paired,
                                drift=None if paired else drift)
    z = float(sps.norm.ppf(DETECTABLE_POWER))
    margin = math.log1p(min_effect)
    results = []
    for i, c in enumerate(configs):
        a_values = np.log(np.array(list(c.a.values()), dtype=float))
        b_values = np.log(np.array(list(c.b.values()), dtype=float))
        a_us, a_spread = _side_location(a_values)
        b_us, b_spread = _side_location(b_values)
        notes = []
        for side, values in (("A", a_values), ("B", b_values)):
            levels = two_levels(values)
            if levels:
                notes.append(f"{side}'s processes sit on two levels {levels.gap:.1%} apart "
                             f"({levels.low} and {levels.high} rounds)")
        common: dict[str, Any] = dict(rounds_a=len(c.a), rounds_b=len(c.b), a_us=_number(a_us),
                      b_us=_number(b_us), a_spread_us=_number(a_spread),
                      b_spread_us=_number(b_spread))
        if i not in tested:
            results.append(LatencyResult(
                "inconclusive", ratio=_number(b_us / a_us) if a_values.size and b_values.size
                else None, method=f"fewer than {MIN_ROUNDS} {'pairs of ' * paired}rounds: "
                "no verdict", note="; ".join([f"needs at least {MIN_ROUNDS} rounds per side "
                                             "(--rounds)", *notes]), **common))
            continue
        s = tested[i]
        look = found[s.look]
        q = look.threshold
        half = q * s.se
        low, high = s.location - half, s.location + half
        # before the plan's last look a config stops as unchanged only well inside the
        # threshold: one a little off zero gets the rounds that can show it
        early = looks is not None and look.rounds < looks.max_rounds
        bound = margin * (EARLY_EQUIVALENCE if early else 1.0)
        detectable = math.expm1((q + z) * s.se) if math.isfinite(q) else math.inf
        verdict: LatencyVerdict
        if math.isfinite(q) and (low > 0 or high < 0):
            verdict = "slower" if s.location > 0 else "faster"
            below = abs(s.location) < margin
            if below:
                notes.insert(0, below_threshold_note(min_effect))
        elif high < bound and low > -bound and detectable <= min_effect:
            verdict, below = "unchanged", False
        else:
            verdict, below = "inconclusive", False
            rounds = min(len(c.a), len(c.b))
            drift_half = (drift_half_width(drift, look.level, len(configs))
                          if drift and not paired else 0.0)
            if math.isfinite(half) and drift_half >= margin:
                notes.insert(0, f"{rounds} rounds and the drift between sessions resolve "
                                f"+-{math.expm1(half):.1%}; the drift alone is +-"
                                f"{math.expm1(drift_half):.1%}, so more rounds cannot decide "
                                f"+-{min_effect:.0%}")
            elif math.isfinite(half):
                needed = rounds_to_resolve(s.se, rounds, min_effect, alpha, len(configs))
                common["rounds_needed"] = needed
                decide = (f"about {needed} would decide +-{min_effect:.0%} (--max-rounds "
                          f"{needed})" if needed <= MOST_ROUNDS_ADVISED else
                          f"over {MOST_ROUNDS_ADVISED} would be needed: a quieter machine")
                notes.insert(0, f"{rounds} rounds resolve +-{math.expm1(half):.1%}; {decide}")
            else:
                notes.insert(0, "too few rounds for this level: run with more --rounds")
        position = (f"; look {s.look + 1} of {len(found)} at {look.rounds} rounds, level "
                    f"{look.level:.2g}" if len(found) > 1 else "")
        results.append(LatencyResult(
            verdict=verdict,
            ratio=math.exp(s.location),
            ci=[math.exp(low), math.exp(high)] if math.isfinite(half) else None,
            p=s.p,
            method=(("difference of each side's Huber location of log round medians, "
                     "moderated" if not paired else
                     "Huber location of paired log round differences, moderated t"
                     if look.permutation else "mean of paired log round differences")
                    + f"{' with the two levels taken off' * s.levelled}"
                    + ("; widened by the session drift" if drift and not paired else "")
                    + f"; {look.method}; interval at q={q:.2f} (family level {alpha:g})"
                    + position),
            detectable=_number(detectable),
            se=s.se,
            note="; ".join(notes) or None,
            below_threshold=below,
            level=look.level,
            **common,
        ))
    return results


def below_threshold_note(min_effect: float) -> str:
    """The note of a change that is real but within the practical threshold."""
    return f"below the {min_effect:.0%} threshold"


def detectable_range(results: list[LatencyResult]) -> list[float] | None:
    """[smallest, largest] `detectable` of a run's configs; None if none."""
    values = [r.detectable for r in results if r.detectable is not None]
    return [min(values), max(values)] if values else None


def geometric_mean_ratio(results: list[LatencyResult]) -> tuple[float, int] | None:
    """(geometric mean of the B/A ratios, how many configs have one); None without any."""
    ratios = [r.ratio for r in results if r.ratio is not None and r.ratio > 0]
    if not ratios:
        return None
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)), len(ratios)


def needs_more_rounds(result: LatencyResult) -> bool:
    """More rounds can decide only an inconclusive config; a flag or `unchanged` is final
    (the looks' levels have paid for stopping there)."""
    return result.verdict == "inconclusive"


def futile(result: LatencyResult, max_rounds: int, min_effect: float = DEFAULT_MIN_EFFECT,
           alpha: float = DEFAULT_ALPHA, configs: int = 1) -> bool:
    """True when `max_rounds` per side could not plausibly decide.

    The standard error is projected to `max_rounds` (~ 1/sqrt(rounds)) and the last
    look's threshold approximated by the normal quantile with Bonferroni over `configs`
    (the sign-flip max-T's is a little smaller): more rounds are futile when the
    projected interval could neither fit inside +-min_effect around the ratio nor
    exclude 1 from it. The early looks' thresholds are far larger (few pairs, little
    level spent), so projecting the current interval would stop configs too soon; and
    before half of `max_rounds` nothing is futile.
    """
    rounds = min(result.rounds_a, result.rounds_b)
    if rounds >= max_rounds:
        return True
    if result.se is None or result.ratio is None or 2 * rounds < max_rounds:
        return False  # a few rounds' spread says little (levels not yet seen, few df)
    half = final_threshold(alpha, configs) * result.se * math.sqrt(rounds / max_rounds)
    distance = abs(math.log(result.ratio))
    return not (distance + half < math.log1p(min_effect) or distance > half)
