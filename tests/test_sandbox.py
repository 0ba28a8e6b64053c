"""launchers/sandbox.py and guard.py's --confine: benchmark code in user, mount and pid
namespaces of its own. Each test plants the attack for real, in a process started the way
abdiff starts workers, and checks what it could do."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import abdiff_argv, config_id, git_env, one_line, write_suite

from abdiff.errors import InfrastructureError
from abdiff.launchers import sandbox
from abdiff.launchers.guard import Confinement
from abdiff.launchers.slurm import SrunLauncher
from abdiff.launchers.spec import ABDIFF_ROOT

AVAILABLE = sys.platform.startswith("linux") and sandbox.trial(Confinement()) is None
needs_namespaces = pytest.mark.skipif(not AVAILABLE, reason="no user namespaces here")


def confined(confinement: Confinement, code: str, *args: str,
             writable: tuple[str, ...] | None = None) -> subprocess.Popen[str]:
    """`python -c CODE ARGS` started as abdiff starts a worker, in `confinement` (and, as a
    round's worker, writable only in `writable`)."""
    argv = [sys.executable, "-S", str(sandbox.GUARD), str(os.getpid()), "0",
            *sandbox.guard_options(confinement, writable), "--", sys.executable, "-c",
            textwrap.dedent(code), *args]
    # the environment a worker gets (process.worker_environment), not this process's
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, stdin=subprocess.DEVNULL,
                            env={"PATH": os.environ["PATH"]})


def finish(proc: subprocess.Popen[str]) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=60)
    lines = out.splitlines()
    return proc.returncode, json.loads(lines[-1]) if lines else {}, err


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A state folder with a key, a repository with .git, a cache under it (a round's folder
    and two sides' folders), and a folder outside everything."""
    paths = {name: tmp_path / name for name in ("state", "repo", "outside")}
    cache = paths["repo"] / ".cache"
    paths.update(git=paths["repo"] / ".git", checkouts=cache / "checkouts",
                 runs=cache / "runs", round=cache / "runs" / "k" / "logs" / "A-r0",
                 side=cache / "sides" / "a", other_side=cache / "sides" / "b")
    for folder in paths.values():
        folder.mkdir(parents=True, exist_ok=True)
    (paths["state"] / "resume.key").write_bytes(b"k" * 32)
    (paths["git"] / "HEAD").write_text("ref: refs/heads/main\n")
    return paths


ATTACK = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
state, repo, git, runs, outside, undo, round_dir, side, other_side = sys.argv[1:10]
seen = {}
def attempt(name, action):
    try:
        action()
        seen[name] = "done"
    except OSError as exc:
        seen[name] = exc.strerror
attempt("read key", lambda: open(os.path.join(state, "resume.key")).read())
seen["state lists"] = os.listdir(state)
attempt("write .git", lambda: open(os.path.join(git, "HEAD"), "w").write("ref: refs/heads/evil"))
attempt("write repo", lambda: open(os.path.join(repo, "planted.py"), "w").write("x"))
attempt("write runs", lambda: open(os.path.join(runs, "record.log"), "w").write("ok"))
attempt("link runs", lambda: os.rename(runs, runs + ".moved"))
attempt("write round", lambda: open(os.path.join(round_dir, "record.log"), "w").write("ok"))
attempt("write side", lambda: open(os.path.join(side, "kernel.cubin"), "w").write("ok"))
attempt("write other side", lambda: open(os.path.join(other_side, "kernel.cubin"),
                                         "w").write("evil"))
attempt("write outside", lambda: open(os.path.join(outside, "note"), "w").write("ok"))
if undo == "undo":  # undo the sandbox, as a root inside would: each must fail
    seen["umount state"] = libc.umount2(state.encode(), 2) == 0  # MNT_DETACH
    seen["remount .git rw"] = libc.mount(None, repo.encode(), None, 32 | 4096, None) == 0
    seen["bind state's parent without its mounts"] = libc.mount(
        os.path.dirname(state).encode(), outside.encode(), None, 4096, None) == 0
    # a sysctl whose handler runs a program as root on the next crash (only opened)
    attempt("open core_pattern", lambda: os.close(
        os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY)))
