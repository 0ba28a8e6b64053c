"""One measured run, wired from the stages: sides, checkouts, execution, compare.

The commands (commands/) parse their options into the typed objects of
options.py and call into here; nothing in this module parses arguments or
prints reports.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType

from abdiff import __version__
from abdiff.errors import InfrastructureError, InputError, internal_errors
from abdiff.host.doctor import preflight
from abdiff.host.exposure import private_dir
from abdiff.host.machine_state import CpuSample, read_machine, start_sample, summary_line
from abdiff.host.machine_state import to_json as machine_json
from abdiff.launchers import make_launcher, sandbox
from abdiff.launchers.base import Launcher
from abdiff.launchers.process import kernel_selecting_environment, worker_environment
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.warm import prime
from abdiff.options import Execution, Selection, Statistics
from abdiff.repo.checkouts import CheckoutCache, default_cache_dir
from abdiff.repo.revs import (
    WORKTREE,
    SideSpec,
    moved_refs,
    open_repo,
    refs_of,
    resolve_rev,
    resolve_side_b,
)
from abdiff.reports.table import say
from abdiff.run.devices import Device, parse_devices
from abdiff.run.rounds import RoundSettings, worker_stderr
from abdiff.run.schedule import (
    Plan,
    RunState,
    SideRun,
    empty_run,
    exclusive,
    run_plan,
    settings_fingerprint,
    state_key,
)
from abdiff.run.time_split import time_split
from abdiff.store.baselines import (
    Allowance,
    baselines_dir,
    drift_allowance,
    fingerprint,
    fingerprint_differences,
    fingerprint_notes,
    load_baseline,
    sessions_with_rounds,
)
from abdiff.store.files import hold_in_use
from abdiff.store.history import earlier_paired_runs
from abdiff.store.records import Result, RunFile
from abdiff.store.sides import CACHE_VARIABLES, SideFolders, in_use_lock
from abdiff.suites import Suite, load_suite
from abdiff.suites.loader import with_configs
from abdiff.targets import detect_target, target_package
from abdiff.targets.base import Target
from abdiff.verdict.compare import compare_runs, earlier_noise, shows_change
from abdiff.verdict.kernel_times import lacks_times
from abdiff.verdict.stats import (
    borrowing,
    few_pairs_plan,
    futile,
    load_scipy,
    needs_more_rounds,
)
from abdiff.worker.measure import asks_torch, resolve_device, timing_kind

log = logging.getLogger(__name__)

@dataclass
class Bench:
    """Everything needed to measure one or two sides of a repository; a context manager
    that releases what its measurements held open when the command is done
    (`launcher.runtime`: the sandbox, the leftovers, the warm pool)."""

    suite: Suite
    target: Target
    launcher: Launcher
    settings: RoundSettings
    cache: CheckoutCache
    cache_dir: Path
    sandbox: str  # what the workers run in, in words (launchers/sandbox.py)
    started: float = field(default_factory=time.monotonic)  # the wall time's start
    devices: list[Device] | None = None  # --devices (None: one, as the launcher has it)
    # other processes' CPU use, sampled from here to the machine's reading (check_machine):
    # the set-up between fills the window that a sleep would
    cpu_sample: CpuSample | None = None
    loading: LoadingAhead | None = None  # beside the servers' torch import

    def statistics_loaded(self) -> None:
        """Wait for what `load_ahead` imports: before the first round, so that it never runs
        beside a timed worker, and before abdiff's own process asks torch for the device."""
        if self.loading is not None:
            self.loading.wait()

    def __enter__(self) -> Bench:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.launcher.runtime is not None:
            self.launcher.runtime.close()


# the workers' variables that name a job, not what it does: a run resumed in another
# terminal or cluster job keeps its rounds
JOB_VARIABLES = ("TERM", "TMPDIR")
JOB_PREFIXES = ("SLURM_", "OMPI_", "PMIX_")
WORKER_STARTS = MappingProxyType({"auto": "fork", "fork": "fork", "on": "standby",
                                  "off": "cold"})


