"""The `command` target: any benchmark executable that writes Google Benchmark or nvbench
JSON, named by the suite:

    target:
      build: [g++, -O2, -o, "{build}/bench", bench.cc, -lbenchmark]   # optional
      command: ["{build}/bench", --benchmark_min_time=0.05]
      format: gbench        # or nvbench
      metrics: [real_time]  # gbench: real_time, cpu_time or counters; one config each
      benchmarks: [...]     # optional: the benchmark names; default: what each side lists

`{build}` is the side's build folder (also $ABDIFF_BUILD_DIR): writable to the benchmark,
kept with the side's caches and keyed by its tree; `build` runs in it once per side per
run, before that side's first round (`prepare`). One round of one side is one process of
the command, run in that side's checkout (worker.py wraps it); a config is one benchmark's
metric (gbench: one name such as `BM_copy/4096`, `BM_copy/4096 items_per_second` for a
further metric; nvbench: one state, `copy[Device=0 Elements=1024]`), and its repetitions
(gbench, `--benchmark_repetitions` = the suite's `run_times`) or samples (nvbench,
`--jsonbin`) in that process are its values. The benchmark's `context` (gbench) or
`devices` (nvbench) are the run's environment facts.

The configs are the suite's `benchmarks`, else what each side lists once built (gbench:
`--benchmark_list_tests`; nvbench: one run), both sides' together.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from abdiff.errors import InputError
from abdiff.launchers.process import guarded, worker_environment
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.sandbox import NO_SANDBOX, Sandbox
from abdiff.launchers.spec import ABDIFF_ROOT, LaunchSpec
from abdiff.run.protocol import RoundJob
from abdiff.store.files import own_folder, read_worker_file, write_atomic
from abdiff.store.validate import Len, from_json
from abdiff.suites import Config, Suite
from abdiff.targets.base import Prepared, Target
from abdiff.targets.command.formats import (
    DEFAULT_METRICS,
    Format,
    benchmark_arguments,
    config_params,
    death_line,
    gbench_id,
    read_report,
)

DISCOVERY_TIMEOUT_S = 600.0
BUILD_TIMEOUT_S = 3600.0
BUILD_PLACEHOLDER = "{build}"
BUILD_VARIABLE = "ABDIFF_BUILD_DIR"
READ_ONLY = "Read-only file system"  # strerror(EROFS): the sandbox's mounts said no


@dataclass(frozen=True)
class CommandOptions:
    """The suite's `target:` block for this target."""

    command: Annotated[list[Annotated[str, Len(1)]], Len(1)]
    format: Format = "gbench"
    benchmarks: Annotated[list[Annotated[str, Len(1)]], Len(1)] | None = None
    build: Annotated[list[Annotated[str, Len(1)]], Len(1)] | None = None
    metrics: Annotated[list[Annotated[str, Len(1)]], Len(1)] = field(
        default_factory=lambda: list(DEFAULT_METRICS))

    @classmethod
    def parse(cls, block: dict[str, Any] | None, where: str) -> CommandOptions:
        if not block:
            raise InputError(f"{where}: the command target needs `target: {{command: [./bench], "
                             "format: gbench}}` in the suite")
        options = from_json(cls, block, f"{where}: target", reject_unknown=True)
        if len(set(options.metrics)) != len(options.metrics):
            raise InputError(f"{where}: target.metrics lists a metric twice")
        if options.format == "nvbench" and options.metrics != list(DEFAULT_METRICS):
            raise InputError(f"{where}: target.metrics is Google Benchmark's (nvbench's one "
                             "metric is its cold GPU time); leave it out")
        return options

    def argv(self, build: Path | None) -> list[str]:
        """The command, `{build}` replaced by the side's build folder."""
        return _with_build(self.command, build)


def _with_build(argv: list[str], build: Path | None) -> list[str]:
    return [a.replace(BUILD_PLACEHOLDER, str(build)) if build is not None else a for a in argv]


def build_environment(build: Path | None) -> dict[str, str]:
    """The benchmark's environment: the worker's own, and $ABDIFF_BUILD_DIR."""
    return {**os.environ, **({BUILD_VARIABLE: str(build)} if build is not None else {})}