seen["uid"] = os.getuid()
print(json.dumps(seen))
"""


@needs_namespaces
def test_the_key_is_hidden_and_the_repository_read_only(layout: dict[str, Path]) -> None:
    confinement = sandbox.plan(layout["repo"], layout["git"], layout["repo"] / ".cache",
                               layout["state"])
    code, seen, err = finish(confined(confinement, ATTACK, *attack_args(layout, "undo"),
                                      writable=(str(layout["round"]), str(layout["side"]))))
    assert code == 0, err
    assert seen["read key"] == "No such file or directory" and seen["state lists"] == []
    assert seen["write .git"] == seen["write repo"] == "Read-only file system"
    # a worker writes its round's folder and its side's, nothing else of the cache, and
    # no other folder (its TMPDIR is its side's)
    assert seen["write round"] == seen["write side"] == "done"
    for attempted in ("write runs", "link runs", "write other side", "write outside"):
        assert seen[attempted] in ("Read-only file system", "Device or resource busy"), \
            attempted
    assert not any(seen[k] for k in ("umount state", "remount .git rw",
                                     "bind state's parent without its mounts"))
    assert seen["open core_pattern"] in ("Read-only file system", "Permission denied")
    # the user it is outside, and never root: root is nobody inside, with no capability
    assert seen["uid"] == (os.geteuid() or 65534)
    # and nothing changed outside
    assert (layout["git"] / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert not (layout["repo"] / "planted.py").exists()
    assert (layout["round"] / "record.log").read_text() == "ok"
    assert not (layout["other_side"] / "kernel.cubin").exists() and layout["runs"].is_dir()


def attack_args(layout: dict[str, Path], undo: str) -> list[str]:
    return [*(str(layout[k]) for k in ("state", "repo", "git", "runs", "outside")), undo,
            *(str(layout[k]) for k in ("round", "side", "other_side"))]


@needs_namespaces
def test_the_attack_works_without_the_sandbox(layout: dict[str, Path]) -> None:
    """The same attack outside a sandbox (without the attempts to unmount, which would
    change this machine's mounts as root): the key is read, .git is written."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(ATTACK),
                             *attack_args(layout, "keep")], stdout=subprocess.PIPE, text=True)
    seen = json.loads(proc.communicate(timeout=60)[0])
    assert seen["read key"] == seen["write .git"] == "done"
    assert seen["write other side"] == seen["link runs"] == "done"
    (layout["git"] / "HEAD").write_text("ref: refs/heads/main\n")


PROCESSES = """
import json, os, signal, sys, time
others = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
environ = {}
for pid in (os.getppid(), int(sys.argv[1])):
    try:
        environ[pid] = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
    except OSError as exc:
        environ[pid] = exc.strerror
# signals to the sandbox's first process end nothing (Python would raise on SIGINT)
os.kill(1, signal.SIGINT)
os.kill(1, signal.SIGTERM)
time.sleep(0.2)
if os.fork() == 0:  # a process left behind: it should not outlive the command
    os.setsid()
    time.sleep(1.5)
    open(sys.argv[2], "w").write("outlived")
    os._exit(0)
print(json.dumps({"pids": others, "me": os.getpid(), "environ": environ}))
"""


@needs_namespaces
def test_no_process_outside_the_sandbox_is_seen_and_none_outlives_it(tmp_path: Path,
                                                                     monkeypatch) -> None:
    monkeypatch.setenv("ABDIFF_TEST_CANARY", "in-abdiff")
    marker = tmp_path / "outlived"
    code, seen, err = finish(confined(Confinement(), PROCESSES, str(os.getpid()), str(marker)))
    assert code == 0, err
    # process 1 is the sandbox's first process (guard.py), 2 the command, 3 the leftover
    assert seen["me"] == 2 and set(seen["pids"]) <= {1, 2, 3}
    assert "ABDIFF_TEST_CANARY" not in json.dumps(seen["environ"])
    time.sleep(2.0)
    assert not marker.exists()


