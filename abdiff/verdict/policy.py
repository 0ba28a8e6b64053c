"""The expect scope and the verdicts: which changes were intended, and the exit code.

A config is in scope when its params match every `--expect KEY=VALUE` key (any
listed value of a key matches). Outside the scope any change is unintended; a
config that ran on A and fails on B is unintended even inside it, because a
crash is never the intended outcome.

A verdict says what was measured: a config that failed on both sides with the
same failure is `still-failing`, never `unchanged`; one whose failure differs
between the sides changed like any other. When no config produced a
measurement on either side, nothing was checked and the exit code is 3.
"""

from __future__ import annotations

from difflib import get_close_matches
from pathlib import Path
from typing import Any

from abdiff.errors import InputError, did_you_mean
from abdiff.store.records import ConfigResult, Verdict

VERDICTS = ("still-failing", "unintended", "inconclusive", "small-change", "expected", "unchanged")
SMALL_CHANGES = ("report", "gate")  # --small-changes: a change below the threshold fails or not
NOTHING_MEASURED_EXIT = 3  # no config produced a measurement on either side: the tool failed
# what a change can be a change of; `--gate latency=soft` reports a class and fails on none
GATE_CLASSES = ("status", "facts", "kernels", "latency")
GATE_LEVELS = ("soft", "hard")