def worker_start(choice: str) -> str:
    """`--prestart auto|fork|on|off` as a start mode of launchers/warm.py. auto forks:
    the fork server sleeps while workers measure, so it needs no spare core, and the A/A
    spread was no wider with it (docs/performance.md, 2 and 16 cores)."""
    return WORKER_STARTS[choice]


def prepare_bench(selection: Selection, execution: Execution, repo_root: Path,
                  checkouts: int = 1) -> Bench:
    """The suite, target, launcher and settings of a run. The caller has refused secrets
    in reach of the benchmark already (commands/common.measuring), before any git.
    `checkouts`: how many the run will measure in (a fork server is started for each).
    The bench holds what the command's measurements hold open (the launcher's runtime:
    launchers/runtime.py): use it in a `with`, which releases it; an error here releases
    it before it goes on."""
    started = execution.started
    cpu_sample = start_sample()
    devices = parse_devices(execution.devices, resolve_device(execution.device) == "cuda") \
        if execution.devices else None
    runtime = Runtime(pass_env=list(execution.pass_env),
                      max_memory_bytes=execution.max_memory_bytes)
    try:
        runtime.leftovers.adopt()  # what the benchmark leaves running ends with the rounds
        bench = _bench(selection, execution, repo_root, checkouts, runtime)
    except BaseException:
        runtime.close()
        raise
    return dataclasses.replace(bench, started=started, devices=devices, cpu_sample=cpu_sample)


def _suite_and_target(selection: Selection, repo_root: Path) -> tuple[Suite, Target]:
    """The suite (--configs) and the target that measures it (--metric into its block)."""
    suite = load_suite(selection.suite, allow_large=selection.allow_large, repo_root=repo_root)
    target = detect_target(repo_root, selection.target)()
    if selection.metrics:  # --metric: the command target's metrics, in the suite's block
        if target.name != "command":
            raise InputError(f"--metric chooses what the command target compares; target "
                             f"{target.name} measures latency only: leave it out")
        suite = dataclasses.replace(suite, target_options={**(suite.target_options or {}),
                                                           "metrics": list(selection.metrics)})
    return suite, target


def _launcher(execution: Execution, suite: Suite, target: Target, runtime: Runtime) -> Launcher:
    """--launcher (or the target's), starting its processes in `runtime`."""
    name = execution.launcher or target.default_launcher
    if name == "local" and not execution.ranks and suite.tp > 1:
        raise InputError(f"suite {suite.name} has tp: {suite.tp}; give --launcher mpirun, srun "
                         "or torchrun to start that many ranks (or --np 1 for one)")
    return make_launcher(name, execution.ranks or suite.tp, execution.nodes,
                         getattr(target, "srun_container", None), runtime)


def _bench(selection: Selection, execution: Execution, repo_root: Path, checkouts: int,
           runtime: Runtime) -> Bench:
    """prepare_bench's work, in `runtime` (adopting already): the checks before any
    checkout, the sandbox, the primed pool, the configs."""
    suite, target = _suite_and_target(selection, repo_root)
    launcher = _launcher(execution, suite, target, runtime)
    cache_dir = (execution.cache_dir or default_cache_dir()).resolve()
    cache = CheckoutCache(repo_root, cache_dir)
    if not execution.skip_preflight:  # before any checkout or worker: the machine must run it
        problem = (preflight(target.name, execution.device, launcher.name)
                   or target.preflight(suite, launcher.name))
        if problem:
            raise InfrastructureError(problem)
    runtime.hold(hold_in_use(in_use_lock(cache_dir)))  # the side caches, while it measures
    yours = [name for name in CACHE_VARIABLES if os.environ.get(name)]
    if yours and not execution.quiet:
        say(f"abdiff: note: {', '.join(yours)} not used by the workers: each side keeps its "
            f"own caches in {cache_dir / 'sides'} (one folder of yours would be shared by "
            "both sides; docs/ci.md)")
    # before the first worker: a fork server keeps the namespaces it started in
    runtime.sandbox = sandbox.start(execution.sandbox, repo_root, cache.common_dir, cache_dir,
                                    private_dir(), launcher.ranks_start_elsewhere)
    start_mode = worker_start(execution.prestart)
    # the first worker (the fork server) imports torch while the rest of the set-up runs
    # and the checkouts are made; in the system's temporary folder. Not for --resume: a
    # finished run re-reports without any worker, and ending a server still importing
    # torch cost seconds (a resumed unfinished run starts its server when it measures)
    if not execution.resume:
        prime(launcher, start_mode, Path(tempfile.gettempdir()), target.worker_env(),
              checkouts)
    # and abdiff loads scipy and what resolving the device imports meanwhile
    # (Bench.statistics_loaded)
    loading = LoadingAhead(execution.device)
    loading.start()
    # what the suite means for this target (none yet: what each side lists, side_runs)
    configs = target.configs(suite, repo_root)
    suite = with_configs(suite, configs) if configs else suite
    return Bench(suite, target, launcher, round_settings(selection, execution, suite, target,
                                                         start_mode),
                 cache, cache_dir, runtime.sandbox.words, loading=loading)