@needs_namespaces
@pytest.mark.parametrize(("code", "returncode"), [
    ("import sys; sys.exit(7)", 7),
    ("import os; os.abort()", -signal.SIGABRT),
    ("import ctypes; ctypes.string_at(0)", -signal.SIGSEGV),
])
def test_the_commands_exit_is_the_workers(code: str, returncode: int) -> None:
    assert confined(Confinement(), code).wait(timeout=60) == returncode


@needs_namespaces
def test_sigterm_to_the_group_reaches_the_command(tmp_path: Path) -> None:
    """abdiff stops a worker with SIGTERM to its process group (then SIGKILL): the command
    gets it, its handler runs, and its exit is the worker's."""
    handler = """
    import pathlib, signal, sys, time
    def stop(*_):
        pathlib.Path(sys.argv[1]).write_text("stopped")
        sys.exit(5)
    signal.signal(signal.SIGTERM, stop)
    print("{}", flush=True)
    time.sleep(60)
    """
    proc = confined(Confinement(), handler, str(tmp_path / "stopped"))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "{}"
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 5
    assert (tmp_path / "stopped").read_text() == "stopped"


@needs_namespaces
def test_the_users_credentials_are_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """The real home's SSH key, .netrc, docker login and git configuration, and the
    repository's git configuration (where actions/checkout leaves its token): a worker's
    HOME is a fresh folder, but it can name the real one; in the sandbox they are empty."""
    home = tmp_path / "home"
    header = "[http]\n\textraheader = AUTHORIZATION: basic hunter2\n"
    for name, text in ((".ssh/id_ed25519", "PRIVATE KEY"), (".netrc", "password hunter2"),
                       (".docker/config.json", '{"auths": {}}'), (".gitconfig", header)):
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    (tmp_path / "repo" / "modules" / "sub").mkdir(parents=True)
    (tmp_path / "repo" / "config").write_text(header)
    # a submodule's configuration with a token in its url; one without any stays readable
    (tmp_path / "repo" / "modules" / "sub" / "config").write_text(
        '[remote "origin"]\n\turl = https://x-access-token:hunter2@github.com/o/r\n')
    (tmp_path / "repo" / "modules" / "plain").mkdir()
    (tmp_path / "repo" / "modules" / "plain" / "config").write_text(
        "[extensions]\n\tpartialClone = origin\n")
    monkeypatch.setenv("HOME", str(home))
    state = tmp_path / "state"
    state.mkdir()
    confinement = sandbox.plan(tmp_path / "repo", tmp_path / "repo", tmp_path / "cache", state)
    assert {str(home / ".ssh"), str(home / ".netrc"), str(home / ".docker"),
            str(home / ".gitconfig"), str(tmp_path / "repo" / "config"),
            str(tmp_path / "repo" / "modules" / "sub" / "config")} <= set(confinement.hidden)
    assert str(tmp_path / "repo" / "modules" / "plain" / "config") not in confinement.hidden
    read = """
    import json, sys
    seen = {}
    for path in sys.argv[1:]:
        try:
            seen[path] = open(path).read()
        except OSError as exc:
            seen[path] = exc.strerror
    print(json.dumps(seen))
    """
    paths = [str(home / n) for n in (".ssh/id_ed25519", ".netrc", ".docker/config.json",
                                     ".gitconfig")] + [
        str(tmp_path / "repo" / n) for n in ("config", "modules/sub/config",
                                             "modules/plain/config")]
    code, seen, err = finish(confined(confinement, read, *paths))
    assert code == 0, err
    assert seen == {paths[0]: "No such file or directory", paths[1]: "",
                    paths[2]: "No such file or directory", paths[3]: "", paths[4]: "",
                    paths[5]: "", paths[6]: "[extensions]\n\tpartialClone = origin\n"}
    assert (home / ".netrc").read_text() == "password hunter2"  # untouched outside


