"""launchers/forkserver.py and forkserver_process.py: each job a fork of one process that
imported torch once, run as if started in the job's folder with the job's environment;
its exit, a timeout and a dead server are seen as with a process of abdiff's own."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import process_running, write_suite

from abdiff.cli import main
from abdiff.errors import InfrastructureError
from abdiff.host import procfs
from abdiff.launchers import forkserver
from abdiff.launchers.forkserver import ForkServer, ForkServers
from abdiff.launchers.local import LocalLauncher
from abdiff.launchers.process import ProcessOutcome, run_process
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.spec import ABDIFF_ROOT, LaunchSpec
from abdiff.launchers.warm import pooled, prime

REPORT = """
import json, os, sys, time
print(json.dumps({"cwd": os.getcwd(), "path0": sys.path[0], "argv": sys.argv[1:],
                  "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0),
                  "home": os.environ["HOME"], "marker": os.environ.get("ABDIFF_MARKER"),
                  "torch": "torch" in sys.modules}))
print("to stderr", file=sys.stderr)
if sys.argv[1] == "sleep":
    time.sleep(60)
sys.exit(int(sys.argv[2]))
"""
ENV = {"PYTHONPATH": str(ABDIFF_ROOT), "ABDIFF_MARKER": "job"}


def checkout(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "report_job.py").write_text(REPORT)
    return folder


def job(folder: Path, *args: str, env: dict[str, str] | None = None) -> LaunchSpec:
    return LaunchSpec([sys.executable, "-m", "report_job", *args], folder,
                      ENV if env is None else env)


def run(server: ForkServer, spec: LaunchSpec, log: Path, timeout_s: float = 60
        ) -> ProcessOutcome:
    return run_process(spec, log, log / "progress", timeout_s, runtime=Runtime(pool=server))


def report(log: Path) -> dict:
    return json.loads((log / "stdout.txt").read_text().splitlines()[0])


@pytest.fixture
def server(tmp_path: Path):
    server = ForkServer(tmp_path / "forkserver")
    yield server
    server.close()


@pytest.mark.slow
def test_each_job_is_a_fork_run_in_its_folder_with_its_environment(
        tmp_path: Path, server: ForkServer) -> None:
    a, b = checkout(tmp_path, "a"), checkout(tmp_path, "b")
    assert run(server, job(a, "run", "0"), tmp_path / "w0").returncode == 0
    assert run(server, job(b, "run", "3"), tmp_path / "w1").returncode == 3
    first, second = report(tmp_path / "w0"), report(tmp_path / "w1")
    parent = server.server.proc.pid
    for folder, seen in ((a, first), (b, second)):
        # torch came with the fork; the job's folder is first on sys.path, as with python -m
        assert (seen["cwd"], seen["path0"], seen["torch"]) == (str(folder), str(folder), True)
        assert seen["ppid"] == parent and seen["pgid"] == seen["pid"] != parent
        assert seen["marker"] == "job"
    assert first["argv"] == ["run", "0"] and first["pid"] != second["pid"]
    # every worker its own HOME, removed when it ended
    assert first["home"] != second["home"] and not Path(first["home"]).exists()
    assert (tmp_path / "w1" / "stderr.txt").read_text() == "to stderr\n"
    assert server.taken == 2 and server.failure is None


@pytest.mark.slow
def test_a_worker_past_its_timeout_is_killed_with_its_group(tmp_path: Path,
                                                            server: ForkServer) -> None:
    outcome = run(server, job(checkout(tmp_path, "a"), "sleep", "0"), tmp_path / "w0",
                  timeout_s=2)
    assert outcome.timed_out and outcome.signal_name == "SIGTERM"
    assert not process_running(report(tmp_path / "w0")["pid"])
    # the server goes on forking
    assert run(server, job(checkout(tmp_path, "b"), "run", "0"), tmp_path / "w1").returncode == 0


def test_a_dead_server_is_reported_and_the_rest_start_cold(
        tmp_path: Path, server: ForkServer) -> None:
    a = checkout(tmp_path, "a")
    run(server, job(a, "run", "0"), tmp_path / "w0")
    os.killpg(server.server.proc.pid, signal.SIGKILL)
    assert run(server, job(a, "run", "0"), tmp_path / "w1").returncode == 0
    cold = report(tmp_path / "w1")
    assert cold["torch"] is False and cold["ppid"] == os.getpid()
    assert server.failure.startswith("the fork server stopped (it ended (exit -9")
    assert server.taken == 1


def test_a_server_that_dies_under_a_running_worker_stops_the_run(tmp_path: Path,
                                                                  server: ForkServer) -> None:
    """The worker dies with it (parent-death signal): its exit says nothing of the config."""
    log = tmp_path / "w0"
    log.mkdir()
    started = server.take(job(checkout(tmp_path, "a"), "sleep", "0"), log / "stdout.txt",
                          log / "stderr.txt")
    os.killpg(server.server.proc.pid, signal.SIGKILL)
    with pytest.raises(InfrastructureError, match=r"^the fork server stopped \(it ended \(exit "
                       r"-9\); .*\) while worker \d+ ran; its round is lost"):
        started.proc.wait(timeout=30)
    started.close()  # SIGKILL to its group; the kill lands a moment later
    deadline = time.monotonic() + 10
    while process_running(started.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_running(started.proc.pid)


@pytest.mark.slow
def test_jobs_it_cannot_take_start_cold(tmp_path: Path, server: ForkServer) -> None:
    a = checkout(tmp_path, "a")
    run(server, job(a, "run", "0"), tmp_path / "w0")
    other = {**ENV, "ABDIFF_MARKER": "other"}  # torch was imported under ENV, not this
    assert run(server, job(a, "run", "0", env=other), tmp_path / "w1").returncode == 0
    assert report(tmp_path / "w1")["torch"] is False
    spec = LaunchSpec(["sh", "-c", "echo cold"], tmp_path)
    assert run(server, spec, tmp_path / "w2").returncode == 0
    assert (tmp_path / "w2" / "stdout.txt").read_text() == "cold\n"
    assert server.taken == 1 and server.failure is None


@pytest.mark.slow
def test_a_server_with_a_thread_a_fork_does_not_stop_refuses_to_fork(tmp_path: Path) -> None:
    """A thread that runs on through the fork could hold a lock the copy inherits."""
    code = textwrap.dedent("""
        import sys, threading, time
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        from abdiff.launchers.forkserver_process import main
        sys.exit(main())
    """)
    done = subprocess.run([sys.executable, "-c", code], input=b"{}\n", capture_output=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ABDIFF_ROOT)})
    assert done.returncode == 0
    assert json.loads(done.stdout) == {
        "error": "after importing torch: 2 threads that a fork does not stop; forking is "
                 "unsafe"}


@pytest.mark.slow
def test_a_primed_server_is_taken_over_and_ended_with_the_measurement(tmp_path: Path) -> None:
    launcher = LocalLauncher()
    launcher.runtime = Runtime()
    prime(launcher, "fork", tmp_path / "standby", ENV)
    pool = launcher.pool
    assert isinstance(pool, ForkServers) and len(pool.waiting) == 1
    primed = pool.waiting[0]
    assert primed.server is not None
    with pooled(launcher, "fork", tmp_path / "unused") as taken:
        assert taken is pool
        folder = checkout(tmp_path, "a")
        assert run(pool, job(folder, "run", "0"), tmp_path / "w0").returncode == 0
        assert pool.by_checkout == {folder: primed}  # the first checkout took the primed one
    assert launcher.pool is None and primed.server is None
    assert not any((tmp_path / "standby").iterdir())


PACKAGE = """
import os, sys, threading, time
with open(os.environ.get("COUNT_FILE", "../imports.txt"), "a") as count:
    count.write(os.getcwd() + "\\n")  # one line per import of the package
