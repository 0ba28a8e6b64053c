"""When an adaptive run looks at its configs, and how much of the level each look spends.

A run measures its first rounds (5 per side by default), looks, and gives the
configs still undecided another block of rounds (6 per side, then the 4 left) up to
`--max-rounds` (15), looking again after each block. Every look is one more chance for an
unchanged config to be flagged by chance, so the family's level is spent over the
looks (Lan and DeMets 1983): by information fraction t = rounds / max_rounds the
looks together may have flagged with chance at most alpha * t**SPENDING_RHO, and the
plan's last look brings it to alpha. A run that ends sooner (every config decided)
has spent less. stats.family_statistics sets the thresholds of all looks jointly on the
same sign patterns, so what is spent is the chance of a false flag at any look. A
look whose sign patterns cannot resolve its level (5 pairs: 32 patterns) flags
nothing and spends nothing; the next look may spend what it left. The plan's last look
spends the rest: with too few pairs for the patterns (at 1%, a plan of 5 to 7 rounds;
not below 5), by Student's t with Bonferroni (stats._few_pairs_look).

A run without an extension (`--max-rounds` equal to `--rounds`, a baseline's B
side, `abdiff run`) has one look and spends all of alpha there.
"""

from __future__ import annotations

from dataclasses import dataclass

SPENDING_RHO = 2.0
"""Exponent of the spending function alpha * t**rho: the default plan (looks at 5, 11
and 15 rounds) may have spent 11% of alpha by 5 rounds (where the sign flips cannot
reach it: nothing is spent there), 54% by 11 and all by 15 (calibration:
docs/statistics.md)."""

DEFAULT_STEP = 6
"""Rounds per side of each adaptive block: looks at 5, 11, 15 rather than every 2
rounds, since each look costs level and a sign-flip test needs 8+ pairs to flag; the
second look at 11, not 10, because `unchanged` needs 11 pairs (stats.MIN_UNCHANGED_ROUNDS):
a look at 10 could only flag, so an A/A run went on to 15 (calibration:
docs/statistics.md)."""


@dataclass(frozen=True)
class Looks:
    """When a run looks at a config: after `first` rounds per side, then every `step`
    more, up to `max_rounds` (schedule.Plan's numbers, recorded in the run file)."""

    first: int
    max_rounds: int
    step: int = DEFAULT_STEP

    def rounds(self) -> tuple[int, ...]:
        """Rounds per side at each look; the last is always `max_rounds`."""
        if self.max_rounds <= self.first:
            return (max(self.first, self.max_rounds),)
        planned = list(range(self.first, self.max_rounds, self.step))
        return (*planned, self.max_rounds)

    def to_json(self) -> dict[str, int]:
        return {"first": self.first, "max_rounds": self.max_rounds, "step": self.step}

    @classmethod
    def from_json(cls, data: dict | None) -> Looks | None:
        """The looks a run file recorded; None for a file without them (one look)."""
        if not data:
            return None
        return cls(int(data["first"]), int(data["max_rounds"]), int(data.get("step", 2)))


def spent(alpha: float, fraction: float, rho: float = SPENDING_RHO) -> float:
    """Level spent by information fraction `fraction`: alpha * fraction**rho (capped at 1)."""
    return alpha * min(1.0, max(0.0, fraction)) ** rho