@needs_namespaces
def test_a_socket_a_process_of_the_user_listens_on_is_out_of_reach(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tmux server, an ssh-agent, git's credential cache listen on a socket by path; a
    read-only mount does not stop a connect(), and the server answers as the user outside
    the sandbox (a hostile pull request had tmux run a shell that wrote the other side's
    caches). A server planted for real, as tmux's would be: it runs what it is sent."""
    import socket
    import threading

    folder = tmp_path / "tmux-0"
    folder.mkdir(mode=0o700)
    path = folder / "default"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    escaped = tmp_path / "escaped"

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                if conn.recv(100) == b"run":
                    escaped.write_text("ran outside")

    threading.Thread(target=serve, daemon=True).start()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "cache" / "sides").mkdir(parents=True)
    own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a worker's, in the cache
    own.bind(str(tmp_path / "cache" / "sides" / "worker.sock"))
    confinement = sandbox.plan(tmp_path / "repo", tmp_path / "repo", tmp_path / "cache", state)
    own.close()
    assert str(path) in confinement.hidden  # as deep as it may be: the kernel lists it
    assert str(tmp_path / "cache" / "sides" / "worker.sock") not in confinement.hidden
    attack = """
    import json, socket, sys
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(sys.argv[1])
        client.sendall(b"run")
        print(json.dumps({"connect": "done"}))
    except OSError as exc:
        print(json.dumps({"connect": exc.strerror}))
    """
    try:
        code, seen, err = finish(confined(confinement, attack, str(path)))
        assert code == 0, err
        assert seen["connect"] == "Connection refused" and not escaped.exists()
        # without the sandbox the same connect runs the server's command
        code, seen, err = finish(confined(Confinement(), attack, str(path)))
        assert seen["connect"] == "done", err
        deadline = time.monotonic() + 10
        while not escaped.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert escaped.read_text() == "ran outside"
    finally:
        server.close()


@needs_namespaces
def test_services_of_this_machine_are_out_of_reach_and_localhost_is_the_sandboxs(
        tmp_path: Path) -> None:
    """A service listening on localhost (a cloud's metadata address is another such) or on
    an abstract unix socket answers the benchmark outside the sandbox; inside, its network
    is a loopback of its own: neither is reached, and ranks could still meet on localhost
    there."""
    import socket

    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"\0abdiff-test-{os.getpid()}"
    abstract.bind(name)
    abstract.listen()
    probe = """
    import json, socket, sys
    seen = {}
    def attempt(what, family, address):
        client = socket.socket(family, socket.SOCK_STREAM)
        client.settimeout(5)
        try:
            client.connect(address)
            seen[what] = "done"
        except OSError as exc:
            seen[what] = type(exc).__name__
        finally:
            client.close()
    attempt("localhost service", socket.AF_INET, ("127.0.0.1", int(sys.argv[1])))
    attempt("abstract socket", socket.AF_UNIX, "\\0" + sys.argv[2])
    own = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    own.bind(("127.0.0.1", 0))
    own.listen()
    attempt("its own localhost", socket.AF_INET, own.getsockname())
    print(json.dumps(seen))
    """
    port, bare = str(tcp.getsockname()[1]), name[1:]
    try:
        code, seen, err = finish(confined(Confinement(), probe, port, bare))
        assert code == 0, err
        assert seen == {"localhost service": "ConnectionRefusedError",
                        "abstract socket": "ConnectionRefusedError",
                        "its own localhost": "done"}
        # the same without a network namespace of its own reaches both
        code, seen, err = finish(confined(Confinement(own_net=False), probe, port, bare))
        assert code == 0, err
        assert seen["localhost service"] == seen["abstract socket"] == "done"
    finally:
        tcp.close()
        abstract.close()


@needs_namespaces
def test_a_path_to_hide_swapped_for_a_link_hides_nothing(tmp_path: Path) -> None:
    """Another user can swap their socket under /tmp, listed by the plan, for a link to a
    file of ours before a worker starts: the hiding must not follow it there."""
    data = tmp_path / "weights.bin"
    data.write_text("model")
    swapped = tmp_path / "their.sock"
    swapped.symlink_to(data)
    read = """
    import json, sys
    print(json.dumps({"read": open(sys.argv[1]).read()}))
    """
    code, seen, err = finish(confined(Confinement(hidden=(str(swapped),)), read, str(data)))
    assert code == 0, err
    assert seen == {"read": "model"}


