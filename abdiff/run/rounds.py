"""One round of one side: every config in fresh worker processes, crashes isolated.

A round starts one worker for all its configs (process start and torch import
are the expensive part). When that worker dies in the middle of a config, the
config gets the death as its status and a new worker takes the configs left,
so an abort costs one process start, never another config's data.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from abdiff.errors import InfrastructureError
from abdiff.launchers.base import Launcher
from abdiff.launchers.process import ProcessOutcome, last_meaningful_line
from abdiff.run.devices import Device
from abdiff.run.iterations import run_times_of
from abdiff.run.protocol import (
    STDERR_MARK,
    KernelProfile,
    RoundLog,
    rank_stderr_path,
    read_round_log,
)
from abdiff.run.ranks import merge_rank_logs, read_rank_logs
from abdiff.run.time_split import Instant, added, worker_time
from abdiff.store.files import own_folder, read_worker_file, remove_path
from abdiff.store.records import IterationPlan, RoundRecord, SideTime
from abdiff.store.sides import SideFolders, WorkerFolders
from abdiff.suites import Config
from abdiff.targets.base import RoundJob, Target

# Kernels are captured in each side's first round only: the selection is a property
# of the code and the shape, and every capture costs a profiled call per config (and
# a process's first capture CUPTI's start, 4.4 s on an H200). A second round never
# outvoted the first (two rounds that disagree have no majority). Workers capture
# them in a pass after every config was timed, never before a timed iteration.
KERNEL_ROUNDS = 1
# the folder of a side's capture of kernel times after its rounds (capture_kernel_times)
KERNEL_TIMES = "kernel-times"


@dataclass
class RoundSettings:
    """How every worker of a run is started; the same for both sides."""

    facts: list[str]
    warmup_times: int
    run_times: int
    timeout_s: float | None = 600.0
    device: str = "auto"
    cuda_graph: bool = True  # graph replays where the device has them; False: --eager
    cpu_threads: int = 1
    worker_start: str = "cold"  # cold | standby | fork (--prestart; launchers/warm.py)
    profile_kernels: bool = True
    # kernel rounds capture every kernel's time (torch.profiler); False: a GPU worker names
    # the kernels from its timed graphs, and a run captures the times of changed configs after
    # its rounds (capture_kernel_times). A side stored for later (a baseline) keeps them all.
    kernel_times: bool = False
    target_options: dict = field(default_factory=dict)
    target_args: list[str] = field(default_factory=list)
    pass_env: list[str] = field(default_factory=list)
    max_memory_bytes: int | None = None
    # run_times is the first rounds' count; later rounds time what the plan chose per config
    # (run/iterations.py). False: every round times run_times (the suite's
    # `adapt_run_times: false`, or a target that cannot vary it: Target.iteration_counts)
    adapt_run_times: bool = True


@dataclass
class RoundOutput:
    env: dict
    processes: int
    # per worker process: {"round", "worker", "seed", "ids"}, the order it timed its configs in
    orders: list[dict] = field(default_factory=list)
    time: SideTime = field(default_factory=SideTime)  # where its workers' time went


def order_seed(run_seed: int, round_index: int, worker: int) -> int:
    """The seed of one worker's config order: fixed by the run's seed (`--seed`), so a run
    can be replayed, different for every round and restarted worker, and the same for the
    two sides of a round: a pair's two workers time its configs in the same order, so what
    a position in a process does to a config (the first one timed ran 3-5% apart on an
    H100) cancels in the pair's difference instead of adding to its spread."""
    digest = hashlib.sha256(f"{run_seed}:{round_index}:{worker}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def death_record(outcome: ProcessOutcome, round_index: int, config_started: bool,
                 timeout_s: float | None = None, phase: str | None = None,
                 launcher: Launcher | None = None) -> RoundRecord:
    """The status of the config a worker was running when it ended abnormally.

    With `config_started`, the reason comes from what the worker wrote to stderr
    after that config's start mark only; otherwise (it died before starting
    any config) from all of its stderr.
    """
    line = last_meaningful_line(outcome.stderr_path, since=STDERR_MARK if config_started else None,
                                ignore=launcher.own_lines if launcher else None)
    if outcome.timed_out:
        limit = f"{timeout_s:g} s" if timeout_s else "the per-config timeout"
        during = f" in phase {phase}" if phase else ""
        return RoundRecord("timeout", f"no progress within {limit} (--timeout){during}; "
                           "process group killed", round=round_index)
    if outcome.signal_name:
        who = outcome.signal_name if outcome.rank is None else \
            f"rank {outcome.rank}, {outcome.signal_name}"
        reason = f"{who}: {line}" if line else who
        return RoundRecord("aborted", reason, round=round_index)
    if outcome.returncode == 0:  # a clean exit is no reason by itself: say what went missing
        why = ("worker exited with code 0 before writing this config's record" if config_started
               else "worker exited without writing a record")
        return RoundRecord("failed", f"{why}: {line}" if line else why, round=round_index)
    return RoundRecord("failed", line or f"exit code {outcome.returncode}", round=round_index)