def load_ahead(device: str) -> None:
    """scipy for the statistics and, where resolving `device` imports torch (a GPU host),
    torch: imported beside the checkouts and the servers' own torch import, not after them
    (on an H100 host abdiff's own torch import was 1.5-4 s of its time before the first
    round)."""
    load_scipy()
    if asks_torch(device):
        import torch  # noqa: F401 - the import is the work


class LoadingAhead(threading.Thread):
    """`load_ahead` in a thread of its own; `wait` raises what it raised, in the waiting
    thread (a second import of torch after a failed one fails another, misleading way)."""

    def __init__(self, device: str) -> None:
        super().__init__(name="abdiff-load-ahead", daemon=True)
        self.device = device
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            load_ahead(self.device)
        except BaseException as exc:  # noqa: BLE001 - raised again by wait, where it counts
            self.failure = exc

    def wait(self) -> None:
        self.join()
        if self.failure is not None:
            raise self.failure


def round_settings(selection: Selection, execution: Execution, suite: Suite, target: Target,
                   start_mode: str) -> RoundSettings:
    """What every round of the run is given (rounds.py)."""
    return RoundSettings(
        facts=suite.facts,
        warmup_times=suite.warmup_times,
        run_times=suite.run_times,
        timeout_s=execution.timeout_s,
        device=execution.device,
        cuda_graph=not execution.eager,
        cpu_threads=execution.cpu_threads,
        worker_start=start_mode,
        target_options=suite.target_options,
        target_args=list(selection.target_args),
        pass_env=list(execution.pass_env),
        max_memory_bytes=execution.max_memory_bytes,
        adapt_run_times=suite.adapt_run_times and target.iteration_counts != "fixed",
    )


def side_folders(bench: Bench, side: SideSpec) -> SideFolders:
    """The side's kept HOME, TMPDIR, tool caches and build folder: its commit and
    kernel-selecting variables (store/sides.py), made before its first worker."""
    # a working tree is one repository's, not a commit every clone shares
    identity = f"{side.sha}:{bench.cache.repo_root}" if side.sha == "WORKTREE" else side.sha
    folders = SideFolders.of(bench.cache_dir, identity, kernel_selecting_environment(os.environ))
    folders.make()
    return folders