def test_nvidias_sockets_stay_reachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    """MPS's pipe folder (CUDA_MPS_PIPE_DIRECTORY, a device plugin's own) and the
    persistence daemon's are NVIDIA's: hidden, a worker's CUDA context would fail."""
    import socket

    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "mps-0"))
    kept = sandbox.gpu_socket_folders()
    assert tmp_path / "mps-0" in kept and Path("/run/nvidia-persistenced") in kept
    made = []
    for name in ("mps-0/control", "deep/a/b/c/d/e/agent.1", "nvidia-mps-look-alike/s"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(tmp_path / name))
        made.append(listener)
    try:
        found = [p for p in sandbox.listening_sockets(kept) if tmp_path in p.parents]
        assert sorted(found) == [tmp_path / "deep/a/b/c/d/e/agent.1",
                                 tmp_path / "nvidia-mps-look-alike/s"]
    finally:
        for listener in made:
            listener.close()


def test_the_plan(tmp_path: Path) -> None:
    repo, state = tmp_path / "repo", tmp_path / "state"
    cache = repo / ".abdiff"
    for folder in (repo / ".git", cache / "checkouts", cache / "runs", state):
        folder.mkdir(parents=True)
    plan = sandbox.plan(repo, repo / ".git", cache, state)
    assert str(state) in plan.hidden
    assert {str(repo), str(repo / ".git"), str(cache),
            str(ABDIFF_ROOT)} <= set(plan.read_only)
    # everything else read-only, the cache and the temporary folder too: what a worker may
    # write is added per worker (its round's folder, its side's folders)
    assert plan.all_read_only and str(cache) in plan.read_only and plan.writable == ()
    worker = Confinement.decode(sandbox.guard_options(plan, ("/r", "/s"))[1])
    assert worker.writable == ("/r", "/s")


def test_off_runs_without_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """--sandbox off says once what it loses, and the run file records it (the words)."""
    with caplog.at_level(logging.INFO, logger="abdiff"):
        off = sandbox.start("off", tmp_path, tmp_path, tmp_path, tmp_path)
    assert off.words == f"none (--sandbox off: {sandbox.LOST_WITHOUT})"
    assert off.options() == [] and off.options(ahead=True) == [] and off.narrowing(()) is None
    assert caplog.text.count("note: --sandbox off: ") == 1


# ---------------------------------------------------------------- where namespaces are refused

# a user namespace of the test's own whose limit of nested user namespaces is 0 (the limit
# is per namespace: the machine's is untouched): abdiff inside cannot make its sandbox
NO_USER_NAMESPACES = ["unshare", "--user", "--map-root-user", "sh", "-c",
                      'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh"]


@needs_namespaces
@pytest.mark.parametrize("mode", ["on", pytest.param("auto", marks=pytest.mark.slow)])
def test_where_namespaces_are_refused(mode: str, faulty_repo: Path, tmp_path: Path) -> None:
    """`on` refuses to measure (exit 3, one line saying why and what to do); `auto` measures
    and says once that the benchmark ran without a sandbox, and the run file records it."""
    suite = write_suite(tmp_path / "s.yaml", [2])
    proc = subprocess.run(
        [*NO_USER_NAMESPACES, *abdiff_argv(
            "main..main", "--configs", suite, "--repo", faulty_repo, "--cache-dir",
            tmp_path / "cache", "--rounds", 1, "--max-rounds", 1, "--sandbox", mode,
            "--prestart", "off")],
        env=git_env(), capture_output=True, text=True, timeout=240, check=False)
    if mode == "on":
        assert proc.returncode == 3, proc.stderr
        line = one_line(proc.stderr)
        assert line.startswith("abdiff: error: --sandbox on: workers cannot be sandboxed here "
                               "(unshare: No space left on device); allow unprivileged user "
                               "namespaces"), line
        return
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stderr.count("benchmark code runs without a sandbox here") == 1
    run_a = json.loads(next((tmp_path / "cache" / "runs").glob("*/a.json")).read_text())
    assert run_a["env"]["sandbox"].startswith("none (unshare: No space left on device")
    assert run_a["configs"][0]["id"] == config_id(2)


@needs_namespaces
def test_where_a_network_namespace_is_refused_the_rest_stays_and_says_so(tmp_path: Path
                                                                          ) -> None:
    """The kernel refusing network namespaces (for real: their count set to 0 in a user
    namespace around abdiff) leaves the sandbox's other namespaces, and abdiff says so."""
    probe = textwrap.dedent("""
        import logging, sys
        from pathlib import Path
        from abdiff.launchers import sandbox
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        here = Path(sys.argv[1])
        print(sandbox.start("auto", here, here, here, here / "state").words)
        """)
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c",
         'echo 0 > /proc/sys/user/max_net_namespaces && exec "$@"', "sh",
         sys.executable, "-c", probe, str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False, env=git_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("user, mount and pid namespaces (no network namespace: "
                                  "unshare: No space left on device)"), done.stdout
    assert "note: the benchmark's sandbox is partial here" in done.stderr


@needs_namespaces
def test_the_trial_says_why_it_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                      ) -> None:
    """A folder to keep read-only that does not exist: the trial start fails and says which
    mount. (One to hide that is gone is skipped: a socket whose server ended.)"""
    missing = tmp_path / "missing"
    failing = Confinement(read_only=(str(missing),))
    assert sandbox.trial(failing) == f"mount {missing}: No such file or directory"
    assert sandbox.trial(Confinement(hidden=(str(missing),))) is None
    monkeypatch.setattr(sandbox, "plan", lambda *args: failing)
    with pytest.raises(InfrastructureError):
        sandbox.start("on", tmp_path, tmp_path, tmp_path, tmp_path / "state")


