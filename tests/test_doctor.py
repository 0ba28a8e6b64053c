"""doctor: the machine checks take what each component costs from the targets' own
declarations (`needs`, `requires`, `hooks`); doctor names no target."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from abdiff.doctor import Machine, machine_checks, machine_table, missing_for
from abdiff.targets import TARGET_CLASSES, target_class
from abdiff.targets.base import LaunchSpec, RoundJob, Target
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
    table = machine_table(list(checks.values()), ["gpu-only"])
    assert "without it, gpu-only loses" in table and "(not used)" in table


def test_builtin_targets_declare_what_doctor_asks() -> None:
    checks = machine_checks([target_class(n) for n in TARGET_CLASSES], BARE)
    assert missing_for(checks, "reference") == []  # torch is there; the CPU is enough
    assert missing_for(checks, "trtllm") == ["GPU", "torch with CUDA", "tensorrt_llm"]
    assert all(target_class(n).hooks for n in TARGET_CLASSES)


def test_hook_problems_checks_the_declared_hooks(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "run.py").write_text("def other():\n    pass\n")
    (problem,) = GpuOnly().hook_problems(tmp_path)
    assert "bench/run.py" in problem
    (tmp_path / "bench" / "run.py").write_text("main()\n")
    assert GpuOnly().hook_problems(tmp_path) == []