def _size_text(size: int) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size >= scale:
            return f"{size / scale:.4g}{unit}"
    return str(size)


STDERR_TAIL = 4 * 2**20  # what a launcher's failure or a rank's death is read from: the end


def _could_not_start(outcome: ProcessOutcome, settings: RoundSettings, round_index: int,
                     attempt: Path, launcher: Launcher) -> str:
    """A worker that never created its record log did not get as far as abdiff's code in
    it (python, the job file, torch, the device): nothing of the benchmark ran, so this is
    the tool failing to run, not a status of the configs."""
    stderr = read_worker_file(outcome.stderr_path, tail=STDERR_TAIL)
    reason = launcher.launch_failure(stderr)
    if reason:
        return (f"{launcher.name} could not launch the worker: {reason}; `abdiff doctor "
                f"--launcher {launcher.name}` tries a 2-rank hello")
    why = death_record(outcome, round_index, False, settings.timeout_s).error
    hint = "; `abdiff doctor` checks python, torch and the device"
    if settings.max_memory_bytes is not None:
        hint = f"; is --max-memory {_size_text(settings.max_memory_bytes)} too small?"
    return f"a worker could not start: {why}{hint} (its output is in {attempt})"


def read_launch(record_path: Path, ranks: int) -> RoundLog:
    """The record logs of every rank of one launch, merged (abdiff/run/ranks.py)."""
    return merge_rank_logs(read_rank_logs(record_path, ranks))


def name_dead_rank(outcome: ProcessOutcome, launcher: Launcher, record_path: Path) -> None:
    """Fill in which rank died of which signal, from the launcher's exit code and stderr."""
    if outcome.returncode <= 0 or outcome.timed_out:
        return
    stderr = read_worker_file(outcome.stderr_path, tail=STDERR_TAIL)
    death = launcher.rank_death(outcome.returncode, stderr)
    if death is not None:
        outcome.rank, outcome.rank_signal = death
        own = rank_stderr_path(record_path, outcome.rank) if outcome.rank is not None else None
        if own is not None and own.exists():
            outcome.stderr_path = own  # the reason is that rank's last line


def finished(log: RoundLog, configs: list[Config], round_index: int) -> dict[str, RoundRecord]:
    """The records a worker's log holds for `configs`; a malformed one fails its config."""
    ids = {c.id for c in configs}
    records = {cid: record for cid, record in log.done.items() if cid in ids}
    for cid, why in log.malformed.items():
        if cid in ids:
            records[cid] = RoundRecord("failed", f"malformed record: {why}", round=round_index)
    return records


def worker_stderr(work_dir: Path, config_id: str) -> Path:
    """The stderr file holding the full text of `config_id`'s failure in a round's folder:
    the worker that started or recorded it, else the last one (which died before
    starting any config, failing all that were left)."""
    workers = sorted(work_dir.glob("worker*"), key=lambda p: int(p.name.removeprefix("worker")))
    for worker in workers:
        log = read_round_log(worker / "records.jsonl")
        if config_id in log.done or config_id in log.started:
            return worker / "stderr.txt"
    return (workers[-1] if workers else work_dir) / "stderr.txt"


def run_round(
    target: Target,
    launcher: Launcher,
    checkout: Path,
    configs: list[Config],
    settings: RoundSettings,
    round_index: int,
    work_dir: Path,
    on_record: Callable[[str, RoundRecord], None],
    seed: Callable[[int], int | None] = lambda worker: None,
    device: Device | None = None,
    side: SideFolders | None = None,
    iterations: IterationPlan | None = None,
    unpaired: frozenset[str] = frozenset(),
) -> RoundOutput:
    """Measure `configs` once at `checkout`, handing each record to `on_record` as it is known.

    `seed(worker)` is the seed of that worker's config order (`order_seed`); `device`
    (--devices) the GPUs it sees or the CPUs it is pinned to.
    If abdiff itself is interrupted, the records the running worker already
    wrote are handed over before the interrupt propagates. Configs a worker timed
    but could not capture kernels of (it died first) are captured by the next
    worker of the round after its own timed configs, or by a worker that only
    captures them when none is left to time. With `side`, the workers keep that side's
    HOME and caches, and in a sandbox write only there and in `work_dir`. `iterations`:
    the plan's timed iterations per config (None: the settings' run_times for all).
    `unpaired`: configs the other side cannot pair (failed there), timed last.
    """
    # the worker runs in the checkout, not here: every path it is given must be absolute
    work_dir = own_folder(Path(work_dir).absolute())  # never a link a worker planted
    work = RoundWork(target, launcher, checkout, configs, settings, round_index, work_dir,
                     on_record, seed, device, side, iterations, unpaired)
    return RoundWorkers(work).run()


