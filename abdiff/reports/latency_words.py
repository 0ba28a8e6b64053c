"""The latency statistics in words: stats.LatencyStatistics (numbers) -> LatencyResult
(the record every report renders), with its method and note sentences."""

from __future__ import annotations

from abdiff.reports.common import spread_text
from abdiff.store.records import MOST_ROUNDS_ADVISED, LatencyResult, OddPair
from abdiff.verdict import stats


def below_threshold_note(min_effect: float) -> str:
    """The note of a change that is real but within the practical threshold."""
    return f"below the {min_effect:.0%} threshold"


def unsure_side_note(min_effect: float) -> str:
    """The note of a change whose interval straddles the threshold."""
    return f"≈ {min_effect:.0%}: cannot tell above or below the threshold"


def method_text(s: stats.LatencyStatistics, alpha: float) -> str:
    """What decided: the statistic, the test and its threshold, the look."""
    if s.threshold is None:
        return f"fewer than {stats.MIN_ROUNDS} {'pairs of ' * s.paired}rounds: no verdict"
    statistic = {
        "huber": "Huber location of paired log round differences, moderated t",
        "huber-levelled": "Huber location of paired log round differences, moderated t, "
                          "with the two levels taken off",
        "welch-huber": "difference of each side's Huber location of log round medians, "
                       "moderated",
    }[s.statistic or "huber"]
    if not s.paired:
        test = f"Welch t, Bonferroni over {s.family} configs (df {s.df:.1f})"
    elif s.flags and s.permutation:
        test = f"sign-flip max-T over {s.family} configs"
    elif s.flags:
        test = (f"{s.look_rounds} pairs are too few for the sign flips: Student's t with "
                f"Bonferroni over {s.family} configs at {stats.FEW_PAIRS_LEVEL:.0%} of the "
                f"level, where the mean of the pairs agrees (df {s.df:.1f})")
        if s.borrowed_runs:
            test += (f", variances borrowed from {s.borrowed_runs} earlier "
                     f"run{'s' * (s.borrowed_runs > 1)} on this machine")
    else:
        test = (f"{s.look_rounds} pairs cannot flag at level {s.level:.2g} (too few sign "
                f"patterns): intervals at Student's t, df {s.df:g}, for `unchanged` only")
    text = f"{statistic}; {test}; interval at q={s.threshold:.2f} (family level {alpha:g})"
    if s.drift is not None:
        text += "; widened by the session drift"
    if s.looks > 1 and s.look is not None:
        text += f"; look {s.look + 1} of {s.looks} at {s.look_rounds} rounds, level {s.level:.2g}"
    return text


def resolve_text(what: str, share: float) -> str:
    """"10 rounds resolve +-9.8%", or "10 rounds cannot resolve a change under 100%"."""
    return (f"{what} resolve {spread_text(share)}" if share < 1 else
            f"{what} cannot resolve a change under 100%")


def levels_text(side: str, levels: stats.Levels) -> str:
    """"A's processes sit on two levels 4.1% apart (6 and 4 rounds)"; a gap of 100% or
    more as how many times slower the slow level is ("the slow one 4.1x the fast")."""
    apart = (f" {levels.gap:.1%} apart" if levels.gap < 1 else
             f", the slow one {1 + levels.gap:.1f}x the fast")
    return (f"{side}'s processes sit on two levels{apart} ({levels.low} and {levels.high} "
            "rounds)")


def odd_pairs_text(odd_pairs: tuple[tuple[int, float], ...]) -> str:
    """"one process ran apart in every config (round 4: B 24.0% slower than in the other
    pairs): that pair's shift taken off before testing": what the statistics took off the
    pairs in which one process ran apart from the rest (round numbers from 1, as the
    progress line counts them; the shift is against the other pairs, not A against B)."""
    parts = [f"round {number + 1}: {'B' if ratio > 1 else 'A'} "
             f"{ratio - 1 if ratio > 1 else 1 / ratio - 1:.1%} slower than in the other pairs"
             for number, ratio in odd_pairs]
    who = "one process" if len(parts) == 1 else f"{len(parts)} processes"
    taken = "that pair's shift" if len(parts) == 1 else "those pairs' shifts"
    return f"{who} ran apart in every config ({'; '.join(parts)}): {taken} taken off before testing"


