"""Launchers start worker processes: locally, or under mpirun / srun / torchrun for several
ranks."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType

from abdiff.errors import InputError
from abdiff.launchers.base import Launcher
from abdiff.launchers.runtime import Runtime

# --launcher NAME -> "module:class", imported only when chosen. A new launcher is one module
# and one line here (docs/architecture.md).
LAUNCHERS: Mapping[str, str] = MappingProxyType({
    "local": "abdiff.launchers.local:LocalLauncher",
    "mpirun": "abdiff.launchers.mpirun:MpirunLauncher",
    "srun": "abdiff.launchers.slurm:SrunLauncher",
    "torchrun": "abdiff.launchers.torchrun:TorchrunLauncher",
})


def make_launcher(name: str, np: int | None = None, nodes: int | None = None,
                  srun_container: str | None = None, runtime: Runtime | None = None
                  ) -> Launcher:
    """The launcher for `--launcher NAME --np N --nodes M` (`srun_container`: the target's
    default container name for srun), starting its processes in `runtime` (a measuring
    command's; None: outside any sandbox)."""
    if name not in LAUNCHERS:
        raise InputError(f"--launcher {name!r} is unknown; choose {', '.join(LAUNCHERS)}")
    module, _, cls_name = LAUNCHERS[name].partition(":")
    cls: type[Launcher] = getattr(importlib.import_module(module), cls_name)
    launcher = cls.for_options(np or 1, nodes or 1, srun_container)
    launcher.runtime = runtime
    return launcher


# Each rank leaves a file (launchers may drop the stdout of ranks that exit at once).
HELLO = ("import pathlib, sys; from abdiff.run.protocol import rank_from_env; "
         "pathlib.Path(sys.argv[1], f'hello.rank{rank_from_env()[0]}').touch()")


def launcher_hello(name: str, np: int = 2, timeout_s: float = 120.0) -> str:
    """Start `np` ranks of a one-line Python hello through launcher `name`, for real.

    Returns what happened in one line; raises InfrastructureError with the
    launcher's own reason when not every rank said hello.
    """
    import sys
    import tempfile
    from pathlib import Path

    from abdiff.errors import InfrastructureError
    from abdiff.launchers.process import last_meaningful_line, run_process
    from abdiff.launchers.spec import ABDIFF_ROOT, LaunchSpec

    launcher = make_launcher(name, np)
    with tempfile.TemporaryDirectory(prefix="abdiff-hello-") as tmp:
        logs = Path(tmp)
        # the ranks import abdiff as the workers do: from this tree, installed or not
        spec = launcher.wrap(LaunchSpec([sys.executable, "-c", HELLO, tmp], logs,
                                        {"PYTHONPATH": str(ABDIFF_ROOT)}))
        outcome = run_process(spec, logs, logs / "progress", timeout_s)
        said = {int(p.name.removeprefix("hello.rank")) for p in logs.glob("hello.rank*")}
        if outcome.returncode == 0 and said == set(range(np)):
            return f"{name}: {np} ranks started and said hello ({' '.join(spec.argv[:3])} ...)"
        stderr = outcome.stderr_path.read_text(errors="replace")
        reason = (launcher.launch_failure(stderr) or last_meaningful_line(outcome.stderr_path)
                  or (f"no progress within {timeout_s:g} s" if outcome.timed_out
                      else f"exit code {outcome.returncode}"))
    raise InfrastructureError(f"{name} could not start {np} ranks (ranks that said hello: "
                              f"{sorted(said) or 'none'}): {reason}")