def capture_kernel_times(target: Target, launcher: Launcher, checkout: Path,
                         configs: list[Config], settings: RoundSettings, work_dir: Path,
                         device: Device | None = None, side: SideFolders | None = None,
                         ) -> tuple[dict[str, KernelProfile], RoundOutput]:
    """The kernels of `configs` with every kernel's time, from one worker that times
    nothing: for configs whose kernel round named its kernels from the timed graphs (no
    times there) and whose latency or kernels changed, so that the report can say which
    kernels account for it. CUPTI's start is paid here, once a side, and only in a run
    that found a change."""
    work_dir = own_folder(Path(work_dir).absolute())
    work = RoundWork(target, launcher, checkout, configs, settings, 0, work_dir,
                     lambda cid, record: None, lambda worker: None, device, side, None,
                     frozenset())
    workers = RoundWorkers(work)
    captured = workers.capture_times()
    wanted = {c.id for c in configs}
    return ({cid: profile for cid, profile in captured.items() if profile.us and cid in wanted},
            RoundOutput({}, workers.processes, [], workers.spent))


@dataclass(frozen=True)
class RoundWork:
    """What one round of one side runs, where and how (run_round's arguments)."""

    target: Target
    launcher: Launcher
    checkout: Path
    configs: list[Config]
    settings: RoundSettings
    round_index: int
    work_dir: Path  # absolute, and abdiff's own folder
    on_record: Callable[[str, RoundRecord], None]
    seed: Callable[[int], int | None]
    device: Device | None
    side: SideFolders | None
    iterations: IterationPlan | None
    unpaired: frozenset[str]  # configs the other side cannot pair: timed last

    @property
    def profile(self) -> bool:
        """Whether this round's workers capture kernels (KERNEL_ROUNDS)."""
        return self.settings.profile_kernels and self.round_index < KERNEL_ROUNDS