LEAVER = r"""
import json, os, subprocess, sys, time
from pathlib import Path
from abdiff.launchers import process, sandbox
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.spec import LaunchSpec
from abdiff.store.sides import SideFolders, WorkerFolders
folder = Path(sys.argv[1])
for name in ("repo", "cache", "state"):
    (folder / name).mkdir()
runtime = Runtime()
runtime.leftovers.adopt()
runtime.sandbox = sandbox.start("on", folder / "repo", folder / "repo", folder / "cache",
                                folder / "state")
print(runtime.sandbox.words, file=sys.stderr)
# a fork server whose worker leaves a process behind (double fork, setsid) and exits, and
# a process that stays the server's child (as clone(CLONE_PARENT) from a worker makes one)
SERVER = '''
import os, sys, time
if os.fork() == 0:
    time.sleep(1.5)
    open(sys.argv[1] + "/sibling-outlived", "w").write("yes")
    os._exit(0)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(sys.argv[1] + "/left", "w").write(str(os.getppid()))
        time.sleep(1.5)
        open(sys.argv[1] + "/outlived", "w").write("yes")
        os._exit(0)
    os._exit(0)
time.sleep(30)
'''
# what a round's worker may write: its round's folder (where it leaves its marks)
marks = folder / "cache" / "runs" / "r0"
marks.mkdir()
folders = WorkerFolders(SideFolders.of(folder / "cache", "a" * 40, {}), marks)
folders.side.make()
server = process.start_process(LaunchSpec([sys.executable, "-c", SERVER, str(marks)], folder,
                                          folders=folders),
                               subprocess.DEVNULL, folder / "err.txt", None, None,
                               runtime=runtime)
while not (marks / "left").exists():
    time.sleep(0.01)
killed = runtime.leftovers.end()  # after the round
time.sleep(2.5)
print(json.dumps({"killed": len(killed), "server_alive": server.proc.poll() is None,
                  "outlived": (marks / "outlived").exists()
                  or (marks / "sibling-outlived").exists(),
                  "adopted_by": (marks / "left").read_text()}))
server.close()
runtime.close()
"""


