"""The run file (`abdiff.run/1`) and the result (`abdiff.result/2`), declared once.

Data flows one way through the pipeline as these dataclasses; JSON is only
produced and parsed here, so every other module works on typed objects. Loading
is validate.py driven by the type hints below (`Literal` statuses and verdicts,
`Annotated` limits); docs/schemas/ is generated from the same classes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from abdiff.errors import InputError
from abdiff.store.files import read_text, write_atomic
from abdiff.store.validate import Len, Min, from_json

RUN_SCHEMA: Final = "abdiff.run/1"
RESULT_SCHEMA: Final = "abdiff.result/2"
# /1 called a config that failed on both sides `unchanged` and had no `measured` count;
# /2 gave that its own verdict, `still-failing`. Both are read (reports, `abdiff comment`).
RESULT_SCHEMAS = ("abdiff.result/1", RESULT_SCHEMA)
Status = Literal["ok", "failed", "aborted", "timeout"]
StatusChange = Literal["same", "fixed", "broken", "still-failing", "failure-changed"]
LatencyVerdict = Literal["unchanged", "slower", "faster", "inconclusive", "n/a"]
Verdict = Literal["unchanged", "expected", "unintended", "inconclusive", "still-failing",
                  "small-change"]
Microseconds = Annotated[float, Min(0, exclusive=True)]
Count = Annotated[int, Min(0)]
Seconds = Annotated[float, Min(0)]


@dataclass
class RoundRecord:
    """One config measured in one round (one fresh worker process)."""

    status: Status
    error: str | None = None
    latency_us: list[Microseconds] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    kernels: dict[str, Count] = field(default_factory=dict)
    round: int | None = None  # schedule position; lets `--resume` skip finished rounds
    # multi-rank launches (abdiff/run/ranks.py): each rank's own record, and the facts whose
    # values differ between ranks (fact name -> value per rank)
    ranks: list[dict[str, Any]] | None = None
    rank_differences: dict[str, list[Any]] | None = None
    # how the warm-up before the timed iterations ended: {"calls", "seconds", "settled", "batches"}
    warmup: dict[str, Any] = field(default_factory=dict)
    session: str | None = None  # the measuring session (RunFile.sessions), for drift
    # each kernel's (operator's self time, on the CPU) total time in the profiled call, us
    kernel_us: dict[str, Annotated[float, Min(0)]] = field(default_factory=dict)
    # GPU time of each module range (NVTX, e.g. attention, MoE) in one timed iteration, us
    # (trtllm with nsys: the ranges upstream's runner marks)
    module_us: dict[str, Annotated[float, Min(0)]] = field(default_factory=dict)
    # NVIDIA GPUs: NVML readings just before and after the timed iterations (abdiff/host/clocks.py)
    # {"start": {"sm_mhz", "mem_mhz", "temp_c", "power_w", "throttle"}, "end": {...}}
    clocks: dict[str, Any] = field(default_factory=dict)
    # timed beside the undecided configs of an adaptive round only so that the round's
    # process speed is known (stats.process_offsets); not in this config's latency test
    companion: bool = False
    # --devices: the device it ran on ("GPU 1", "CPUs 0-3"); its paired round ran there too
    device: str | None = None


@dataclass
class ConfigIterations:
    """The timed iterations per round planned for one config (run/iterations.py), and the
    variance split and costs they were chosen from (log-scale variances, seconds)."""

    run_times: Annotated[int, Min(1)]  # per round from IterationPlan.from_round on
    within: Annotated[float, Min(0)]  # a round statistic's variance from one iteration (x 1/n)
    between: Annotated[float, Min(0)]  # process-to-process variance beyond the iterations
    process_s: Seconds  # a round's cost besides its timed iterations
    iteration_s: Seconds  # one timed iteration
    rounds: Count  # rounds (both sides) the split came from


@dataclass
class IterationPlan:
    """Where the plan changed the suite's timed iterations per round: the same on both
    sides, for every round numbered `from_round` or later (the A and B rounds of a block
    always time the same count)."""

    from_round: Count
    suite_run_times: Annotated[int, Min(1)]
    configs: dict[str, ConfigIterations] = field(default_factory=dict)


@dataclass(frozen=True)
class EarlierNoise:
    """One config's noise as earlier paired runs on the same machine measured it, per pair
    difference (log): the Huber location's unit variance and the plain variance, pooled
    over `runs` runs with `df` degrees of freedom (verdict/stats.py: `earlier_noise`). A
    plan of few rounds borrows it (`borrow`)."""

    huber: Annotated[float, Min(0, exclusive=True)]
    mean: Annotated[float, Min(0, exclusive=True)]
    df: Annotated[float, Min(0, exclusive=True)]
    runs: Annotated[int, Min(1)]


@dataclass
class ConfigRuns:
    """All rounds of one config on one side."""

    id: str
    params: dict[str, Any] = field(default_factory=dict)
    rounds: list[RoundRecord] = field(default_factory=list)


@dataclass
class RunFile:
    """One side's measurements: a run file, and also the format of a baseline."""

    rev: str
    sha: str
    target: str
    suite: str
    env: dict[str, Any]  # the machine, from the worker's env event (measure.environment)
    configs: list[ConfigRuns]
    # the order each worker timed its configs in: {"round", "worker", "seed", "ids"}; with
    # the seed, `random.Random(seed).shuffle` of the job's configs gives the same order
    orders: list[dict[str, Any]] = field(default_factory=list)
    # session id -> when and where its rounds were measured (started, host, GPU, driver)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    # when the run looked at its configs: {"first", "max_rounds", "step"} rounds per side
    # (sequential.Looks); each look is tested at its alpha-spending level. Empty: one look
    looks: dict[str, int] = field(default_factory=dict)
    # timed iterations per round planned at the first look (None: the suite's run_times
    # in every round; rounds store their latencies, so each one's count is len(latency_us))
    iterations: IterationPlan | None = None
    # config id -> its noise in earlier paired runs on this machine, recorded (B's file)
    # where the plan has so few rounds that its last look borrows it
    earlier_noise: dict[str, EarlierNoise] = field(default_factory=dict)
    schema: Literal["abdiff.run/1"] = RUN_SCHEMA

    def config(self, config_id: str) -> ConfigRuns | None:
        return next((c for c in self.configs if c.id == config_id), None)

    def to_json(self) -> dict[str, Any]:
        data = plain(self)
        return {"schema": data.pop("schema"), **data}


