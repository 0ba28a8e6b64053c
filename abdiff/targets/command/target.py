"""The `command` target: any benchmark executable that writes Google Benchmark or nvbench
JSON, named by the suite:

    target:
      command: [./build/bench_gemm, --benchmark_min_time=0.05s]
      format: gbench        # or nvbench
      benchmarks: [...]     # optional: the config ids; default: what one run reports

One round of one side is one process of the command, run in that side's checkout
(worker.py wraps it); a config is one benchmark (gbench: one name such as
`BM_copy/4096`; nvbench: one state, `copy[Device=0 Elements=1024]`), and its
repetitions (gbench, `--benchmark_repetitions` = the suite's `run_times`) or samples
(nvbench, `--jsonbin`) in that process are its latencies. The benchmark's `context`
(gbench) or `devices` (nvbench) are the run's environment facts.

The configs are decided once, before anything is checked out: the suite's
`benchmarks`, else what one run of the command in the repository's working tree
reports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

from abdiff.errors import InputError
from abdiff.launchers.process import guarded, worker_environment
from abdiff.run.protocol import RoundJob
from abdiff.store.validate import Len, from_json
from abdiff.suites import Config, Suite
from abdiff.targets.base import ABDIFF_ROOT, LaunchSpec, Target
from abdiff.targets.command.formats import (
    Format,
    benchmark_arguments,
    config_params,
    read_report,
)

DISCOVERY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class CommandOptions:
    """The suite's `target:` block for this target."""

    command: Annotated[list[Annotated[str, Len(1)]], Len(1)]
    format: Format = "gbench"
    benchmarks: Annotated[list[Annotated[str, Len(1)]], Len(1)] | None = None

    @classmethod
    def parse(cls, block: dict[str, Any] | None, where: str) -> CommandOptions:
        if not block:
            raise InputError(f"{where}: the command target needs `target: {{command: [./bench], "
                             "format: gbench}}` in the suite")
        return from_json(cls, block, f"{where}: target", reject_unknown=True)


def discover(options: CommandOptions, folder: Path, where: str) -> list[str]:
    """The config ids one run of the command in `folder` reports (gbench: one repetition),
    in the order it ran them; with the environment a worker gets (launchers/process.py)."""
    with tempfile.TemporaryDirectory(prefix="abdiff-discover-") as scratch:
        out = Path(scratch) / "benchmark.json"
        argv = [*options.command, *benchmark_arguments(options.format, out, 1, None)]
        fix = "build it there, or list the configs in the suite's target.benchmarks"
        if shutil.which(argv[0], path=os.environ.get("PATH")) is None and not os.access(
                folder / argv[0], os.X_OK):
            raise InputError(f"{where}: target.command {options.command[0]} cannot run in "
                             f"{folder} to list its benchmarks (no such program); {fix}")
        try:
            # the repository's code: started as a worker is, in the sandbox in force
            done = subprocess.run(guarded(argv, None), cwd=folder, capture_output=True,
                                  text=True, timeout=DISCOVERY_TIMEOUT_S, check=False,
                                  env=worker_environment({}, home=Path(scratch)),
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InputError(f"{where}: target.command {options.command[0]} cannot run in "
                             f"{folder} to list its benchmarks ({exc}); {fix}") from None
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        why = f"exit code {done.returncode}" + (f": {lines[-1].strip()}" if lines else "")
        try:
            document = json.loads(out.read_text(encoding="utf-8"))
            report = read_report(options.format, document, [], out.parent)
        except (OSError, ValueError) as exc:  # FormatError, json's errors
            raise InputError(f"{where}: target.command {options.command[0]} wrote no "
                             f"{options.format} JSON in {folder} ({why}; {exc}); {fix}") from None
    if not report.results:
        raise InputError(f"{where}: target.command {options.command[0]} reported no "
                         f"benchmarks in {folder} ({why})")
    return list(report.results)


class CommandTarget(Target):
    """A benchmark executable of the repository, one process per round."""

    name: ClassVar[str] = "command"
    needs: ClassVar[dict[str, str]] = {
        "GPU": "nvbench benchmarks (they run on CUDA); Google Benchmark ones run on the CPU",
    }

    @classmethod
    def detect(cls, root: Path) -> bool:
        return False  # the suite names the command: chosen with --target command only

    def configs(self, suite: Suite, repo_root: Path) -> list[Config]:
        options = CommandOptions.parse(suite.target_options, suite.source)
        if suite.configs:
            raise InputError(f"{suite.source}: the command target takes its configs from the "
                             "benchmark (or target.benchmarks), not from a 'matrix'")
        ids = options.benchmarks or discover(options, repo_root, suite.source)
        if len(set(ids)) != len(ids):
            raise InputError(f"{suite.source}: target.benchmarks lists a benchmark twice")
        return [Config(cid, config_params(options.format, cid)) for cid in ids]

    def worker_env(self) -> dict[str, str]:
        # abdiff's own folder, so the worker imports this abdiff also where it is not
        # installed (run from a source tree): the allow-listed environment drops PYTHONPATH
        return {"PYTHONPATH": str(ABDIFF_ROOT)}

    def round_command(self, checkout: Path, job_path: Path, job: RoundJob) -> LaunchSpec:
        if job.ranks > 1:
            raise InputError(f"the command target runs one benchmark process per round, not "
                             f"{job.ranks} ranks; leave out --np (and the suite's tp)")
        argv = [sys.executable, "-m", "abdiff.targets.command.worker", str(job_path)]
        return LaunchSpec(argv, Path(checkout), self.worker_env())
