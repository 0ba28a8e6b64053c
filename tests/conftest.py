"""Shared fixtures: demo repositories whose benchmark misbehaves for real, and a runner
for the `abdiff` command as a user starts it (a separate process).

`faulty_repo` is the demo repository plus two branches:

- `faulty`: `Runner.create_run_pack` calls `faults.inject(batch_size)` (FAULTS_PY
  below), which aborts, segfaults, raises, exits, hangs, eats memory or corrupts
  the record log depending on the batch size; other batch sizes run normally;
- `broken`: the runner module raises when imported, so no config can start.

`fault_run` runs one `abdiff main..faulty` over all the faults once per test
session; tests/test_faults.py and tests/test_security.py read its results.

Two tiers: `pytest` runs the unit tier (pyproject's addopts: -m "not slow"),
`pytest -m slow` the slow tier (end to end, real MPI/Slurm/Chromium, several
processes, fuzzing), `pytest --full` both.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from abdiff.demo import build_demo_repo
from abdiff.demo.builder import RUNNER_PATH
from abdiff.reports.table import DEFAULT_WIDTH

# The table report follows the terminal's width: tests read it at the width it has off a
# terminal (CI logs), whatever terminal pytest runs in; a test of the layout sets its own.
os.environ["COLUMNS"] = str(DEFAULT_WIDTH)

FAULTS_MODULE = "tinyllm/tools/layer_wise_benchmarks/faults.py"
HOSTILE = ("<script>alert(1)</script> | **bold** [x](http://evil.invalid) `tick` <b> "
           "@octocat #1 \x1b[31mred")
GRANDCHILD = "abdiff-test-grandchild"

# What the benchmark does per batch size on the `faulty` branch (any other size: nothing).
FAULTS_PY = f'''\
"""Fault injection for abdiff's tests: misbehave for some batch sizes."""
import ctypes
import json
import os
import resource
import subprocess
import sys
import time

HOSTILE = {HOSTILE!r}


def _job():
    with open(sys.argv[-1]) as handle:  # the worker's argv ends with its job file
        return json.load(handle)


def _grandchild():
    """A process of our own, as a benchmark's helper would be: it must die with us."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                             {GRANDCHILD!r}, _job()["record_path"]])


def inject(batch_size):
    dump = os.environ.get("ABDIFF_TEST_ENV_DUMP")
    if dump:  # what a hostile benchmark can find: its environment, its parent's, ~/.netrc
        try:
            with open(f"/proc/{{os.getppid()}}/environ", "rb") as handle:
                parent = handle.read().decode(errors="replace")
        except OSError as exc:
            parent = repr(exc)
        netrc = os.path.expanduser("~/.netrc")
        with open(dump, "w") as handle:
            json.dump({{"names": sorted(os.environ), "parent_environ": parent,
                       "home": os.environ.get("HOME"),
                       "netrc": open(netrc).read() if os.path.exists(netrc) else None}}, handle)
    if batch_size == 3:  # a host assert: message on stderr, then SIGABRT
        _grandchild()
        print("DG_HOST_ASSERT failed: " + HOSTILE, file=sys.stderr, flush=True)
        os.abort()
    if batch_size == 5:  # a real segmentation fault, silent
        ctypes.string_at(0)
    if batch_size == 6:
        raise ValueError("injected failure for batch_size 6")
    if batch_size == 7:
        os._exit(3)
    if batch_size == 9:  # hangs, with a helper process
        _grandchild()
        time.sleep(1000)
    if batch_size == 10:  # grows until the address-space limit stops it
        if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
            raise RuntimeError("refusing to eat memory without an address-space limit")
        hog = []
        while True:
            hog.append(bytearray(64 * 2**20))
    if batch_size == 11:  # garbage in the record log
        with open(_job()["record_path"], "a") as log:
            log.write("this is {{not json\\n")
    if batch_size == 12:  # a clean exit in the middle of a config
        os._exit(0)
    if batch_size == 13:  # a record that is JSON but not a valid record
        job = _job()
        cid = next(c["id"] for c in job["configs"] if c["params"]["batch_size"] == 13)
        with open(job["record_path"], "a") as log:
            log.write(json.dumps({{"event": "done", "id": cid,
                                  "record": {{"status": "great"}}}}) + "\\n")
    if batch_size == 14:  # slow, with a helper process: a window to interrupt abdiff in
        _grandchild()
        time.sleep(2)
    if batch_size == 15:  # slow, alone
        time.sleep(2)
'''

INJECT_ANCHOR = "        s = self.local_shapes\n        kv_cache_manager"
_INJECT_CALL = ("        from tinyllm.tools.layer_wise_benchmarks.faults import inject\n\n"
                "        inject(batch_size)\n")


# ---------------------------------------------------------------- test tiers


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true",
                     help="run both tiers: the unit tier and the slow tier (-m slow)")


def pytest_configure(config: pytest.Config) -> None:
    # pyproject's addopts select the unit tier (-m "not slow"); --full drops that selection
    if config.getoption("--full"):
        config.option.markexpr = ""


# ---------------------------------------------------------------- git and processes


@pytest.fixture(scope="session", autouse=True)
def abdiff_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """abdiff's own state (the key of stored rounds) in a folder of this session, not the
    user's ~/.local/state/abdiff; subprocesses inherit it. The one-time note for root is
    marked as given (test_exposure.py tests it): stderr is then the same for every user."""
    state = tmp_path_factory.mktemp("abdiff-state")
    (state / "root-warned").touch()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ABDIFF_STATE_DIR", str(state))
        yield


WORKER_WRITABLE: list[Path] = []  # `worker_writable_folder`'s, removed at the session's end


@pytest.fixture(scope="session", autouse=True)
def temporary_folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What abdiff makes in the temporary folder (a primed fork server's folder, kept when
    it failed or abdiff was killed) goes to a folder of this session, not the machine's
    /tmp; the folders tests made under /dev/shm (`worker_writable_folder`: memory) are
    removed at the session's end."""
    folder = tmp_path_factory.mktemp("tmpdir")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(folder))
        patch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
        yield
    for made in WORKER_WRITABLE:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def no_write_token() -> Iterator[None]:
    """CI may set GITHUB_TOKEN for the whole job; abdiff refuses to measure with it set,
    and no test should hand it to anything. Session-wide, so session fixtures run without it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("GITHUB_TOKEN", raising=False)
        yield



def git_env() -> dict[str, str]:
    """This environment without the user's or the system's git configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C",
               GIT_AUTHOR_NAME="Test", GIT_AUTHOR_EMAIL="test@example.com",
               GIT_COMMITTER_NAME="Test", GIT_COMMITTER_EMAIL="test@example.com")
    env.pop("ABDIFF_CACHE_DIR", None)
    return env


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=git_env()).stdout.strip()


