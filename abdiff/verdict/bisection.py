"""Find the commit that made a change: binary search over the first-parent path A..B.

The change to find is what `A..B` showed for each target config (its
*signature*: status change, facts changed, kernels added/removed, latency
direction). A candidate commit C is classified per config by comparing it
with the ends:

- status, facts and kernels are deterministic: C is `new` when `A..C` shows
  the same deterministic change as `A..B`, `old` when it shows none;
- latency needs statistics on both ends: `new` when `A..C` moves the same way
  as `A..B` and `C..B` does not move (unchanged or inconclusive), `old` when
  `C..B` moves that way and `A..C` does not; when neither side moves after the
  adaptive rounds C is `inconclusive`, and that config's search stops there
  (never a guess);
- a config that fails at C in a way neither end fails (the commit cannot run
  the benchmark) is `skip`, like `git bisect skip`;
- a part of the change (some facts but not all, a smaller move) is `partial`:
  not yet the change, so the search goes on above C, and the sandwich check at
  the end tells a change spread over commits from one made by one commit.

Every config keeps its own interval (last `old`, first `new`); one measurement
at C classifies every config whose interval contains C, so configs changed by
different commits are found in one search. This module holds the search and
the classification; measuring is the caller's (`commands/bisect.py`), so the
search is unit-tested without running a benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from abdiff.store.records import ConfigResult, Result

BISECT_SCHEMA = "abdiff.bisect/1"
Outcome = Literal["old", "new", "partial", "skip", "inconclusive"]
MOVES = ("slower", "faster")


@dataclass
class Commit:
    sha: str
    subject: str
    author: str = ""
    date: str = ""


@dataclass
class ChangeSignature:
    """What A..B changed in one config: the thing to find."""

    status_change: str
    facts_changed: dict[str, list[Any]]
    kernels_added: dict[str, int]
    kernels_removed: dict[str, int]
    latency: str | None  # "slower" / "faster", or None when latency did not move

    @classmethod
    def of(cls, config: ConfigResult) -> ChangeSignature:
        moved = config.latency.verdict if config.latency.verdict in MOVES else None
        signature = cls(config.status_change, config.facts_changed, config.kernels_added,
                        config.kernels_removed, moved)
        if moved and config.latency.below_threshold and signature.deterministic:
            # a move within --min-effect beside a fact or kernel change: the change to find
            # is the one that matters; a same-threshold `unchanged` elsewhere is no contradiction
            signature.latency = None
        return signature

    @property
    def deterministic(self) -> bool:
        return bool(self.status_change in ("fixed", "broken") or self.facts_changed
                    or self.kernels_added or self.kernels_removed)

    def shown_by(self, config: ConfigResult) -> bool:
        """`config` (a comparison of two commits) shows this whole change: the same
        deterministic change, and the same latency move where latency is part of it.

        Where a deterministic part exists, an undecided latency does not contradict
        it (as in `classify`); `latency_undecided` names those configs in the report.
        """
        same_deterministic = (config.status_change, config.facts_changed, config.kernels_added,
                              config.kernels_removed) == (self.status_change, self.facts_changed,
                                                          self.kernels_added, self.kernels_removed)
        return same_deterministic and (self.latency in (None, config.latency.verdict)
                                       or self.latency_undecided(config))

    def latency_undecided(self, config: ConfigResult) -> bool:
        """The latency part of this change was not decided by `config` (inconclusive there),
        and a deterministic part carries the identification."""
        return bool(self.deterministic and self.latency
                    and config.latency.verdict == "inconclusive")


def deterministic_change(config: ConfigResult) -> bool:
    return ChangeSignature.of(config).deterministic


def classify(signature: ChangeSignature, against_a: ConfigResult,
             against_b: ConfigResult | None) -> Outcome:
    """Where candidate C stands for one config, from `A..C` and (latency) `C..B`."""
    b_fails = signature.status_change in ("broken", "still-failing")
    if against_a.status_b != "ok" and against_a.status_a == "ok" and not b_fails:
        return "skip"  # C fails where neither end does: it cannot run the benchmark
    same_deterministic = (
        against_a.status_change == signature.status_change
        and against_a.facts_changed == signature.facts_changed
        and against_a.kernels_added == signature.kernels_added
        and against_a.kernels_removed == signature.kernels_removed
    )
    no_deterministic = not deterministic_change(against_a)
    if signature.latency is None:
        if same_deterministic and signature.deterministic:
            return "new"
        return "old" if no_deterministic else "partial"
    latency_a = against_a.latency.verdict
    latency_b = against_b.latency.verdict if against_b is not None else "n/a"
    # the move shows on exactly one side of C: on CPU-like noise "unchanged" (an equivalence
    # proof) is rarely reached, but a clear move on one side and none on the other decides
    quiet = ("unchanged", "inconclusive")
    if latency_a == signature.latency and latency_b in quiet and \
            (same_deterministic or not signature.deterministic):
        return "new"
    if latency_a in quiet and latency_b == signature.latency and no_deterministic:
        return "old"
    if signature.deterministic and latency_a in quiet and latency_b in quiet:
        # latency decides neither way: the deterministic part says where C stands
        if same_deterministic:
            return "new"
        if no_deterministic:
            return "old"
    if latency_a in MOVES and latency_b in MOVES:
        return "partial"  # moved from A and still moves to B: a share of the change
    if not no_deterministic and not same_deterministic:
        return "partial"
    return "inconclusive"


@dataclass
class Step:
    """One tested commit and what it was for each config measured there."""

    commit: Commit
    outcomes: dict[str, Outcome]


@dataclass
class Culprit:
    """The first commit that shows a change, the configs it changed, and the sandwich check."""

    commit: Commit
    configs: list[str]
    confirmed: bool | None = None  # culprit^..culprit shows the same change
    latency_undecided: list[str] = field(default_factory=list)  # confirmed by facts/kernels only
    spread_from: Commit | None = None  # the last commit seen unchanged, when not confirmed
    evidence: Result | None = None  # the comparison culprit^..culprit


@dataclass
class BisectResult:
    a: Commit
    b: Commit
    configs: list[str]  # the configs whose change was searched
    culprits: list[Culprit] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    unresolved: dict[str, str] = field(default_factory=dict)  # config -> why not found
    skipped: list[Commit] = field(default_factory=list)
    schema: str = BISECT_SCHEMA

    @property
    def exit_code(self) -> int:
        """0: every change pinned to one confirmed commit; 1: some change could not be."""
        if self.unresolved or any(c.confirmed is False for c in self.culprits):
            return 1
        return 0

    def to_json(self) -> dict[str, Any]:
        def commit(c: Commit | None) -> dict[str, str] | None:
            return None if c is None else asdict(c)

        return {
            "schema": self.schema, "a": commit(self.a), "b": commit(self.b),
            "configs": self.configs,
            "culprits": [{"commit": commit(c.commit), "configs": c.configs,
                          "confirmed": c.confirmed, "latency_undecided": c.latency_undecided,
                          "spread_from": commit(c.spread_from),
                          "evidence": c.evidence.to_json() if c.evidence else None}
                         for c in self.culprits],
            "steps": [{"commit": commit(s.commit), "outcomes": s.outcomes} for s in self.steps],
            "unresolved": self.unresolved,
            "skipped": [commit(c) for c in self.skipped],
            "exit_code": self.exit_code,
        }


Tester = Callable[[Commit, list[str]], dict[str, Outcome]]


def search(path: list[Commit], configs: list[str], test: Tester) -> tuple[
        dict[str, int], dict[str, str], list[Step], set[int]]:
    """Binary search of `path` (index 0 = A, known old; last = B, known new) per config.

    Returns, per config, the index of its first `new` commit; the configs whose
    search stopped (with why); the steps taken; and the skipped indices.
    """
    low = {c: 0 for c in configs}  # last index known old (or partial)
    high = {c: len(path) - 1 for c in configs}  # first index known new
    unresolved: dict[str, str] = {}
    skipped: set[int] = set()
    steps: list[Step] = []

    def open_configs() -> list[str]:
        return [c for c in configs if c not in unresolved and high[c] - low[c] > 1]

    while open_configs():
        widest = max(open_configs(), key=lambda c: high[c] - low[c])
        candidates = [i for i in range(low[widest] + 1, high[widest]) if i not in skipped]
        if not candidates:
            for c in open_configs():
                if all(i in skipped for i in range(low[c] + 1, high[c])):
                    unresolved[c] = (f"first changed in one of {path[low[c] + 1].sha[:12]}.."
                                     f"{path[high[c]].sha[:12]}: the commits before the last "
                                     "could not run the benchmark (skipped)")
            continue
        middle = (low[widest] + high[widest]) / 2
        index = min(candidates, key=lambda i: (abs(i - middle), i))
        measured = [c for c in open_configs() if low[c] < index < high[c]]
        outcomes = test(path[index], measured)
        steps.append(Step(path[index], outcomes))
        for config in measured:
            outcome = outcomes[config]
            if outcome == "new":
                high[config] = index
            elif outcome in ("old", "partial"):
                low[config] = index
            elif outcome == "skip":
                skipped.add(index)
            else:
                unresolved[config] = (f"latency stayed inconclusive at {path[index].sha[:12]} "
                                      "after --max-rounds rounds")
    first_new = {c: high[c] for c in configs if c not in unresolved}
    return first_new, unresolved, steps, skipped


def outcome_at(steps: list[Step], commit: Commit, config: str) -> Outcome | None:
    """What `config` was at `commit` in the search (None: not tested there)."""
    return next((s.outcomes[config] for s in steps
                 if s.commit.sha == commit.sha and config in s.outcomes), None)


def last_unchanged(steps: list[Step], path: list[Commit], config: str, before: int) -> Commit:
    """The highest commit below `before` at which `config` showed no change at all (A if none)."""
    index_of = {commit.sha: i for i, commit in enumerate(path)}
    seen = [index_of[s.commit.sha] for s in steps
            if s.outcomes.get(config) == "old" and index_of[s.commit.sha] < before]
    return path[max(seen, default=0)]


def culprits_of(first_new: dict[str, int], path: list[Commit]) -> list[Culprit]:
    """Configs grouped by the commit that changed them, in history order."""
    by_index: dict[int, list[str]] = {}
    for config, index in first_new.items():
        by_index.setdefault(index, []).append(config)
    return [Culprit(path[i], sorted(cs)) for i, cs in sorted(by_index.items())]


def result_signatures(result: Result, wanted: list[str] | None) -> dict[str, ChangeSignature]:
    """The changes of `A..B` to search: the given configs, or every unintended one."""
    chosen = [c for c in result.configs
              if (c.id in wanted if wanted else c.verdict == "unintended")]
    return {c.id: ChangeSignature.of(c) for c in chosen
            if ChangeSignature.of(c).deterministic or ChangeSignature.of(c).latency}
