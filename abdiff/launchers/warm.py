"""Warm worker starts: how the local launcher's workers skip Python's start and the
torch import (`--prestart`), which cost a second or more per worker process.

- "ahead" (standby.py): the next worker starts while the current one measures;
  it competes for a core with the timed work, so it needs spare cores.
- "fork" (forkserver.py): one process per checkout imports torch once and forks
  each of that side's workers; it sleeps while workers measure.
- "cold": every worker starts from nothing.

Both implement one interface, `WorkerPool` (pool.py), and do not know each
other; this module is the only one that knows them all (it picks one by name).
"""

from __future__ import annotations

import atexit
import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from abdiff.launchers.base import Launcher
from abdiff.launchers.forkserver import ForkServers
from abdiff.launchers.pool import WorkerPool
from abdiff.launchers.standby import StandbyPool

# (folder, pass_env, max_memory_bytes, own_folder) -> the pool
PoolFactory = Callable[[Path, list[str] | None, int | None, bool], WorkerPool]
POOLS: dict[str, PoolFactory] = {"ahead": StandbyPool, "fork": ForkServers}


def make_pool(mode: str, folder: Path, pass_env: list[str] | None,
              max_memory_bytes: int | None, own_folder: bool = False) -> WorkerPool:
    return POOLS[mode](folder, pass_env, max_memory_bytes, own_folder)


@contextlib.contextmanager
def standing_by(launcher: Launcher, mode: str, folder: Path,
                pass_env: list[str] | None, max_memory_bytes: int | None
                ) -> Iterator[WorkerPool | None]:
    """Give `launcher` a pool for the duration of a measurement (where asked and it can);
    a pool the launcher already holds (`prime`) is used and ended with it."""
    if mode not in POOLS or not launcher.can_prestart:
        yield None
        return
    pool = launcher.standby or make_pool(mode, folder, pass_env, max_memory_bytes)
    launcher.standby = pool
    try:
        yield pool
    finally:
        launcher.standby = None
        pool.close()


def prime(launcher: Launcher, mode: str, under: Path, env: dict[str, str] | None,
          pass_env: list[str] | None, max_memory_bytes: int | None, sides: int = 1) -> None:
    """Start the pool's first process now (a fork server per side that will measure),
    before the run's checks and checkouts, so that their torch imports overlap them (where
    a warm mode is chosen and the target's worker environment is known), in a folder of
    its own under `under`; the first measurement's `standing_by` takes the pool over and
    ends it."""
    if mode in POOLS and launcher.can_prestart and env is not None and launcher.standby is None:
        under.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"abdiff-{mode}-", dir=under))
        pool = make_pool(mode, folder, pass_env, max_memory_bytes, own_folder=True)
        for _ in range(sides):
            pool.start_waiting(env)
        launcher.standby = pool
        atexit.register(pool.close)  # a run that stops before measuring leaves nothing