@pytest.fixture
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed author and dates, no user or system git config, no repository above tmp_path,
    no abdiff cache from the environment (for tests that call git and abdiff in-process)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.delenv("ABDIFF_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "Test")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "test@example.com")
        monkeypatch.setenv(f"GIT_{who}_DATE", "2026-01-01T00:00:00+00:00")


def abdiff_argv(*args: object) -> list[str]:
    return [sys.executable, "-m", "abdiff.cli", *(str(a) for a in args)]


def run_abdiff(*args: object, env: dict[str, str] | None = None,
               timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`abdiff ARGS` in a fresh process, as a user or a CI job starts it."""
    return subprocess.run(abdiff_argv(*args), capture_output=True, text=True, timeout=timeout,
                          env=env or git_env(), stdin=subprocess.DEVNULL, check=False)


def processes_mentioning(text: str, exclude: set[int] | None = None) -> dict[int, str]:
    """Live processes (not zombies) whose command line or working folder contains `text`:
    pid -> cmdline (a pre-started worker's command line names no run, its folder does)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (exclude or set()):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if (text in cmdline or text in cwd) and state != "Z":
            found[int(entry.name)] = cmdline
    return found


def wait_for_no_processes(text: str, timeout: float = 10.0) -> dict[int, str]:
    """Processes mentioning `text` that are still alive after `timeout` (empty: none)."""
    deadline = time.monotonic() + timeout
    left = processes_mentioning(text)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = processes_mentioning(text)
    return left


def kill_leftovers(text: str) -> None:
    """Test cleanup: SIGKILL what a failing test left behind (by pid, ours only)."""
    for pid in processes_mentioning(text, exclude={os.getpid()}):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def one_line(stderr: str) -> str:
    """The one line abdiff prints on an error (notes such as "A/A run" aside); fails the test
    on a traceback or more lines."""
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("abdiff: note:")]
    assert len(lines) == 1, stderr
    return lines[0]


def state_dir_of(stderr: str) -> Path:
    match = re.search(r"^abdiff: .*run files in (\S+)$", "\n".join(unwrapped(stderr)),
                      re.MULTILINE)
    assert match, stderr
    return Path(match.group(1))


# ---------------------------------------------------------------- suites and repositories


def write_suite(path: Path, batch_sizes: list[int], backends: tuple[str, ...] = ("TRTLLM",),
                seq_len_q: tuple[int, ...] = (1,)) -> Path:
    """A tiny suite: GEN, kv 64, one warm-up and three timed iterations."""
    path.write_text(
        "warmup_times: 1\nrun_times: 3\n"
        "facts: [attn_metadata.max_total_draft_tokens]\n"
        "matrix:\n  run_type: [GEN]\n"
        f"  backend: [{', '.join(backends)}]\n"
        f"  batch_size: [{', '.join(map(str, batch_sizes))}]\n"
        f"  seq_len_q: [{', '.join(map(str, seq_len_q))}]\n"
        "  seq_len_kv_cache: [64]\n", encoding="utf-8")
    return path


def config_id(batch_size: int, backend: str = "TRTLLM", q: int = 1) -> str:
    return f"GEN-{backend}-bs{batch_size}-q{q}-kv64"


def build_faulty_repo(path: Path) -> dict[str, str]:
    """The demo repository plus the `faulty` and `broken` branches; returns branch -> sha."""
    shas = build_demo_repo(path)
    runner = (path / RUNNER_PATH).read_text(encoding="utf-8")
    assert runner.count(INJECT_ANCHOR) == 1, "the demo runner changed: update INJECT_ANCHOR"
    git(path, "checkout", "-q", "-b", "faulty", "main")
    (path / FAULTS_MODULE).write_text(FAULTS_PY, encoding="utf-8")
    (path / RUNNER_PATH).write_text(runner.replace(INJECT_ANCHOR, _INJECT_CALL + INJECT_ANCHOR),
                                    encoding="utf-8")
    git(path, "add", "-A")
    git(path, "commit", "-q", "--no-verify", "-m", "faulty benchmark")
    shas["faulty"] = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "-b", "broken", "main")
    (path / RUNNER_PATH).write_text(
        runner + '\nraise RuntimeError("injected import failure: the harness cannot load")\n',
        encoding="utf-8")
    git(path, "commit", "-q", "--no-verify", "-am", "runner that cannot be imported")
    shas["broken"] = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "main")
    return shas


