"""Interleave A and B rounds, extend inconclusive configs, and keep every round on disk.

Rounds run in randomized ABBA blocks (ABBA or BAAB per block), so slow drift
on the machine (thermal, clocks, a neighbour's job) lands on both sides alike
instead of on whichever side ran later. After the first rounds, configs whose
latency verdict is still inconclusive get more blocks, up to `max_rounds`.

Both run files are rewritten atomically after every round in a state folder
keyed by what was measured; re-running the same command (or `--resume`)
continues from the rounds already there. The state folder lies in the cache,
where the benchmark (same user) can write: a hash next to the files would be
recomputed by whoever rewrites them. So state.json records the SHA-256 of each
run file as abdiff wrote it, and an HMAC of that record under a key the
benchmark is not given (exposure.resume_key: abdiff's state folder, outside the
cache, mode 0600). A side whose file no longer matches is measured again; a
state.json that fails authentication is discarded whole. Either is said on
stderr, `--resume` or not: stored rounds are never trusted unverified.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import os
import platform
import random
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from abdiff.errors import InfrastructureError
from abdiff.host.exposure import warn_if_root
from abdiff.launchers.base import Launcher
from abdiff.launchers.pool import WorkerPool
from abdiff.launchers.warm import pooled
from abdiff.run.devices import Device
from abdiff.run.iterations import MIN_PLAN_PAIRS, plan_iterations, shared_cost
from abdiff.run.progress import Progress
from abdiff.run.rounds import (
    KERNEL_TIMES,
    RoundOutput,
    RoundSettings,
    capture_kernel_times,
    order_seed,
    run_round,
)
from abdiff.run.time_split import added
from abdiff.store.files import (
    lock_exclusively,
    own_folder,
    remove_path,
    write_atomic,
)
from abdiff.store.records import (
    ConfigRuns,
    IterationPlan,
    RoundRecord,
    RunFile,
    SideTime,
    dump_json,
    run_file_of,
)
from abdiff.store.sides import SideFolders, WorkerFolders
from abdiff.store.state import set_aside, stored_state, write_state
from abdiff.suites import Config
from abdiff.targets.base import Target
from abdiff.verdict.sequential import DEFAULT_STEP, Looks

log = logging.getLogger(__name__)

FAILURE_REPEATS = 2  # rounds a failing config is repeated in, to tell a crash from a flake
# What a session records of the benchmark's machine, from the worker's env event: enough to
# tell later whether two sessions ran on the same host, GPU, driver and clock policy.
SESSION_ENV_KEYS = ("host", "device_name", "gpu_uuid", "driver", "clock_policy")


@dataclass
class Plan:
    rounds: int = 5  # first rounds per side
    max_rounds: int = 15  # adaptive ceiling per side
    step: int = DEFAULT_STEP  # rounds per side of each adaptive block

    def looks(self) -> Looks:
        """When configs are looked at: the levels their tests spend (sequential.py)."""
        return Looks(self.rounds, max(self.rounds, self.max_rounds), self.step)


def abba_slots(count: int, rng: random.Random, start: int = 0) -> list[tuple[str, int]]:
    """(side, round) slots for rounds start..start+count-1 of both sides.

    Rounds go in blocks of two per side, each block ABBA or BAAB at random; an
    odd count ends with a half block (AB or BA).
    """
    slots: list[tuple[str, int]] = []
    end = start + count
    for r in range(start, end, 2):
        first, second = ("A", "B") if rng.random() < 0.5 else ("B", "A")
        slots += [(first, r), (second, r)]
        if r + 1 < end:
            slots += [(second, r + 1), (first, r + 1)]
    return slots


@dataclass
class SideRun:
    """One side as the scheduler sees it: where it runs and what it measured so far."""

    checkout: Path
    run: RunFile
    # makes the checkout exactly its commit again before a round starts (None: nothing to do)
    refresh: Callable[[], Path] | None = None
    folders: SideFolders | None = None  # its workers' kept HOME, TMPDIR and tool caches


def state_key(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


class RunState:
    """Both sides' run files and the state folder that keeps them between runs."""

    def __init__(self, state_dir: Path, sides: dict[str, SideRun], seed: int) -> None:
        self.state_dir = state_dir
        self.sides = sides
        self.seed = seed
        self.processes = 0
        self.warm_starts = 0  # of those, started ahead or forked (--prestart)
        self.warm_words = ""  # what the pool calls them (launchers/warm.py)
        self.time: dict[str, SideTime] = {}  # where each side's workers' time went this run
        self.written: dict[str, str] = {}  # run file name -> SHA-256 of what save wrote
        # Every abdiff invocation is its own session, a resumed one too: the rounds it adds
        # were measured at another time than the ones it found (baselines.drift_allowance).
        self.session = uuid.uuid4().hex[:12]
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        for side in sides.values():
            side.run.sessions[self.session] = {"started": started, "host": platform.node()}

    @classmethod
    def open(cls, state_dir: Path, sides: dict[str, SideRun], resume: bool,
             seed: int | None) -> RunState:
        """Continue an unfinished measurement in `state_dir`, else start a new one.

        A finished one is reused only with `resume` (to re-report without measuring).
        The caller holds `exclusive(state_dir)` while measuring.
        """
        if os.path.lexists(state_dir / "state.json"):
            state = stored_state(state_dir)
            if isinstance(state, str):
                log.warning(f"{state_dir}: its stored rounds fail authentication ({state}); "
                            "measuring anew")
            elif resume or not state.complete:
                for name, side in sides.items():
                    saved = state_dir / f"{name.lower()}.json"
                    if saved.name in state.changed:
                        log.warning(f"{saved}: not the file abdiff wrote (changed since); "
                                    f"measuring side {name} again")
                    if saved.name not in state.files:
                        continue
                    # the bytes whose hash was checked: no second read a benchmark could change
                    old = run_file_of(state.files[saved.name], saved)
                    for config in side.run.configs:
                        kept = old.config(config.id)
                        if kept is not None:
                            config.rounds = kept.rounds
                    side.run.env = old.env or side.run.env
                    side.run.orders = old.orders
                    side.run.iterations = old.iterations  # later rounds keep its counts
                    side.run.earlier_noise = old.earlier_noise  # what its last look borrows
                    side.run.sessions = {**old.sessions, **side.run.sessions}
                return cls(state_dir, sides, state.seed)  # the unfinished round order goes on
            if set_aside(state_dir) is None:
                shutil.rmtree(state_dir)
        seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        run_state = cls(state_dir, sides, seed)
        run_state.save(complete=False)
        return run_state

    def save(self, complete: bool, changed: list[str] | None = None) -> None:
        """Write the run files and sign what was written. `changed`: the sides whose run
        changed since the last save (None: all); the others keep the file and the hash
        this process wrote (a run file is rewritten whole, and a suite's grows with every
        round: writing only what changed saves most of abdiff's own time per round).
        runs/ or the state folder replaced by a link (without a sandbox the benchmark can)
        stops the measurement: nothing is written through it."""
        own_folder(self.state_dir.parent)
        own_folder(self.state_dir)
        for name, side in self.sides.items():
            path = self.state_dir / f"{name.lower()}.json"
            if changed is not None and name not in changed and path.name in self.written:
                continue
            text = dump_json(side.run.to_json(), compact=True)
            write_atomic(path, text)
            # the hash of what abdiff wrote, never read back: the benchmark can write there
            self.written[path.name] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        files = {f"{name.lower()}.json": self.written.get(f"{name.lower()}.json")
                 for name in sorted(self.sides)}
        write_state(self.state_dir, self.seed, complete, files)

    @property
    def iterations(self) -> IterationPlan | None:
        """The timed iterations planned per config (the same in every side's run file)."""
        return next((s.run.iterations for s in self.sides.values() if s.run.iterations), None)

    def plan_iterations(self, settings: RoundSettings, one_count: bool, from_round: int
                        ) -> None:
        """Once the pairs allow: each config's timed iterations per round from `from_round`
        on, from every side's rounds pooled and what this session's workers spent
        (run/iterations.py); kept in every side's run file. A plan there already (a
        resumed run) stays: its later rounds were timed with it."""
        plan = self.iterations
        if plan is None:
            config_rounds = sum(r.session == self.session for s in self.sides.values()
                                for c in s.run.configs for r in c.rounds)
            shared = shared_cost(list(self.time.values()), config_rounds)
            if shared is None:  # nothing measured in this session: no costs to plan by
                return
            plan = plan_iterations([s.run for s in self.sides.values()], shared,
                                   settings.run_times, from_round, one_count)
        for side in self.sides.values():
            side.run.iterations = plan
        self.save(complete=False)

    def round_dir(self, side: str, round_index: int | str) -> Path:
        """Where a side's round (or KERNEL_TIMES, its capture of kernel times) keeps its
        workers' job, record log, stdout and stderr."""
        return self.side_rounds(side) / (f"r{round_index}" if isinstance(round_index, int)
                                         else round_index)

    def side_rounds(self, side: str) -> Path:
        """The folder of a side's round folders: what that side's fork server may write
        once it has imported the side's code (launchers/forkserver.py, `prepare`)."""
        return self.state_dir / "logs" / side

    def has_round(self, side: str, config_id: str, round_index: int) -> bool:
        config = self.sides[side].run.config(config_id)
        return config is not None and any(r.round == round_index for r in config.rounds)

    def settled_failure(self, side: str, config_id: str) -> bool:
        """Failed in FAILURE_REPEATS rounds already: its status is known, and every
        further abort would cost a process start for no new information."""
        config = self.sides[side].run.config(config_id)
        return config is not None and sum(r.status != "ok" for r in config.rounds) >= \
            FAILURE_REPEATS

    def never_paired(self, side: str, config_id: str) -> bool:
        """The other side's failure is settled and this side has run the config in
        FAILURE_REPEATS rounds: its status on both sides is known, and more of its rounds
        here would be timed for no verdict (no pair will come)."""
        config = self.sides[side].run.config(config_id)
        return config is not None and len(config.rounds) >= FAILURE_REPEATS and any(
            self.settled_failure(other, config_id) for other in self.sides if other != side)

    def todo(self, side: str, round_index: int, configs: list[Config]) -> list[Config]:
        """Which of `configs` still need this side's round `round_index`."""
        return [c for c in configs
                if not self.has_round(side, c.id, round_index)
                and not self.settled_failure(side, c.id)
                and not self.never_paired(side, c.id)]

    def unpaired(self, side: str, configs: list[Config]) -> frozenset[str]:
        """Which of `configs` the other side's rounds will not pair (settled failures)."""
        others = [other for other in self.sides if other != side]
        return frozenset(c.id for c in configs
                         if any(self.settled_failure(other, c.id) for other in others))

    def add(self, side: str, config_id: str, record: RoundRecord) -> None:
        config = self.sides[side].run.config(config_id)
        assert config is not None, config_id
        record.session = self.session
        config.rounds = [r for r in config.rounds if r.round != record.round] + [record]
        config.rounds.sort(key=lambda r: -1 if r.round is None else r.round)


