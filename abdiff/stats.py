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
  `alpha`, *and* the point ratio beyond the practical threshold `min_effect`.
- **unchanged**: an equivalence test, TOST (two one-sided Welch tests against
  +-log(1 + min_effect)), below `equivalence_alpha`.
- **inconclusive**: neither; the scheduler adds rounds (`needs_more_rounds`).

scipy has no Holm procedure (only Benjamini-Hochberg/Yekutieli in
`scipy.stats.false_discovery_control`), so Holm's step-down is the few lines in
`holm` below; every test and interval is scipy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from abdiff.records import LatencyResult

DEFAULT_MIN_EFFECT = 0.02
"""Practical threshold and equivalence margin: changes within +-2% are "unchanged"."""

DEFAULT_ALPHA = 0.005
"""Family-wise error rate for slower/faster across the configs of one run (Holm).

The target is at most 1 false alarm per 100 A/A suite runs. Holm at alpha
bounds that by alpha only for one look at exact tests; abdiff looks up to six
times (5 rounds, then +2 per side up to 15) and real rounds are not exactly
normal. Measured (benchmarks/calibration.py, docs/statistics.md): at 0.01 the
A/A rate was about 1.0% for independent configs with normal round noise and
1.4% on real host-timed H200 rounds; at 0.005 it was 0.4-0.7% and 0.9%, and
0.0-0.5% on every other noise profile and replay (demo on the 2-core CPU:
0.3%). Noise below the 2% threshold (device-timed GPU rounds) loses no power
at 0.005: a 5% shift is found every time.
"""

DEFAULT_EQUIVALENCE_ALPHA = 0.05
"""Level of the TOST for "unchanged" (the standard 90% interval inside the margin).

No multiplicity adjustment is needed for equivalence: the claim "every config
is unchanged" is an intersection-union test, which holds at the per-test level.
"""

DEFAULT_CONFIRM_P = DEFAULT_ALPHA / 10
"""Adaptive runs: a slower/faster flag stops early only with adjusted p below this.

A flag with weaker evidence asks for more rounds (`needs_more_rounds`) and is
decided on the final data: a Haybittle-Peto boundary. Without it every look of
the adaptive extension is another chance for an A/A config to cross alpha
(calibration, A/A false alarms without -> with it: replayed host-timed H200
rounds 2.3% -> 0.9%, demo rounds on the 2-core CPU 1.2% -> 0.3%, at almost the
same power).
"""

DEFAULT_CONFIRM_EQUIVALENCE_P: float | None = None
"""Adaptive runs: an unchanged verdict stops early only with TOST p below this (off).

Repeated looks let a change right at the margin (2%) be called unchanged in
about 10% of runs instead of the nominal 5%; a boundary of 0.005 brings that
back to 4%, but costs A/A configs on a quiet CPU 10.8 rounds per side instead
of 7.0 (calibration). Unchanged-by-2% is the edge of "does not matter", so the
default keeps the rounds.
"""

MIN_ROUNDS = 3
"""Fewer rounds than this on a side: no decisive verdict, always inconclusive.

With two rounds the between-round variance rests on one degree of freedom per
side; the t-test is formally valid but a single odd process decides it.
"""

CORRECTIONS = ("holm", "bh")

_METHOD = "Welch t on log round medians"


@dataclass
class LatencyStats:
    """One config's latency comparison before multiple-comparison control.

    `ratio` is B/A (the geometric mean of B's round medians over A's); `ci` is
    its 90% confidence interval (the TOST's); `p_difference` the raw two-sided
    Welch p-value; `p_equivalence` the TOST p-value against the margin
    (+-`min_effect`). NaN where the rounds do not define them.
    """

    ratio: float
    ci: tuple[float, float]
    p_difference: float
    p_equivalence: float
    rounds_a: int
    rounds_b: int
    method: str


@dataclass(frozen=True)
class RoundTests:
    """Vectorized results of `round_level_tests` (one entry per row)."""

    ratio: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    p_difference: np.ndarray
    p_equivalence: np.ndarray


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


