"""Group-sequential levels for the adaptive extension: alpha spending (Lan-DeMets).

A run looks at a config after its first rounds (5 per side by default) and, while
the config is undecided, again after every block of 2 more rounds per side, up to
`--max-rounds`. Every look is one more chance for an unchanged config to cross
alpha by chance, so no look may be tested at the full alpha. The error is spread
over the looks by a spending function (Lan and DeMets 1983): by the look at
information fraction t = rounds / max_rounds, at most alpha(t) = alpha * t**rho of
the level has been spent (Kim and DeMets' power family; SPENDING_RHO below). The
nominal level of look k is the two-sided p below which it rejects, chosen so that
the chance to reject first at look k, under no change, is alpha(t_k) - alpha(t_k-1).

That chance depends on the earlier looks: the test statistics of one config at
two looks share its first rounds, and are correlated as sqrt(t_i / t_j). It is
computed exactly for that correlation (a Brownian motion observed at the looks,
the textbook model of sequential tests; Jennison and Turnbull 2000, ch. 19) by
integrating the density of the statistic over the region where no look has
rejected, look by look on a grid (Armitage, McPherson and Rowe 1969), with
scipy's normal distribution and its root finder. Levels are nominal: the Welch
p-value of a config is compared with them as it is (its t distribution has heavier
tails than the normal the levels assume, which errs towards fewer flags).

A run without an extension (`--max-rounds` equal to `--rounds`, a baseline's B
side, `abdiff run`) has one look, at t = 1, and is tested at the full alpha.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

SPENDING_RHO = 3.0
"""Exponent of the spending function alpha * t**rho.

Larger spends less at the early looks and keeps the last look's level close to
alpha. At 3 the first look of the default plan (5 of 15 rounds) gets 1/27 of
alpha and the last about 0.6 alpha (`nominal_levels`). Calibration (docs/statistics.md)
compares it with the Haybittle-Peto boundary it replaced and with testing every
look at the full alpha.
"""

GRID_POINTS = 401  # per look: Simpson's rule over the region where no look has rejected


@dataclass(frozen=True)
class Looks:
    """When a run looks at a config: after `first` rounds per side, then every `step`
    more, up to `max_rounds` (schedule.Plan's numbers, recorded in the run file)."""

    first: int
    max_rounds: int
    step: int = 2

    def rounds(self) -> tuple[int, ...]:
        """Rounds per side at each look; the last is always `max_rounds`."""
        if self.max_rounds <= self.first:
            return (max(self.first, self.max_rounds),)
        planned = list(range(self.first, self.max_rounds, self.step))
        return (*planned, self.max_rounds)

    def index(self, rounds: int) -> int:
        """The look a config with `rounds` rounds per side is at: the last planned look
        it has reached (the first when it has fewer, after failed rounds)."""
        reached = [k for k, n in enumerate(self.rounds()) if n <= rounds]
        return reached[-1] if reached else 0

    def to_json(self) -> dict[str, int]:
        return {"first": self.first, "max_rounds": self.max_rounds, "step": self.step}

    @classmethod
    def from_json(cls, data: dict | None) -> Looks | None:
        """The looks a run file recorded; None for a file without them (one look)."""
        if not data:
            return None
        return cls(int(data["first"]), int(data["max_rounds"]), int(data.get("step", 2)))


def spent(t: float, alpha: float, rho: float = SPENDING_RHO) -> float:
    """Level spent by information fraction t: alpha * t**rho (t capped at 1)."""
    return alpha * min(1.0, t) ** rho


def _simpson_weights(points: int, width: float) -> np.ndarray:
    weights = np.ones(points)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return weights * width / (3 * (points - 1))


@functools.lru_cache(maxsize=256)
def nominal_levels(looks: tuple[int, ...], alpha: float,
                   rho: float = SPENDING_RHO) -> tuple[float, ...]:
    """Two-sided nominal level of each look of a plan with `looks` rounds per side.

    The statistic at look k is W_k / sqrt(I_k), W a Brownian motion with variance
    I_k = rounds at look k. Look 1 rejects when |Z| > c_1 with 2 * P(Z > c_1) =
    alpha(t_1). For every later look, the sub-density of W_(k-1) over the region
    where no earlier look rejected is carried on a grid, and c_k solves (brentq)
    P(no rejection before k, |W_k| > c_k sqrt(I_k)) = alpha(t_k) - alpha(t_(k-1)),
    each term an exact normal tail integrated over the grid (Simpson's rule).
    The levels add up, with the looks' correlation, to exactly alpha(1) = alpha.
    """
    info = np.asarray(looks, dtype=float)
    if len(info) == 0 or np.any(np.diff(info) <= 0) or info[0] <= 0:
        raise ValueError(f"looks must be increasing positive round counts, got {looks}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    levels: list[float] = []
    grid = density = weights = np.zeros(0)
    previous = 0.0
    for k, current in enumerate(info):
        budget = spent(current / info[-1], alpha, rho)
        target = budget - previous
        previous = budget
        if k == 0:
            bound = sps.norm.isf(target / 2)
        else:
            scale = math.sqrt(current - info[k - 1])
            mass = weights * density

            def excess(c: float, mass: np.ndarray = mass, grid: np.ndarray = grid,
                       scale: float = scale, current: float = current,
                       target: float = target) -> float:
                """P(first rejection at this look with bound c) - its share of alpha."""
                edge = c * math.sqrt(current)
                return float(mass @ (sps.norm.cdf((-edge - grid) / scale)
                                     + sps.norm.sf((edge - grid) / scale))) - target

            bound = optimize.brentq(excess, 1e-6, 50.0, xtol=1e-10)
        levels.append(float(2 * sps.norm.sf(bound)))
        edge = bound * math.sqrt(current)
        new_grid = np.linspace(-edge, edge, GRID_POINTS)
        if k == 0:
            density = sps.norm.pdf(new_grid, scale=math.sqrt(current))
        else:
            step_scale = math.sqrt(current - info[k - 1])
            density = (weights * density) @ sps.norm.pdf(
                (new_grid[None, :] - grid[:, None]) / step_scale) / step_scale
        grid, weights = new_grid, _simpson_weights(GRID_POINTS, 2 * edge)
    return tuple(levels)


def look_level(looks: Looks | None, rounds: int, alpha: float) -> float:
    """The nominal level at which a config with `rounds` rounds per side is tested:
    alpha itself without looks or with one look (exactly: its computed level rounds
    a hair below), else its look's `nominal_levels`."""
    if looks is None or len(looks.rounds()) == 1:
        return alpha
    return nominal_levels(looks.rounds(), alpha)[looks.index(rounds)]