def state_lock_path(state_dir: Path) -> Path:
    """The lock held while a state folder is measured (a second identical command must not
    redo the same rounds): in `locks/`, beside runs/, so that runs/ holds only states."""
    return own_folder(state_dir.parent.with_name("locks")) / f"{state_dir.name}.lock"


def runs_folder(cache_dir: Path) -> Path:
    """The cache's runs/ (made if missing), refused when it is a link or no folder."""
    return own_folder(Path(cache_dir) / "runs")


def clean_runs(runs_dir: Path, older_than_days: float | None) -> tuple[int, int]:
    """Remove the run folders under `runs_dir` last written more than `older_than_days`
    ago (all when None); returns (removed, kept because a running abdiff measures them).
    runs/ and locks/ themselves are refused when links, and a link inside runs/ is
    removed, never followed."""
    if not os.path.lexists(runs_dir):
        return 0, 0
    runs_dir = own_folder(runs_dir)
    cutoff = None if older_than_days is None else time.time() - older_than_days * 86400
    removed = kept = 0
    for entry in sorted(runs_dir.iterdir()):
        if entry.is_symlink() or not entry.is_dir():
            entry.unlink()  # nothing abdiff made: the benchmark planted it
            continue
        written = max([entry.stat().st_mtime] + [p.lstat().st_mtime for p in entry.iterdir()])
        if cutoff is not None and written >= cutoff:
            continue
        lock = lock_exclusively(state_lock_path(entry))
        if lock is None:
            kept += 1
            continue
        try:
            shutil.rmtree(entry)
            removed += 1
        finally:
            os.close(lock)
    return removed, kept