def _run_repository_code(argv: list[str], folder: Path, build: Path | None, scratch: Path,
                         timeout: float, sandbox: Sandbox) -> subprocess.CompletedProcess[str]:
    """The repository's code (a build, a listing): started as a worker is, in the run's
    `sandbox` (writable: `scratch`, its HOME and TMPDIR, and the side's `build` folder), with
    a worker's environment; OSError or TimeoutExpired when it cannot."""
    env = worker_environment({BUILD_VARIABLE: str(build)} if build is not None else {},
                             home=scratch)
    env["TMPDIR"] = str(scratch)
    writable = (str(scratch), *([str(build)] if build is not None else []))
    return subprocess.run(guarded(argv, None, confine=sandbox.options(writable)), cwd=folder,
                          capture_output=True, text=True, timeout=timeout, check=False, env=env,
                          stdin=subprocess.DEVNULL)


def _why(done: subprocess.CompletedProcess[str]) -> str:
    line = death_line(done.stderr) or death_line(done.stdout)
    code = (f"signal {-done.returncode}" if done.returncode < 0
            else f"exit code {done.returncode}")
    return code + (f": {line}" if line else "")


def build(options: CommandOptions, checkout: Path, folder: Path, sandbox: Sandbox) -> str | None:
    """Run the suite's `build` in `checkout` into `folder`, in `sandbox`; None when it worked,
    else why not (one line; the whole output is in `folder`/abdiff-build.log)."""
    assert options.build is not None
    own_folder(folder)  # the side's workers can write it: never a link they planted
    log = folder / "abdiff-build.log"
    argv = _with_build(options.build, folder)
    with tempfile.TemporaryDirectory(prefix="abdiff-build-") as scratch:
        try:
            done = _run_repository_code(argv, checkout, folder, Path(scratch), BUILD_TIMEOUT_S,
                                        sandbox)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"target.build {argv[0]} could not run ({exc})"
    # renamed into place: a link the build left at this name is replaced, not followed
    write_atomic(log, f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}")
    if done.returncode == 0:
        return None
    hint = ("; the checkout is read-only to the benchmark's code: build into $ABDIFF_BUILD_DIR "
            "(docs/targets.md)" if READ_ONLY in done.stdout + done.stderr else "")
    return f"target.build failed ({_why(done)}; full output in {log}){hint}"


def list_benchmarks(options: CommandOptions, folder: Path, build: Path | None,
                    sandbox: Sandbox) -> list[str]:
    """The benchmark names the command in `folder` lists (gbench: --benchmark_list_tests,
    nothing timed; nvbench: one run), in its order, run in `sandbox`; InputError saying why
    not."""
    argv = options.argv(build)
    fix = "build it there (target.build), or list the configs in the suite's target.benchmarks"
    if shutil.which(argv[0], path=os.environ.get("PATH")) is None and not os.access(
            folder / argv[0], os.X_OK):
        raise InputError(f"target.command {argv[0]} cannot run in {folder} to list its "
                         f"benchmarks (no such program); {fix}")
    with tempfile.TemporaryDirectory(prefix="abdiff-discover-") as scratch:
        out = Path(scratch) / "benchmark.json"
        listing = options.format == "gbench"
        argv += (["--benchmark_list_tests=true"] if listing
                 else benchmark_arguments(options.format, out, 1, None))
        try:
            done = _run_repository_code(argv, folder, build, Path(scratch), DISCOVERY_TIMEOUT_S,
                                        sandbox)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InputError(f"target.command {argv[0]} cannot run in {folder} to list its "
                             f"benchmarks ({exc}); {fix}") from None
        if listing:
            names = [line.strip() for line in done.stdout.splitlines() if line.strip()]
            if done.returncode != 0 or not names:
                raise InputError(f"target.command {argv[0]} listed no benchmarks in {folder} "
                                 f"(--benchmark_list_tests: {_why(done)}); {fix}")
            return names
        try:
            report, _ = read_report(options.format, read_worker_file(out), [],
                                    folder=out.parent)
        except (OSError, ValueError) as exc:  # FormatError, json's errors
            raise InputError(f"target.command {argv[0]} wrote no {options.format} JSON in "
                             f"{folder} ({_why(done)}; {exc}); {fix}") from None
    if not report.results:
        raise InputError(f"target.command {argv[0]} reported no benchmarks in {folder} "
                         f"({_why(done)})")
    return list(report.results)


