"""`abdiff doctor`: what this machine has, what each missing piece rules out, and hook checks.

Two independent questions:

- the machine: GPU, torch (with CUDA), tensorrt_llm and its version,
  deep_gemm, nsys, mpirun, srun. Each target declares what the absence of
  each rules out (`Target.needs`) and what it cannot run without
  (`Target.requires`); this module only looks. Nothing heavy is imported:
  tensorrt_llm is located and versioned through package metadata, never
  imported (importing it loads CUDA libraries and takes seconds to minutes);
- the code: in one or two checkouts, whether every hook the target's probe
  relies on still exists (abdiff/targets/hooks.py, ast only). This needs no GPU, so a
  CPU-only CI machine can tell a PR author that a rename broke the probe.

Exit codes: 0 when the chosen target can run here and every hook holds; 1
when a hook is missing in a checkout (a code problem, reported first); 3
when the hooks hold but this machine lacks something the target needs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from abdiff.host.clocks import all_pinning
from abdiff.launchers import sandbox
from abdiff.launchers.guard import Confinement
from abdiff.targets import target_class
from abdiff.targets.base import Target


@dataclass
class Check:
    """One component: present or not, what was found, and per target what its absence costs."""

    name: str
    present: bool
    detail: str
    rules_out: dict[str, str]  # target -> what cannot happen without it ("" = not needed)
    required_by: tuple[str, ...] = ()


# what every target loses without the sandbox (launchers/sandbox.py)
WITHOUT_SANDBOX = ("isolation: benchmark code can write .git and the checkouts, and read "
                   "abdiff's key for stored rounds")


@dataclass
class Machine:
    """What the checks look at; injectable so tests need no GPU and no installed tools."""

    which: Callable[[str], str | None] = shutil.which
    find_spec: Callable[[str], object | None] = importlib.util.find_spec
    version: Callable[[str], str | None] = field(default=lambda name: _version(name))
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    gpus: Callable[[], list[str]] = field(default=lambda: _gpus())
    torch: Callable[[], tuple[str | None, str | None]] = field(default=lambda: _torch())
    clocks: Callable[[], tuple[list[str], str | None]] = field(default=lambda: all_pinning())
    # why benchmark code cannot run in namespaces of its own here, None when it can
    sandbox: Callable[[], str | None] = field(default=lambda: sandbox.trial(Confinement()))


def _version(name: str) -> str | None:
    for dist in (name, name.replace("_", "-")):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _gpus() -> list[str]:
    """GPU names from nvidia-smi (no CUDA context is created)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.startswith("GPU")]


def _torch() -> tuple[str | None, str | None]:
    """(torch version, CUDA version when torch can use a GPU)."""
    try:
        import torch
    except ImportError:
        return None, None
    cuda = torch.version.cuda if torch.cuda.is_available() else None
    return torch.__version__, cuda


def _spec_origin(machine: Machine, name: str) -> str | None:
    try:
        spec = machine.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = getattr(spec, "submodule_search_locations", None)
    if locations:
        return str(next(iter(locations)))
    return getattr(spec, "origin", None)


def machine_checks(targets: list[type[Target]], machine: Machine | None = None) -> list[Check]:
    """Every component a target may use, with what each target says its absence rules out
    (`Target.needs`, `Target.requires`)."""
    m = machine or Machine()
    found: list[tuple[str, bool, str]] = []
    gpus = m.gpus()
    found.append(("GPU", bool(gpus), "; ".join(gpus) or "nvidia-smi finds none"))
    if gpus:  # without a GPU there are no clocks to read
        pinning, why = m.clocks()
        found.append(("GPU clocks", bool(pinning), "; ".join(pinning) or why or "no GPU"))
    torch_version, cuda = m.torch()
    found.append(("torch", torch_version is not None, torch_version or "not importable"))
    found.append(("torch with CUDA", cuda is not None,
                  f"CUDA {cuda}" if cuda else "torch sees no CUDA device"))
    trtllm_dir = _spec_origin(m, "tensorrt_llm")
    trtllm_version = m.version("tensorrt_llm")
    found.append(("tensorrt_llm", trtllm_dir is not None,
                  f"{trtllm_version or 'unknown version'} at {trtllm_dir}" if trtllm_dir
                  else "not installed"))
    deep_gemm = _spec_origin(m, "deep_gemm")
    if deep_gemm is None and trtllm_dir and Path(trtllm_dir, "deep_gemm").is_dir():
        deep_gemm = str(Path(trtllm_dir, "deep_gemm"))
    found.append(("deep_gemm", deep_gemm is not None, deep_gemm or "not found"))
    for tool in ("nsys", "mpirun"):
        path = m.which(tool)
        found.append((tool, path is not None, path or "not on PATH"))
    srun = m.which("srun")
    why = ("srun is not on PATH" if srun is None else
           None if m.environ.get("SLURM_JOB_ID") else
           f"{srun}, but SLURM_JOB_ID is not set (not inside a Slurm allocation)")
    found.append(("srun", why is None,
                  f"{srun} in job {m.environ.get('SLURM_JOB_ID')}" if why is None else why))
    return [Check(name, present, detail, {t.name: t.needs.get(name, "") for t in targets},
                  tuple(t.name for t in targets if name in t.requires))
            for name, present, detail in found]