@contextmanager
def exclusive(state_dir: Path) -> Iterator[None]:
    """The state folder's lock, or one clear error when another abdiff holds it; runs/,
    locks/, the lock and the state folder refused when they are links (own_folder)."""
    runs_folder(state_dir.parent.parent)
    lock = lock_exclusively(state_lock_path(state_dir))
    if lock is None:
        raise InfrastructureError(f"another abdiff is measuring the same runs ({state_dir}); "
                                  "wait for it to end, then re-run to reuse its rounds")
    try:
        own_folder(state_dir)
        yield
    finally:
        os.close(lock)


@dataclass
class Lane:
    """Where one stream of rounds runs: a launcher (with its own warm pool) and, with
    `--devices`, the device its workers are given (devices.py); `ready` makes the warm
    pools ready before the lane's first worker (`PoolsReady`)."""

    launcher: Launcher
    device: Device | None = None
    ready: Callable[[], None] | None = None


class PoolsReady:
    """Every lane's warm pool made ready (its servers started, the target's preimport done)
    once, when the first worker of any lane is to start, and before it: a measurement whose
    rounds are all kept (a finished run re-reported, a bisect's finished comparison) waits
    for no import, and no import runs beside a timed worker of another lane. Made ready in
    the measuring thread: run_wave calls it before its lane threads start, and theirs find
    it done."""

    def __init__(self, prepares: Sequence[Callable[[], None]]) -> None:
        self.prepares = prepares
        self.lock = threading.Lock()
        self.done = False

    def __call__(self) -> None:
        with self.lock:
            if not self.done:
                for prepare in self.prepares:
                    prepare()
                self.done = True