if os.path.exists("thread"):  # a package that starts a thread no fork stops
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
"""
USES_PACKAGE = """
import json, os, sys
print(json.dumps({"preimported": "pkg" in sys.modules, "ppid": os.getppid()}))
import pkg
print(json.dumps({"pkg": pkg.__file__}))
"""


def package_checkout(tmp_path: Path, name: str, thread: bool = False) -> Path:
    folder = checkout(tmp_path, name)
    (folder / "pkg").mkdir()
    (folder / "pkg" / "__init__.py").write_text(PACKAGE)
    (folder / "uses_pkg.py").write_text(USES_PACKAGE)
    if thread:
        (folder / "thread").write_text("")
    return folder


def uses_pkg(folder: Path) -> LaunchSpec:
    return LaunchSpec([sys.executable, "-m", "uses_pkg"], folder, ENV)


@pytest.mark.slow
def test_the_targets_preimport_is_imported_once_per_side_from_its_own_checkout(
        tmp_path: Path) -> None:
    a, b = package_checkout(tmp_path, "a"), package_checkout(tmp_path, "b")
    pool = ForkServers(tmp_path / "servers")
    try:
        pool.prepare([a, b], ENV, ("pkg",))
        for n, folder in enumerate((a, b, a, b)):
            assert run(pool, uses_pkg(folder), tmp_path / f"w{n}").returncode == 0
            first, second = [json.loads(line) for line in
                             (tmp_path / f"w{n}" / "stdout.txt").read_text().splitlines()]
            assert first["preimported"] is True and first["ppid"] != os.getpid()
            assert second["pkg"] == str(folder / "pkg" / "__init__.py")
        # one import per side, each in its checkout (the server's import ran there)
        assert sorted((tmp_path / "imports.txt").read_text().split()) == [str(a), str(b)]
        assert pool.preimported(a) and pool.preimported(a).startswith(
            "pkg imported once in the fork server (")
        assert pool.taken == 4 and pool.failure is None
    finally:
        pool.close()
    # the control: without the preimport, every worker imports the package itself
    (tmp_path / "imports.txt").unlink()
    pool = ForkServers(tmp_path / "servers2")
    try:
        for n, folder in enumerate((a, b, a, b)):
            assert run(pool, uses_pkg(folder), tmp_path / f"c{n}").returncode == 0
        assert len((tmp_path / "imports.txt").read_text().split()) == 4
        assert pool.preimported(a) is None
    finally:
        pool.close()


@pytest.mark.slow
def test_a_preimport_that_starts_a_thread_leaves_that_side_to_cold_starts(
        tmp_path: Path) -> None:
    """A fork copies only the forking thread: the server checks after the preimport and
    ends instead of forking; that side's workers start cold and the run says why."""
    a = package_checkout(tmp_path, "a", thread=True)
    pool = ForkServers(tmp_path / "servers")
    try:
        pool.prepare([a], ENV, ("pkg",))
        assert run(pool, uses_pkg(a), tmp_path / "w0").returncode == 0
        first = json.loads((tmp_path / "w0" / "stdout.txt").read_text().splitlines()[0])
        assert first["preimported"] is False and first["ppid"] == os.getpid()  # cold
        said = pool.preimported(a)
        assert said is not None and said.startswith("not imported ahead: the fork server "
                                                    "stopped (after importing pkg from the "
                                                    "checkout ahead (the target's preimport): "
                                                    "2 threads that a fork does not stop")
        assert said.endswith("that side's workers started cold")
    finally:
        pool.close()