class RoundWorkers:
    """The worker processes of one round, started one after another until every config
    has its record: what they recorded so far, and what is left to time or capture."""

    def __init__(self, work: RoundWork) -> None:
        self.work = work
        self.records: dict[str, RoundRecord] = {}
        self.env: dict = {}
        self.remaining = list(work.configs)
        self.handed: set[str] = set()
        self.processes = 0
        self.orders: list[dict] = []
        self.uncaptured: list[Config] = []
        self.captured: set[str] = set()
        self.spent = SideTime()

    def run(self) -> RoundOutput:
        """Start workers until no config is left to time or to capture."""
        work = self.work
        while self.remaining or self.uncaptured:
            job, outcome = self.launch()
            record_path = Path(job.record_path)
            name_dead_rank(outcome, work.launcher, record_path)
            log = read_launch(record_path, job.ranks)
            self.take(log)
            self.fail_unfinished(log, outcome)
            self.hand_over()
        return RoundOutput(self.env, self.processes, self.orders, self.spent)

    def launch(self, kernel_times: bool = False) -> tuple[RoundJob, ProcessOutcome]:
        """The next worker, run to its end: its folder made empty (the worker before could
        have planted links in it) and its job written there. `kernel_times`: the job
        captures kernels with their times (True) whatever the settings say."""
        attempt = self.work.work_dir / f"worker{self.processes}"
        remove_path(attempt)
        attempt.mkdir()
        job = self.job(attempt / "records.jsonl")
        if kernel_times:
            job = dataclasses.replace(job, profile_kernels=True, kernel_times=True)
        job_path = attempt / "job.json"
        job.write(job_path)
        return job, self.start(job, job_path, attempt)

    def job(self, record_path: Path) -> RoundJob:
        """The next worker's job: the configs left to time, then those left to capture."""
        work, settings = self.work, self.work.settings
        counts = {c.id: run_times_of(work.iterations, c.id, work.round_index, settings.run_times)
                  for c in self.remaining}
        return RoundJob(
            configs=[{"id": c.id, "params": c.params,
                      **({"run_times": counts[c.id]} if work.iterations is not None else {}),
                      **({"last": True} if c.id in work.unpaired else {})}
                     for c in sorted(self.remaining, key=lambda c: c.id in work.unpaired)],
            facts=settings.facts,
            record_path=str(record_path),
            round=work.round_index,
            warmup_times=settings.warmup_times,
            run_times=max(counts.values(), default=settings.run_times),
            device=settings.device,
            cuda_graph=settings.cuda_graph,
            cpu_threads=settings.cpu_threads,
            profile_kernels=work.profile,
            kernel_times=settings.kernel_times,
            order_seed=work.seed(self.processes),
            capture_only=[{"id": c.id, "params": c.params} for c in self.uncaptured],
            target_options=settings.target_options,
            target_args=settings.target_args,
            ranks=work.launcher.ranks,
        )

    def start(self, job: RoundJob, job_path: Path, attempt: Path) -> ProcessOutcome:
        """Run one worker to its end. Interrupted, the records it already wrote are handed
        over first; one that never wrote its record log is abdiff failing to run it."""
        work, launcher, settings = self.work, self.work.launcher, self.work.settings
        record_path = Path(job.record_path)
        spec = launcher.wrap(work.target.round_command(work.checkout, job_path, job))
        if work.device is not None:
            spec.env.update(work.device.env)
            spec.cpus = work.device.cpus
        handed_at = Instant.now()
        if work.side is not None:
            spec.folders = WorkerFolders(work.side, work.work_dir)
        try:
            outcome = launcher.run(spec, attempt, record_path, settings.timeout_s,
                                   settings.pass_env, settings.max_memory_bytes)
        except BaseException:
            for cid, record in finished(read_launch(record_path, job.ranks), self.remaining,
                                        work.round_index).items():
                work.on_record(cid, record)
            for config in self.uncaptured:  # timed by an earlier worker: kept without kernels
                if config.id in self.records:  # (capture_times has timed none of them)
                    work.on_record(config.id, self.records[config.id])
            raise
        self.processes += 1
        self.spent = added(self.spent, worker_time(record_path, handed_at, Instant.now()))
        if not record_path.exists():
            raise InfrastructureError(_could_not_start(outcome, settings, work.round_index,
                                                       attempt, launcher))
        return outcome

    def capture_times(self) -> dict[str, KernelProfile]:
        """One worker that times nothing and captures every config's kernels with their
        times (torch.profiler); what it captured, by config."""
        self.remaining, self.uncaptured = [], list(self.work.configs)
        job, _ = self.launch(kernel_times=True)
        return read_launch(Path(job.record_path), job.ranks).kernels

    def take(self, log: RoundLog) -> None:
        """Keep what a worker's log holds: its env, its order, its records and kernels."""
        work = self.work
        self.env = self.env or log.env
        if log.order.get("ids"):
            self.orders.append({"round": work.round_index, "worker": self.processes - 1,
                                **log.order})
        records = self.records
        records.update(finished(log, self.remaining, work.round_index))
        for cid, kernel_profile in log.kernels.items():
            if cid in records:
                records[cid].kernels = kernel_profile.counts
                records[cid].kernel_us = kernel_profile.us
                self.captured.add(cid)
        # a worker given only captures gets no second try: a capture that kills its
        # process would kill every retry too
        # only a target whose worker captures in a pass of its own gets capture-only workers
        # (the trtllm probe captures right after each config's timed calls, in run.py's flow)
        self.uncaptured = [c for c in work.configs if work.profile and work.target.capture_pass
                           and self.remaining and c.id in records
                           and records[c.id].status == "ok" and c.id not in self.captured]

    def fail_unfinished(self, log: RoundLog, outcome: ProcessOutcome) -> None:
        """The config a worker died in gets its death as status; the configs it left are
        the next worker's, unless it could not run any config here at all."""
        work, records = self.work, self.records
        timeout_s = work.settings.timeout_s
        culprit = log.in_progress
        if culprit is not None and culprit not in records:
            records[culprit] = death_record(outcome, work.round_index, True, timeout_s,
                                            log.phase, work.launcher)
            records[culprit].facts = log.facts.get(culprit, {})
        unfinished = [c for c in self.remaining if c.id not in records]
        if unfinished and culprit is None and not log.done:
            # the worker ended without finishing or starting a config: it cannot run
            # here at all, and retrying would fail the same way. (One that finished
            # some and died between configs made progress: a new worker takes the rest.)
            why = death_record(outcome, work.round_index, False, timeout_s, log.phase,
                               work.launcher)
            for config in unfinished:
                records[config.id] = RoundRecord(why.status, why.error, round=work.round_index)
            unfinished = []
        self.remaining = unfinished

    def hand_over(self) -> None:
        """Hand each new record to on_record, in the configs' order; a config waiting for
        the next worker's capture pass is kept until then."""
        waiting = {c.id for c in self.uncaptured}
        for cid in [c.id for c in self.work.configs
                    if c.id in self.records and c.id not in self.handed | waiting]:
            self.work.on_record(cid, self.records[cid])
            self.handed.add(cid)
