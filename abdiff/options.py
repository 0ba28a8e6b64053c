"""The options of a measuring command, one frozen object per concern.

The command line is parsed once, in commands/ (`commands/common.py` turns the
argparse result into these); everything after it (session, schedule, compare,
reports) receives these typed objects and never sees argparse.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from abdiff.run.schedule import Plan
from abdiff.verdict.stats import DEFAULT_ALPHA, DEFAULT_MIN_EFFECT


@dataclass(frozen=True)
class Selection:
    """What is measured: the repository, the suite, the target, what may change."""

    suite: str  # a built-in suite name or a YAML file (--configs)
    repo: Path | None = None  # None: the current directory
    allow_large: bool = False  # --yes: a matrix beyond the safety limit
    target: str | None = None  # None: detected from the repository
    target_args: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()  # --metric: the command target's; empty: the suite's
    expect: tuple[str, ...] = ()  # KEY=VALUE; empty: the suite's own scope
    baselines_dir: Path | None = None  # where baseline:NAME is looked up
    allow_env_mismatch: bool = False  # compare with a baseline of another machine


@dataclass(frozen=True)
class Execution:
    """How the rounds run: how many, in which workers, on what device, kept where."""

    rounds: int = Plan.rounds
    max_rounds: int = Plan.max_rounds
    timeout_s: float = 600.0
    launcher: str | None = None  # None: the target's default
    ranks: int | None = None  # --np; None: the suite's tp
    nodes: int | None = None
    device: str = "auto"
    eager: bool = False
    cpu_threads: int = 1
    devices: str | None = None  # --devices: GPU indices or CPU sets (devices.py); None: one
    prestart: str = "auto"
    sandbox: str = "auto"  # launchers/sandbox.py: auto | on | off
    cache_dir: Path | None = None
    pass_env: tuple[str, ...] = ()
    unsafe_allow_secret_env: bool = False
    max_memory_bytes: int | None = None
    resume: bool = False
    seed: int | None = None
    skip_preflight: bool = False
    quiet: bool = False  # no progress lines
    # when the command began (time.monotonic(), cli.main): its imports are its time too
    started: float = field(default_factory=time.monotonic, compare=False)


@dataclass(frozen=True)
class Statistics:
    """How measured rounds become verdicts and an exit code."""

    min_effect: float = DEFAULT_MIN_EFFECT  # a fraction: 0.02 is 2%
    alpha: float = DEFAULT_ALPHA
    small_changes: str = "report"
    require_all: bool = False
    gates: dict[str, str] = field(default_factory=dict)  # class -> soft|hard


@dataclass(frozen=True)
class Output:
    """Where the report goes and in which formats."""

    format: str = "table"
    output: Path | None = None  # None: stdout
    json: Path | None = None
    html: Path | None = None
    details_url: str | None = None