@pytest.fixture(scope="session")
def faulty_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared and read-only for tests (each test uses its own cache folder)."""
    path = tmp_path_factory.mktemp("faulty") / "repo"
    build_faulty_repo(path)
    return path


# ---------------------------------------------------------------- the fault run

# batch size on `faulty` -> (B's status, B's error: exact text, or a regex)
FAULTS: dict[int, tuple[str, str]] = {
    3: ("aborted", re.escape("SIGABRT: DG_HOST_ASSERT failed: " + HOSTILE)),
    5: ("aborted", "SIGSEGV"),
    6: ("failed", "ValueError: injected failure for batch_size 6"),
    7: ("failed", "exit code 3"),
    9: ("timeout", re.escape("no progress within 8 s (--timeout); process group killed")),
    10: ("failed", re.escape("MemoryError (out of memory; address-space limit 1536 MiB, "
                             "--max-memory)")),
    11: ("failed", r"malformed record: line \d+: not JSON"),
    12: ("failed", re.escape("worker exited with code 0 before writing this config's record")),
    13: ("failed", r"malformed record: .*status must be one of 'ok', .*got 'great'"),
}
HEALTHY = (1, 2)
# healthy first and last, the ValueError before silent deaths (whose reason must not borrow
# its traceback)
FAULT_ORDER = [1, 3, 6, 5, 7, 9, 10, 11, 12, 13, 2]
FAULT_ROUNDS = 2
PASSED_SECRET = "KEEP_THIS_TOKEN"
SECRET_VALUE = "s3cr3t-value"
# GITHUB_TOKEN is not here: abdiff refuses to measure while it is set (test_security.py).
SECRETS = ("GH_TOKEN", "GH_PAT", "PIP_INDEX_URL", "HTTPS_PROXY", "DOCKER_AUTH_CONFIG",
           "CI_JOB_JWT_V2", "DEPLOY_KEY", "REGISTRY_CREDS", "GIT_CONFIG_VALUE_0", "GIT_ASKPASS",
           "SLURM_JWT", "CI_JOB_TOKEN", "DB_PASSWORD", "APP_SECRET",
           "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AZURE_CLIENT_SECRET", "OPENAI_API_KEY",
           "GOOGLE_APPLICATION_CREDENTIALS", "HF_TOKEN", "DEPLOY_PRIVATE_KEY", "npm_token")


@dataclass
class FaultRun:
    tmp: Path
    proc: subprocess.CompletedProcess[str]
    seconds: float
    result: dict
    runs: dict[str, dict]  # "A"/"B" -> run file JSON from the state folder
    state_dir: Path
    markdown: str
    html: str
    env_seen: dict[str, Any]  # what the benchmark found (FAULTS_PY: inject)
    home: Path  # abdiff's HOME, holding a ~/.netrc
    orphans: dict[int, str]


def worker_writable_folder(name: str) -> Path:
    """A folder a sandboxed worker can still write, for a planted benchmark to leave what it
    found: one under /dev/shm, which the sandbox leaves shared (docs/ci.md: NCCL needs it;
    every other folder but its round's and its side's is read-only to it)."""
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix=f"abdiff-test-{name}-",
                                   dir=shm if shm.is_dir() else None))
    WORKER_WRITABLE.append(folder)
    return folder


@pytest.fixture(scope="session")
def fault_run(faulty_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> FaultRun:
    """`abdiff main..faulty` over every fault at once, two rounds, as a CI job runs it."""
    tmp = tmp_path_factory.mktemp("fault-run")
    suite = write_suite(tmp / "faults.yaml", FAULT_ORDER)
    env = git_env()
    env.update({name: SECRET_VALUE for name in SECRETS})
    env[PASSED_SECRET] = "passed-on-purpose"
    env["ABDIFF_TEST_PLAIN"] = "plain"
    dump = worker_writable_folder("env-dump") / "env-seen.json"
    env["ABDIFF_TEST_ENV_DUMP"] = str(dump)
    home = tmp / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine github.com login ci password {SECRET_VALUE}\n")
    env["HOME"] = str(home)
    start = time.monotonic()
    try:
        proc = run_abdiff(
            "main..faulty", "--configs", suite, "--repo", faulty_repo, "--cache-dir",
            tmp / "cache", "--target", "reference", "--rounds", FAULT_ROUNDS, "--max-rounds",
            FAULT_ROUNDS, "--seed", 1, "--timeout", 8, "--max-memory", "1536M",
            "--prestart", "on",  # every fault in a worker started ahead of its job
            "--pass-env", PASSED_SECRET, "--pass-env", "ABDIFF_TEST_ENV_DUMP",
            # the secrets are set to show that workers do not get them: measure anyway
            "--unsafe-allow-secret-env",
            "--format", "markdown", "--output", tmp / "report.md",
            "--html", tmp / "report.html", "--json", tmp / "result.json", env=env)
        seconds = time.monotonic() - start
        orphans = wait_for_no_processes(str(tmp), timeout=5)
    finally:
        kill_leftovers(str(tmp))
    state = state_dir_of(proc.stderr)
    return FaultRun(
        tmp=tmp, proc=proc, seconds=seconds,
        result=json.loads((tmp / "result.json").read_text()),
        runs={side: json.loads((state / f"{side.lower()}.json").read_text()) for side in "AB"},
        state_dir=state,
        markdown=(tmp / "report.md").read_text(), html=(tmp / "report.html").read_text(),
        env_seen=json.loads(dump.read_text()), home=home, orphans=orphans,
    )


def launcher_env(cluster_env: dict[str, str] | None = None) -> dict[str, str]:
    """git_env (or a Slurm cluster's) for real mpirun/srun ranks on a CI machine."""
    env = dict(cluster_env or git_env())
    env["ABDIFF_MPIRUN_ARGS"] = "--oversubscribe"  # CI machines may have fewer cores than ranks
    env["ABDIFF_SRUN_MPI"] = "none"  # gloo needs no MPI plugin; Debian's PMIx may not load
    for name in ("CONTAINER_NAME", "ABDIFF_SRUN_CONTAINER"):  # no pyxis on the test cluster
        env.pop(name, None)
    return env


def process_running(pid: int) -> bool:
    """Whether `pid` still runs: a zombie has ended (an orphan's waits for a PID 1 that may
    never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


H200_DATA = Path(__file__).parent / "data" / "h200"


def h200_with_kernels(name: str, folder: Path) -> Path:
    """tests/data/h200/NAME-kernels.json.gz (an H200 run file that keeps its kernel
    counts) unpacked into `folder`; the path of the run file."""
    target = folder / f"{name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(H200_DATA / f"{name}-kernels.json.gz", "rt") as packed:
        target.write_text(packed.read())
    return target


def unwrapped(text: str) -> list[str]:
    """Lines as abdiff printed them before wrapping them to the terminal: a continuation is
    indented four more than its paragraph's first line (reports.table.fit), or is the
    report's own indent after `note:` (2), `next:` (6) or the verdict line (8)."""
    out: list[str] = []
    indents: list[int] = []
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        if out and line.strip() and out[-1].strip():
            first = out[-1]
            hanging = {"note: ": 2, "next: ": 6, "abdiff: ": 8}
            if indent == indents[-1] + 4 or any(
                    first.startswith(p) and indent == n for p, n in hanging.items()):
                out[-1] += " " + line.strip()
                continue
        out.append(line)
        indents.append(indent)
    return out
