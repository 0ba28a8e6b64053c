"""Warm worker starts: how the local launcher's workers skip Python's start and the
torch import (`--prestart`), which cost a second or more per worker process.

- "standby" (standby.py, `--prestart on`): the next worker starts while the current one
  measures; it competes for a core with the timed work, so it needs spare cores.
- "fork" (forkserver.py): one process per checkout imports torch once and forks
  each of that side's workers; it sleeps while workers measure.
- "cold": every worker starts from nothing.

Both implement one interface, `WorkerPool` (pool.py), and do not know each
other; this module is the only one that knows them all (it picks one by name). The pool
in use is the measurement's runtime's (runtime.py: `Runtime.pool`), which ends it.

Words, one per thing: a *pool* is where warm starts come from (either kind); *standby*
is `--prestart on`'s kind; a process *started ahead* is any pool's process that waits
for its job (a fork server, a standby worker: `start_process(ahead=True)`).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

from abdiff.launchers.base import Launcher
from abdiff.launchers.forkserver import ForkServers
from abdiff.launchers.pool import WorkerPool
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.standby import StandbyPool

# (folder, runtime, own_folder) -> the pool
PoolFactory = Callable[[Path, Runtime, bool], WorkerPool]
POOLS: Mapping[str, PoolFactory] = MappingProxyType({"standby": StandbyPool,
                                                     "fork": ForkServers})


def make_pool(mode: str, folder: Path, runtime: Runtime, own_folder: bool = False) -> WorkerPool:
    return POOLS[mode](folder, runtime, own_folder)


@contextlib.contextmanager
def pooled(launcher: Launcher, mode: str, folder: Path) -> Iterator[WorkerPool | None]:
    """Give `launcher`'s runtime a pool for the duration of a measurement (where asked and
    it can); a pool the runtime already holds (`prime`) is used and ended with it."""
    runtime = launcher.runtime
    if mode not in POOLS or not launcher.can_prestart or runtime is None:
        yield None
        return
    pool = runtime.pool or make_pool(mode, folder, runtime)
    runtime.pool = pool
    try:
        yield pool
    finally:
        runtime.pool = None
        pool.close()


def prime(launcher: Launcher, mode: str, under: Path, env: dict[str, str] | None,
          sides: int = 1) -> None:
    """Start the pool's first process now (a fork server per side that will measure),
    before the run's checks and checkouts, so that their torch imports overlap them (where
    a warm mode is chosen and the target's worker environment is known), in a folder of
    its own under `under`; the first measurement's `pooled` takes the pool over and ends
    it, or the runtime's close when the run stops before measuring."""
    runtime = launcher.runtime
    if mode in POOLS and launcher.can_prestart and env is not None and runtime is not None \
            and runtime.pool is None:
        under.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"abdiff-{mode}-", dir=under))
        pool = make_pool(mode, folder, runtime, own_folder=True)
        runtime.pool = pool
        for _ in range(sides):
            pool.start_waiting(env)
