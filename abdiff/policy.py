"""The expect scope and the verdicts: which changes were intended, and the exit code.

A config is in scope when its params match every `--expect KEY=VALUE` key (any
listed value of a key matches). Outside the scope any change is unintended; a
config that ran on A and fails on B is unintended even inside it, because a
crash is never the intended outcome (DESIGN.md, "Result").

A verdict says what was measured: a config that failed on both sides with the
same failure is `still-failing`, never `unchanged`; one whose failure differs
between the sides changed like any other. When no config produced a
measurement on either side, nothing was checked and the exit code is 3.
"""

from __future__ import annotations

from typing import Any

from abdiff.errors import InputError
from abdiff.records import ConfigResult, Verdict

VERDICTS = ("still-failing", "unintended", "inconclusive", "expected", "unchanged")
NOTHING_MEASURED_EXIT = 3  # no config produced a measurement on either side: the tool failed


def parse_expect(items: list[str], allowed_keys: list[str]) -> dict[str, list[str]]:
    """`["backend=DSA", "seq_len_q=4"]` -> {"backend": ["DSA"], "seq_len_q": ["4"]}."""
    expect: dict[str, list[str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise InputError(f"--expect {item!r}: expected KEY=VALUE, e.g. --expect backend=DSA")
        if key not in allowed_keys:
            raise InputError(
                f"--expect {item!r}: unknown key '{key}'; allowed: {', '.join(allowed_keys)}"
            )
        expect.setdefault(key, []).extend(v for v in value.split(",") if v)
    return expect


def in_scope(params: dict[str, Any], expect: dict[str, list[str]]) -> bool:
    """True when the config may change: every expect key matches one of its values."""
    if not expect:
        return False
    return all(str(params.get(key)) in values for key, values in expect.items())


def changed(config: ConfigResult) -> bool:
    """Anything observable differs between A and B (a different failure included)."""
    if config.status_change in ("fixed", "broken", "failure-changed"):
        return True
    return bool(
        config.facts_changed
        or config.kernels_added
        or config.kernels_removed
        or config.latency.verdict in ("slower", "faster")
    )


def verdict(config: ConfigResult) -> Verdict:
    if config.status_change == "broken":
        return "unintended"
    if changed(config):
        return "expected" if config.in_scope else "unintended"
    if not measured(config):
        return "still-failing"  # the same failure on both sides: nothing was measured
    if config.latency.verdict == "inconclusive":
        return "inconclusive"
    return "unchanged"


def measured(config: ConfigResult) -> bool:
    """Ran on both sides: its facts, kernels and latency were compared."""
    return config.status_a == "ok" and config.status_b == "ok"


def exit_code(configs: list[ConfigResult], require_all: bool, not_compared: int = 0) -> int:
    """3 when no config ran on either side, 1 for an unintended change (or, with
    `require_all`, a config not measured on both sides), else 0."""
    if not any("ok" in (c.status_a, c.status_b) for c in configs):
        return NOTHING_MEASURED_EXIT
    if any(c.verdict == "unintended" for c in configs):
        return 1
    if require_all and (not_compared or not all(measured(c) for c in configs)):
        return 1
    return 0


def apply_policy(configs: list[ConfigResult], expect: dict[str, list[str]],
                 require_all: bool = False, not_compared: int = 0) -> dict[str, Any]:
    """Set `in_scope` and `verdict` on each config; return the summary with the exit code.

    `not_compared` counts configs with no rounds on a side (they are not in `configs`)."""
    for config in configs:
        config.in_scope = in_scope(config.params, expect)
        config.verdict = verdict(config)
    counts = {name: sum(c.verdict == name for c in configs) for name in VERDICTS}
    return {**counts, "configs": len(configs), "measured": sum(map(measured, configs)),
            "not_compared": not_compared, "require_all": require_all,
            "exit_code": exit_code(configs, require_all, not_compared)}