LIMITS = """
import json, os, resource, sys
if sys.argv[1] == "lower":  # what a side's benchmark can do to its fork server
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (64, hard))
print(json.dumps({"nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))
"""


@pytest.mark.slow
def test_one_side_cannot_set_the_other_sides_server_limits(tmp_path: Path) -> None:
    """A worker can lower its fork server's limits, and the server's later forks inherit
    them: each checkout (side) has a server of its own, so B's benchmark lowers only B's."""
    a, b = checkout(tmp_path, "a"), checkout(tmp_path, "b")
    for folder in (a, b):
        (folder / "limits.py").write_text(LIMITS)
    pool = ForkServers(tmp_path / "servers")

    def limits(folder: Path, what: str, log: str) -> int:
        spec = LaunchSpec([sys.executable, "-m", "limits", what], folder, ENV)
        assert run(pool, spec, tmp_path / log).returncode == 0
        return int(report(tmp_path / log)["nofile"])

    try:
        before = limits(a, "read", "a0")
        limits(b, "lower", "b0")
        assert limits(b, "read", "b1") == 64  # the attack is real within a server
        assert limits(a, "read", "a1") == before > 64
        assert len(pool.by_checkout) == 2 and pool.taken == 4
    finally:
        pool.close()


@pytest.mark.slow
def test_a_run_whose_server_cannot_start_measures_cold_and_says_so(
        faulty_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The server's module is missing (as where abdiff's own package is broken): every
    worker starts cold, the verdicts stand, and the run says once why it was slower."""
    monkeypatch.setattr(forkserver, "SERVER_MODULE", "abdiff.launchers.no_such_module")
    rc = main([str(a) for a in [
        "main..pr", "--configs", write_suite(tmp_path / "s.yaml", [1]), "--repo", faulty_repo,
        "--cache-dir", tmp_path / "cache", "--target", "reference", "--rounds", 2,
        "--max-rounds", 2, "--quiet", "--format", "json", "--prestart", "fork"]])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert json.loads(captured.out)["summary"]["measured"] == 1
    assert re.fullmatch(r"abdiff: the fork server stopped \(it ended \(exit 1\); its output is "
                        r"in .+\); the workers after it started cold",
                        captured.err.splitlines()[0])
    assert "Traceback" not in captured.err


@pytest.mark.slow
def test_a_package_planted_in_the_servers_folder_is_not_imported(tmp_path: Path) -> None:
    """The server's folder is under the cache's runs/, which the benchmark can write: an
    `abdiff/` package planted there (for a later run's server, started in that folder) is
    not on the server's import path (-P)."""
    folder = tmp_path / "forkserver"
    (folder / "abdiff").mkdir(parents=True)
    marker = tmp_path / "planted-ran"
    (folder / "abdiff" / "__init__.py").write_text(
        f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n")
    server = ForkServer(folder)
    try:
        outcome = run(server, job(checkout(tmp_path, "a"), "run", "0"), tmp_path / "w0")
        assert outcome.returncode == 0 and server.failure is None and server.taken == 1
        assert report(tmp_path / "w0")["torch"]  # a fork of the server ran the job
    finally:
        server.close()
    assert not marker.exists()


@pytest.mark.slow
def test_a_forked_worker_is_pinned_to_its_cpu_set(tmp_path: Path) -> None:
    """--devices on a CPU host: the fork takes the job's CPU set before it becomes the job;
    the server, and the next job without one, keep all of theirs."""
    folder = checkout(tmp_path, "a")
    (folder / "affinity.py").write_text(
        "import json, os\nprint(json.dumps(sorted(os.sched_getaffinity(0))))\n")
    allowed = sorted(os.sched_getaffinity(0))
    pool = ForkServers(tmp_path / "servers")
    try:
        pinned = LaunchSpec([sys.executable, "-m", "affinity"], folder, ENV, cpus=(allowed[0],))
        assert run(pool, pinned, tmp_path / "w0").returncode == 0
        free = LaunchSpec([sys.executable, "-m", "affinity"], folder, ENV)
        assert run(pool, free, tmp_path / "w1").returncode == 0
        assert pool.taken == 2
    finally:
        pool.close()
    assert json.loads((tmp_path / "w0" / "stdout.txt").read_text()) == [allowed[0]]
    assert json.loads((tmp_path / "w1" / "stdout.txt").read_text()) == allowed


FORGER = """
import sys
server = sys.modules["__main__"]  # the fork server: a preimport runs in it
forge = open("forge").read()  # what to forge (read in the checkout, where it imports)
told = server.tell


def tell(message):
    if "preimported" in message and forge == "modules":
        message = {"preimported": ["forger\\x1b]0;owned\\x07"], "seconds": "fast"}
    if "preimported" in message and forge == "failed":
        message = {"preimported": [], "seconds": 0.5, "failed": "\\x1b]0;owned\\x07\\n::error::x"}
    told(message)
    if "pid" in message and forge == "exit":  # the worker it just forked has ended, it says
        told({"exit": message["pid"], "returncode": 0})


server.tell = tell
"""


def forging_checkout(tmp_path: Path, forge: str) -> Path:
    """A checkout whose preimported module makes its fork server say what it did not do."""
    folder = checkout(tmp_path, "a")
    (folder / "forger.py").write_text(FORGER)
    (folder / "forge").write_text(forge)
    return folder


def raw_server(folder: Path, *jobs: dict) -> subprocess.Popen[str]:
    """The fork server with no abdiff reading it: the control's view of its pipe."""
    server = subprocess.Popen([sys.executable, "-P", "-m", forkserver.SERVER_MODULE],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=folder.parent, env={**os.environ, **ENV})
    assert server.stdin is not None
    for message in ({"preimport": {"cwd": str(folder), "modules": ["forger"]}}, *jobs):
        server.stdin.write(json.dumps(message) + "\n")
    server.stdin.flush()
    return server


@pytest.mark.slow
@pytest.mark.parametrize("forge", ["modules", "failed"])
def test_a_preimport_cannot_make_its_server_say_what_abdiff_prints(tmp_path: Path,
                                                                    forge: str) -> None:
    """The side's preimported code runs in the fork server and replaces what it says: the
    control reads the forged answer off the server's pipe (escape sequences, a CI command,
    seconds that are a word: before the check, abdiff printed the escapes and failed on
    the seconds with a traceback); abdiff refuses an answer no server sends and says
    whatever text it keeps without control characters or CI commands."""
    a = forging_checkout(tmp_path, forge)
    control = raw_server(a)
    said, _ = control.communicate(timeout=120)
    answer = json.loads(said.splitlines()[0])
    assert "\x1b]0;owned\x07" in (answer["preimported"] + [answer.get("failed", "")])[0]
    pool = ForkServers(tmp_path / "servers")
    try:
        pool.prepare([a], ENV, ("forger",))
        words = pool.preimported(a)
        assert words is not None and "\x1b" not in words and "\x07" not in words
        assert "\n" not in words  # one line: no line of it is a CI command
        if forge == "modules":
            assert words.startswith("not imported ahead: the fork server stopped (it wrote a "
                                    "message that is not one of the server's (modules abdiff "
                                    "did not ask to import)")
            assert run(pool, job(a, "run", "0"), tmp_path / "w0").returncode == 0
            assert report(tmp_path / "w0")["ppid"] == os.getpid()  # started cold
        else:
            assert words == "not imported ahead: ]0;owned ::error::x (each worker imports it)"
    finally:
        pool.close()


@pytest.mark.slow
def test_a_forged_exit_of_a_running_worker_stops_the_run(tmp_path: Path) -> None:
    """A server whose preimport says a worker ended the moment it was forked: abdiff would
    take the round as over (exit 0) while the worker still runs into the next one. The
    control reads the forged exit off the pipe while the worker runs; abdiff sees the
    worker still there, stops the run (exit 3: the rounds before are kept) and kills it."""
    a = forging_checkout(tmp_path, "exit")
    (tmp_path / "c").mkdir()
    control = raw_server(a, {"cwd": str(a), "argv": [sys.executable, "-m", "report_job",
                                                      "sleep", "0"],
                             "stdout": str(tmp_path / "c" / "out"),
                             "stderr": str(tmp_path / "c" / "err"), "env": {**os.environ, **ENV}})
    try:
        assert control.stdout is not None
        lines = [json.loads(control.stdout.readline()) for _ in range(3)]
        assert lines[1:] == [{"pid": lines[1]["pid"]}, {"exit": lines[1]["pid"], "returncode": 0}]
        assert process_running(lines[1]["pid"])  # it said the worker ended: it runs
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(lines[1]["pid"], signal.SIGKILL)
        control.kill()
        control.wait()
    pool = ForkServers(tmp_path / "servers")
    try:
        pool.prepare([a], ENV, ("forger",))
        with pytest.raises(InfrastructureError, match=r"^the fork server stopped \(it said "
                           r"worker \d+ ended while it still ran; .*\): its round is lost"
                           ) as stopped:
            run(pool, job(a, "sleep", "0"), tmp_path / "w0")
    finally:
        pool.close()
    # its pid as the server said it (no sandbox here: the same pid); killed at once, the
    # worker may not have written its own report yet
    worker = int(re.search(r"worker (\d+) ended", str(stopped.value)).group(1))
    deadline = time.monotonic() + 10
    while process_running(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_running(worker)


BURNER = """
import os, threading, time
started = []
def burn():  # the other side's worker is timed while this side's own is not running
    end = time.time() + 60
    while time.time() < end:
        pass
def start():
    if not started:
        started.append(True)
        threading.Thread(target=burn, daemon=True).start()
os.register_at_fork(after_in_parent=start)  # after the server's check at its first fork
"""
# the same burn in a process of a session of its own (setsid): out of the server's
# process group, which a stop of that group alone misses
SESSION_BURNER = """
import os, subprocess, sys
started = []
def start():
    if not started:
        started.append(True)
        subprocess.Popen([sys.executable, "-c", "import time\\nend = time.time() + 60\\n"
                          "while time.time() < end: pass"], start_new_session=True)
os.register_at_fork(after_in_parent=start)
"""
BUSY = """
import time
end = time.perf_counter() + 0.6
while time.perf_counter() < end:
    pass
"""


def cpu_seconds(root: int) -> float:
    """CPU time of `root` and every process below it, seconds."""
    total = 0
    for pid in procfs.below([root], procfs.children()):
        stat = procfs.read_stat(pid)
        total += stat.cpu_ticks if stat is not None else 0
    return total / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
@pytest.mark.parametrize("held", [True, False])
@pytest.mark.parametrize("burner", [BURNER, SESSION_BURNER], ids=["thread", "setsid"])
def test_a_sides_server_is_stopped_while_the_other_sides_worker_runs(
        tmp_path: Path, held: bool, burner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Side b's preimported code starts a thread in its fork server after the first fork
    (which the server's check at that fork cannot see), or a process in a session of its
    own, and burns the CPU while side a's worker is timed. Stopped meanwhile, b's server
    and all below it get no CPU time; the control, without the stop, shows the attack:
    the burner runs through a's worker."""
    if not held:
        monkeypatch.setattr(ForkServer, "hold", lambda self, running: None)
    folders = {}
    for name, package in (("a", ""), ("b", burner)):
        folders[name] = tmp_path / name
        (folders[name] / "pkg").mkdir(parents=True)
        (folders[name] / "pkg" / "__init__.py").write_text(package)
        (folders[name] / "busy.py").write_text(BUSY)
    pool = ForkServers(tmp_path / "servers")
    below: list[int] = []
    try:
        pool.prepare([folders["a"], folders["b"]], ENV, ("pkg",))
        spec = LaunchSpec([sys.executable, "-m", "busy"], folders["b"], ENV)
        assert run(pool, spec, tmp_path / "b0").returncode == 0  # the burner starts
        pool.sweep()
        server = pool.by_checkout[folders["b"]].server
        assert server is not None
        below = procfs.below([server.proc.pid], procfs.children())
        before = cpu_seconds(server.proc.pid)
        spec = LaunchSpec([sys.executable, "-m", "busy"], folders["a"], ENV)
        assert run(pool, spec, tmp_path / "a1").returncode == 0
        burned = cpu_seconds(server.proc.pid) - before
    finally:
        pool.close()
        for pid in below:  # no sandbox here: a process of its own session outlives the server
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if held:
        assert burned < 0.05
    else:
        assert burned > 0.2
