"""The expect scope and the verdicts: which changes were intended, and the exit code.

A config is in scope when its params match every `--expect KEY=VALUE` key (any
listed value of a key matches). Outside the scope any change is unintended; a
config that ran on A and fails on B is unintended even inside it, because a
crash is never the intended outcome (DESIGN.md, "Result").
"""

from __future__ import annotations

from typing import Any

from abdiff.errors import InputError
from abdiff.records import ConfigResult

VERDICTS = ("unintended", "inconclusive", "expected", "unchanged")


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
    """Anything observable differs between A and B."""
    if config.status_change in ("fixed", "broken"):
        return True
    if config.status_change == "still-failing" and config.status_a != config.status_b:
        return True
    return bool(
        config.facts_changed
        or config.kernels_added
        or config.kernels_removed
        or config.latency.verdict in ("slower", "faster")
    )


def verdict(config: ConfigResult) -> str:
    if config.status_change == "broken":
        return "unintended"
    if changed(config):
        return "expected" if config.in_scope else "unintended"
    if config.latency.verdict == "inconclusive":
        return "inconclusive"
    return "unchanged"


def apply_policy(configs: list[ConfigResult], expect: dict[str, list[str]]) -> dict[str, Any]:
    """Set `in_scope` and `verdict` on each config; return the summary with the exit code."""
    for config in configs:
        config.in_scope = in_scope(config.params, expect)
        config.verdict = verdict(config)
    counts = {name: sum(c.verdict == name for c in configs) for name in VERDICTS}
    return {**counts, "configs": len(configs), "exit_code": 1 if counts["unintended"] else 0}