def parse_expect(items: list[str], allowed_keys: list[str]) -> dict[str, list[str]]:
    """`["backend=DSA", "seq_len_q=4"]` -> {"backend": ["DSA"], "seq_len_q": ["4"]}."""
    expect: dict[str, list[str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise InputError(f"--expect {item!r}: expected KEY=VALUE, e.g. --expect backend=DSA")
        if key not in allowed_keys:
            raise InputError(f"--expect {item!r}: unknown key '{key}'; allowed: "
                             f"{', '.join(allowed_keys)}" + did_you_mean(
                                 key, [], guesses=[f"{k}={value}" for k in
                                                   get_close_matches(key, allowed_keys, n=1)]))
        expect.setdefault(key, []).extend(v for v in value.split(",") if v)
    return expect


def parse_gates(text: str | None) -> dict[str, str]:
    """`latency=soft,kernels=hard` (or a YAML file of such a mapping) -> {class: level}.

    A class not named is hard: a soft gate is something a team rolls out on purpose."""
    if not text:
        return {}
    where = f"--gate {text!r}"
    path = Path(text)
    if path.suffix in (".yaml", ".yml", ".json") or path.is_file():
        import yaml  # only here: `abdiff comment` runs with the standard library alone

        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise InputError(f"{where}: cannot read the gate file ({type(exc).__name__}); give "
                             "CLASS=soft|hard,... or a YAML mapping file") from None
        if not isinstance(data, dict):
            raise InputError(f"{where}: the file must map classes to soft or hard, e.g. "
                             "{latency: soft}")
        items = [(str(k), str(v)) for k, v in data.items()]
    else:
        items = [(part.partition("=")[0], part.partition("=")[2])
                 for part in text.split(",") if part]
    gates: dict[str, str] = {}
    for name, level in items:
        if name not in GATE_CLASSES or level not in GATE_LEVELS:
            raise InputError(f"{where}: {name}={level} is not CLASS=soft|hard with CLASS one of "
                             f"{', '.join(GATE_CLASSES)}, e.g. --gate latency=soft,kernels=hard")
        gates[name] = level
    return gates


def changed_classes(config: ConfigResult) -> list[str]:
    """The gate classes in which `config` changed (status, facts, kernels, latency)."""
    found = {
        "status": config.status_change in ("fixed", "broken", "failure-changed"),
        "facts": bool(config.facts_changed),
        "kernels": bool(config.kernels_added or config.kernels_removed),
        "latency": config.latency.verdict in ("slower", "faster"),
    }
    return [name for name in GATE_CLASSES if found[name]]


def fails(config: ConfigResult, gates: dict[str, str] | None = None) -> bool:
    """An unintended change in at least one hard class (every class is hard by default)."""
    if config.verdict != "unintended":
        return False
    return any((gates or {}).get(name, "hard") == "hard"
               for name in changed_classes(config) or ["status"])


def in_scope(params: dict[str, Any], expect: dict[str, list[str]]) -> bool:
    """True when the config may change: every expect key matches one of its values."""
    if not expect:
        return False
    return all(str(params.get(key)) in values for key, values in expect.items())


def latency_changed(config: ConfigResult, small_changes: str = "report") -> bool:
    """Latency flagged slower or faster; one below the threshold only when it gates."""
    latency = config.latency
    return latency.verdict in ("slower", "faster") and (
        not latency.below_threshold or small_changes == "gate")


def changed(config: ConfigResult, small_changes: str = "report") -> bool:
    """Anything observable differs between A and B (a different failure included); a
    latency change below the threshold counts only with `small_changes` "gate"."""
    if config.status_change in ("fixed", "broken", "failure-changed"):
        return True
    return bool(
        config.facts_changed
        or config.kernels_added
        or config.kernels_removed
        or latency_changed(config, small_changes)
    )


def verdict(config: ConfigResult, small_changes: str = "report") -> Verdict:
    """The config's verdict. A latency change that is real but below the threshold is
    `small-change` (shown, exit 0) unless `small_changes` is "gate": never `unchanged`."""
    if config.status_change == "broken":
        return "unintended"
    if changed(config, small_changes):
        return "expected" if config.in_scope else "unintended"
    if not measured(config):
        return "still-failing"  # the same failure on both sides: nothing was measured
    if config.latency.verdict in ("slower", "faster"):
        return "small-change"
    if config.latency.verdict == "inconclusive":
        return "inconclusive"
    return "unchanged"


def measured(config: ConfigResult) -> bool:
    """Ran on both sides: its facts, kernels and latency were compared."""
    return config.status_a == "ok" and config.status_b == "ok"


def summary_disagreements(summary: dict[str, Any], configs: list[ConfigResult]) -> list[str]:
    """What a result's summary says that its configs do not (a forged or damaged result
    file): its counts of configs, of configs measured and of each verdict (a count missing
    disagrees too), the configs it says changed in soft classes only (recomputed from its
    soft gates, which the comment names), and an exit code 0 beside an unintended change
    that fails."""
    held = {"configs": len(configs), "measured": sum(map(measured, configs))}
    for config in configs:
        held[config.verdict] = held.get(config.verdict, 0) + 1
    wrong = [f"{key} {summary.get(key, 'missing')!r} but {held.get(key, 0)} in its configs"
             for key in ("configs", "measured", *VERDICTS)
             if not _count(summary.get(key)) or summary[key] != held.get(key, 0)]
    soft_gates = summary.get("soft_gates") or []
    if not _names(soft_gates):
        wrong.append(f"soft gates {soft_gates!r} that are not class names")
        soft_gates = []
    gates = {name: "soft" for name in soft_gates}
    soft = sorted(c.id for c in configs if c.verdict == "unintended" and not fails(c, gates))
    said = summary.get("soft_only") or []
    if not _names(said) or sorted(said) != soft:
        wrong.append(f"soft_only {said!r} but {soft} in its configs")
    hard = sum(fails(c, gates) for c in configs)
    if summary.get("exit_code") == 0 and hard:
        wrong.append(f"exit code 0 with {hard} unintended change(s) that fail")
    return wrong


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def exit_code(configs: list[ConfigResult], require_all: bool, not_compared: int = 0,
              gates: dict[str, str] | None = None) -> int:
    """3 when no config ran on either side, 1 for an unintended change in a hard gate class
    (or, with `require_all`, a config not measured on both sides), else 0."""
    if not any("ok" in (c.status_a, c.status_b) for c in configs):
        return NOTHING_MEASURED_EXIT
    if any(fails(c, gates) for c in configs):
        return 1
    if require_all and (not_compared or not all(measured(c) for c in configs)):
        return 1
    return 0


def apply_policy(configs: list[ConfigResult], expect: dict[str, list[str]],
                 require_all: bool = False, not_compared: int = 0,
                 small_changes: str = "report",
                 gates: dict[str, str] | None = None) -> dict[str, Any]:
    """Set `in_scope` and `verdict` on each config; return the summary with the exit code.

    `not_compared` counts configs with no rounds on a side (they are not in `configs`);
    `gates` makes classes soft: reported as always, failing nothing."""
    for config in configs:
        config.in_scope = in_scope(config.params, expect)
        config.verdict = verdict(config, small_changes)
    counts = {name: sum(c.verdict == name for c in configs) for name in VERDICTS}
    summary: dict[str, Any] = {
        **counts, "configs": len(configs), "measured": sum(map(measured, configs)),
        "not_compared": not_compared, "require_all": require_all,
        "small_changes": small_changes,
        "exit_code": exit_code(configs, require_all, not_compared, gates)}
    soft = sorted(name for name, level in (gates or {}).items() if level == "soft")
    if soft:
        summary["soft_gates"] = soft
        summary["soft_only"] = [c.id for c in configs
                                if c.verdict == "unintended" and not fails(c, gates)]
    return summary