DEFAULT_MIN_EFFECT = 0.02
"""Practical threshold (fraction): a real change within +-2% is `small-change`; a result
without `summary.min_effect` was computed at it."""
DEFAULT_ALPHA = 0.01
"""Family-wise false-alarm rate: the chance that a run with no change flags any config
slower or faster, over all configs and looks (calibrated: docs/statistics.md)."""
MOST_ROUNDS_ADVISED = 100  # beyond this many rounds per side: advise a quieter machine


@dataclass
class OddPair:
    """A pair whose shift, shared by every config (one worker process ran apart), the
    statistics took off: its round number (from 0) and the B/A ratio of that shift."""

    round: Count
    ratio: Annotated[float, Min(0)]


@dataclass
class LatencyResult:
    """Latency comparison of one config; ratio and interval are B/A."""

    verdict: LatencyVerdict
    ratio: float | None = None
    ci: Annotated[list[float], Len(2, 2)] | None = None  # [low, high]
    p: float | None = None
    p_equivalence: float | None = None  # result/2 files only (TOST); v3 decides by the interval
    rounds_a: Count = 0
    rounds_b: Count = 0
    method: str | None = None
    a_us: float | None = None  # A's Huber location of its round medians, us (result/2: median)
    b_us: float | None = None
    a_spread_us: float | None = None  # normal-consistent MAD of those round medians, us
    b_spread_us: float | None = None
    detectable: float | None = None  # smallest change seen with 80% power (fraction)
    note: str | None = None  # e.g. "below the 2% threshold"
    # slower/faster with the ratio inside +-min_effect: real, small (stats.latency_verdicts)
    below_threshold: bool = False
    level: float | None = None  # the family level spent up to the look that decided (p <= it)
    se: float | None = None  # standard error of log(ratio): interval = ratio * exp(+-q se)
    rounds_needed: int | None = None  # inconclusive: rounds per side that would decide it
    # sides measured apart (a baseline): the interval's half-width the drift between
    # sessions alone gives (fraction); from min_effect on, more rounds cannot decide
    drift: float | None = None
    # the mean of the paired log differences (odd processes off) as a ratio, and its interval
    # at the same threshold: `unchanged` needs it inside +-min_effect too (stats)
    mean_ratio: float | None = None
    mean_ci: Annotated[list[float], Len(2, 2)] | None = None
    # slower/faster: the interval wholly above the threshold, below it, or across it
    threshold_side: Literal["above", "below", "unsure"] | None = None
    # the pairs the deciding look took an odd process's shared shift off (stats)
    odd_pairs: list[OddPair] = field(default_factory=list)
    # Each side's round medians (us), in round order: the HTML report's distributions.
    a_rounds_us: list[float] = field(default_factory=list)
    b_rounds_us: list[float] = field(default_factory=list)