@needs_namespaces
def test_a_leftover_in_a_servers_sandbox_ends_after_the_round(tmp_path: Path) -> None:
    """In the fork server's pid namespace a leftover comes to the namespace's first process,
    not to abdiff, or stays the server's child: the kill after the round finds both there,
    and the server lives on."""
    done = subprocess.run([sys.executable, "-c", LEAVER, str(tmp_path)], capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "user, mount, pid and network namespaces"
    seen = json.loads(done.stdout)
    assert seen["killed"] >= 2 and seen["adopted_by"] == "1"
    assert seen["server_alive"] and not seen["outlived"]


def test_ranks_srun_starts_are_not_abdiffs_to_sandbox(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture
                                                      ) -> None:
    """srun's ranks start under slurmd: `auto` says so once and records it, `on` refuses."""
    elsewhere = SrunLauncher.ranks_start_elsewhere
    with caplog.at_level(logging.INFO, logger="abdiff"):
        started = sandbox.start("auto", tmp_path, tmp_path, tmp_path, tmp_path, elsewhere)
    assert started.words == \
        "none (srun starts the ranks under slurmd, outside abdiff's process tree; " \
        f"{sandbox.LOST_WITHOUT})"
    assert started.options() == []
    assert caplog.text.count("runs without a sandbox here (srun starts") == 1
    with pytest.raises(InfrastructureError, match=r"--sandbox on: .*slurmd.*cluster's means"):
        sandbox.start("on", tmp_path, tmp_path, tmp_path, tmp_path, elsewhere)


HOPPER = r"""
import os, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
if os.fork() == 0:  # a leftover that changes its pid every 10 ms: a list of pids misses it
    os.setsid()
    deadline = time.time() + 3.0
    while time.time() < deadline:
        if os.fork():
            os._exit(0)
        time.sleep(0.01)
    (folder / "outlived").write_text("yes")
    os._exit(0)
"""

SWEEPER = r"""
import json, sys, time
from pathlib import Path
from abdiff.launchers import sandbox
from abdiff.launchers.forkserver import ForkServer
from abdiff.launchers.process import run_process
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.spec import ABDIFF_ROOT, LaunchSpec
from abdiff.store.sides import SideFolders, WorkerFolders
folder = Path(sys.argv[1])
for name in ("repo", "cache", "state", "job"):
    (folder / name).mkdir()
(folder / "job" / "hopper.py").write_text(sys.argv[2])
runtime = Runtime(sandbox.start("on", folder / "repo", folder / "repo", folder / "cache",
                                folder / "state"))
server = ForkServer(folder / "server", runtime)
runtime.pool = server
# what a round's worker may write: its round's folder (where it leaves its mark)
marks = folder / "cache" / "runs" / "r0"
marks.mkdir()
folders = WorkerFolders(SideFolders.of(folder / "cache", "a" * 40, {}), marks)
folders.side.make()
spec = LaunchSpec([sys.executable, "-m", "hopper", str(marks)], folder / "job",
                  {"PYTHONPATH": str(ABDIFF_ROOT)}, folders=folders)
outcome = run_process(spec, marks, marks / "progress", 60, runtime=runtime)
server.sweep()  # what abdiff does after the side's round
time.sleep(3.5)
print(json.dumps({"returncode": outcome.returncode, "outlived": (marks / "outlived").exists(),
                  "failure": server.failure, "forked": server.taken}))
server.close()
"""


@needs_namespaces
@pytest.mark.slow
def test_the_fork_servers_sweep_ends_a_leftover_that_hops_pids(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SWEEPER, str(tmp_path), HOPPER],
                          capture_output=True, text=True, check=False, timeout=180)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"returncode": 0, "outlived": False, "failure": None,
                                       "forked": 1}


