"""The parent <-> worker contract: the job a worker is given, the record log it writes.

The parent writes a `RoundJob` as JSON and passes its path to the worker. The
worker appends one JSON line per event to `job.record_path` (`RecordWriter`);
the parent reads it back (`read_round_log`). This module imports no torch: the
parent reads record logs without paying for a torch import.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from abdiff.store.files import read_worker_file, worker_json
from abdiff.store.records import RoundRecord

# Written to stderr as each config starts: a death's reason is read from the
# worker's stderr after the last such line, never from an earlier config's output.
STDERR_MARK = "abdiff-worker: config "
# (global rank, local rank) variables per launcher: mpirun (Open MPI), PMI, srun, torchrun.
RANK_VARIABLES = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMIX_RANK", "MPI_LOCALRANKID"),
    ("PMI_RANK", "MPI_LOCALRANKID"),
    ("SLURM_PROCID", "SLURM_LOCALID"),
    ("RANK", "LOCAL_RANK"),
)


def rank_from_env(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(global rank, local rank) as mpirun, srun or torchrun announce it; (0, 0) alone."""
    env = os.environ if environ is None else environ
    for rank_name, local_name in RANK_VARIABLES:
        value = env.get(rank_name, "").strip()
        if value.isdigit():
            local = env.get(local_name, "").strip()
            return int(value), int(local) if local.isdigit() else 0
    return 0, 0


def rank_stderr_path(record_path: Path | str, rank: int) -> Path:
    """Where rank `rank` of a multi-rank launch sends its stderr: the launcher mixes the
    ranks' lines, and a dead rank's reason must be its own last line, not another's."""
    return Path(record_path).with_name(f"stderr.rank{rank}.txt")


def redirect_rank_stderr(record_path: Path | str, rank: int) -> None:
    """Send this rank's stderr, C-level messages (aborts) included, to its own file
    (`rank_stderr_path`); called by every rank of a multi-rank launch."""
    own = os.open(rank_stderr_path(record_path, rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                  0o644)
    os.dup2(own, sys.stderr.fileno())
    os.close(own)


def rank_record_path(record_path: Path | str, rank: int) -> Path:
    """Where rank `rank` writes its events: rank 0 the job's record log (the one the
    parent watches for progress), every other rank a file of its own beside it."""
    path = Path(record_path)
    return path if rank == 0 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


@dataclass
class KernelProfile:
    """What one profiled call ran: per CUDA kernel (operator, on the CPU) name, how many
    times, and the total time in microseconds (a kernel's device time; an operator's self
    time on the CPU)."""

    counts: dict[str, int]
    us: dict[str, float]


@dataclass
class RoundJob:
    """What one worker process must do: the configs of one side's round.

    Written as JSON next to the record file and passed to the worker by path.
    The worker appends one JSON line per event to `record_path`:
    `{"event": "order", "seed": ..., "ids": [...]}` once (the order it times the
    configs in), `{"event": "start", "id": ...}` before a config, then
    `{"event": "done", "id": ..., "record": {RoundRecord fields}}` after it, and,
    in the capture pass after every config was timed,
    `{"event": "kernels", "id": ..., "kernels": {...}}`; each line flushed and
    fsynced, so a crash loses nothing already measured.
    """

    # [{"id": ..., "params": {...}}], with "run_times" where the plan set a config's own
    # count (run/iterations.py; `run_times_of`), and "last": true for a config the other
    # side cannot pair (it failed there): timed after the paired ones, which then run
    # after the same configs on both sides (a worker keeps what it set up)
    configs: list[dict[str, Any]]
    facts: list[str]  # dotted names read from the live attention metadata
    record_path: str
    round: int
    warmup_times: int = 3
    run_times: int = 20  # the largest of the configs' counts: a target timing a job alike
    device: str = "auto"  # auto | cpu | cuda
    cuda_graph: bool = True  # time graph replays where the device has them (CUDA); False: eager
    cpu_threads: int = 1  # torch intra-op threads on the CPU (see docs/performance.md)
    profile_kernels: bool = True
    # with profile_kernels: every kernel's time too (torch.profiler, CUPTI's start in this
    # process); False: where graph replays are timed, names and counts from the graph's nodes
    kernel_times: bool = True
    # Seed of the order the worker times `configs` in (None: as given); recorded in the run file.
    order_seed: int | None = None
    # Configs timed by an earlier worker of this round that died before its capture pass:
    # only their kernels are captured here.
    capture_only: list[dict[str, Any]] = field(default_factory=list)
    target_options: dict[str, Any] = field(default_factory=dict)  # the suite's `target:` block
    target_args: list[str] = field(default_factory=list)  # --target-arg, passed through verbatim
    ranks: int = 1  # processes the launcher starts; each writes rank_record_path(record_path, r)

    def run_times_of(self, config: dict[str, Any]) -> int:
        """The timed iterations of one of this job's configs: its own count where the plan
        set one, else the job's."""
        count = config.get("run_times")
        return count if isinstance(count, int) and count > 0 else self.run_times

    def write(self, path: Path) -> None:
        """A new file (never through a link someone planted where it goes)."""
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(handle, "w", encoding="utf-8") as opened:
            opened.write(json.dumps(asdict(self), indent=1))

    @classmethod
    def read(cls, path: Path) -> RoundJob:
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))


