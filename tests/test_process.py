"""launchers/process.py: a worker gets its memory limit and parent-death signal inside its
own process (guard.py, no preexec_fn), and dies with abdiff."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import process_running

from abdiff.errors import InfrastructureError
from abdiff.launchers.process import run_process
from abdiff.launchers.spec import LaunchSpec

REPORT_LIMITS = """
import ctypes, resource, signal
deathsig = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(deathsig), 0, 0, 0)  # PR_GET_PDEATHSIG
print(resource.getrlimit(resource.RLIMIT_AS)[0], deathsig.value == signal.SIGKILL)
"""

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")


@linux
@pytest.mark.parametrize(("max_memory", "expected"), [(3 * 2**30, 3 * 2**30), (None, -1)])
def test_worker_gets_limit_and_parent_death_signal(tmp_path: Path, max_memory: int | None,
                                                   expected: int) -> None:
    spec = LaunchSpec([sys.executable, "-c", REPORT_LIMITS], tmp_path)
    outcome = run_process(spec, tmp_path / "log", tmp_path / "progress", 60,
                          max_memory_bytes=max_memory)
    assert outcome.returncode == 0, outcome.stderr_path.read_text()
    limit, armed = (tmp_path / "log" / "stdout.txt").read_text().split()
    assert int(limit) == expected and armed == "True"  # -1: RLIM_INFINITY


def test_missing_program_is_an_infrastructure_error(tmp_path: Path) -> None:
    spec = LaunchSpec(["no-such-benchmark-runner"], tmp_path)
    with pytest.raises(InfrastructureError, match="cannot start no-such-benchmark-runner"):
        run_process(spec, tmp_path / "log", tmp_path / "progress", 60)


PARENT = """
import sys
from pathlib import Path
from abdiff.launchers.process import run_process
from abdiff.launchers.spec import LaunchSpec
folder = Path(sys.argv[1])
run_process(LaunchSpec(["sh", "-c", "echo $$ > pid; exec sleep 120"], folder),
            folder / "log", folder / "progress", None)
"""


@linux
def test_worker_dies_with_a_killed_parent(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)])
    pid_file = tmp_path / "pid"
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    parent.kill()  # SIGKILL: abdiff gets no chance to clean up
    parent.wait()
    deadline = time.monotonic() + 30
    while process_running(worker):
        assert time.monotonic() < deadline, "the worker outlived its parent"
        time.sleep(0.05)


LEAVER = r"""
import json, os, subprocess, sys, time
from pathlib import Path
from abdiff.launchers import process
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.spec import LaunchSpec
folder, mode = Path(sys.argv[1]), sys.argv[2]
runtime = Runtime()  # what a measuring command holds open
if mode != "none":
    runtime.leftovers.adopt()
# a process abdiff starts itself (the fork server, a standby worker)
server = process.start_process(LaunchSpec(["sleep", "30"], folder), subprocess.DEVNULL,
                               folder / "err.txt", None, None, runtime=runtime)
if os.fork() == 0:  # a worker that leaves a process behind (double fork, setsid) and exits
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (1, 2):  # off the test's pipes, which would wait for it
            os.dup2(null, fd)
        (folder / "pid").write_text(str(os.getpid()))
        time.sleep(120)
    os._exit(0)
os.wait()
while not (folder / "pid").exists():
    time.sleep(0.01)
if mode == "reused":  # the leftover got the pid of a process abdiff started, which ended
    runtime.leftovers.started[int((folder / "pid").read_text())] = 1
# after a round (Leftovers.end), or when the command ends (Runtime.close, as the command's
# `with prepare_bench(...)` does)
killed = runtime.leftovers.end() if mode in ("round", "reused") else []
print(json.dumps({"killed": killed, "server_alive": server.proc.poll() is None}))
server.close()
runtime.close()
"""


@linux
@pytest.mark.parametrize("mode", ["round", "reused", "command", "none"])
def test_a_process_the_benchmark_leaves_behind_ends_with_abdiff(tmp_path: Path,
                                                                mode: str) -> None:
    """A double-forked, setsid process outlives its worker. abdiff, a child subreaper while
    it measures, kills it after the round (a process it started itself lives on) or when
    the command ends; without adoption it lives on (the planted leftover is real). A
    leftover whose pid was once a process abdiff started (reused) is a leftover all the
    same."""
    done = subprocess.run([sys.executable, "-c", LEAVER, str(tmp_path), mode],
                          capture_output=True, text=True, check=True, timeout=60)
    seen = json.loads(done.stdout)
    pid = int((tmp_path / "pid").read_text())
    assert seen["server_alive"] and (pid in seen["killed"]) is (mode in ("round", "reused"))
    deadline = time.monotonic() + 5
    while mode != "none" and process_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert process_running(pid) is (mode == "none")
    finally:
        if process_running(pid):
            os.kill(pid, signal.SIGKILL)