@needs_namespaces
def test_an_empty_home_makes_no_mount_over_root(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME set but empty (as a test before this one left it in a CI run): the plan names /
    read-only; it is remounted in place, never bound over itself, where a user namespace
    made on top is refused (EPERM)."""
    monkeypatch.setenv("HOME", "")
    for name in ("repo", "cache", "state"):
        (tmp_path / name).mkdir()
    plan = sandbox.plan(tmp_path / "repo", tmp_path / "repo", tmp_path / "cache",
                        tmp_path / "state")
    assert "/" in plan.read_only and "/" not in plan.writable
    assert sandbox.trial(plan) is None


PLANTER = r"""
import json, sys
from pathlib import Path
from abdiff.launchers import sandbox
from abdiff.launchers.forkserver import ForkServers
from abdiff.launchers.runtime import Runtime
from abdiff.launchers.spec import ABDIFF_ROOT
from abdiff.store.sides import SideFolders, WorkerFolders
folder, narrowed = Path(sys.argv[1]), sys.argv[2] == "narrowed"
for name in ("repo", "cache", "state", "b/pkg"):
    (folder / name).mkdir(parents=True)
runtime = Runtime(sandbox.start("on", folder / "repo", folder / "repo", folder / "cache",
                                folder / "state"))
main_side = SideFolders.of(folder / "cache", "a" * 40, {})
pr_side = SideFolders.of(folder / "cache", "b" * 40, {})
main_side.make()
pr_side.make()
logs = folder / "cache" / "runs" / "key" / "logs"
logs.mkdir(parents=True)
# the pull request's package, imported ahead in its side's fork server: it plants a kernel
# where main's workers load DeepGEMM's
target = main_side.caches / "deep_gemm" / "planted.cubin"
(folder / "b" / "pkg" / "__init__.py").write_text(
    f"try:\n    open({str(target)!r}, 'w').write('x')\nexcept OSError:\n    pass\n")
pool = ForkServers(folder / "servers", runtime)
writes = {folder / "b": WorkerFolders(pr_side, logs)}
pool.prepare([folder / "b"], {"PYTHONPATH": str(ABDIFF_ROOT)}, ("pkg",),
             writes if narrowed else None)
print(json.dumps({"planted": target.exists(), "preimported": pool.preimported(folder / "b"),
                  "failure": pool.failure}))
pool.close()
"""


@needs_namespaces
@pytest.mark.slow
@pytest.mark.parametrize("narrowed", [True, False])
def test_a_preimport_writes_only_where_its_sides_workers_may(tmp_path: Path,
                                                             narrowed: bool) -> None:
    """The checkout's code runs in its side's fork server before any fork (the target's
    preimport): the server narrows its sandbox to its side's folders first. Without that
    (the control) the pull request's import plants a file in main's DeepGEMM cache."""
    done = subprocess.run([sys.executable, "-c", PLANTER, str(tmp_path),
                           "narrowed" if narrowed else "broad"],
                          capture_output=True, text=True, check=False, timeout=180)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["failure"] is None
    assert seen["preimported"].startswith("pkg imported once in the fork server")
    assert seen["planted"] is not narrowed


@needs_namespaces
@pytest.mark.parametrize(("limit", "said"), [
    (2, "a nested user namespace is refused: No space left on device"),
    (3, "None")])
def test_the_trial_start_checks_that_a_job_can_narrow_its_sandbox(limit: int,
                                                                   said: str) -> None:
    """A job given to a process started ahead narrows its sandbox in one more user
    namespace (guard.narrow): where the kernel refuses that (here a limit of nested user
    namespaces, the sandbox itself taking two), the trial start says so, and abdiff
    measures without the sandbox or refuses (--sandbox on); one more allowed: it works."""
    trial = ("from abdiff.launchers import sandbox; from abdiff.launchers.guard import "
             "Confinement; print(sandbox.trial(Confinement()))")
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c",
         f'echo {limit} > /proc/sys/user/max_user_namespaces && exec "$@"', "sh",
         sys.executable, "-c", trial], capture_output=True, text=True, timeout=60,
        check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == said


WRITE_THROUGH = """
import pathlib, sys
pathlib.Path(sys.argv[1], "planted.txt").write_text("written by the benchmark")
print("{}")
"""


@needs_namespaces
def test_a_link_planted_at_a_writable_folder_is_refused_not_bound(
        layout: dict[str, Path]) -> None:
    """An earlier worker of the side replaced its side's folder by a link to a folder of the
    user's: the next worker's sandbox would bind what the link names writable. guard.py
    refuses to start it instead; the control, without a sandbox, writes through the link."""
    build = layout["side"] / "build"
    build.symlink_to(layout["outside"], target_is_directory=True)
    confinement = sandbox.plan(layout["repo"], layout["git"], layout["repo"] / ".cache",
                               layout["state"])
    code, _, err = finish(confined(confinement, WRITE_THROUGH, str(build),
                                   writable=(str(layout["round"]), str(build))))
    assert code == 126 and "cannot sandbox the worker" in err
    assert not (layout["outside"] / "planted.txt").exists()
    control = subprocess.run([sys.executable, "-c", WRITE_THROUGH, str(build)],
                             capture_output=True, text=True, timeout=60, check=False)
    assert control.returncode == 0 and (layout["outside"] / "planted.txt").exists()