@dataclass
class KernelDelta:
    """One kernel's time in the profiled call on each side and B - A, us (kernel_times.py).
    A renamed template instantiation reads `name<float> -> <BFloat16>`."""

    kernel: str
    a_us: float
    b_us: float
    delta_us: float


@dataclass
class ConfigResult:
    """Everything compared for one config, and what the policy makes of it."""

    id: str
    params: dict[str, Any]
    status_a: Status
    status_b: Status
    status_change: StatusChange
    error_a: str | None
    error_b: str | None
    facts_changed: dict[str, Annotated[list[Any], Len(2, 2)]]  # name -> [a, b]
    kernels_added: dict[str, Count]
    kernels_removed: dict[str, Count]
    latency: LatencyResult
    in_scope: bool = False
    verdict: Verdict = "unchanged"
    # where the latency or the kernels changed: the kernels that account for it, largest first
    kernel_deltas: list[KernelDelta] = field(default_factory=list)
    # the same for module ranges (RoundRecord.module_us; `kernel` holds the module's name)
    module_deltas: list[KernelDelta] = field(default_factory=list)
    # each side's total kernel (CPU: operator) time in the profiled call, us: what the
    # kernel_deltas are shares of (the profiled call is not the timed step)
    profiled_a_us: float | None = None
    profiled_b_us: float | None = None
    # the timed iterations per round planned for it, and the split they came from (None:
    # the suite's run_times in every round)
    iterations: ConfigIterations | None = None


@dataclass
class SideTime:
    """Where one side's worker processes spent their time, seconds summed over them
    (time_split.py computes it from their record logs)."""

    workers: Count = 0
    start_s: Seconds = 0.0  # started (or forked) to its first config: Python, torch, the package
    setup_s: Seconds = 0.0  # each config's set-up: run pack, facts, graph capture
    warmup_s: Seconds = 0.0
    timed_s: Seconds = 0.0  # the timed iterations
    capture_s: Seconds = 0.0  # the kernel capture pass
    exit_s: Seconds = 0.0  # its last record to abdiff seeing it end

    @property
    def total_s(self) -> float:
        return (self.start_s + self.setup_s + self.warmup_s + self.timed_s + self.capture_s
                + self.exit_s)


@dataclass
class TimeSplit:
    """Where a run's wall time went: each measured side's workers, and abdiff itself (the
    rest: checkouts, the fork servers' imports, scheduling, statistics, reports)."""

    wall_s: Seconds
    sides: dict[str, SideTime] = field(default_factory=dict)  # "A", "B" (measured sides)
    abdiff_s: Seconds = 0.0
    devices: Count = 1  # --devices: how many ran rounds at once


@dataclass
class Side:
    rev: str
    sha: str
    baseline: str | None = None  # name of the stored baseline used as this side
    # the environment its run file recorded (compare.SIDE_ENV_KEYS: device, driver, torch,
    # target package, kernel_env, sandbox, machine check, ...) and its sessions (2026-12-05)
    env: dict[str, Any] = field(default_factory=dict)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Result:
    """The comparison of two run files; every report format renders this object."""

    a: Side
    b: Side
    expect: dict[str, list[str]]
    configs: list[ConfigResult]
    summary: dict[str, Any]
    suite: str = ""
    target: str = ""
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # where this run's wall time went (None: nothing measured now, or an older abdiff)
    time: TimeSplit | None = None
    schema: Literal["abdiff.result/1", "abdiff.result/2"] = RESULT_SCHEMA

    def to_json(self) -> dict[str, Any]:
        data = plain(self)
        return {"schema": data.pop("schema"), **data}