@dataclass
class Spread:
    """What lanes running at once share: the lock over the measurement, and the stop that
    keeps rounds ended by abdiff's own interruption out of it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class LaneRounds:
    """Slots of the measurement run one after another on one lane, each (side, round) for
    the configs that lack that round, saved after each. With `spread`, other lanes run
    beside this one: the measurement is changed under its lock, and what only one lane
    may do at a time (refresh a checkout, end the orphans) is left to run_wave."""

    run_state: RunState
    configs: list[Config]
    target: Target
    settings: RoundSettings
    progress: Progress
    lane: Lane
    spread: Spread | None = None

    def guard(self) -> contextlib.AbstractContextManager[object]:
        return self.spread.lock if self.spread is not None else contextlib.nullcontext()

    def stopped(self) -> bool:
        """Whether abdiff's own stop ended the lanes (a spread's only)."""
        return self.spread is not None and self.spread.stop.is_set()

    def run(self, slots: list[tuple[str, int]]) -> None:
        for side, round_index in slots:
            if self.stopped():
                return
            with self.guard():
                todo = self.run_state.todo(side, round_index, self.configs)
                if not todo:
                    self.progress.step(len(self.configs), None)
                    continue
            if self.lane.ready is not None:
                self.lane.ready()
            started = time.monotonic()
            work_dir = self.prepare(side, round_index)
            output = self.run_round(side, round_index, todo, work_dir)
            self.take(side, round_index, output, started)

    def capture_times(self, side: str, configs: list[Config]) -> None:
        """Kernel times of `configs` on one side (rounds.capture_kernel_times), put into
        the records of the side's kernel round, saved."""
        if self.lane.ready is not None:
            self.lane.ready()
        started = time.monotonic()
        work_dir = self.prepare(side, KERNEL_TIMES)
        side_run, lane = self.run_state.sides[side], self.lane
        try:
            profiles, output = capture_kernel_times(self.target, lane.launcher,
                                                    side_run.checkout, configs, self.settings,
                                                    work_dir, lane.device, side_run.folders)
        finally:
            self.after_round()
        for config in side_run.run.configs:
            named = [r for r in config.rounds if r.kernels and not r.kernel_us]
            if config.id in profiles and named:
                named[0].kernel_us = profiles[config.id].us
        self.take(side, KERNEL_TIMES, output, started)

    def prepare(self, side: str, round_index: int | str) -> Path:
        """The round's folder made empty, its checkout refreshed (alone on the machine) and
        its side's folders made: the folder its workers get."""
        side_run = self.run_state.sides[side]
        work_dir = self.run_state.round_dir(side, round_index)
        # a half-run round from an interrupted run, or what the other side's benchmark
        # planted where this round's records go (runs/ is writable to it)
        for folder in (self.run_state.state_dir, work_dir.parent):
            if folder.is_symlink():
                raise InfrastructureError(f"{folder} was replaced by a link while the "
                                          "benchmark ran; the measurement stops (run it again "
                                          "with a fresh --cache-dir)")
        remove_path(work_dir)
        if side_run.refresh is not None and self.spread is None:
            side_run.checkout = side_run.refresh()
        if side_run.folders is not None:  # what a worker may write must exist: it is bound
            side_run.folders.make()
        own_folder(work_dir.parent.parent)
        own_folder(work_dir.parent)
        if self.spread is None:
            self.progress.watch(work_dir, side)
        return work_dir

    def run_round(self, side: str, round_index: int, todo: list[Config], work_dir: Path
                  ) -> RoundOutput:
        """One round on this lane; its records kept as they come, and kept (saved, alone on
        the machine) when the round ends abnormally."""
        side_run, lane = self.run_state.sides[side], self.lane
        try:
            output = run_round(self.target, lane.launcher, side_run.checkout, todo,
                               self.settings, round_index, work_dir,
                               partial(self.keep, side),
                               partial(order_seed, self.run_state.seed, round_index),
                               lane.device, side_run.folders, self.run_state.iterations,
                               self.run_state.unpaired(side, todo))
        except BaseException:
            self.after_round()
            if self.spread is None:  # what the round's workers recorded is kept
                self.run_state.save(complete=False, changed=[side])
            raise
        self.after_round()
        return output

    def keep(self, side: str, cid: str, record: RoundRecord) -> None:
        if self.stopped():
            return  # ended by abdiff's own stop, not by the benchmark
        if self.lane.device is not None:
            record.device = self.lane.device.name
        with self.guard():
            self.run_state.add(side, cid, record)

    def after_round(self) -> None:
        launcher = self.lane.launcher
        if self.spread is None:
            self.progress.watch(None)
        # nothing the benchmark left running may rewrite what is saved, or run beside
        # the other side's workers (a lane's pool sweeps only its own sandbox; the
        # orphans of all lanes are ended after each wave, run_wave)
        if launcher.pool is not None:
            launcher.pool.sweep()
        if self.spread is None:
            launcher.end_leftovers()

    def take(self, side: str, round_index: int | str, output: RoundOutput, started: float
             ) -> None:
        """A finished round's orders, processes, time and env into the measurement, saved."""
        run_state, launcher = self.run_state, self.lane.launcher
        side_run = run_state.sides[side]
        with self.guard():
            side_run.run.orders = [o for o in side_run.run.orders
                                   if o["round"] != round_index] + output.orders
            run_state.processes += output.processes
            run_state.time[side] = added(run_state.time.get(side, SideTime()),
                                         output.time)
            preimported = launcher.pool.preimported(side_run.checkout) \
                if launcher.pool is not None else None
            if preimported and side_run.run.env.get("preimport") != preimported:
                side_run.run.env["preimport"] = preimported
            if output.env and not side_run.run.env.get("device"):
                side_run.run.env.update(output.env)
            session = side_run.run.sessions[run_state.session]
            machine = {k: output.env[k] for k in SESSION_ENV_KEYS if output.env.get(k)}
            if any(session.get(k) != v for k, v in machine.items()):
                session.update(machine)
            if not self.stopped():
                run_state.save(complete=False, changed=[side])
            self.progress.step(len(self.configs), time.monotonic() - started)