def side_runs(bench: Bench, specs: dict[str, SideSpec]) -> tuple[Bench, dict[str, SideRun]]:
    """Each side checked out and prepared by the target (the command target builds it, once
    per side per run); the configs both sides list, where the target takes them from the
    sides; then each side's run."""
    checkouts = {name: bench.cache.checkout(spec) for name, spec in specs.items()}
    folders = {name: side_folders(bench, spec) for name, spec in specs.items()}
    listed: dict[str, list] = {}
    failures: dict[str, str] = {}
    for name, spec in specs.items():
        prepared = bench.target.prepare(bench.suite, checkouts[name], folders[name].build,
                                        bench.launcher.runtime)
        if prepared.failure is not None:
            failures[name] = f"{name} ({spec.rev}): {prepared.failure}"
            say(f"abdiff: side {failures[name]}; its configs fail with this reason")
        if prepared.configs is not None:
            listed[name] = prepared.configs
    if not bench.suite.configs:  # the target lists them per side: both sides' together
        merged = {c.id: c for configs in listed.values() for c in configs}
        if not merged:
            raise InfrastructureError("nothing to measure: no side listed a benchmark ("
                                      + "; ".join(failures.values()) + ")")
        bench = dataclasses.replace(bench, suite=with_configs(bench.suite, list(merged.values())))
        for name, configs in listed.items():
            missing = [c for c in merged if c not in {d.id for d in configs}]
            if missing:
                say(f"abdiff: note: side {name} ({specs[name].rev}) does not list "
                    f"{len(missing)} config(s) the other side has ({', '.join(missing[:3])}"
                    f"{', ...' if len(missing) > 3 else ''}): they fail there as not reported")
    return bench, {name: side_run(bench, spec, checkouts[name], folders[name])
                   for name, spec in specs.items()}


def side_run(bench: Bench, side: SideSpec, checkout: Path, folders: SideFolders) -> SideRun:
    # worker_start: how worker processes started: cold, standby or fork (--prestart)
    # launcher and repository: `abdiff history` keeps to one repository's runs (the cache is
    # shared) and does not read another launcher's kernels as a change of the commit
    env = {"abdiff": __version__, "worker_start": bench.settings.worker_start,
           "sandbox": bench.sandbox, "launcher": launcher_text(bench),
           "repository": str(bench.cache.repo_root.resolve()), "side_folders": folders.to_json(),
           "target_package": target_package(bench.target.name),
           **bench.target.env_info(checkout)}
    run = empty_run(side.rev, side.sha, bench.target.name, bench.suite.name,
                    bench.suite.configs, env)
    # before each round: what the other side's benchmark wrote into this checkout (or into
    # .git) is undone, and the checkout verified against the commit (checkouts.py). A copy
    # of the working tree is not made again mid-run: the user may be editing the original.
    if side.sha == WORKTREE:
        return SideRun(checkout, run, folders=folders)
    return SideRun(checkout, run, refresh=lambda: bench.cache.checkout(side), folders=folders)


def launcher_text(bench: Bench) -> str:
    """"local", or "mpirun x2" with more than one rank."""
    launcher = bench.launcher
    return launcher.name if launcher.ranks == 1 else f"{launcher.name} x{launcher.ranks}"


def state_dir(bench: Bench, sides: dict[str, SideRun], kind: str) -> Path:
    """Where a measurement's rounds are kept, keyed by everything that shapes them."""
    parts = {
        "kind": kind,
        "sides": {n: [s.run.sha, str(s.checkout)] for n, s in sides.items()},
        "target": bench.target.name,
        "suite": bench.suite.source,
        "configs": [c.id for c in bench.suite.configs],
        "settings": settings_fingerprint(bench.settings),
        "launcher": launcher_text(bench),
        # what else changes what a worker does: a failed round stored under another sandbox
        # or environment is not this measurement's (the values: a hash, not kept in clear)
        "sandbox": bench.sandbox,
        "environment": hashlib.sha256(json.dumps(
            {name: value for name, value in worker_environment(
                bench.target.worker_env() or {}, bench.settings.pass_env).items()
             if name not in JOB_VARIABLES and not name.startswith(JOB_PREFIXES)},
            sort_keys=True).encode()).hexdigest(),
    }
    return bench.cache_dir / "runs" / state_key(parts)


