"""What every report format shares: ordering, the summary sentence and cell texts.

Each format only decides layout and escaping; the words and numbers come from
here, so the terminal table, the PR comment and the HTML page can never
disagree about what a config's change was. Functions here return plain,
unescaped (but single-line, control-character-free and length-capped) text:
each format escapes it for its own medium.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from abdiff.reports.printable import printable
from abdiff.store.records import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_EFFECT,
    MOST_ROUNDS_ADVISED,
    ConfigResult,
    LatencyResult,
    Result,
    Side,
)
from abdiff.verdict import policy

# Reading order of every report: what needs a human first. `still-failing` (fails on both
# sides) leads: it hides whatever else the change did to that config.
VERDICT_ORDER: tuple[str, ...] = (
    "still-failing", "unintended", "inconclusive", "small-change", "expected", "unchanged")
# Order of the counts in the summary sentence ("2 unintended, 4 expected, ...").
SUMMARY_ORDER: tuple[str, ...] = (
    "unintended", "expected", "small-change", "unchanged", "inconclusive", "still-failing")
TEXT_LIMIT = 200
# our own sentences (notes, a latency's explanation): long enough never to be cut; the cap
# is for text a benchmark made huge
NOTE_LIMIT = 2000
ELLIPSIS = "\u2026"


def clip(text: Any, limit: int = TEXT_LIMIT) -> str:
    """One line of printable text, at most `limit` characters (ellipsis when cut).

    Text from benchmarks (error lines, fact values, kernel and config names)
    may hold newlines, ANSI escapes, bidirectional overrides or megabytes of
    traceback; no report should inherit any of that. Newlines become " / ",
    other control and format characters are dropped (printable.py, which also breaks up
    what a CI runner would read as a workflow command).
    """
    text = str(text).replace("\r\n", "\n").replace("\r", "\n").replace("\n", " / ")
    line = printable(text, lines=False).strip()
    if len(line) > limit:
        line = line[: max(limit - 1, 0)].rstrip() + ELLIPSIS
    return line


def ordered(result: Result) -> list[ConfigResult]:
    """Configs in reading order: still-failing, unintended, inconclusive, expected, unchanged.

    Stable within a verdict (suite order is kept); an unknown verdict sorts
    right after the known ones rather than disappearing.
    """
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    return sorted(result.configs, key=lambda c: rank.get(c.verdict, len(VERDICT_ORDER)))


def grouped(result: Result) -> dict[str, list[ConfigResult]]:
    """Configs by verdict, in reading order; empty groups are left out."""
    groups: dict[str, list[ConfigResult]] = {}
    for cfg in ordered(result):
        groups.setdefault(cfg.verdict, []).append(cfg)
    return groups


def counts(result: Result) -> dict[str, int]:
    """How many configs got each verdict (every documented verdict present, maybe 0).

    Counted from the configs themselves rather than read from `summary`, so a
    hand-built or partial summary cannot make a report disagree with its rows.
    """
    tally = {v: 0 for v in VERDICT_ORDER}
    for cfg in result.configs:
        tally[cfg.verdict] = tally.get(cfg.verdict, 0) + 1
    return tally


@dataclass(frozen=True)
class RunFacts:
    """Every count a report states about a run, derived once from its Result: the
    headline, the `next:` line, the notes, the summary and the last line of every format
    read these, so no two of them can count the same thing differently."""

    exit_code: int
    verdicts: dict[str, int]  # configs per verdict (`counts`)
    total: int  # configs of the run, those never compared included
    measured: int  # ran on both sides (policy.measured)
    failed_both: int
    failed_one: int
    not_run: int  # neither failed nor measured: no rounds on a side
    timed: int  # configs with a latency on both sides
    undecided: tuple[ConfigResult, ...]  # of those, the ones whose latency is inconclusive
    min_effect: float
    alpha: float
    max_rounds: int | None  # the adaptive plan's ceiling per side, where the result has it
    machine: tuple[str, ...]  # what made the machine noisy, where it was


def _count_field(result: Result, key: str) -> int | None:
    value = result.summary.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _share_field(result: Result, key: str, default: float) -> float:
    value = result.summary.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


def run_facts(result: Result) -> RunFacts:
    """The counts of `result`, from its configs (a hand-built or partial summary cannot
    make a report disagree with its rows); the summary only adds the configs never
    compared, the exit code, the thresholds and the machine."""
    measured = sum(map(policy.measured, result.configs))
    total = max(len(result.configs) + (_count_field(result, "not_compared") or 0),
                _count_field(result, "configs") or 0)  # a run that compared none has none
    both = sum(c.status_a != "ok" and c.status_b != "ok" for c in result.configs)
    one = sum((c.status_a == "ok") != (c.status_b == "ok") for c in result.configs)
    timed = [c for c in result.configs if c.latency.verdict != "n/a"]
    machine = result.summary.get("machine")
    return RunFacts(
        exit_code=exit_code(result), verdicts=counts(result), total=total, measured=measured,
        failed_both=both, failed_one=one, not_run=max(total - measured - both - one, 0),
        timed=len(timed), undecided=tuple(c for c in timed if c.latency.verdict == "inconclusive"),
        min_effect=_share_field(result, "min_effect", DEFAULT_MIN_EFFECT),
        alpha=_share_field(result, "alpha", DEFAULT_ALPHA),
        max_rounds=_count_field(result, "max_rounds"),
        machine=tuple(map(str, machine)) if isinstance(machine, list) else ())



def measured_sentence(result: Result) -> str:
    """"9 of 12 configs measured; 3 failed on both sides": how much of the suite was checked.

    Measured means ran on both sides. Configs with no rounds on a side (an interrupted
    or one-sided run) count as not measured."""
    facts = run_facts(result)
    return "; ".join([f"{facts.measured} of {facts.total} config{'' if facts.total == 1 else 's'}"
                      " measured", *unmeasured_parts(result)])


def unmeasured_parts(result: Result) -> list[str]:
    """Why the configs not measured were not: ["3 failed on both sides", "1 failed on one
    side", "2 not run on both sides"], the same words in the headline and the summary."""
    facts = run_facts(result)
    parts = [f"{facts.failed_both} failed on both sides"] if facts.failed_both else []
    parts += [f"{facts.failed_one} failed on one side"] if facts.failed_one else []
    return parts + ([f"{facts.not_run} not run on both sides"] if facts.not_run else [])


def summary_sentence(result: Result) -> str:
    """"9 of 12 configs measured; 3 failed on both sides; 2 unintended, 4 expected, 3
    unchanged, 0 inconclusive, 3 still-failing" (still-failing only when there are any)."""
    tally = run_facts(result).verdicts
    extra = [v for v in tally if v not in SUMMARY_ORDER]
    parts = [f"{tally[v]} {v}" for v in (*SUMMARY_ORDER, *extra)
             if tally[v] or v not in ("still-failing", "small-change")]
    return f"{measured_sentence(result)}; {', '.join(parts)}"


def latency_undecided(result: Result) -> str | None:
    """"latency undecided for 3 of the 12 configs timed on both sides" when any config with
    latency on both sides got no latency verdict (whatever its config verdict: an unintended
    fact change can sit beside an undecided latency); None otherwise. The headline, the
    `next:` line and the notes all say it in these words, from `RunFacts.undecided`."""
    facts = run_facts(result)
    if not facts.undecided:
        return None
    by_verdict: dict[str, int] = {}
    for cfg in facts.undecided:
        by_verdict[cfg.verdict] = by_verdict.get(cfg.verdict, 0) + 1
    # which verdict counts hold them, when not all are `inconclusive`: "7 of the 8 ... (4
    # inconclusive, 3 of the 4 unintended)", each count the summary's own
    split = (" (" + ", ".join(
        f"{n} {v}" if n == facts.verdicts.get(v) else f"{n} of the {facts.verdicts.get(v)} {v}"
        for v, n in by_verdict.items()) + ")" if set(by_verdict) != {"inconclusive"} else "")
    return (f"latency undecided for {len(facts.undecided)} of the {facts.timed} "
            f"config{'' if facts.timed == 1 else 's'} timed on both sides{split}")


def verdict_line(result: Result) -> str:
    """The headline: is there anything a reviewer must look at, and was anything measured?
    Sides measured under different kernel-selecting variables say so here too."""
    differs = result.summary.get("kernel_env_differs")
    env = (f"; kernel-selecting environment differs: {clip(', '.join(map(str, differs)), 400)}"
           if isinstance(differs, list) and differs else "")
    return _verdict(result) + env


def _verdict(result: Result) -> str:
    facts = run_facts(result)
    if facts.exit_code == policy.NOTHING_MEASURED_EXIT:
        return f"nothing measured (0 of {facts.total} configs ran on both sides)"
    tally = facts.verdicts
    n = tally["unintended"]
    undecided = latency_undecided(result)
    if n:
        line = f"{n} unintended change{'' if n == 1 else 's'}"
        soft = result.summary.get("soft_gates")
        if isinstance(soft, list) and soft:  # `--gate latency=soft`: say what does not fail
            only = result.summary.get("soft_only") or []
            line += (f" (soft gates: {', '.join(map(str, soft))}; {len(only)} of them in soft "
                     "classes only, reported, not failing)")
        return line  # the summary sentence counts the undecided
    if facts.exit_code == 1 and result.summary.get("require_all") is True:
        return "not every config measured (--require-all)"
    if facts.measured == 0:
        return f"nothing measured (0 of {facts.total} configs ran on both sides)"
    words = [f"{facts.measured} measured"]
    if tally["still-failing"]:
        words.append(f"{tally['still-failing']} still failing")
    if tally["inconclusive"]:
        words.append(f"{tally['inconclusive']} inconclusive")
    if tally["small-change"]:
        words.append(f"{tally['small-change']} below the threshold")
    words += [part for part in unmeasured_parts(result)
              if not (tally["still-failing"] and part.endswith("failed on both sides"))]
    if undecided:  # status, facts and kernels were checked, speed mostly not
        return f"no unintended change found, but {undecided}; {', '.join(words)}"
    return f"no unintended change ({', '.join(words)})"


def passed(result: Result) -> bool:
    """Exit 0, something measured and every latency decided: the run is green (an
    undecided latency keeps exit 0 but not the green mark)."""
    facts = run_facts(result)
    return facts.exit_code == 0 and facts.measured > 0 and not facts.undecided


# what each exit status of a compared run means, on its last line
EXIT_MEANINGS = MappingProxyType({
    0: "nothing changed outside the expected scope",
    1: "a change outside the expected scope, in the UNINTENDED rows",
    3: "nothing measured: abdiff could not check anything",
})


def time_line(result: Result) -> str | None:
    """Where the run's wall time went (Result.time), in one line; None when this run
    measured nothing (a re-print of kept rounds, an older result)."""
    split = result.time
    if split is None:
        return None
    parts = []
    for name, side in split.sides.items():
        parts.append(
            f"{name} {side.workers} worker{'' if side.workers == 1 else 's'}: start "
            f"{side.start_s:.1f}, set-up {side.setup_s:.1f}, warm-up {side.warmup_s:.1f}, "
            f"timed {side.timed_s:.1f}, kernel capture {side.capture_s:.1f}, ending "
            f"{side.exit_s:.1f}")
    devices = f" on {split.devices} devices at once" if split.devices > 1 else ""
    return (f"time: {split.wall_s:.1f} s{devices}; " + "; ".join(parts)
            + f"; abdiff itself {split.abdiff_s:.1f} (seconds)")


def final_line(result: Result) -> str:
    """The one line every command ends with, whatever went to files: the verdict, each
    count said once, and what the exit status means."""
    facts = run_facts(result)
    code, tally = facts.exit_code, facts.verdicts
    meaning = EXIT_MEANINGS.get(code, "")
    if code == policy.NOTHING_MEASURED_EXIT:
        head = "nothing measured"
    elif tally["unintended"]:
        head = f"{tally['unintended']} unintended change{'' if tally['unintended'] == 1 else 's'}"
    elif code == 1 and result.summary.get("require_all") is True:
        head = "not every config measured"
        meaning = "--require-all and a config not measured on both sides"
    else:
        head = "no unintended change"
    soft = result.summary.get("soft_gates")
    if code == 0 and tally["unintended"] and isinstance(soft, list) and soft:
        meaning = (f"the unintended changes are in soft gate classes only ("
                   f"{clip(', '.join(map(str, soft)), 80)}): reported, not failing")
    order = [*SUMMARY_ORDER, *(v for v in tally if v not in SUMMARY_ORDER)]
    verdicts = ", ".join(f"{tally[v]} {v}" for v in order if tally.get(v))
    differs = result.summary.get("kernel_env_differs")
    if isinstance(differs, list) and differs:  # the sides did not run the same kernels' inputs
        names = clip(", ".join(map(str, differs)), 400)
        head += f" (kernel-selecting environment differs: {names})"
    return f"abdiff: {head}: {measured_sentence(result)}; {verdicts} (exit {code}: {meaning})"


def spread_text(share: float) -> str:
    """"+-9.8%"; from 100% on no latency statement (a step cannot get 100% faster): "over
    100%" ("+-192.9%" reads as a number a reader might act on)."""
    return f"+-{share:.1%}" if share < 1 else "over 100%"


def rounds_span(configs: tuple[ConfigResult, ...]) -> str:
    """"10 rounds per side", or "10 to 35 rounds per side" when the configs stopped at
    different looks."""
    rounds = [min(c.latency.rounds_a, c.latency.rounds_b) for c in configs]
    low, high = min(rounds), max(rounds)
    return f"{low} rounds per side" if low == high else f"{low} to {high} rounds per side"


def next_step(result: Result) -> str | None:
    """What to do about the configs whose latency the run could not decide, or None: the
    rounds per side that each one's measured spread says would decide it
    (`LatencyResult.rounds_needed`, the largest of them); beyond MOST_ROUNDS_ADVISED, or
    on a machine that was noisy, a quieter machine."""
    facts = run_facts(result)
    if not facts.undecided:
        return None
    # against a baseline whose sessions drift beyond the threshold, rounds cannot decide
    by_drift = {c.id: c.latency.drift for c in facts.undecided
                if c.latency.drift is not None and c.latency.drift >= facts.min_effect}
    drifting = list(by_drift.values())
    projected = [c.latency.rounds_needed for c in facts.undecided
                 if c.latency.rounds_needed and c.id not in by_drift]
    text = f"next: {latency_undecided(result)}, after {rounds_span(facts.undecided)}"
    if facts.machine:  # the machine explains the noise: say that first
        return (f"{text}; the machine was noisy ({'; '.join(facts.machine)}): measure on an "
                "idle machine")
    if drifting:
        who = "" if len(drifting) == len(facts.undecided) else f" for {len(drifting)} of them"
        text += (f"; the drift between the baseline's sessions alone resolves "
                 f"{spread_text(max(drifting))}{who}, so more rounds cannot decide "
                 f"+-{facts.min_effect:.0%}: compare two revisions, measured interleaved "
                 "(A..B), or add sessions to the baseline (`abdiff baseline refresh NAME "
                 "--rev REV --append`)")
        if len(drifting) == len(facts.undecided):
            return text
        text += "; for the others"
    sep = ", " if drifting else "; "
    if not projected:
        return f"{text}{sep}more rounds would decide them: re-run with a larger --max-rounds"
    needed = max(projected)
    if facts.max_rounds and needed <= facts.max_rounds:  # advice this run already followed
        return (f"{text}{sep}the --max-rounds {facts.max_rounds} of this run already allowed "
                f"the {needed} rounds their spread asks for: it grew as rounds came in, "
                "measure on an idle machine")
    if needed <= MOST_ROUNDS_ADVISED:
        return (f"{text}{sep}about {needed} rounds per side would decide them at the spread "
                f"measured: re-run with --max-rounds {needed} (a config whose spread grows "
                "stops early and says so)")
    return (f"{text}{sep}their rounds vary too much to decide here (over {MOST_ROUNDS_ADVISED} "
            "rounds per side would be needed, as their rows say): measure on an idle machine "
            "(the notes say how much rounds vary)")


def exit_code(result: Result) -> int:
    """The run's exit code: the summary's when present, else the policy's rule."""
    code = result.summary.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return policy.exit_code(result.configs, result.summary.get("require_all") is True)


def min_effect(result: Result) -> float:
    """The practical threshold of the run (fraction), 0.02 when the summary lacks it."""
    return run_facts(result).min_effect


def percent(share: float) -> str:
    """A share as a percentage with as many digits as it has: 2%, 0.5%, 12.5%."""
    return f"{share * 100:.3g}%"


def side_label(side: Side) -> str:
    """"main (0123456789)", or "baseline:NAME (0123456789)" for a stored baseline."""
    rev = f"baseline:{side.baseline}" if side.baseline else side.rev
    sha = side.sha[:10] if side.sha else "?"
    return f"{clip(rev, 80)} ({clip(sha, 10)})"


def sides_line(result: Result) -> str:
    """"A: main (0123456789) B: pr (abcdef0123)"."""
    return f"A: {side_label(result.a)} B: {side_label(result.b)}"


def expect_text(result: Result) -> str:
    """The policy scope, "backend=DSA", or "nothing" when every change is unintended."""
    if not result.expect:
        return "nothing"
    items = [f"{k}={','.join(str(v) for v in vals)}" for k, vals in result.expect.items()]
    return clip("; ".join(items))


def context_items(result: Result) -> list[tuple[str, str]]:
    """(label, value) pairs describing the run: suite, target, scope, sides."""
    items = [("A", side_label(result.a)), ("B", side_label(result.b))]
    if result.suite:
        items.append(("suite", clip(result.suite, 80)))
    if result.target:
        items.append(("target", clip(result.target, 80)))
    if result.summary.get("timing"):
        items.append(("timing", clip(result.summary["timing"], 80)))
    items.append(("expected to change", expect_text(result)))
    facts = run_facts(result)  # the units the verdicts were reached with, spelled out
    items.append(("threshold", f"±{percent(facts.min_effect)} (--min-effect)"))
    items.append(("alpha", f"{percent(facts.alpha)} family-wise (--alpha)"))
    return items


def environment_text(side: Side) -> str:
    """Where and with what a side was measured, from its run file's environment (2026-12-05):
    "cpu Intel(R) Xeon(R), torch 2.13.0+cpu, ..., 3 sessions on vm (2026-12-05 10:30 to
    10:31)"; empty for a result that predates it. Every value is the untrusted file's,
    clipped."""
    env, parts = side.env, []

    def text(key: str, limit: int = 60) -> str | None:
        value = env.get(key)
        return clip(str(value), limit) if value not in (None, "", {}, []) else None

    device = text("device_name") or text("device")
    if device:
        count = env.get("device_count")
        parts.append(device + (f" x{count}" if isinstance(count, int) and count > 1 else ""))
    for key, label in (("driver", "driver "), ("cuda", "CUDA "), ("cpu_model", ""),
                       ("torch", "torch "), ("python", "Python "),
                       ("target_package", "target package "),
                       ("timing", "timing: ")):
        if text(key):
            parts.append(f"{label}{text(key)}")
    parts += [f"{clip(key[:-len('.version')], 40)} {clip(str(value), 40)}"
              for key, value in sorted(env.items()) if key.endswith(".version") and value]
    if side.env:
        kernel_env = env.get("kernel_env")
        parts.append("kernel env: " + (", ".join(f"{clip(str(k), 40)}={clip(str(v), 40)}"
                                                for k, v in sorted(kernel_env.items()))
                                      if isinstance(kernel_env, dict) and kernel_env
                                      else "none set"))
    if text("sandbox"):
        parts.append(f"sandbox: {text('sandbox')}")
    checks = env.get("machine")
    if isinstance(checks, list) and checks:
        flagged = [clip(str(c.get("name")), 40) for c in checks
                   if isinstance(c, dict) and c.get("ok") is False]
        parts.append("machine check: " + (f"{', '.join(flagged)} flagged" if flagged
                                          else "nothing flagged"))
    if side.sessions:
        hosts = sorted({clip(str(w.get("host")), 40) for w in side.sessions.values()
                        if isinstance(w, dict) and w.get("host")})
        started = sorted(str(w.get("started"))[:16].replace("T", " ")
                         for w in side.sessions.values()
                         if isinstance(w, dict) and w.get("started"))
        when = (f" ({started[0]}" + (f" to {started[-1]}" if started[-1] != started[0] else "")
                + ")") if started else ""
        count = len(side.sessions)
        parts.append(f"{count} session{'s' * (count != 1)}"
                     + (f" on {', '.join(hosts[:4])}" if hosts else "") + when)
    return ", ".join(parts)


def environment_items(result: Result) -> list[tuple[str, str]]:
    """("A measured with", ...), ("B measured with", ...) for the sides that say."""
    return [(f"{name} measured with", environment_text(side))
            for name, side in (("A", result.a), ("B", result.b)) if environment_text(side)]


def value_text(value: Any, limit: int = 60) -> str:
    """A fact value as Python spells it: None, 3, True, [32, 4], 'fp8'."""
    return clip(repr(value), limit)


def fact_changes(cfg: ConfigResult) -> list[str]:
    """["attn_metadata.max_total_draft_tokens: None -> 3", ...], sorted by name."""
    lines = []
    for name in sorted(cfg.facts_changed):
        pair = cfg.facts_changed[name]
        a, b = (list(pair) + [None, None])[:2] if isinstance(pair, list | tuple) else (pair, None)
        lines.append(f"{clip(name, 80)}: {value_text(a)} -> {value_text(b)}")
    return lines


KERNEL_LINES = 8  # a kernel diff longer than this is cut in reports; the JSON has it all


# Kernels that do an attention step's real work; a cut kernel diff shows these first,
# so "-aten::bmm, +..._flash_attention..." is not hidden behind copies and fills.
HEADLINE_KERNELS = re.compile(
    r"gemm|bmm|\bmm\b|matmul|softmax|attention|sdpa|flash|fmha|mmha|xqa|mqa|conv", re.IGNORECASE)


def headline_first(name: str) -> tuple[bool, str]:
    """Sort key: headline kernels (HEADLINE_KERNELS) first, then by name."""
    return (not HEADLINE_KERNELS.search(name), name)


def kernel_changes(cfg: ConfigResult, limit: int = KERNEL_LINES, width: int = 120) -> list[str]:
    """["+aten::_scaled_dot_product_flash_attention_for_cpu x2", "-aten::bmm x4"].

    Headline kernels (HEADLINE_KERNELS) first, then added before removed, by name.
    """
    changes = [("+", k, n) for k, n in cfg.kernels_added.items()]
    changes += [("-", k, n) for k, n in cfg.kernels_removed.items()]
    changes.sort(key=lambda c: (headline_first(c[1])[0], c[0] == "-", c[1]))
    lines = [f"{sign}{clip(name, width)} x{n}" for sign, name, n in changes]
    if len(lines) > limit:
        lines = lines[: limit - 1] + [f"(+{len(lines) - limit + 1} more in the JSON result)"]
    return lines


def latency_cell(latency: LatencyResult, max_rounds: int | None = None) -> str:
    """"1.043x [1.021, 1.066] p=0.003 (slower)"; "n/a" when not comparable.

    The statistics' own short note, when it has one, joins the verdict:
    "(unchanged; below the 2% threshold)". `max_rounds`: the run's ceiling, so that a
    config stopped below it says why (`latency_details`).
    """
    if latency.ratio is None:
        return "n/a" if latency.verdict in ("n/a", "", None) else f"({latency.verdict})"
    text = f"{latency.ratio:.3f}x"
    if latency.ci and len(latency.ci) == 2 and None not in latency.ci:
        text += f" [{latency.ci[0]:.3f}, {latency.ci[1]:.3f}]"
    if latency.p is not None:
        text += f" p={_p_text(latency.p)}"
    return "; ".join([f"{text} ({latency.verdict})", *latency_details(latency, max_rounds)])


def latency_details(latency: LatencyResult, max_rounds: int | None = None) -> list[str]:
    """Detectable effect and note, where the result has them (absolute times have their own
    cell, `times_cell`): ["detects ≥ 2.2%", ...].

    A detectable change of 100% or more is no latency statement (a step cannot get more
    than 100% faster): an undecided config says "undecidable at this noise" instead, a
    decided one (its interval excludes 1: a change that large was seen) says nothing of
    it. An undecided config that
    stopped below the run's --max-rounds says so: the adaptive plan found more rounds
    futile at the spread it had by then (stats.futile).
    """
    parts = []
    if latency.detectable is not None and latency.detectable < 1:
        parts.append(f"detects ≥ {latency.detectable:.1%}")
    elif latency.detectable is not None and latency.verdict == "inconclusive":
        parts.append("undecidable at this noise (detects only changes over 100%)")
    if latency.note:
        parts.append(clip(latency.note, NOTE_LIMIT))
    rounds = min(latency.rounds_a, latency.rounds_b)
    if latency.verdict == "inconclusive" and max_rounds and 0 < rounds < max_rounds:
        parts.append(f"stopped at {rounds} of --max-rounds {max_rounds}: at the spread "
                     "measured by then, more rounds could not decide it")
    return parts


def significant(value: float, digits: int, sign: bool = False) -> str:
    """`value` rounded to `digits` significant digits, never in exponent notation (a reader
    compares "460" with "4744" at a glance, not "4.6e+02"): 460, 4.1, -3920, +2.63."""
    rounded = float(f"{value:.{digits}g}")
    plus = "+" if sign else ""
    if abs(rounded) >= 10 ** (digits - 1):
        return f"{rounded:{plus}.0f}"
    return f"{rounded:{plus}g}"


def time_scale(value_us: float) -> tuple[float, str]:
    """The unit a time of `value_us` microseconds reads best in: nanoseconds below one
    microsecond (a CPU micro-benchmark's), else microseconds."""
    return (1e3, "ns") if value_us < 1 else (1.0, "µs")


def us_text(value: float) -> str:
    """A time with four significant digits: "512.3 µs", "18430 µs", "29.36 ns"."""
    scale, unit = time_scale(value)
    scaled = value * scale
    return f"{significant(scaled, 4)} {unit}" if scaled < 1e4 else f"{scaled:.0f} {unit}"


def side_times(latency: LatencyResult) -> dict[str, tuple[float, float | None]]:
    """{"A": (median µs, spread µs or None), "B": ...} for the sides that have a time.

    The fields (`a_us`, `a_spread_us`, ...) come from the statistics; a result
    written before they existed has none, and every report then leaves the
    times out rather than showing zeros.
    """
    times = {}
    for side in ("a", "b"):
        median = getattr(latency, f"{side}_us", None)
        spread = getattr(latency, f"{side}_spread_us", None)
        if isinstance(median, int | float) and math.isfinite(median) and median > 0:
            if not isinstance(spread, int | float) or not math.isfinite(spread):
                spread = None  # absent or not a number: the reports show no spread
            times[side.upper()] = (float(median), None if spread is None else float(spread))
    return times


def times_cell(latency: LatencyResult) -> str:
    """"A 512.3 µs ±4.1, B 388 µs ±3.0" (median of the round medians ± their spread); ""."""
    parts = []
    for side, (median, spread) in side_times(latency).items():
        text = f"{side} {us_text(median)}"
        if spread is not None:  # in the median's unit
            text += f" ±{significant(spread * time_scale(median)[0], 2)}"
        parts.append(text)
    return ", ".join(parts)


def _p_text(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


@dataclass
class KernelGroup:
    """One kernel diff shared by several configs, shown once ("K1") instead of per row."""

    label: str
    lines: list[str]
    ids: list[str]


def kernel_groups(configs: list[ConfigResult], min_size: int = 2) -> list[KernelGroup]:
    """Identical, non-empty kernel diffs of at least `min_size` configs, largest first.

    A harness change that switches the attention kernel of every TRTLLM MTP
    config prints the same six lines per row otherwise; grouped, the reader
    sees the change once and the list of configs it hit.
    """
    by_diff: dict[tuple[tuple[str, int], ...], list[str]] = {}
    for cfg in configs:
        key = (tuple(sorted(("+" + k, n) for k, n in cfg.kernels_added.items()))
               + tuple(sorted(("-" + k, n) for k, n in cfg.kernels_removed.items())))
        if key:
            by_diff.setdefault(key, []).append(cfg.id)
    shared = sorted((ids for ids in by_diff.values() if len(ids) >= min_size),
                    key=lambda ids: -len(ids))
    index = {cfg.id: cfg for cfg in configs}
    return [KernelGroup(f"K{i}", kernel_changes(index[ids[0]], limit=10**6), ids)
            for i, ids in enumerate(shared, start=1)]


def group_of(cfg: ConfigResult, groups: list[KernelGroup]) -> KernelGroup | None:
    return next((g for g in groups if cfg.id in g.ids), None)


def kernel_cell(cfg: ConfigResult, groups: list[KernelGroup], limit: int = KERNEL_LINES,
                width: int = 120) -> list[str]:
    """The kernel lines of a row: its own diff, or a pointer to the group that holds it;
    then the kernels whose time accounts for the change (`root_cause_lines`)."""
    group = group_of(cfg, groups)
    if group is not None:
        lines = [f"{group.label}: same change in {len(group.ids)} configs"]
    else:
        lines = kernel_changes(cfg, limit, width)
    return lines + root_cause_lines(cfg, width)


def root_cause_lines(cfg: ConfigResult, width: int = 120) -> list[str]:
    """The kernels behind a changed config (kernel_times.py), largest difference first, as
    shares of the profiled call: "aten::bmm: 64% -> 0% (Δ -5370 µs)".

    Kernel times come from one call per round under the profiler, after the timed
    iterations: not the timed step (a profiled call runs slower, and on a busy machine
    its kernels vary from round to round). Shares of that call can never read as larger
    than the step; a first line names the pass and its total per side. A result from
    before the totals were kept shows the differences alone."""
    totals = (cfg.profiled_a_us, cfg.profiled_b_us)
    lines = []
    if cfg.kernel_deltas and all(t is not None and t > 0 for t in totals):
        a_total, b_total = float(totals[0] or 0), float(totals[1] or 0)
        lines.append(f"profiled call (one per round, not the timed step): A {us_text(a_total)}, "
                     f"B {us_text(b_total)} in kernels")
        lines += [clip(f"{d.kernel}: {d.a_us / a_total:.0%} -> {d.b_us / b_total:.0%} "
                       f"(Δ {significant(d.delta_us, 3, sign=True)} µs)", width)
                  for d in cfg.kernel_deltas]
    else:
        lines += [clip(f"Δ {significant(d.delta_us, 3, sign=True)} µs {d.kernel} (profiled "
                       "call)", width) for d in cfg.kernel_deltas]
    return lines + [clip(f"Δ {significant(d.delta_us, 3, sign=True)} µs in module {d.kernel}",
                         width) for d in cfg.module_deltas]


def status_cell(cfg: ConfigResult) -> str:
    """"ok", or "aborted -> ok (fixed)" when the outcome changed."""
    if cfg.status_a == cfg.status_b and cfg.status_change == "same":
        return clip(cfg.status_a, 40)
    return f"{clip(cfg.status_a, 40)} -> {clip(cfg.status_b, 40)} ({clip(cfg.status_change, 40)})"


def error_lines(cfg: ConfigResult, limit: int = TEXT_LIMIT) -> list[str]:
    """["A: DG_HOST_ASSERT(...)"]: the failure lines of either side, clipped."""
    lines = []
    if cfg.error_a:
        lines.append(f"A: {clip(cfg.error_a, limit)}")
    if cfg.error_b:
        lines.append(f"B: {clip(cfg.error_b, limit)}")
    return lines


def params_text(cfg: ConfigResult) -> str:
    """"backend=TRTLLM batch_size=32 ..." for readers who do not know the id scheme."""
    return clip(" ".join(f"{k}={v}" for k, v in cfg.params.items()))


def only_in_lines(result: Result) -> list[str]:
    """Configs measured on one side only (a suite changed between the sides)."""
    lines = []
    if result.only_in_a:
        lines.append("only in A: " + clip(", ".join(result.only_in_a), 400))
    if result.only_in_b:
        lines.append("only in B: " + clip(", ".join(result.only_in_b), 400))
    return lines


def notes(result: Result) -> list[str]:
    """Result.notes, one line each, whole: a report wraps them (in the terminal at word
    boundaries, elsewhere the medium does), never cuts them. Only a note past NOTE_LIMIT
    (text a benchmark made huge) is cut, after its last whole clause that fits."""
    suffix = f" {ELLIPSIS} (whole in the JSON)"
    room = NOTE_LIMIT - len(suffix)
    out = []
    for note in result.notes:
        line = clip(note, 10 * NOTE_LIMIT)
        if len(line) > NOTE_LIMIT:
            cut = max(line.rfind("; ", 0, room), line.rfind(". ", 0, room))
            line = (line[:cut] if cut > room // 2 else line[:room].rstrip()) + suffix
        out.append(line)
    return out