def _not_a_number(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a number JSON has", name, 0)


def load_event(line: str) -> Any:
    """One line of a worker's record log. NaN and Infinity are refused (not JSON): a
    worker writes the log, and an infinite warm-up or time stamp would reach the plan of
    timed iterations and the time split as numbers (a number past a float's range, 1e999,
    still reads as infinite: the readers keep finite numbers only)."""
    return worker_json(line, parse_constant=_not_a_number)


class RecordWriter:
    """Appends the worker's events to the record log, one fsynced JSON line each."""

    def __init__(self, path: Path) -> None:
        self._handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the round
        self.facts_written: dict[str, dict[str, Any]] = {}

    def _write(self, event: dict[str, Any]) -> None:
        # for the time split (time_split.py): the wall clock, which a worker on another
        # host shares, and this host's steady clock, which no clock step moves
        event["t"], event["m"] = time.time(), time.monotonic()
        self._handle.write(json.dumps(event) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def env(self, env: dict[str, Any]) -> None:
        self._write({"event": "env", "env": env})

    def start(self, config_id: str) -> None:
        print(f"{STDERR_MARK}{config_id}", file=sys.stderr, flush=True)
        self._write({"event": "start", "id": config_id})

    def facts(self, config_id: str, facts: dict[str, Any]) -> None:
        """Facts as soon as they are read: a config that aborts later still has them."""
        self.facts_written[config_id] = facts
        self._write({"event": "facts", "id": config_id, "facts": facts})

    def phase(self, phase: str, config_id: str | None = None) -> None:
        """A stage of the benchmark began (build, autotune, ...): restarts the inactivity
        timeout, and names what hung when it expires."""
        self._write({"event": "phase", "phase": phase, "id": config_id})

    def order(self, seed: int | None, ids: list[str]) -> None:
        self._write({"event": "order", "seed": seed, "ids": ids})

    def done(self, config_id: str, record: RoundRecord) -> None:
        self._write({"event": "done", "id": config_id, "record": asdict(record)})

    def kernels(self, config_id: str, profile: KernelProfile) -> None:
        """A config's kernels from the capture pass, after every config was timed."""
        self._write({"event": "kernels", "id": config_id, "kernels": profile.counts,
                     "kernel_us": profile.us})

    def close(self) -> None:
        self._handle.close()


@dataclass
class RoundLog:
    """What a worker's record log holds once the process has ended."""

    env: dict[str, Any] = field(default_factory=dict)
    done: dict[str, RoundRecord] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    malformed: dict[str, str] = field(default_factory=dict)  # config id -> why
    phase: str | None = None  # the last phase line's stage, e.g. "autotune (GEN-DSA-bs8-...)"
    order: dict[str, Any] = field(default_factory=dict)  # {"seed": ..., "ids": [...]}
    kernels: dict[str, KernelProfile] = field(default_factory=dict)  # from the capture pass

    @property
    def in_progress(self) -> str | None:
        """The config named by the last start line, unless it finished: where a crash happened.

        A worker may start a config again (upstream's run.py interleaves shapes),
        so only the last start line says what was running when the process died.
        """
        if self.started and self.started[-1] not in self.done:
            return self.started[-1]
        return None


def read_round_log(path: Path) -> RoundLog:
    """Parse a record log; a torn last line (process killed mid-write) is ignored."""
    from abdiff.errors import InputError
    from abdiff.store.records import parse_round

    log = RoundLog()
    lines = read_worker_file(Path(path)).split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = load_event(line)
        except ValueError:
            if number == len(lines):
                continue  # torn final write
            log.malformed[log.started[-1] if log.started else "?"] = f"line {number}: not JSON"
            continue
        kind = event.get("event") if isinstance(event, dict) else None
        cid = event.get("id") if isinstance(event, dict) else None
        if kind == "env" and isinstance(event.get("env"), dict):
            log.env = event["env"]
        elif kind == "start" and isinstance(cid, str):
            log.started.append(cid)
        elif kind == "facts" and isinstance(cid, str) and isinstance(event.get("facts"), dict):
            log.facts[cid] = event["facts"]
        elif kind == "phase" and isinstance(event.get("phase"), str):
            log.phase = event["phase"] + (f" ({cid})" if isinstance(cid, str) else "")
        elif kind == "done" and isinstance(cid, str):
            try:
                log.done[cid] = parse_round(event.get("record"), f"record of {cid}")
            except InputError as exc:
                log.malformed[cid] = str(exc)
        elif kind == "order" and isinstance(event.get("ids"), list):
            log.order = {"seed": event.get("seed"), "ids": event["ids"]}
        elif kind == "kernels" and isinstance(cid, str) and isinstance(event.get("kernels"), dict):
            try:
                parsed = parse_round({"status": "ok", "kernels": event["kernels"],
                                      "kernel_us": event.get("kernel_us", {})},
                                     f"kernels of {cid}")
            except InputError as exc:
                log.malformed[cid] = str(exc)
                continue
            log.kernels[cid] = KernelProfile(parsed.kernels, parsed.kernel_us)
            if cid in log.done:
                log.done[cid].kernels, log.done[cid].kernel_us = parsed.kernels, parsed.kernel_us
        else:
            log.malformed[log.started[-1] if log.started else "?"] = f"line {number}: bad event"
    return log