_SCALARS = frozenset({float, int, str, bool, type(None)})


def plain(value: Any) -> Any:
    """dataclasses.asdict without its deep copy of every number and string (a run file's
    rounds hold thousands; abdiff writes them after every round): dataclasses become
    dicts, lists and tuples new lists and tuples, dicts new dicts; the rest is shared."""
    if type(value) in _SCALARS:  # most of a run file: numbers and strings, first
        return value
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list | tuple):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def _json_safe(value: Any) -> Any:
    """NaN and infinity are not JSON; they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def dump_json(data: dict[str, Any], compact: bool = False) -> str:
    """JSON text of `data`; `compact` for run files, rewritten after every round: without
    indentation json's C encoder writes them (an H100 A/A's 600 KB run file: 8 ms, not 16,
    on the 2-core VM); people read results, which stay indented."""
    layout: dict[str, Any] = {"separators": (",", ":")} if compact else {"indent": 1}
    # json's C encoder writes NaN and Infinity as such: text without them needs no second
    # pass in Python (a string holding those letters takes it too)
    text = json.dumps(data, **layout)
    if "NaN" in text or "Infinity" in text:
        text = json.dumps(_json_safe(data), allow_nan=False, **layout)
    return text + "\n"


def write_run_file(path: Path, run: RunFile) -> None:
    write_atomic(path, dump_json(run.to_json(), compact=True))


def _check_schema(data: Any, schemas: tuple[str, ...], what: str, where: str) -> None:
    # checked before the fields, so a file of another kind gets this message, not a field's
    if not isinstance(data, dict):
        raise InputError(f"{where}: {what} must be a JSON object")
    if data.get("schema") not in schemas:
        raise InputError(f"{where}: schema is {data.get('schema')!r}, expected "
                         + " or ".join(f"'{s}'" for s in schemas))


def parse_round(data: Any, where: str) -> RoundRecord:
    return from_json(RoundRecord, data, where)


def parse_run_file(data: Any, where: str) -> RunFile:
    """Validate a decoded run file; every problem is one InputError naming the place."""
    _check_schema(data, (RUN_SCHEMA,), "a run file", where)
    run = from_json(RunFile, data, where)
    seen: set[str] = set()
    for i, config in enumerate(run.configs):
        if config.id in seen:
            raise InputError(f"{where}: configs[{i}].id: duplicate config id '{config.id}'")
        seen.add(config.id)
    return run


def read_json(path: Path, what: str) -> Any:
    """Decode a JSON file; every way it can be unreadable is one InputError (exit 2)."""
    return decode_json(read_text(path, what), str(path))


def decode_json(text: str, where: str) -> Any:
    """Decode JSON text read from `where`; every way it can be unusable is one InputError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not JSON (line {exc.lineno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # a huge integer, absurd nesting
        raise InputError(f"{where}: not usable JSON ({type(exc).__name__})") from None


def load_run_file(path: Path) -> RunFile:
    """Read and validate a run file or baseline; bad files raise InputError (exit 2)."""
    return parse_run_file(read_json(path, "run file"), str(path))


def run_file_of(text: str, path: Path) -> RunFile:
    """The run file in `text`, as read (and authenticated) from `path` already: a cache's
    run file is parsed from the bytes whose MAC held, never read a second time."""
    return parse_run_file(decode_json(text, str(path)), str(path))


def parse_result(data: Any, where: str) -> Result:
    """Validate a decoded `abdiff.result/1` or `/2` document; every problem is one InputError.
    A /1 document is read as written: its verdicts stay what /1 said they were.

    The result may come from an untrusted job (a pull request's CI run, docs/ci.md), so
    every field is checked for its type before a report is rendered from it.
    """
    _check_schema(data, RESULT_SCHEMAS, "a result", where)
    return from_json(Result, data, where)


def load_result(path: Path) -> Result:
    """Read and validate a result JSON (`--json FILE`); bad files raise InputError (exit 2)."""
    return parse_result(read_json(path, "result file"), str(path))