def note_parts(s: stats.LatencyStatistics, min_effect: float,
               max_rounds: int | None = None) -> list[str]:
    """The row's notes: threshold side, what would decide, the mean, the levels.
    `max_rounds`: the adaptive plan's ceiling; a config stopped below it was futile
    (reports.common.latency_details says so), so no note asks it for more rounds."""
    notes = []
    if s.threshold_side == "below":
        notes.append(below_threshold_note(min_effect))
    elif s.threshold_side == "unsure":
        notes.append(unsure_side_note(min_effect))
    rounds, resolves = min(s.rounds_a, s.rounds_b), s.resolves
    if s.verdict == "inconclusive" and s.threshold is None:
        notes.append(f"needs at least {stats.MIN_ROUNDS} rounds per side (--rounds)")
    elif s.verdict == "inconclusive" and s.paired and not s.flags and s.look_rounds:
        # the look's sign patterns, not the noise, left it open: more rounds decide it,
        # unless the plan found them futile
        stopped = max_rounds is not None and rounds < max_rounds
        notes.append(f"{s.look_rounds} pairs have too few sign patterns to flag a change at "
                     "this level, however large" + ("" if stopped else
                                                    ": more rounds per side (--rounds, "
                                                    "--max-rounds) decide it"))
    elif s.verdict == "inconclusive" and resolves is None:
        notes.append("too few rounds for this level: run with more --rounds")
    elif resolves is None:
        pass  # decided: nothing to resolve
    elif s.verdict == "inconclusive" and s.drift is not None and s.drift >= min_effect:
        notes.append(f"{resolve_text(f'{rounds} rounds and the drift between sessions', resolves)}"
                     f"; the drift alone is {spread_text(s.drift)}, so more rounds cannot "
                     f"decide +-{min_effect:.0%}")
    elif s.verdict == "inconclusive" and s.rounds_needed is not None:
        decide = (f"about {s.rounds_needed} would decide +-{min_effect:.0%} (--max-rounds "
                  f"{s.rounds_needed})" if s.rounds_needed <= MOST_ROUNDS_ADVISED else
                  f"over {MOST_ROUNDS_ADVISED} would be needed: a quieter machine")
        notes.append(f"{resolve_text(f'{rounds} rounds', resolves)}; {decide}")
    if s.verdict == "inconclusive" and s.mean_ci and s.ci and s.mean_ratio is not None:
        robust_inside = 1 / (1 + min_effect) < s.ci[0] and s.ci[1] < 1 + min_effect
        mean_inside = 1 / (1 + min_effect) < s.mean_ci[0] and s.mean_ci[1] < 1 + min_effect
        if robust_inside and not mean_inside:
            notes.append(f"mean of the rounds {s.mean_ratio:.3f}x [{s.mean_ci[0]:.3f}, "
                         f"{s.mean_ci[1]:.3f}]: some rounds moved more than most")
    if s.odd_pairs:
        notes.append(odd_pairs_text(s.odd_pairs))
    for side, levels in (("A", s.levels_a), ("B", s.levels_b)):
        if levels:
            notes.append(levels_text(side, levels))
    return notes


def latency_result(s: stats.LatencyStatistics, min_effect: float, alpha: float,
                   max_rounds: int | None = None) -> LatencyResult:
    """The record of one config's latency statistics, with its words (`max_rounds`: the
    adaptive plan's ceiling, `note_parts`)."""
    return LatencyResult(
        verdict=s.verdict,
        ratio=s.ratio,
        ci=list(s.ci) if s.ci else None,
        p=s.p,
        rounds_a=s.rounds_a,
        rounds_b=s.rounds_b,
        method=method_text(s, alpha),
        a_us=s.a_us,
        b_us=s.b_us,
        a_spread_us=s.a_spread_us,
        b_spread_us=s.b_spread_us,
        detectable=s.detectable,
        note="; ".join(note_parts(s, min_effect, max_rounds)) or None,
        below_threshold=s.below_threshold,
        level=s.level,
        se=s.se,
        rounds_needed=s.rounds_needed,
        drift=s.drift,
        mean_ratio=s.mean_ratio,
        mean_ci=list(s.mean_ci) if s.mean_ci else None,
        threshold_side=s.threshold_side,
        odd_pairs=[OddPair(number, ratio) for number, ratio in s.odd_pairs],
    )