def blocks_of(slots: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """`slots` (schedule's order) cut into their ABBA blocks: the slots of two consecutive
    rounds (one at the end of an odd count). A block's A and B rounds are paired, so a
    block runs on one device."""
    blocks: list[list[tuple[str, int]]] = []
    for slot in slots:
        if blocks and slot[1] in (blocks[-1][0][1], blocks[-1][0][1] + 1):
            blocks[-1].append(slot)
        else:
            blocks.append([slot])
    return blocks


def run_wave(run_state: RunState, work: list[tuple[Lane, list[tuple[str, int]]]],
             configs: list[Config], target: Target, settings: RoundSettings,
             progress: Progress, spread: Spread) -> None:
    """Each lane's slots at once, one thread a lane; then, with every lane idle, the
    orphans ended and the measurement saved. The checkouts are refreshed before (a lane's
    workers may be running in one while another lane would rewrite it)."""
    for side in {side for _, slots in work for side, _ in slots}:
        refresh = run_state.sides[side].refresh
        if refresh is not None:
            run_state.sides[side].checkout = refresh()
    # the warm pools made ready here, in the measuring thread, where a worker is to start:
    # a process started from a lane's thread would get its parent-death signal when that
    # thread ends (PR_SET_PDEATHSIG follows the thread that forked it)
    ready = work[0][0].ready if work else None  # the lanes share one (start_pools)
    if ready is not None and any(run_state.todo(side, round_index, configs)
                                 for _, slots in work for side, round_index in slots):
        ready()
    failures: list[BaseException] = []

    def lane_work(lane: Lane, slots: list[tuple[str, int]]) -> None:
        try:
            LaneRounds(run_state, configs, target, settings, progress, lane, spread).run(slots)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the measuring thread
            failures.append(exc)
            spread.stop.set()

    threads = [threading.Thread(target=lane_work, args=(lane, slots), daemon=True)
               for lane, slots in work if slots]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        spread.stop.set()  # abdiff is stopping: what the lanes record now is not kept
        raise
    for lane, _ in work[:1]:  # the lanes share one runtime's leftovers
        lane.launcher.end_leftovers()
    if failures:
        raise failures[0]
    run_state.save(complete=False)


def run_spread(run_state: RunState, slots: list[tuple[str, int]], configs: list[Config],
               target: Target, lanes: list[Lane], settings: RoundSettings, progress: Progress,
               after_first_half: Callable[[], None] | None = None) -> None:
    """`slots` on every lane at once: block k of them on lane k mod len(lanes), in waves of
    one block a lane. `after_first_half` runs once the first wave's first rounds are in
    (the first-round check); the rest of that wave after it."""
    blocks = blocks_of(slots)
    spread = Spread()
    for start in range(0, len(blocks), len(lanes)):
        wave = list(zip(lanes, blocks[start:start + len(lanes)], strict=False))
        if start == 0 and after_first_half is not None:
            run_wave(run_state, [(lane, block[:2]) for lane, block in wave], configs,
                     target, settings, progress, spread)
            after_first_half()
            wave = [(lane, block[2:]) for lane, block in wave]
        run_wave(run_state, wave, configs, target, settings, progress, spread)


def run_plan(
    run_state: RunState,
    configs: list[Config],
    target: Target,
    launcher: Launcher,
    settings: RoundSettings,
    plan: Plan,
    undecided: Callable[[], set[str]] | None,
    quiet: bool = False,
    after_first_round: Callable[[], None] | None = None,
    devices: list[Device] | None = None,
    wanting_times: Callable[[], set[str]] | None = None,
) -> RunState:
    """The first `plan.rounds` per side for all configs, then adaptive blocks.

    `undecided` names the configs that need more rounds (None: no extension); a block
    runs only them, on both sides, so their rounds stay paired.
    `after_first_round` runs once every side has its first round; it raises to stop
    there (nothing could run: no more worker processes are spent), the rounds kept.
    One-sided measurements (`abdiff run`, a baseline refresh, B against a stored
    baseline) use the same schedule, keeping the slots of the sides present.
    With several `devices` (--devices), the ABBA blocks run on all of them at once
    (run_spread), each device with its own launcher and warm pool. `wanting_times` names,
    once the rounds are in, the configs whose kernel times are still to be captured
    (rounds.capture_kernel_times): one worker per side captures them.
    """
    warn_if_root()
    rng = random.Random(run_state.seed)
    for side in run_state.sides.values():
        side.run.looks = plan.looks().to_json()
        if devices:
            side.run.env["devices"] = [device.name for device in devices]
    slots = [s for s in abba_slots(plan.rounds, rng) if s[0] in run_state.sides]
    progress = Progress(quiet)
    extra_rounds = plan.max_rounds - plan.rounds if undecided is not None else 0
    # the most the adaptive blocks may add: every config, up to max-rounds (the ETA's bound)
    progress.plan("first rounds", len(slots), len(slots) * len(configs),
                  len(run_state.sides) * extra_rounds * len(configs))
    try:
        with contextlib.ExitStack() as stack:
            lanes = [Lane(launcher, device) for device in devices] if devices \
                else [Lane(launcher)]
            for lane in lanes[1:]:
                lane.launcher = launcher.for_lane()  # a warm pool of its own (pooled)
            pools = start_pools(stack, run_state, lanes, target, settings)
            rounds = PlanRounds(run_state, target, settings, progress, lanes)
            # where there is an extension, the timed iterations are planned as soon as the
            # pairs allow (the first look's rounds after them time the plan's counts)
            planning = (undecided is not None and settings.adapt_run_times
                        and plan.rounds < plan.max_rounds)
            planned_from = min(MIN_PLAN_PAIRS, plan.rounds) if planning else plan.rounds
            # a schedule starts with both sides' round 0: the first-round check after it
            rounds.run([s for s in slots if s[1] < planned_from], configs, after_first_round)
            if planning:
                run_state.plan_iterations(settings, target.iteration_counts == "job",
                                          planned_from)
            if rest := [s for s in slots if s[1] >= planned_from]:
                rounds.run(rest, configs)
            if undecided is not None:
                rounds.run_adaptive(configs, plan, undecided, rng)
            if wanting_times is not None and (wanted := wanting_times()):
                try:
                    rounds.capture_times([c for c in configs if c.id in wanted])
                except InfrastructureError as exc:  # the rounds are kept: report without times
                    log.warning(f"kernel times not captured: {exc}")
            count_warm_starts(run_state, pools)
    finally:
        progress.close()
    launcher.end_leftovers()
    run_state.save(complete=True)
    return run_state


def start_pools(stack: contextlib.ExitStack, run_state: RunState, lanes: list[Lane],
                target: Target, settings: RoundSettings) -> list[WorkerPool | None]:
    """Each lane's warm pool (pooled) for as long as `stack` holds, its servers made ready
    before the first worker of any lane (`PoolsReady`, the lanes' `ready`)."""
    pools = [stack.enter_context(pooled(
        lane.launcher, settings.worker_start,
        run_state.state_dir / ("pool" if n == 0 else f"pool{n}")))
        for n, lane in enumerate(lanes)]
    env = target.worker_env()
    # what a server that imports a side's code ahead may write: that side's folders
    # (an A/A run's sides share a checkout, and so a server: both sides' rounds)
    logs = own_folder(run_state.state_dir / "logs")
    folders: dict[Path, WorkerFolders] = {}
    for name, side in run_state.sides.items():
        if side.folders is not None:
            rounds = own_folder(run_state.side_rounds(name))
            shared = side.checkout in folders
            folders[side.checkout] = WorkerFolders(side.folders, logs if shared else rounds)
    prepares = [partial(pool.prepare, [side.checkout for side in run_state.sides.values()],
                        {**env, **(lane.device.env if lane.device else {})},
                        target.preimport, folders)
                for lane, pool in zip(lanes, pools, strict=True)
                if pool is not None and env is not None]
    if prepares:
        # both sides' servers ready (and the target's preimport done) before the first
        # worker: no import runs beside a timed one
        ready = PoolsReady(prepares)
        for lane in lanes:
            lane.ready = ready
    return pools


def count_warm_starts(run_state: RunState, pools: list[WorkerPool | None]) -> None:
    """The workers the pools started ahead or forked, kept in `run_state`; a pool that
    failed said once the rounds are in (it cost time, not data)."""
    for pool in pools:
        if pool is not None:
            run_state.warm_starts += pool.taken
            run_state.warm_words = pool.words
            if pool.failure:
                log.warning(f"{pool.failure}; the workers after it started cold")


@dataclass(frozen=True)
class PlanRounds:
    """The lanes of one run_plan and what all their rounds share."""

    run_state: RunState
    target: Target
    settings: RoundSettings
    progress: Progress
    lanes: list[Lane]

    def run(self, slots: list[tuple[str, int]], configs: list[Config],
            check: Callable[[], None] | None = None) -> None:
        """`slots` for `configs` on the lanes; `check` once the first round's slots are in."""
        if len(self.lanes) > 1:
            run_spread(self.run_state, slots, configs, self.target, self.lanes, self.settings,
                       self.progress, check)
            return
        lane = LaneRounds(self.run_state, configs, self.target, self.settings, self.progress,
                          self.lanes[0])
        first = [s for s in slots if s[1] == slots[0][1]] if check else []
        lane.run(first)
        if check is not None:
            check()
        lane.run(slots[len(first):])

    def capture_times(self, configs: list[Config]) -> None:
        """Kernel times of `configs`, each side on the first lane (LaneRounds.capture_times)."""
        sides = len(self.run_state.sides)
        self.progress.plan(f"kernel times of {len(configs)} changed "
                           f"config{'s' * (len(configs) > 1)}", sides, sides * len(configs), 0)
        lane = LaneRounds(self.run_state, configs, self.target, self.settings, self.progress,
                          self.lanes[0])
        for side in self.run_state.sides:
            lane.capture_times(side, configs)

    def run_adaptive(self, configs: list[Config], plan: Plan,
                     undecided: Callable[[], set[str]], rng: random.Random) -> None:
        """After the first rounds: blocks of `plan.step` rounds for the configs still
        `undecided`, up to `plan.max_rounds`."""
        run_state = self.run_state
        done = plan.rounds
        while done < plan.max_rounds:
            ids = undecided()
            if not ids:
                break
            extra = min(plan.step, plan.max_rounds - done)
            block_slots = [s for s in abba_slots(extra, rng, start=done)
                           if s[0] in run_state.sides]
            block = [c for c in configs if c.id in ids]
            self.progress.plan(f"rounds {done + 1}-{done + extra} for {len(block)} undecided "
                               "configs", len(block_slots), len(block_slots) * len(block),
                               len(run_state.sides) * (plan.max_rounds - done - extra)
                               * len(block))
            self.run(block_slots, block)
            done += extra


def empty_run(rev: str, sha: str, target: str, suite: str, configs: list[Config],
              env: dict) -> RunFile:
    return RunFile(rev=rev, sha=sha, target=target, suite=suite, env=dict(env),
                   configs=[ConfigRuns(c.id, dict(c.params)) for c in configs])


def settings_fingerprint(settings: RoundSettings) -> dict:
    """What about the settings changes the measurement (and so the state key)."""
    data = asdict(settings)
    for volatile in ("timeout_s", "pass_env"):
        data.pop(volatile)
    return data
