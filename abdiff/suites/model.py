"""What a suite is, after loading: its configs and what the run does with them (the
loader and the upstream-tests reader both build these)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Config:
    """One point of the matrix: what one run-pack measurement is made of."""

    id: str
    params: dict[str, Any]


@dataclass
class Suite:
    name: str
    source: str
    description: str
    configs: list[Config]
    expect: dict[str, list[str]]
    facts: list[str]
    warmup_times: int
    run_times: int
    target_options: dict[str, Any] = field(default_factory=dict)
    tp: int = 1
    adapt_run_times: bool = True  # False: every round times run_times (run/iterations.py)

    def param_keys(self) -> list[str]:
        """The keys the configs' params have, in their first config's order (what
        `expect` and --expect may name)."""
        return list(dict.fromkeys(key for config in self.configs for key in config.params))