def stop_when_nothing_ran(run_state: RunState, runs: dict[str, RunFile]
                          ) -> Callable[[], None]:
    """The first-round check: when no config of `runs` (the compared sides, a stored
    baseline included) has run, nothing can be measured and more rounds would fail the
    same way, so stop with one line naming the first cause and the file holding its
    full text."""

    sides = "on either side " if len(runs) > 1 else ""

    def check() -> None:
        if any(r.status == "ok" for run in runs.values() for c in run.configs
               for r in c.rounds):
            return
        for name, run in runs.items():
            for config in run.configs:
                failed = next((r for r in config.rounds if r.error), None)
                if failed is None or name not in run_state.sides:
                    continue
                where = worker_stderr(run_state.round_dir(name, failed.round or 0), config.id)
                raise InfrastructureError(
                    f"nothing measured: no config ran {sides}in the first round; first "
                    f"cause: {config.id} on {name} ({run.rev}): {failed.status}: {failed.error} "
                    f"(full text in {where}); fix that, then re-run (`abdiff doctor "
                    "A..B` checks the probe's hooks in both sides)")
        raise InfrastructureError(f"nothing measured: no config ran {sides}in the first round "
                                  f"(run files in {run_state.state_dir}); read the workers' "
                                  "stderr there, fix the cause and re-run")

    return check


def borrowing_noise(first_round: Callable[[], None], bench: Bench, where: Path,
                    run_a: RunFile, run_b: RunFile, quiet: bool) -> Callable[[], None]:
    """`first_round`, then, once A's run file names its machine, what earlier paired runs on
    it of commits in A's history measured of each config's noise into B's run file
    (`earlier_noise`, kept when the run is resumed): a plan of so few rounds that its
    last look borrows it."""

    def check() -> None:
        first_round()
        if run_b.earlier_noise:
            return
        earlier = earlier_paired_runs(bench.cache_dir / "runs", where, run_a,
                                      bench.cache.repo_root)
        run_b.earlier_noise = earlier_noise(earlier, run_b.configs, bench.settings.run_times)
        recorded = list(run_b.earlier_noise.values())
        lent = [n for n, used in zip(recorded, borrowing(recorded), strict=True) if used]
        if not quiet and lent:
            counts = {n.runs for n in lent}
            most = max(counts)
            say(f"abdiff: {len(lent)} configs' noise borrowed from "
                f"{'up to ' * (len(counts) > 1)}{most} earlier run{'s' * (most > 1)} on this "
                "machine (a plan of few rounds)")

    return check


def run_one_side(selection: Selection, execution: Execution, rev: str, kind: str) -> RunFile:
    """The rounds of one side (no interleaving partner), kept like a diff's."""
    repo_root = open_repo(selection.repo)
    spec = resolve_rev(repo_root, rev)  # refused before a worker starts
    with prepare_bench(selection, execution, repo_root) as prepared:
        bench, sides = side_runs(prepared, {"A": spec})
        where = state_dir(bench, sides, kind)
        with exclusive(where), internal_errors(where):
            run_state = RunState.open(where, sides, execution.resume, execution.seed)
            bench.statistics_loaded()
            check_machine(execution, [sides["A"].run], bench.cpu_sample)
            # no later run of this side captures kernel times: its kernel round keeps them
            settings = dataclasses.replace(bench.settings, kernel_times=True)
            run_plan(run_state, bench.suite.configs, bench.target, bench.launcher,
                    settings, Plan(execution.rounds, execution.rounds), None,
                    execution.quiet, stop_when_nothing_ran(run_state, {"A": sides["A"].run}),
                    bench.devices)
    return sides["A"].run


def refs_note(before: dict[str, str], after: dict[str, str], quiet: bool) -> list[str]:
    """A note (and a warning on stderr) when the repository's refs changed while the rounds
    ran: the benchmark can write .git, and the next run resolves `main` to where it points
    now (docs/ci.md). abdiff does not move them back: the user may have committed."""
    moved = moved_refs(before, after)
    if not moved:
        return []
    shown = "; ".join(moved[:3]) + (f"; {len(moved) - 3} more" if len(moved) > 3 else "")
    note = (f"the repository's refs changed while the benchmark ran ({shown}): a later run "
            "resolves names to where they point now; check them before trusting it")
    if not quiet:
        say(f"abdiff: warning: {note}")
    return [note]