def round_level_tests(
    log_a: np.ndarray, log_b: np.ndarray, margin: float, confidence: float
) -> RoundTests:
    """Welch's t-test, its confidence interval and a TOST on per-round log summaries.

    `log_a` and `log_b` are 1-D (one comparison) or 2-D (rows of independent
    comparisons, rounds along the last axis; rows must match, round counts
    may differ between the sides). Each side needs at least 2 rounds.

    Method: `scipy.stats.ttest_ind(log_b, log_a, equal_var=False)` (Welch,
    Welch-Satterthwaite degrees of freedom) for the difference of mean log
    round medians; its `confidence_interval(confidence)` exponentiated gives
    the ratio interval. Equivalence: two one-sided Welch tests (TOST) of
    H0: diff >= +log(1+margin) and H0: diff <= -log(1+margin); the TOST
    p-value is the larger of the two.

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
    if a.shape[-1] < 2 or b.shape[-1] < 2:
        raise ValueError("each side needs at least 2 rounds for a round-level test")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be between 0 and 1")
    delta = math.log1p(margin)
    diff = b.mean(axis=-1) - a.mean(axis=-1)
    rows = diff.shape[0]
    p_diff = np.empty(rows)
    p_eq = np.empty(rows)
    low = np.empty(rows)
    high = np.empty(rows)

    constant = (np.ptp(a, axis=-1) == 0) & (np.ptp(b, axis=-1) == 0)
    p_diff[constant] = np.where(diff[constant] != 0, 0.0, 1.0)
    p_eq[constant] = np.where(np.abs(diff[constant]) < delta, 0.0, 1.0)
    low[constant] = diff[constant]
    high[constant] = diff[constant]

    var = ~constant
    if var.any():
        va, vb = a[var], b[var]
        welch = sps.ttest_ind(vb, va, equal_var=False, axis=-1)
        interval = welch.confidence_interval(confidence_level=confidence)
        # H1: diff < +delta, and H1: diff > -delta (shifting B shifts the mean only).
        upper = sps.ttest_ind(vb - delta, va, equal_var=False, axis=-1, alternative="less")
        lower = sps.ttest_ind(vb + delta, va, equal_var=False, axis=-1, alternative="greater")
        p_diff[var] = welch.pvalue
        p_eq[var] = np.maximum(upper.pvalue, lower.pvalue)
        low[var] = interval.low
        high[var] = interval.high
    return RoundTests(np.exp(diff), np.exp(low), np.exp(high), p_diff, p_eq)


def _log_round_summaries(rounds: list[list[float]]) -> np.ndarray:
    """Log of each non-empty round's summary; empty rounds (no iterations) are skipped."""
    return np.log([round_summary(r) for r in rounds if len(r) > 0])


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
) -> LatencyStats:
    """Compare one config's latency, B against A, at the level of rounds.

    `a_rounds`/`b_rounds` hold each round's timed iteration latencies (us);
    rounds may have different iteration counts and the sides different round
    counts. Each round becomes its median (`round_summary`), and
    `round_level_tests` compares the log medians with Welch's t-test (two
    sided, `p_difference`) and a TOST against +-log(1 + min_effect)
    (`p_equivalence`). Iterations are never pooled across rounds.

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
    log_a = _log_round_summaries(a_rounds)
    log_b = _log_round_summaries(b_rounds)
    na, nb = len(log_a), len(log_b)
    nan = float("nan")
    if na == 0 or nb == 0:
        return LatencyStats(nan, (nan, nan), nan, nan, na, nb, f"{_METHOD}: no rounds")
    if na < 2 or nb < 2:
        ratio = float(np.exp(log_b.mean() - log_a.mean()))
        return LatencyStats(ratio, (nan, nan), nan, nan, na, nb,
                            f"{_METHOD}: needs 2+ rounds per side for a test")
    tests = round_level_tests(log_a, log_b, min_effect, confidence)
    method = f"{_METHOD}, {100 * confidence:g}% CI; TOST +-{100 * min_effect:g}%"
    if (np.ptp(log_a) == 0) and (np.ptp(log_b) == 0):
        method += " (no round-to-round variation: exact)"
    return LatencyStats(
        ratio=float(tests.ratio[0]),
        ci=(float(tests.ci_low[0]), float(tests.ci_high[0])),
        p_difference=float(tests.p_difference[0]),
        p_equivalence=float(tests.p_equivalence[0]),
        rounds_a=na,
        rounds_b=nb,
        method=method,
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
) -> list[LatencyResult]:
    """Verdicts for the configs of one run, with multiple-comparison control.

    The family is every config with a decidable test (at least MIN_ROUNDS
    rounds per side and a finite p-value). `correction` "holm" (default)
    controls the family-wise error rate strongly: even when some configs
    really change (the expected scope of a PR), the chance of flagging any
    unchanged config stays below alpha; "bh" (Benjamini-Hochberg,
    `scipy.stats.false_discovery_control`) controls only the false discovery
    rate and lets the unchanged configs be flagged more often when others
    change (calibration: docs/statistics.md).

    Per config, in this order:
    - slower: adjusted p < alpha and ratio > 1 + min_effect;
    - faster: adjusted p < alpha and ratio < 1 / (1 + min_effect);
    - unchanged: TOST p < equivalence_alpha (the ratio's 1 - 2*equivalence_alpha
      interval lies inside [1/(1+min_effect), 1+min_effect]); a significant but
      negligible change is also "unchanged";
    - inconclusive: anything else, including fewer than MIN_ROUNDS rounds.

    `min_effect` must be the one given to `compare_latency` (it set the TOST
    margin). The result's `p` is the **adjusted** p-value (None when the config
    is not in the family), `p_equivalence` the raw TOST p (no adjustment, see
    DEFAULT_EQUIVALENCE_ALPHA), `ci` the per-config 90% interval of
    `compare_latency`.
    """
    _check_levels(min_effect, alpha)
    if not 0 < equivalence_alpha < 1:
        raise ValueError(f"equivalence_alpha must be between 0 and 1, got {equivalence_alpha}")
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    family = [i for i, s in enumerate(stats) if _decidable(s)]
    raw = np.array([stats[i].p_difference for i in family], dtype=float)
    if correction == "holm":
        adjusted_family = holm(raw)
    else:
        adjusted_family = sps.false_discovery_control(raw, method="bh") if len(raw) else raw
    adjusted = dict(zip(family, adjusted_family.tolist(), strict=True))
    label = f"Holm over {len(family)}" if correction == "holm" else f"BH over {len(family)}"

    upper = 1 + min_effect
    lower = 1 / (1 + min_effect)
    results = []
    for i, s in enumerate(stats):
        ci = [_number(s.ci[0]), _number(s.ci[1])]
        p = adjusted.get(i)
        if p is None:
            verdict = "inconclusive"
            method = f"{s.method}; fewer than {MIN_ROUNDS} rounds on a side: no verdict"
        else:
            method = f"{s.method}; {label}"
            if p < alpha and s.ratio > upper:
                verdict = "slower"
            elif p < alpha and s.ratio < lower:
                verdict = "faster"
            elif s.p_equivalence < equivalence_alpha:
                verdict = "unchanged"
            else:
                verdict = "inconclusive"
        results.append(LatencyResult(
            verdict=verdict,
            ratio=_number(s.ratio),
            ci=ci if all(c is not None for c in ci) else None,
            p=p,
            p_equivalence=_number(s.p_equivalence),
            rounds_a=s.rounds_a,
            rounds_b=s.rounds_b,
            method=method,
        ))
    return results


def needs_more_rounds(
    result: LatencyResult,
    confirm_p: float | None = DEFAULT_CONFIRM_P,
    confirm_equivalence_p: float | None = DEFAULT_CONFIRM_EQUIVALENCE_P,
) -> bool:
    """True when this config should get more interleaved rounds (if the budget allows).

    - inconclusive: yes, more rounds may decide it;
    - slower/faster with adjusted p >= `confirm_p`, or unchanged with TOST p >=
      `confirm_equivalence_p`: yes, an early verdict on marginal evidence is
      confirmed or withdrawn on more data (a Haybittle-Peto boundary); whatever
      the verdict after the last round is, it is final at the full levels;
    - otherwise (overwhelming evidence, or n/a): no.

    `None` for either boundary gives the plain rule for that verdict. The
    scheduler must ask this for every config with a latency result, whatever
    its policy verdict, or the confirmation never happens.
    """
    if result.verdict == "inconclusive":
        return True
    if confirm_p is not None and result.verdict in ("slower", "faster"):
        return result.p is None or result.p >= confirm_p
    if confirm_equivalence_p is not None and result.verdict == "unchanged":
        return result.p_equivalence is None or result.p_equivalence >= confirm_equivalence_p
    return False


def futile(result: LatencyResult, max_rounds: int, min_effect: float = DEFAULT_MIN_EFFECT) -> bool:
    """True when more rounds, up to `max_rounds` per side, could not plausibly decide.

    A futility boundary for the adaptive extension: the interval's half-width
    on the log scale is projected to `max_rounds` rounds per side
    (half-width ~ 1/sqrt(rounds), the t quantile's shrinkage ignored, which
    errs towards extending). `unchanged` needs |log ratio| + half-width below
    log(1 + min_effect); `slower`/`faster` needs |log ratio| above the
    half-width. When neither can happen, extending spends time and cannot
    change the answer. A marginal flag is significant, so a difference stays
    reachable and it is still extended for confirmation.
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
