"""What a launcher is given to start: a command (argv, folder, environment), and where
abdiff itself lives so that a worker imports this abdiff."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from abdiff.store.sides import WorkerFolders

# The folder holding the abdiff package: on a worker's PYTHONPATH, so it imports this
# abdiff also where abdiff is not installed (run from a source tree)
ABDIFF_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LaunchSpec:
    """A command for a launcher: argv (never a shell string), working folder, extra env."""

    argv: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    cpus: tuple[int, ...] = ()  # --devices on a CPU host: the CPU set it runs on (all: empty)
    # the folders its processes may write and keep (a round's worker; None: a process of
    # abdiff's own, which gets a fresh HOME and writes nothing of the cache)
    folders: WorkerFolders | None = None