def check_machine(execution: Execution, runs: list[RunFile],
                  sample: CpuSample | None = None) -> None:
    """Read the machine before the first rounds (machine_state), say it on a terminal (as the
    progress line; off a terminal the notes name a noisy reading) and record it in the run
    files; a run that already holds a reading (resumed) keeps its own."""
    if all("machine" in run.env for run in runs):
        return
    readings = read_machine(resolve_device(execution.device), sample)
    if not execution.quiet and sys.stderr.isatty():
        log.info(summary_line(readings))
    for run in runs:
        run.env.setdefault("machine", machine_json(readings))


def undecided_configs(run_a: RunFile, run_b: RunFile, expect: dict, statistics: Statistics,
                      max_rounds: int) -> Callable[[], set[str]]:
    """Which configs still need rounds: latency inconclusive (stats.needs_more_rounds),
    unless `max_rounds` could not plausibly decide them (stats.futile)."""
    min_effect, alpha = statistics.min_effect, statistics.alpha

    def undecided() -> set[str]:
        result = compare_runs(run_a, run_b, expect, min_effect, alpha)
        return {c.id for c in result.configs
                if needs_more_rounds(c.latency)
                and not futile(c.latency, max_rounds, min_effect, alpha, len(result.configs))}

    return undecided


def wanting_kernel_times(run_a: RunFile, run_b: RunFile, expect: dict,
                         statistics: Statistics) -> Callable[[], set[str]]:
    """Which configs, once measured, changed (kernels or latency: what the report names the
    kernels behind) while a side named their kernels without times."""

    def wanting() -> set[str]:
        result = compare_runs(run_a, run_b, expect, statistics.min_effect, statistics.alpha)
        return {config.id for config in result.configs
                if shows_change(config.kernels_added, config.kernels_removed, config.latency)
                and any(side is not None and lacks_times(side.rounds)
                        for side in (run_a.config(config.id), run_b.config(config.id)))}

    return wanting


def run_and_compare(
    execution: Execution, statistics: Statistics, bench: Bench, sides: dict[str, SideRun],
    run_a: RunFile, expect: dict, notes: list[str], adaptive: bool = True,
    check_measured: Callable[[], list[str]] | None = None,
    allowance: Callable[[], Allowance] | None = None,
) -> Result:
    """Measure the sides, then compare. `check_measured` may refuse what was measured (an
    InputError, before anything else is printed) or add notes; `allowance` (a side
    measured apart) says, once B is measured, what the drift between sessions allows."""
    where = state_dir(bench, sides, "diff")
    run_b = sides["B"].run
    rounds = execution.rounds
    refs_before = refs_of(bench.cache.repo_root)
    max_rounds = max(rounds, execution.max_rounds) if adaptive else rounds
    with exclusive(where), internal_errors(where):
        run_state = RunState.open(where, sides, execution.resume, execution.seed)
        bench.statistics_loaded()
        check_machine(execution, [side.run for side in sides.values()], bench.cpu_sample)
        first_round = stop_when_nothing_ran(run_state, {"A": run_a, "B": run_b})
        if "A" in sides and few_pairs_plan(max_rounds, statistics.alpha):
            first_round = borrowing_noise(first_round, bench, where, run_a, run_b,
                                          execution.quiet)
        run_plan(run_state, bench.suite.configs, bench.target, bench.launcher, bench.settings,
                Plan(rounds, max_rounds),
                undecided_configs(run_a, run_b, expect, statistics, max_rounds),
                execution.quiet, first_round, bench.devices,
                # only a worker with a capture pass of its own captures without timing
                wanting_kernel_times(run_a, run_b, expect, statistics)
                if bench.target.capture_pass else None)
        if check_measured is not None:
            notes = notes + check_measured()
        allowed = allowance() if allowance is not None else None
        if allowed is not None:
            notes = notes + [allowed.why]
            statistics = dataclasses.replace(statistics, gates=allowed.gates)
        notes = notes + refs_note(refs_before, refs_of(bench.cache.repo_root), execution.quiet)
        if not execution.quiet and not run_state.processes:
            say(f"abdiff: no worker started: the rounds kept in {where} are reported")
        elif not execution.quiet:
            ahead = (f" ({run_state.warm_starts} {run_state.warm_words})"
                     if run_state.warm_starts else "")
            say(f"abdiff: {run_state.processes} worker processes this run{ahead}; run files "
                f"in {where}")
        result = compare_runs(run_a, run_b, expect, statistics.min_effect, statistics.alpha,
                              notes, statistics.require_all, statistics.small_changes,
                              statistics.gates, allowed.drift if allowed else None)
        if allowed is not None:
            result.summary.update(allowed.summary)
        if run_state.processes:
            result.time = time_split(time.monotonic() - bench.started, run_state.time,
                                     len(bench.devices or [None]))
        return result


