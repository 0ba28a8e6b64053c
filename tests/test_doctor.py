"""doctor: the machine checks take what each component costs from the targets' own
declarations (`needs`, `requires`, `hooks`); doctor names no target. doctor.preflight: the
machine checks `abdiff A..B` makes before it checks anything out (this machine for real for
the reference target; a GPU machine described through doctor's injectable `Machine`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import ClassVar

from abdiff.host.doctor import (
    Machine,
    machine_checks,
    machine_rows,
    missing_for,
    preflight,
    sandbox_check,
)
from abdiff.launchers.spec import LaunchSpec
from abdiff.reports.table import grid
from abdiff.targets import target_class, target_names
from abdiff.targets.base import RoundJob, Target
from abdiff.targets.hooks import Hook

BARE = Machine(which=lambda name: "/usr/bin/mpirun" if name == "mpirun" else None,
               find_spec=lambda name: None, version=lambda name: None, environ={},
               gpus=lambda: [], torch=lambda: ("2.13.0", None))


class GpuOnly(Target):
    name: ClassVar[str] = "gpu-only"
    hooks = (Hook(("bench/run.py",), calls="main", why="the entry point"),)
    needs: ClassVar[dict[str, str]] = {"GPU": "everything", "mpirun": "--launcher mpirun"}
    requires = ("GPU",)

    @classmethod
    def detect(cls, root: Path) -> bool:
        return False

    def round_command(self, checkout: Path, job_path: Path, job: RoundJob) -> LaunchSpec:
        return LaunchSpec(["true"], checkout)


def test_costs_and_requirements_come_from_the_target() -> None:
    checks = {c.name: c for c in machine_checks([GpuOnly], BARE)}
    assert checks["GPU"].rules_out == {"gpu-only": "everything"}
    assert checks["nsys"].rules_out == {"gpu-only": ""} and checks["mpirun"].present
    assert missing_for(list(checks.values()), "gpu-only") == ["GPU"]
    table = grid(*machine_rows(list(checks.values()), ["gpu-only"]), 160)
    assert "without it, gpu-only loses" in table and "(not used)" in table


def test_builtin_targets_declare_what_doctor_asks() -> None:
    checks = machine_checks([target_class(n) for n in target_names()], BARE)
    assert missing_for(checks, "reference") == []  # torch is there; the CPU is enough
    assert missing_for(checks, "trtllm") == ["GPU", "torch with CUDA", "tensorrt_llm"]
    assert missing_for(checks, "command") == []  # the benchmark brings what it needs
    assert all(target_class(n).hooks for n in ("reference", "trtllm"))


def test_hook_problems_checks_the_declared_hooks(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "run.py").write_text("def other():\n    pass\n")
    (problem,) = GpuOnly().hook_problems(tmp_path)
    assert "bench/run.py" in problem
    (tmp_path / "bench" / "run.py").write_text("main()\n")
    assert GpuOnly().hook_problems(tmp_path) == []


def gpu_machine(**overrides) -> Machine:
    """An H200 host with torch+CUDA, tensorrt_llm and mpirun, not inside a Slurm job."""
    tools = {"mpirun": "/usr/bin/mpirun", "srun": "/usr/bin/srun"}
    fields = dict(
        which=tools.get,
        find_spec=lambda name: importlib.util.find_spec("json") if name == "tensorrt_llm"
        else None,
        version=lambda name: "1.2.0" if name == "tensorrt_llm" else None,
        environ={}, gpus=lambda: ["GPU 0: NVIDIA H200"], torch=lambda: ("2.13.0", "12.8"))
    fields.update(overrides)
    return Machine(**fields)


def test_this_machine_runs_the_reference_target_on_the_cpu() -> None:
    assert preflight("reference", "cpu", "local") is None
    assert preflight("reference", "auto", "local") is None


def test_cuda_asked_for_without_a_gpu_names_what_is_missing() -> None:
    cpu_only = gpu_machine(gpus=lambda: [], torch=lambda: ("2.13.0", None))
    line = preflight("reference", "cuda", "local", cpu_only)
    assert line is not None and line.startswith(
        "target reference cannot run here: needs GPU, torch with CUDA (GPU: nvidia-smi finds "
        "none; torch with CUDA: torch sees no CUDA device)")
    assert "--skip-preflight" in line and "\n" not in line
    assert preflight("trtllm", "auto", "local", cpu_only).startswith(
        "target trtllm cannot run here: needs GPU, torch with CUDA (")


def test_the_launcher_and_tensorrt_llm_are_checked() -> None:
    assert preflight("trtllm", "auto", "mpirun", gpu_machine()) is None
    no_mpirun = gpu_machine(which=lambda name: None)
    assert "needs mpirun (mpirun: not on PATH)" in preflight("trtllm", "auto", "mpirun", no_mpirun)
    assert "needs srun (srun: /usr/bin/srun, but SLURM_JOB_ID is not set" in preflight(
        "trtllm", "auto", "srun", gpu_machine())
    login_node = gpu_machine(gpus=lambda: [], torch=lambda: ("2.13.0", None),
                             find_spec=lambda name: None, environ={"SLURM_JOB_ID": "7"})
    assert preflight("trtllm", "auto", "srun", login_node) is None  # the ranks run elsewhere
    assert preflight("trtllm", "auto", "local", login_node) is not None
    no_trtllm = gpu_machine(find_spec=lambda name: None)
    assert "needs tensorrt_llm (tensorrt_llm: not installed)" in preflight(
        "trtllm", "auto", "local", no_trtllm)


def test_doctor_checks_the_target_the_run_would_use(tmp_path: Path) -> None:
    """On the demo, `abdiff doctor main..pr --configs mtp` checks the reference target (as
    the run would), says so first, and ends with what its exit status means."""
    from conftest import git, git_env, run_abdiff, unwrapped

    from abdiff.demo import build_demo_repo

    repo = tmp_path / "demo"
    build_demo_repo(repo)
    done = run_abdiff("doctor", "main..pr", "--configs", "mtp", "--repo", repo, "--cache-dir",
                      tmp_path / "cache", env={**git_env(), "COLUMNS": "100"})
    assert max(map(len, done.stdout.splitlines())) <= 100  # wrapped to the width, not cut
    lines = unwrapped(done.stdout)
    assert lines[0] == (f"abdiff doctor: checking target reference (detected in {repo}: "
                        "tinyllm/tools/layer_wise_benchmarks/runner.py)")
    assert ("suite mtp: target reference runs it on this machine's device (no model files, no "
            "GPU generation to check)") in lines
    assert "PROBLEM" not in done.stdout and "target reference (chosen): can run here" in lines
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[-1] == ("abdiff doctor: target reference: ready: this machine can run it and "
                         "every hook the probe uses is present (exit 0)")
    # a repository without a benchmark, no range: the machine, for the reference target
    plain = tmp_path / "plain"
    plain.mkdir()
    git(plain, "init", "-q")
    done = run_abdiff("doctor", "--repo", plain)
    lines = unwrapped(done.stdout)
    assert lines[0] == (f"abdiff doctor: checking target reference (no benchmark in {plain}; "
                        "pass --target trtllm or --repo PATH to check another)")
    assert lines[-1] == ("abdiff doctor: target reference: this machine can run it (no hooks "
                         "checked: give a benchmark repository and a range) (exit 0)")
    # a target whose worker relies on no hook, with a range: not told to give one
    done = run_abdiff("doctor", "main..pr", "--target", "command", "--repo", repo,
                      "--cache-dir", tmp_path / "cache")
    assert unwrapped(done.stdout)[-1] == ("abdiff doctor: target command: this machine can run "
                                          "it (its worker relies on no hook in the code) (exit 0)")


def test_the_sandbox_is_checked() -> None:
    """This machine (namespaces work for root here) and one that refuses them."""
    reference = [target_class("reference")]
    here = sandbox_check(reference)
    assert here.present and here.detail.startswith("user, mount, pid and network namespaces")
    row = sandbox_check(reference, Machine(sandbox=lambda: "unshare: Operation not permitted"))
    assert not row.present and row.detail == "not here: unshare: Operation not permitted " \
        "(docs/ci.md)"
    checks = [*machine_checks(reference), row]
    assert "isolation: benchmark code" in grid(*machine_rows(checks, ["reference"]), 200)
    assert missing_for(checks, "reference") == []  # measuring goes on, and says so


def test_the_machine_table_fits_every_width() -> None:
    """At 80, 100 and 160 columns no line of the table is wider; where the columns cannot
    fit, one block per component (what each target loses, one line each), nothing cut."""
    checks = [*machine_checks([target_class(n) for n in target_names()], BARE),
              sandbox_check([target_class("reference")])]
    headers, rows = machine_rows(checks, sorted(target_names()))
    words = {w for row in rows for cell in row for w in cell.split()} - {"-"}
    for width in (80, 100, 160):
        table = grid(headers, rows, width, lead=3)
        assert max(map(len, table.splitlines())) <= width, width
        assert words <= set(table.split()), width  # every word there, none cut
    assert "without it, trtllm loses: everything" in grid(headers, rows, 80, lead=3)
    assert grid(headers, rows, 200, lead=3).splitlines()[0].startswith("component  ")