def command_configs(options: CommandOptions, names: list[str]) -> list[Config]:
    """A config per benchmark and metric (`gbench_id`); nvbench: per state."""
    if options.format == "nvbench":
        return [Config(n, config_params("nvbench", n)) for n in names]
    return [Config(gbench_id(n, m, options.metrics), config_params("gbench", n, m))
            for n in names for m in options.metrics]


class CommandTarget(Target):
    """A benchmark executable of the repository, one process per round."""

    name: ClassVar[str] = "command"
    # the suite's run_times always: nvbench chooses its own samples, and a gbench process
    # runs every benchmark with one --benchmark_repetitions
    iteration_counts: ClassVar[Literal["config", "job", "fixed"]] = "fixed"
    needs: ClassVar[dict[str, str]] = {
        "GPU": "nvbench benchmarks (they run on CUDA); Google Benchmark ones run on the CPU",
    }

    def __init__(self) -> None:
        # checkout -> (its build folder, what `prepare` made of it): once per side per run
        self.sides: dict[Path, tuple[Path | None, Prepared]] = {}

    @classmethod
    def detect(cls, root: Path) -> bool:
        return False  # the suite names the command: chosen with --target command only

    def configs(self, suite: Suite, repo_root: Path) -> list[Config]:
        options = CommandOptions.parse(suite.target_options, suite.source)
        if suite.configs:
            raise InputError(f"{suite.source}: the command target takes its configs from the "
                             "benchmark (or target.benchmarks), not from a 'matrix'")
        if options.benchmarks is None:
            return []  # what each side lists, once built (prepare)
        if len(set(options.benchmarks)) != len(options.benchmarks):
            raise InputError(f"{suite.source}: target.benchmarks lists a benchmark twice")
        return command_configs(options, options.benchmarks)

    def prepare(self, suite: Suite, checkout: Path, folder: Path,
                runtime: Runtime | None) -> Prepared:
        known = self.sides.get(Path(checkout).resolve())
        if known is not None:  # A/A, or a bisect's commit met again: built once this run
            return known[1]
        options = CommandOptions.parse(suite.target_options, suite.source)
        uses_build = options.build is not None or any(BUILD_PLACEHOLDER in a
                                                       for a in options.command)
        build_dir = folder if uses_build else None
        if build_dir is not None:
            build_dir.mkdir(parents=True, exist_ok=True)
        sandbox = runtime.sandbox if runtime is not None else NO_SANDBOX
        failure = build(options, checkout, folder, sandbox) if options.build is not None \
            else None
        listed = None
        if failure is None and options.benchmarks is None:
            try:
                listed = command_configs(options, list_benchmarks(options, checkout, build_dir,
                                                                  sandbox))
            except InputError as exc:
                failure = str(exc)
        prepared = Prepared(listed, failure)
        self.sides[Path(checkout).resolve()] = (build_dir, prepared)
        return prepared

    def worker_env(self) -> dict[str, str]:
        # abdiff's own folder, so the worker imports this abdiff also where it is not
        # installed (run from a source tree): the allow-listed environment drops PYTHONPATH
        return {"PYTHONPATH": str(ABDIFF_ROOT)}

    def round_command(self, checkout: Path, job_path: Path, job: RoundJob) -> LaunchSpec:
        if job.ranks > 1:
            raise InputError(f"the command target runs one benchmark process per round, not "
                             f"{job.ranks} ranks; leave out --np (and the suite's tp)")
        build_dir, prepared = self.sides.get(Path(checkout).resolve(), (None, Prepared()))
        argv = [sys.executable, "-m", "abdiff.targets.command.worker", str(job_path),
                str(build_dir or ""), *([prepared.failure] if prepared.failure else [])]
        return LaunchSpec(argv, Path(checkout), self.worker_env())
