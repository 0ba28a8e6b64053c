"""launchers/standby.py and standby_worker.py: a worker started ahead of its job becomes
that job as if it had been started in the job's folder; whatever the pool cannot hand
over starts cold, as without it."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from abdiff.launchers.local import LocalLauncher
from abdiff.launchers.process import ProcessOutcome, run_process
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.spec import ABDIFF_ROOT, LaunchSpec
from abdiff.launchers.standby import StandbyPool
from abdiff.launchers.warm import pooled, prime
from abdiff.run.session import worker_start

REPORT = """
import json, os, sys
print(json.dumps({"cwd": os.getcwd(), "path0": sys.path[0], "argv": sys.argv[1:],
                  "pid": os.getpid(), "torch": "torch" in sys.modules}))
print("to stderr", file=sys.stderr)
"""


def checkout(tmp_path: Path, name: str) -> Path:
    """A folder holding the job's module, importable only from there (sys.path[0])."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "report_job.py").write_text(REPORT)
    return folder


def job(folder: Path, env: dict[str, str] | None = None) -> LaunchSpec:
    return LaunchSpec([sys.executable, "-m", "report_job", "one", "two"], folder,
                      env if env is not None else {"PYTHONPATH": str(ABDIFF_ROOT)})


def run(pool: StandbyPool, spec: LaunchSpec, log: Path) -> ProcessOutcome:
    return run_process(spec, log, log / "progress", 60, runtime=Runtime(pool=pool))


def report(log: Path) -> dict:
    return json.loads((log / "stdout.txt").read_text())


@pytest.fixture
def pool(tmp_path: Path):
    pool = StandbyPool(tmp_path / "standby")
    yield pool
    pool.close()


@pytest.mark.slow
def test_next_job_runs_in_the_process_started_ahead(tmp_path: Path, pool: StandbyPool) -> None:
    a, b = checkout(tmp_path, "a"), checkout(tmp_path, "b")
    assert run(pool, job(a), tmp_path / "w0").returncode == 0
    assert (pool.started, pool.taken) == (1, 0)  # the first job starts cold; one waits now
    waiting = pool.waiting.proc.pid
    assert run(pool, job(b), tmp_path / "w1").returncode == 0
    assert (pool.started, pool.taken) == (2, 1)
    cold, ahead = report(tmp_path / "w0"), report(tmp_path / "w1")
    assert cold == {"cwd": str(a), "path0": str(a), "argv": ["one", "two"], "pid": cold["pid"],
                    "torch": False}
    # the waiting process imported torch before the job, then ran it from b, as if started there
    assert ahead == {"cwd": str(b), "path0": str(b), "argv": ["one", "two"], "pid": waiting,
                     "torch": True}
    assert (tmp_path / "w1" / "stderr.txt").read_text() == "to stderr\n"


def test_a_waiting_process_that_died_is_reported_and_the_rest_start_cold(
        tmp_path: Path, pool: StandbyPool) -> None:
    a = checkout(tmp_path, "a")
    run(pool, job(a), tmp_path / "w0")
    dead = pool.waiting.proc
    os.killpg(dead.pid, signal.SIGKILL)
    dead.wait()
    assert run(pool, job(a), tmp_path / "w1").returncode == 0
    assert report(tmp_path / "w1")["pid"] != dead.pid
    assert pool.failure.startswith("a worker started ahead ended before its job (exit -9")
    assert pool.waiting is None and pool.taken == 0
    run(pool, job(a), tmp_path / "w2")
    assert pool.started == 1  # no new process waits once one died


def test_a_job_it_cannot_become_starts_cold(tmp_path: Path, pool: StandbyPool) -> None:
    spec = LaunchSpec(["sh", "-c", "echo cold"], tmp_path)
    assert run(pool, spec, tmp_path / "w0").returncode == 0
    assert (tmp_path / "w0" / "stdout.txt").read_text() == "cold\n"
    assert pool.started == 0 and pool.waiting is None


def test_another_environment_is_not_handed_to_the_waiting_process(tmp_path: Path,
                                                                  pool: StandbyPool) -> None:
    a = checkout(tmp_path, "a")
    run(pool, job(a), tmp_path / "w0")
    first = pool.waiting.proc
    other = {"PYTHONPATH": str(ABDIFF_ROOT), "ABDIFF_OTHER": "1"}
    assert run(pool, job(a, other), tmp_path / "w1").returncode == 0
    assert report(tmp_path / "w1")["pid"] != first.pid and first.poll() is not None
    assert pool.taken == 0 and pool.waiting_env == other


@pytest.mark.slow
def test_a_primed_pool_serves_the_first_job_too(tmp_path: Path) -> None:
    launcher = LocalLauncher()
    launcher.runtime = Runtime()
    prime(launcher, "standby", tmp_path / "standby", {"PYTHONPATH": str(ABDIFF_ROOT)})
    pool = launcher.pool
    assert isinstance(pool, StandbyPool) and pool.waiting is not None and pool.started == 1
    with pooled(launcher, "standby", tmp_path / "unused") as taken:
        assert taken is pool
        assert run(pool, job(checkout(tmp_path, "a")), tmp_path / "w0").returncode == 0
        assert (pool.started, pool.taken) == (2, 1)
    assert launcher.pool is None and pool.waiting is None
    assert not (tmp_path / "unused").exists() and not any((tmp_path / "standby").iterdir())


def test_a_primed_pool_no_run_took_is_ended(tmp_path: Path) -> None:
    """A run that stops before measuring (an error, Ctrl-C after the set-up): the command's
    runtime ends the pool it primed, and its folder."""
    launcher = LocalLauncher()
    with Runtime() as runtime:
        launcher.runtime = runtime
        prime(launcher, "standby", tmp_path / "standby", {"PYTHONPATH": str(ABDIFF_ROOT)})
        assert isinstance(launcher.pool, StandbyPool) and launcher.pool.waiting is not None
        waiting = launcher.pool.waiting.proc
    assert waiting.wait(timeout=30) is not None
    assert launcher.pool is None and not any((tmp_path / "standby").iterdir())
    # off, or a target whose workers' environment differs from job to job: nothing starts
    prime(launcher, "cold", tmp_path / "off", {})
    prime(launcher, "standby", tmp_path / "unknown", None)
    assert launcher.pool is None
    launcher.runtime = None  # a process of abdiff's own (doctor's hello): no pool at all
    prime(launcher, "standby", tmp_path / "none", {"PYTHONPATH": str(ABDIFF_ROOT)})
    assert launcher.pool is None and not (tmp_path / "none").exists()


def test_close_ends_the_waiting_process(tmp_path: Path, pool: StandbyPool) -> None:
    run(pool, job(checkout(tmp_path, "a")), tmp_path / "w0")
    waiting = pool.waiting.proc
    pool.close()
    assert waiting.poll() is not None and pool.waiting is None


@pytest.mark.parametrize(("choice", "mode"), [
    ("auto", "fork"), ("fork", "fork"), ("on", "standby"), ("off", "cold")])
def test_prestart_choice(choice: str, mode: str) -> None:
    assert worker_start(choice) == mode