def sandbox_check(targets: list[type[Target]], machine: Machine | None = None) -> Check:
    """Whether benchmark code can run in namespaces of its own here (a trial start, for
    real): doctor's row; no target needs it to run, every target loses isolation."""
    why_not = (machine or Machine()).sandbox()
    return Check("sandbox", why_not is None,
                 f"{sandbox.NAMESPACES}: --sandbox auto runs benchmarks in them"
                 if why_not is None else f"not here: {why_not} (docs/ci.md)",
                 {t.name: WITHOUT_SANDBOX for t in targets})


def missing_for(checks: list[Check], target: str) -> list[str]:
    """Names of the components `target` cannot run without that are missing."""
    return [c.name for c in checks if target in c.required_by and not c.present]


def _torch_located() -> tuple[str | None, str | None]:
    """(torch version, None) from package metadata: importing torch costs seconds, and a
    preflight that needs no CUDA need not pay for it."""
    return (_version("torch") if importlib.util.find_spec("torch") else None), None


def preflight(target: str, device: str, launcher: str,
              machine: Machine | None = None) -> str | None:
    """The machine checks of `abdiff doctor` for one run, before anything is checked out:
    None when it can run here, else doctor's line saying what is missing.

    Beyond what the target always needs: torch with CUDA when `--device cuda` asks
    for it, and the launcher's command (mpirun, srun in an allocation). Under srun the
    ranks run on the allocation's nodes, not here (a login node without CUDA may launch
    them), so only srun itself is checked."""
    target_cls = target_class(target)
    ranks_run_here = launcher != "srun"
    needs_cuda = ranks_run_here and (
        device == "cuda" or (device == "auto" and "GPU" in target_cls.requires))
    if machine is None:
        machine = Machine() if needs_cuda else Machine(torch=_torch_located)
    checks = machine_checks([target_cls], machine)
    missing = missing_for(checks, target) if ranks_run_here else []
    wanted = (["GPU", "torch with CUDA"] if needs_cuda else []) + \
        ([launcher] if launcher in ("mpirun", "srun") else [])
    missing += [c.name for c in checks if c.name in wanted and not c.present
                and c.name not in missing]
    if not missing:
        return None
    details = "; ".join(f"{c.name}: {c.detail}" for c in checks if c.name in missing)
    return (f"target {target} cannot run here: needs {', '.join(missing)} ({details}); "
            "`abdiff doctor` says what each rules out, --skip-preflight measures anyway")


def machine_rows(checks: list[Check], targets: list[str]) -> tuple[list[str], list[list[str]]]:
    """The machine table's headers and rows: per component, whether it is there, what was
    found, and what each target loses without it (`-` when it is there)."""
    rows = []
    for check in checks:
        costs = [("-" if check.present else (check.rules_out.get(t) or "(not used)"))
                 for t in targets]
        rows.append([check.name, "ok" if check.present else "MISSING", check.detail, *costs])
    headers = ["component", "status", "found", *(f"without it, {t} loses" for t in targets)]
    return headers, rows


@dataclass
class HookReport:
    """The hook problems of one checkout."""

    label: str
    path: Path
    problems: list[str]


def hooks_table(reports: list[HookReport], total: int | None) -> str:
    lines = []
    for report in reports:
        if not report.problems:
            count = f"all {total} hooks" if total else "all hooks"
            lines.append(f"{report.label}: {count} present ({report.path})")
            continue
        lines.append(f"{report.label}: {len(report.problems)} hook(s) missing ({report.path})")
        lines += [f"  - {problem}" for problem in report.problems]
    return "\n".join(lines)


def exit_code(checks: list[Check], target: str, reports: list[HookReport]) -> int:
    if any(r.problems for r in reports):
        return 1
    return 3 if missing_for(checks, target) else 0