def against_baseline(selection: Selection, execution: Execution, statistics: Statistics,
                     bench: Bench, repo_root: Path, name: str, rev_b: str, rev_range: str,
                     expect_of: Callable[[Suite], dict]) -> Result:
    """B measured now against a stored side A; refuses another machine's baseline."""
    run_a = load_baseline(baselines_dir(repo_root, selection.baselines_dir), name)
    spec_b = resolve_side_b(repo_root, rev_b or None, rev_range)
    # what the settings decide is checked before measuring; the machine after B's workers
    # have reported it from the benchmark's own interpreter (which may have another torch)
    bench.statistics_loaded()
    timed = timing_kind(resolve_device(execution.device), bench.settings.cuda_graph)
    chosen = {"target": bench.target.name, "cuda_graph": timed == "graph replay"}
    baseline_env = fingerprint(run_a)
    env_differences(name, {k: v for k, v in baseline_env.items() if k in chosen}, chosen,
                    selection.allow_env_mismatch)
    bench, sides = side_runs(bench, {"B": spec_b})
    expect = expect_of(bench.suite)  # the configs are known now
    wanted = {c.id for c in bench.suite.configs}
    held = len(run_a.configs)
    run_a.configs = [c for c in run_a.configs if c.id in wanted]
    if not run_a.configs:
        raise InputError(f"baseline {name!r} holds none of the {len(wanted)} configs of suite "
                         f"{bench.suite.name!r} (it holds {held} of suite {run_a.suite!r}): "
                         f"measure with --configs {run_a.suite}, or refresh the baseline "
                         f"with this suite")
    # notes, each a whole sentence: a report clips a note, never mid-sentence here; what
    # the drift allows follows once B is measured (the machine it ran on decides it)
    notes = [f"side A is the stored baseline {name!r} ({run_a.rev} {run_a.sha[:12]}, "
             f"recorded {run_a.env.get('recorded_at', 'at an unknown time')}, "
             f"{len(sessions_with_rounds(run_a))} sessions); it was not interleaved with B",
             "B gets no adaptive rounds: they would run fewer configs per process than the "
             "baseline's rounds did, and a config's place in its process moves its latency"]

    def machine_matches() -> list[str]:
        here = {**sides["B"].run.env, **chosen}
        if "device" not in here:  # B's workers never started: no machine reported
            return []
        differences = env_differences(name, baseline_env, here, selection.allow_env_mismatch,
                                      " --resume")
        notes = ["environment differs from the baseline's: " + "; ".join(differences)] \
            if differences else []
        machine = fingerprint_notes(run_a.env, sides["B"].run.env)
        if machine:
            notes.append("measured on another machine than the baseline (latency is "
                         "comparable, but check): " + "; ".join(machine))
        return notes

    result = run_and_compare(
        execution, statistics, bench, sides, run_a, expect, notes, adaptive=False,
        check_measured=machine_matches,
        allowance=lambda: drift_allowance(run_a, sides["B"].run, f"baseline {name!r}",
                                          statistics.gates))
    result.a.baseline = name
    return result


def env_differences(name: str, baseline: dict, here: dict, allowed: bool,
                    rerun: str = "") -> list[str]:
    """The fingerprint keys that differ; InputError unless `allowed` (--allow-env-mismatch)."""
    differences = fingerprint_differences(baseline, here)
    if differences and not allowed:
        raise InputError(f"baseline {name!r} was recorded on another environment ("
                         + "; ".join(differences) + f"); pass --allow-env-mismatch{rerun} "
                         "to compare")
    return differences


