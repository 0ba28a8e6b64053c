"""A fake target for fast tests of rounds, schedule and resume: no torch, no subprocess.

Its "worker" runs in the test's own process (FakeLauncher.run takes the place of
run_process) and writes the same record log a real worker writes (protocol.py), so
rounds.py and schedule.py run unchanged. What the benchmark does for one config in
one round is a function of (side checkout name, config id, round):

- a number: ok, with that latency in µs (the job's count of iterations for that config,
  RoundJob.run_times_of, around it);
- "raise": the config fails with an exception, the worker goes on;
- "abort": the worker process dies of SIGABRT in that config;
- "abort-in-capture": timed (CAPTURE_ABORT_US), then the worker dies of SIGABRT while
  capturing that config's kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from abdiff.launchers.base import Launcher
from abdiff.launchers.process import ProcessOutcome
from abdiff.launchers.spec import LaunchSpec
from abdiff.run.devices import Device
from abdiff.run.protocol import KernelProfile, RecordWriter, RoundJob
from abdiff.run.rounds import RoundSettings
from abdiff.run.schedule import Plan, RunState, SideRun, empty_run, run_plan
from abdiff.store.records import RoundRecord
from abdiff.suites import Config
from abdiff.targets.base import Target

Behaviour = Callable[[str, str, int], "float | str"]
SIGABRT_EXIT = -6
CAPTURE_ABORT_US = 100.0


class FakeTarget(Target):
    name: ClassVar[str] = "fake"
    capture_pass: ClassVar[bool] = True
    iteration_counts: ClassVar[Literal["config", "job", "fixed"]] = "config"

    @classmethod
    def detect(cls, root: Path) -> bool:
        return False

    def round_command(self, checkout: Path, job_path: Path, job: RoundJob) -> LaunchSpec:
        return LaunchSpec(["fake-worker", str(job_path)], Path(checkout))


@dataclass
class FakeLauncher(Launcher):
    behaviour: Behaviour
    workers: list[tuple[str, int, list[str]]] = field(default_factory=list)  # side, round, ids
    # --devices: the CPU set each worker was given (side, round, cpus), and how much slower
    # a CPU set makes the benchmark (cpus -> factor; 1 when not named)
    pinned: list[tuple[str, int, tuple[int, ...]]] = field(default_factory=list)
    slower_on: dict[tuple[int, ...], float] = field(default_factory=dict)
    # a GPU worker's kernel round: names from the timed graphs, times only when the job
    # asks for them (RoundJob.kernel_times)
    graph_named: bool = False
    name: ClassVar[str] = "in-process"

    @classmethod
    def for_options(cls, ranks: int, nodes: int, srun_container: str | None) -> FakeLauncher:
        return cls(lambda side, config_id, round_number: 100.0)  # every round 100 us

    def wrap(self, spec: LaunchSpec) -> LaunchSpec:
        return spec

    def run(self, spec: LaunchSpec, log_dir: Path, progress_path: Path,
            timeout_s: float | None, pass_env: list[str] | None = None,
            max_memory_bytes: int | None = None) -> ProcessOutcome:
        job = RoundJob.read(Path(spec.argv[1]))
        side = spec.cwd.name
        self.workers.append((side, job.round, [c["id"] for c in job.configs]))
        self.pinned.append((side, job.round, spec.cpus))
        factor = self.slower_on.get(spec.cpus, 1.0)
        stderr = log_dir / "stderr.txt"
        stderr.write_text("")
        writer = RecordWriter(Path(job.record_path))
        writer.env({"device": "cpu", "python": "fake", "cpu_model": "fake"})
        try:
            for config in job.configs:
                writer.start(config["id"])
                what = self.behaviour(side, config["id"], job.round)
                if what == "abort":
                    stderr.write_text("Fatal Python error: Aborted\n")
                    return ProcessOutcome(SIGABRT_EXIT, False, stderr)
                latency = CAPTURE_ABORT_US if what == "abort-in-capture" else what
                record = (RoundRecord("failed", "RuntimeError: boom", round=job.round)
                          if isinstance(latency, str) else
                          RoundRecord("ok", None,
                                      [factor * latency * (1 + 0.001 * i)
                                       for i in range(job.run_times_of(config))],
                                      {"side": side}, {}, job.round))
                writer.done(config["id"], record)
            if job.profile_kernels:  # the capture pass, after every config was timed
                for config in [*job.configs, *job.capture_only]:
                    if self.behaviour(side, config["id"], job.round) == "abort-in-capture":
                        stderr.write_text("Fatal Python error: Aborted\n")
                        return ProcessOutcome(SIGABRT_EXIT, False, stderr)
                    timed = job.kernel_times or not self.graph_named
                    writer.kernels(config["id"], KernelProfile({"kernel": 1},
                                                               {"kernel": 2.5} if timed else {}))
        finally:
            writer.close()
        return ProcessOutcome(0, False, stderr)


CONFIGS = [Config(f"GEN-TRTLLM-bs{b}-q1-kv64", {"batch_size": b}) for b in (1, 2, 3)]
SETTINGS = RoundSettings(facts=[], warmup_times=0, run_times=5, timeout_s=None)


def fake_measurement(state_dir: Path, launcher: FakeLauncher, plan: Plan, *,
                     undecided: Callable[[], dict[str, bool]] | None = None, resume: bool = False,
                     seed: int | None = 7, configs: list[Config] = CONFIGS,
                     devices: list[Device] | None = None,
                     settings: RoundSettings = SETTINGS,
                     wanting_times: Callable[[], set[str]] | None = None) -> RunState:
    """Both sides (checkouts named A and B) measured with the fake target."""
    sides = {name: SideRun(state_dir.parent / name,
                           empty_run(name.lower(), name * 40, "fake", "s", configs, {}))
             for name in "AB"}
    run_state = RunState.open(state_dir, sides, resume, seed)
    return run_plan(run_state, configs, FakeTarget(), launcher, settings, plan, undecided,
                   quiet=True, devices=devices, wanting_times=wanting_times)
