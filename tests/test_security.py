"""abdiff runs no one's code by accident: no shell, revs checked before git sees them, YAML
loaded safely, credentials kept from benchmark processes, benchmark text escaped in reports.

The end-to-end checks read the session's fault run (tests/conftest.py), whose benchmark
really crashed with a hostile line on stderr and really saw the environment abdiff gave it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import (
    HOSTILE,
    INJECT_ANCHOR,
    PASSED_SECRET,
    SECRET_VALUE,
    SECRETS,
    FaultRun,
    abdiff_argv,
    config_id,
    git,
    git_env,
    one_line,
    process_running,
    run_abdiff,
    state_dir_of,
    worker_writable_folder,
    write_suite,
)

from abdiff.cli import main
from abdiff.demo import build_demo_repo
from abdiff.demo.builder import RUNNER_PATH
from abdiff.host.exposure import state_home
from abdiff.launchers import sandbox
from abdiff.launchers.guard import Confinement
from abdiff.launchers.process import worker_environment

SRC = Path(__file__).resolve().parents[1] / "abdiff"
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}
CI_SCRIPT = SRC.parent / "ci" / "abdiff-ci.sh"


def _python_files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return f"{_name(func.value)}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else ""


# ---------------------------------------------------------------- no shell, argv lists


def test_no_shell_anywhere() -> None:
    """No `shell=True`, no os.system/os.popen/getoutput, and no subprocess started from a
    string: every command is an argv list."""
    problems = []
    for path in _python_files():
        for call in _calls(ast.parse(path.read_text(encoding="utf-8"))):
            name = _name(call.func)
            where = f"{path.relative_to(SRC)}:{call.lineno}"
            for kw in call.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                              and kw.value.value is False):
                    problems.append(f"{where}: shell={ast.unparse(kw.value)}")
            if name in ("os.system", "os.popen", "subprocess.getoutput",
                        "subprocess.getstatusoutput", "os.execl", "os.execlp", "os.spawnl"):
                problems.append(f"{where}: {name}")
            if name.split(".")[-1] in SUBPROCESS_CALLS and name.startswith("subprocess.") \
                    and call.args and isinstance(call.args[0], ast.Constant | ast.JoinedStr):
                problems.append(f"{where}: {name} with a string command")
    assert problems == []


def test_yaml_only_through_the_safe_loader() -> None:
    unsafe = []
    for path in _python_files():
        text = path.read_text(encoding="utf-8")
        for call in _calls(ast.parse(text)):
            name = _name(call.func)
            if name in ("yaml.load", "yaml.load_all", "yaml.unsafe_load", "yaml.full_load",
                        "yaml.unsafe_load_all", "yaml.full_load_all"):
                unsafe.append(f"{path.relative_to(SRC)}:{call.lineno}: {name}")
        for loader in ("yaml.Loader", "yaml.FullLoader", "yaml.UnsafeLoader"):
            if loader in text:
                unsafe.append(f"{path.relative_to(SRC)}: {loader}")
    assert unsafe == []


def test_python_tags_in_a_suite_run_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            faulty_repo: Path) -> None:
    pwned = tmp_path / "PWNED"
    suite = tmp_path / "evil.yaml"
    suite.write_text(f'description: !!python/object/apply:os.system ["touch {pwned}"]\n'
                     "matrix: {run_type: [GEN]}\n")
    rc = main(["main..pr", "--configs", str(suite), "--repo", str(faulty_repo),
               "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "malformed YAML" in err and "python/object/apply" in err
    assert not pwned.exists()


# ---------------------------------------------------------------- revs are checked first


@pytest.fixture
def git_spy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `git` first on PATH that logs its argv (one line per call) and runs the real git."""
    real = next(Path(d) / "git" for d in os.environ["PATH"].split(os.pathsep)
                if (Path(d) / "git").is_file())
    folder = tmp_path / "spy"
    folder.mkdir()
    log = tmp_path / "git-calls.log"
    spy = folder / "git"
    spy.write_text(f'#!/bin/sh\nprintf "%s " "$@" >> "{log}"\necho >> "{log}"\n'
                   f'exec "{real}" "$@"\n')
    spy.chmod(spy.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    log.touch()
    return log


OPTION_REVS = [
    ["main..--upload-pack=touch {pwned}"],
    ["main...--upload-pack=touch {pwned}"],
    ["diff", "--upload-pack=touch {pwned}..main"],
    ["diff", "--", "--upload-pack=touch {pwned}..main"],
    ["run", "--", "--upload-pack=touch {pwned}"],
    ["baseline", "refresh", "rel", "--rev=--upload-pack=touch {pwned}"],
    ["baseline:rel..--upload-pack=touch {pwned}"],
    ["main..pr --upload-pack=touch {pwned}"],
    ["main..pr\n--upload-pack=touch {pwned}"],
    ["doctor", "main..--upload-pack=touch {pwned}"],
]


@pytest.mark.parametrize("words", OPTION_REVS, ids=lambda w: " ".join(w)[:40])
def test_option_like_revs_never_reach_git(words: list[str], tmp_path: Path, faulty_repo: Path,
                                          git_spy: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A rev such as `--upload-pack=CMD` is refused before git runs with it (git would run
    CMD); the answer is one line and exit 2."""
    pwned = tmp_path / "PWNED"
    suite = write_suite(tmp_path / "s.yaml", [1])
    argv = [w.format(pwned=pwned) for w in words]
    options = ["--repo", str(faulty_repo)]
    if argv[0] != "doctor":
        options += ["--configs", str(suite), "--cache-dir", str(tmp_path / "cache")]
    if argv[0] == "run":
        options += ["--out", str(tmp_path / "run.json")]
    rc = main([*argv, *options])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "upload-pack" not in git_spy.read_text()
    assert not pwned.exists()


# ---------------------------------------------------------------- credentials stay out

@pytest.mark.slow

def test_benchmark_never_sees_credentials(fault_run: FaultRun) -> None:
    """The benchmark process of a real run saw only the allowed part of abdiff's environment
    (credentials hidden in any name, plain variables too) plus what --pass-env named; its
    parent's /proc environ no longer holds the values, and HOME is its side's kept folder,
    without the CI user's ~/.netrc."""
    seen = fault_run.env_seen
    names = set(seen["names"])
    assert not names & set(SECRETS), names & set(SECRETS)
    assert PASSED_SECRET in names and "PATH" in names
    assert "ABDIFF_TEST_PLAIN" not in names
    # its parent (the fork server, not dumpable) keeps its environ from it; where it could
    # read it, the values are not there
    parent = seen["parent_environ"]
    assert SECRET_VALUE not in parent and "s3cr3t" not in parent
    assert "PATH=" in parent or parent == "PermissionError(13, 'Permission denied')"
    assert seen["netrc"] is None
    # its HOME is its side's, kept in the cache folder (sides.py), not the user's
    assert Path(seen["home"]).parent.parent == fault_run.tmp / "cache" / "sides"
    assert Path(seen["home"]).is_dir()  # kept for the side's next workers


@pytest.mark.parametrize("name", [*SECRETS, "GITHUB_TOKEN", "SSH_AUTH_SOCK", "AWS_SECRET_KEY",
                                  "MY_SERVICE_CREDENTIALS", "DJANGO_SECRET_KEY", "github_token",
                                  "Api_Password", "HOME", "SECRETARY", "TORCH_HUB_TOKEN"])
def test_only_allowed_variables_reach_workers(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "x")
    assert name not in worker_environment({})
    assert worker_environment({}, pass_env=[name])[name] == "x"


@pytest.mark.parametrize("name", ["PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "TERM",
                                  "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NCCL_DEBUG",
                                  "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                  "TORCH_CUDA_ARCH_LIST", "PYTORCH_CUDA_ALLOC_CONF",
                                  "TRITON_CACHE_DIR", "OMPI_MCA_btl", "PMIX_RANK", "SLURM_JOB_ID",
                                  "VIRTUAL_ENV", "CONDA_PREFIX", "HF_HOME", "HF_HUB_OFFLINE",
                                  "HF_HUB_CACHE", "TRANSFORMERS_OFFLINE"])
def test_what_benchmarks_need_passes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "x")
    assert worker_environment({})[name] == "x"


# A benchmark that looks for credentials where a process of the same user can find them.
SNOOP = """
import json, os, sys
try:
    parent = open(f"/proc/{os.getppid()}/environ", "rb").read().decode(errors="replace")
except OSError as exc:
    parent = repr(exc)
netrc = os.path.expanduser("~/.netrc")
json.dump({"parent": parent, "home": os.environ["HOME"], "names": sorted(os.environ),
           "netrc": open(netrc).read() if os.path.exists(netrc) else None},
          open(sys.argv[1], "w"))
"""
# abdiff's side: run the benchmark through the real process runner, as a round does.
PARENT = """
import sys
from pathlib import Path
from abdiff.launchers.process import run_process
from abdiff.launchers.spec import LaunchSpec
out = Path(sys.argv[1])
spec = LaunchSpec([sys.executable, "-c", sys.argv[2], str(out / "seen.json")], out)
sys.exit(run_process(spec, out / "logs", out / "progress", timeout_s=120).returncode)
"""


def test_a_snooping_benchmark_finds_no_credentials(tmp_path: Path) -> None:
    """A benchmark that reads /proc/$PPID/environ and ~/.netrc: abdiff's process was started
    with credentials in its environment and a ~/.netrc in its HOME, and the benchmark finds
    neither."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine github.com login ci password {SECRET_VALUE}\n")
    env = git_env()
    env.update({name: SECRET_VALUE for name in SECRETS}, HOME=str(home))
    proc = subprocess.run([sys.executable, "-c", PARENT, str(tmp_path), SNOOP], env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr + (tmp_path / "logs" / "stderr.txt").read_text()
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert SECRET_VALUE not in seen["parent"]
    assert f"PATH={os.environ['PATH']}" in seen["parent"]  # what workers get anyway stays
    assert not set(seen["names"]) & set(SECRETS)
    assert seen["netrc"] is None and seen["home"] != str(home)
    assert not Path(seen["home"]).exists()  # the temporary HOME is removed after the worker


def test_the_targets_variables_and_a_fresh_home(tmp_path: Path) -> None:
    env = worker_environment({"PYTHONPATH": "/probe", "ABDIFF_JOB": "1"}, home=tmp_path)
    assert env["PYTHONPATH"] == "/probe" and env["ABDIFF_JOB"] == "1"
    assert env["HOME"] == str(tmp_path)


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "GH_TOKEN", "ACTIONS_RUNTIME_TOKEN",
                                  "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "MY_SERVICE_API_KEY"])
def test_measuring_with_a_secret_is_refused(tmp_path: Path, faulty_repo: Path, name: str) -> None:
    """A token in the measuring process: exit 2, one line naming it and the next step, before
    any checkout."""
    suite = write_suite(tmp_path / "s.yaml", [1])
    env = git_env()
    env[name] = "s3cr3t"
    proc = run_abdiff("main..pr", "--configs", suite, "--repo", faulty_repo,
                      "--cache-dir", tmp_path / "cache", env=env)
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc.stderr)
    assert f"{name} (in abdiff's environment)" in line
    assert f"unset {name} for the measuring step" in line and "s3cr3t" not in line
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------- benchmark text is inert

@pytest.mark.slow

def test_hostile_error_line_is_escaped_in_markdown(fault_run: FaultRun) -> None:
    """The aborting benchmark's stderr line reaches the PR comment as inert text: no HTML,
    no link, no mention, no code span, no extra table cell, no terminal escape."""
    md = fault_run.markdown
    row = next(line for line in md.splitlines() if config_id(3) in line)
    assert "SIGABRT: DG\\_HOST\\_ASSERT failed: &lt;script&gt;alert(1)&lt;/script&gt; \\|" in row
    for raw in ("<script>", "</script>", "<b>", "[x](", "`tick`", "**bold**", "\x1b", "@octocat"):
        assert raw not in md
    assert "@\u200docto" in row and "#\u200d1" in row
    header = next(line for line in md.splitlines() if line.startswith("| Config |"))
    cells = len(re.findall(r"(?<!\\)\|", header))
    assert len(re.findall(r"(?<!\\)\|", row)) == cells


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in_script else self.text).append(data)

@pytest.mark.slow

def test_hostile_error_line_is_escaped_in_html(fault_run: FaultRun) -> None:
    page = _Text()
    page.feed(fault_run.html)
    shown = HOSTILE.replace("\x1b", "")  # control characters are dropped, the rest shown
    assert any(shown in text for text in page.text), "the error line is shown as text"
    assert not any("alert(1)" in script for script in page.scripts)
    assert "b" not in page.tags
    assert "<script>alert" not in fault_run.html

@pytest.mark.slow

def test_hostile_error_line_is_clean_in_the_terminal_table(
        fault_run: FaultRun, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = fault_run.state_dir / "a.json", fault_run.state_dir / "b.json"
    assert main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "DG_HOST_ASSERT failed: <script>" in out  # shown, as text
    assert "\x1b" not in out


# ---------------------------------------------------------------- a pull request as an attacker
#
# The `evil` commit's benchmark does, in every worker, what issue 35 found PR code could do:
# read every ancestor's environment, make main's sha stand for another commit (a replace
# ref in the shared .git), append code to main's cached checkout (for main's next round),
# leave a .pth file in a writable folder on its sys.path, steal abdiff's key for stored
# rounds, and leave a process behind that rewrites main's stored rounds and their hash once
# abdiff is done.
# The `payload` commit is what the replace ref points main at: it says when it runs.

CANARY = "abdiff-test-canary-4f1d"
FORGED_US = 123456.0
EVIL_MODULE = "tinyllm/tools/layer_wise_benchmarks/evil.py"
EVIL_PY = '''\\
"""A pull request's benchmark written by an attacker (abdiff's tests)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LOOT, ROOT = Path({loot!r}), {root!r}  # where it leaves what it found; the test's folder
GIT_DIR, MAIN, PAYLOAD, RUNNER = {git_dir!r}, {main!r}, {payload!r}, {runner!r}
KEY = Path({key!r})  # abdiff's key for stored rounds, where this user's abdiff keeps it


def ancestors_environ():
    found, pid = {{}}, os.getppid()
    while pid > 0:
        try:
            found[pid] = Path(f"/proc/{{pid}}/environ").read_bytes().decode(errors="replace")
        except OSError as exc:
            found[pid] = repr(exc)
        try:
            pid = int(Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return found


def outlive(state_dir):
    """A process that means to outlive the worker and abdiff, then rewrite the stored rounds
    (the test does that rewrite itself: this one must not get the chance)."""
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    (LOOT / "leftover-pid").write_text(str(os.getpid()))
    state_file, deadline = state_dir / "state.json", time.time() + 120
    while time.time() < deadline:
        try:
            if json.loads(state_file.read_text()).get("complete"):
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    time.sleep(3.0)  # abdiff has written its last state and exited
    (LOOT / "outlived").write_text(str(state_dir))
    os._exit(0)


def attack():
    (LOOT / f"environ-{{os.getpid()}}.json").write_text(json.dumps(ancestors_environ()))
    try:  # with it, stored rounds can be forged and signed
        (LOOT / "key-stolen").write_text(KEY.read_bytes().hex())
    except OSError:
        pass
    subprocess.run(["git", "--git-dir", GIT_DIR, "replace", "-f", MAIN, PAYLOAD],
                   capture_output=True, check=False)
    for folder in sys.path:  # the test's own environments only: never the developer's
        if folder.startswith(ROOT) and folder.endswith("site-packages"):
            Path(folder, "zz_evil.pth").write_text(  # says which environment ran it
                f"import sys; open({{str(LOOT / 'pth-ran')!r}}, 'a')"
                ".write(sys.prefix + '\\\\n')\\n")
            break
    job = json.loads(Path(sys.argv[-1]).read_text())
    state_dir = next(p for p in Path(job["record_path"]).parents if (p / "state.json").exists())
    for runner in (state_dir.parents[1] / "checkouts").glob(f"*/{{MAIN}}/{{RUNNER}}"):
        with open(runner, "a") as main_runner:  # main's next round runs this, if not restored
            main_runner.write("\\nimport pathlib; pathlib.Path("
                              f"{{str(LOOT / 'payload-ran')!r}}).touch()\\n")
    if not (LOOT / "leftover-pid").exists():
        outlive(state_dir)
'''


@dataclass(frozen=True)
class EvilRepo:
    path: Path
    shas: dict[str, str]
    loot: Path  # where its benchmark leaves what it found (a folder it can write)
    root: Path  # the test's folder (the measuring environments)


def build_evil_repo(tmp: Path) -> EvilRepo:
    repo, loot = tmp / "repo", worker_writable_folder("loot")
    shas = build_demo_repo(repo)
    runner = (repo / RUNNER_PATH).read_text(encoding="utf-8")
    git(repo, "checkout", "-q", "-b", "payload", "main")
    (repo / RUNNER_PATH).write_text(runner.replace(INJECT_ANCHOR, (
        f"        import pathlib\n        pathlib.Path({str(loot / 'payload-ran')!r}).touch()\n"
        + INJECT_ANCHOR)), encoding="utf-8")
    git(repo, "commit", "-q", "--no-verify", "-am", "what main's sha is made to stand for")
    shas["payload"] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "evil", "main")
    (repo / EVIL_MODULE).write_text(EVIL_PY.format(
        loot=str(loot), root=str(tmp), git_dir=str(repo / ".git"), main=shas["main"],
        payload=shas["payload"], runner=RUNNER_PATH, key=str(state_home() / "resume.key")),
        encoding="utf-8")
    (repo / RUNNER_PATH).write_text(runner.replace(INJECT_ANCHOR, (
        "        from tinyllm.tools.layer_wise_benchmarks.evil import attack\n\n"
        "        attack()\n" + INJECT_ANCHOR)), encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-verify", "-m", "a benchmark that attacks the runner")
    shas["evil"] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    return EvilRepo(repo, shas, loot, tmp)


@pytest.fixture(scope="module")
def evil(tmp_path_factory: pytest.TempPathFactory) -> EvilRepo:
    return build_evil_repo(tmp_path_factory.mktemp("evil"))


def make_venv(folder: Path, paths: list[str]) -> Path:
    """A virtual environment of its own (the base interpreter, no pip) that imports from
    `paths`; returns its python."""
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv",
                    "--without-pip", str(folder)], check=True, capture_output=True, timeout=120)
    python = folder / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "abdiff-test-paths.pth").write_text("".join(f"{p}\n" for p in paths))
    return python


def test_a_token_held_by_a_parent_is_refused_before_pr_code_runs(evil: EvilRepo,
                                                                  tmp_path: Path) -> None:
    """The old abdiff-ci.sh way: the script keeps GITHUB_TOKEN and starts abdiff without it
    (`env -u`). The benchmark could read it from the script's /proc/PID/environ, so abdiff
    refuses (exit 2) naming that process, and the evil benchmark never runs."""
    suite = write_suite(tmp_path / "s.yaml", [2])
    env = {**git_env(), "GITHUB_TOKEN": CANARY}
    script = 'env -u GITHUB_TOKEN "$@"; exit $?'
    proc = subprocess.run(["bash", "-c", script, "bash", *abdiff_argv(
        "main..evil", "--configs", suite, "--repo", evil.path, "--cache-dir", tmp_path / "c")],
        env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc.stderr)
    assert re.search(r"GITHUB_TOKEN \(in process \d+, bash, above abdiff\)", line), line
    assert CANARY not in line and not list(evil.loot.glob("environ-*"))


@pytest.mark.parametrize("posting", [False, True])
def test_ci_script_measures_only_without_a_token(evil: EvilRepo, tmp_path: Path,
                                                 posting: bool) -> None:
    """abdiff-ci.sh holding GITHUB_TOKEN in its measuring step (or asked to post in it):
    exit 2 before the benchmark runs."""
    env = {**git_env(), "GITHUB_TOKEN": CANARY, "ABDIFF_BIN": f"{sys.executable} -m abdiff",
           "ABDIFF_GH_REPO": "octo/bench", "ABDIFF_PR": "7"}
    if posting:
        env["ABDIFF_POST_COMMENT"] = "1"
    proc = subprocess.run(["bash", str(CI_SCRIPT), "--base", "main", "--head", "evil",
                           "--repo", str(evil.path), "--out", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert ("separate step" if posting else "unset GITHUB_TOKEN for the measuring") in proc.stderr
    assert not list(evil.loot.glob("environ-*"))


def test_python_m_abdiff_from_a_hostile_folder(tmp_path: Path) -> None:
    """A checkout that carries an `abdiff/` package, a sitecustomize.py and a usercustomize.py
    (each would write PWNED): `python -m abdiff` from there imports the checkout's abdiff
    (why the recipe uses -I), `python -I -m abdiff` the installed one, and runs none of it."""
    pwned = tmp_path / "PWNED"
    payload = f"import pathlib; pathlib.Path({str(pwned)!r}).touch()\n"
    hostile = tmp_path / "checkout"
    (hostile / "abdiff").mkdir(parents=True)
    for name in ("abdiff/__init__.py", "abdiff/__main__.py", "sitecustomize.py",
                 "usercustomize.py"):
        (hostile / name).write_text(payload)
    env = {**os.environ, "PYTHONPATH": str(hostile)}
    plain = subprocess.run([sys.executable, "-m", "abdiff", "--version"], cwd=hostile, env=env,
                           capture_output=True, text=True, timeout=60, check=False)
    assert pwned.exists()  # the attack is real without -I
    pwned.unlink()
    isolated = subprocess.run([sys.executable, "-I", "-m", "abdiff", "--version"], cwd=hostile,
                              env=env, capture_output=True, text=True, timeout=60, check=False)
    assert isolated.returncode == 0, isolated.stderr
    assert isolated.stdout.startswith("abdiff ") and not pwned.exists(), plain.stderr


def forge_rounds(state_dir: Path) -> None:
    """Rewrite side A's stored rounds and the SHA-256 recorded for them (no HMAC key)."""
    run_a = json.loads((state_dir / "a.json").read_text())
    for config in run_a["configs"]:
        for record in config["rounds"]:
            record["latency_us"] = [FORGED_US] * len(record.get("latency_us") or [1])
    (state_dir / "a.json").write_text(json.dumps(run_a))
    state = json.loads((state_dir / "state.json").read_text())
    state["files"]["a.json"] = hashlib.sha256((state_dir / "a.json").read_bytes()).hexdigest()
    (state_dir / "state.json").write_text(json.dumps(state))


def measuring_evil(evil: EvilRepo, tmp_path: Path, *options: object
                   ) -> tuple[Path, Callable[..., subprocess.CompletedProcess[str]]]:
    """A Python environment of its own for measuring main..evil (the attack writes a .pth
    into it), and a function that measures with `options` into a cache folder."""
    suite = write_suite(tmp_path / "s.yaml", [2])
    deps = [p for p in sys.path if p.endswith("site-packages")] + [str(SRC.parent)]
    measure_python = make_venv(evil.root / "measure-env", deps)
    (tmp_path / "home").mkdir()  # apart from the loot: home is read-only in the sandbox
    env = {**git_env(), "HOME": str(tmp_path / "home"), "ABDIFF_TEST_CANARY": "plain"}

    def measure(cache: Path, *extra: object) -> subprocess.CompletedProcess[str]:
        argv = [measure_python, "-m", "abdiff", "main..evil", "--configs", suite, "--repo",
                evil.path, "--cache-dir", cache, "--rounds", 2, "--max-rounds", 2, "--seed", 3,
                "--prestart", "on", "--json", tmp_path / "out" / "result.json", *options,
                *extra]
        return subprocess.run(
            [str(a) for a in argv],
            env=env, capture_output=True, text=True, timeout=300, check=False)

    return measure_python, measure


def environments_seen(loot: Path) -> dict[int, str]:
    """What the benchmark read from /proc/PID/environ of its ancestors, by pid."""
    return {int(pid): text for p in loot.glob("environ-*.json")
            for pid, text in json.loads(p.read_text()).items()}


@pytest.mark.slow
def test_a_pull_request_that_attacks_the_runner(evil: EvilRepo, tmp_path: Path) -> None:
    """The two-step recipe of docs/ci.md against the `evil` commit, then two later runs,
    without the sandbox (`--sandbox off`, as where the OS refuses namespaces): what holds
    then.

    Step 1 measures main..evil with no token anywhere above it. Step 2, after every process
    of step 1 has exited, posts with the token from an install the benchmark did not write
    (`python -I -m abdiff` from an empty folder). The process the benchmark left behind
    (double fork, setsid) ended with abdiff; main's rounds rewritten with a recomputed
    hash (what it meant to do) are measured anew on `--resume`, and a fresh cache finds
    main's sha replaced in .git."""
    measure_python, measure = measuring_evil(evil, tmp_path, "--sandbox", "off")
    post_python = make_venv(evil.root / "post-env", [str(SRC.parent)])
    env = {**git_env(), "HOME": str(tmp_path)}
    out = tmp_path / "out"

    first = measure(tmp_path / "cache")
    assert first.returncode in (0, 1), first.stderr
    # without a sandbox the key is the user's file, and it read it (the sandbox test below)
    assert (evil.loot / "key-stolen").exists()
    # the replace ref it wrote into .git is named in the result and on stderr
    notes = json.loads((out / "result.json").read_text())["notes"]
    assert any("refs changed while the benchmark ran (refs/replace/" in n for n in notes), notes
    assert "abdiff: warning: the repository's refs changed" in first.stderr
    # the benchmark did read its ancestors' environments: no token in any (none was in
    # reach), and abdiff's own blanked for what workers do not get
    seen = list(environments_seen(evil.loot).values())
    assert any("PATH=" in e for e in seen)
    assert not any(CANARY in e or "ABDIFF_TEST_CANARY=plain" in e for e in seen)
    # the process it left behind (double fork, setsid) ended with abdiff
    leftover = int((evil.loot / "leftover-pid").read_text())
    deadline = time.monotonic() + 10
    while process_running(leftover) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_running(leftover)
    time.sleep(3.5)
    assert not (evil.loot / "outlived").exists()
    # what it meant to do, done here: A's rounds rewritten and their hash recomputed
    forge_rounds(state_dir_of(first.stderr))

    # step 2: post (dry run) with the token, from a clean install and an empty folder
    empty = tmp_path / "empty"
    empty.mkdir()
    post = subprocess.run([post_python, "-I", "-m", "abdiff", "comment", "--repo", "octo/bench",
                           "--pr", "7", "--result", out / "result.json", "--dry-run"], cwd=empty,
                          env={**env, "GITHUB_TOKEN": CANARY}, capture_output=True, text=True,
                          timeout=60, check=False)
    assert post.returncode == 0, post.stderr
    ran_pth = (evil.loot / "pth-ran").read_text().split()
    assert "<!-- abdiff -->" in post.stdout and str(post_python.parents[1]) not in ran_pth
    # the .pth is real: main's later workers ran it, and so does the measuring install with -I
    (evil.loot / "pth-ran").unlink()
    subprocess.run([measure_python, "-I", "-c", "pass"], check=True, timeout=60)
    assert set((evil.loot / "pth-ran").read_text().split()) == {str(measure_python.parents[1])}

    # main's stored rounds forged with their hash: re-measured, and said so
    again = measure(tmp_path / "cache", "--resume")
    assert again.returncode in (0, 1), again.stderr
    assert "fail authentication" in again.stderr and "measuring anew" in again.stderr
    state = state_dir_of(again.stderr)
    rounds = json.loads((state / "a.json").read_text())["configs"][0]["rounds"]
    assert rounds and all(FORGED_US not in r["latency_us"] for r in rounds)

    # main's sha replaced by the payload commit in .git: a fresh cache still runs main
    assert git(evil.path, "show", f"{evil.shas['main']}:{RUNNER_PATH}").count("payload-ran")
    fresh = measure(tmp_path / "fresh-cache")
    assert fresh.returncode in (0, 1), fresh.stderr
    assert not (evil.loot / "payload-ran").exists()
    result = json.loads((out / "result.json").read_text())
    assert result["a"]["sha"] == evil.shas["main"]
    checkout_a = tmp_path / "fresh-cache" / "checkouts"
    runner_a = next(checkout_a.glob(f"*/{evil.shas['main']}")) / RUNNER_PATH
    assert "payload-ran" not in runner_a.read_text()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux")
                    or sandbox.trial(Confinement()) is not None,
                    reason="no user namespaces here")
def test_the_sandbox_stops_that_pull_request(tmp_path: Path) -> None:
    """The same `evil` commit measured with the default `--sandbox auto` where namespaces
    work: every attack of the benchmark fails. It finds no key, sees no process above its
    sandbox, writes no replace ref into .git, no .pth into the measuring environment, nothing
    into main's cached checkout; its leftover process dies with the round."""
    (tmp_path / "evil").mkdir()
    evil = build_evil_repo(tmp_path / "evil")
    measure_python, measure = measuring_evil(evil, tmp_path)
    first = measure(tmp_path / "cache")
    assert first.returncode in (0, 1), first.stderr
    assert "without a sandbox" not in first.stderr
    assert not (evil.loot / "key-stolen").exists()
    # the ancestors it could see: its sandbox's first process (1) and itself (2), no more
    seen = environments_seen(evil.loot)
    assert seen and set(seen) <= {1, 2}, sorted(seen)
    assert not any("ABDIFF_TEST_CANARY" in e for e in seen.values())
    # .git is read-only to it: no replace ref, no ref changed during the rounds
    assert git(evil.path, "replace", "-l") == ""
    notes = json.loads((tmp_path / "out" / "result.json").read_text())["notes"]
    assert not any("refs changed" in n for n in notes), notes
    # the measuring environment's site-packages are read-only to it: no .pth there
    subprocess.run([measure_python, "-I", "-c", "pass"], check=True, timeout=60)
    assert not (evil.loot / "pth-ran").exists()
    # main's cached checkout is read-only to it: main's rounds ran main
    assert not (evil.loot / "payload-ran").exists()
    # its leftover meant to rewrite the stored rounds once abdiff was done: it never did
    time.sleep(3.5)
    assert not (evil.loot / "outlived").exists()
    # and the run files say what the workers ran in
    run_b = json.loads(next((tmp_path / "cache" / "runs").glob("*/b.json")).read_text())
    assert run_b["env"]["sandbox"] == "user, mount, pid and network namespaces"


# ---------------------------------------------------------------- prying from inside the sandbox
#
# What a review found the benchmark could still do from inside the sandbox, each planted by
# the `pry` commit's benchmark in every worker of B: plant links where abdiff writes next (the
# next worker's job.json onto a branch ref, its stderr.txt into site-packages as a .pth),
# write its own stderr as a link to a secret of abdiff's user (which abdiff would read for it
# as the failure reason), reach into the fork server (its message pipe to abdiff), and
# write abdiff's Python environment and the user's site-packages.

PRY_MODULE = "tinyllm/tools/layer_wise_benchmarks/pry.py"
PRY_PY = '''\\
"""A pull request's benchmark that pries from inside abdiff's sandbox (abdiff's tests)."""
import json
import os
import sys
from pathlib import Path

LOOT, SECRET, REF, PTH = Path({loot!r}), {secret!r}, {ref!r}, {pth!r}
WRITES = {writes!r}


def pry():
    job = json.loads(Path(sys.argv[-1]).read_text())
    attempt = Path(job["record_path"]).parent
    seen = {{}}
    following = attempt.parent / f"worker{{int(attempt.name.removeprefix('worker')) + 1}}"
    try:
        following.mkdir()
        (following / "job.json").symlink_to(REF)
        (following / "stderr.txt").symlink_to(PTH)
        seen["planted"] = "yes"
    except OSError as exc:
        seen["planted"] = exc.strerror
    try:
        os.close(os.open(f"/proc/{{os.getppid()}}/fd/1", os.O_WRONLY))
        seen["server pipe"] = "opened"
    except OSError as exc:
        seen["server pipe"] = exc.strerror
    for path in WRITES:
        try:
            with open(path, "a") as handle:
                handle.write("\\nimport os  # pwned\\n")
            seen[path] = "written"
        except OSError as exc:
            seen[path] = exc.strerror
    (LOOT / f"seen-{{os.getpid()}}.json").write_text(json.dumps(seen))
    stderr = attempt / "stderr.txt"
    stderr.unlink()
    stderr.symlink_to(SECRET)  # abdiff reads the last line of a dead worker's stderr
    os._exit(1)
'''


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux")
                    or sandbox.trial(Confinement()) is not None,
                    reason="no user namespaces here")
def test_a_benchmark_that_pries_from_inside_the_sandbox(tmp_path: Path) -> None:
    home, loot, repo = tmp_path / "home", worker_writable_folder("pry"), tmp_path / "repo"
    (home / ".ssh").mkdir(parents=True)
    secret = home / ".netrc"
    secret.write_text(f"machine github.com login bot password {CANARY}\n")
    build_demo_repo(repo)
    deps = [p for p in sys.path if p.endswith("site-packages")] + [str(SRC.parent)]
    measure_python = make_venv(tmp_path / "measure-env", deps)
    env = {**git_env(), "HOME": str(home)}
    user_site = subprocess.run([measure_python, "-c", "import site; print(site.USER_SITE)"],
                               env=env, capture_output=True, text=True, check=True).stdout.strip()
    ref, pth = repo / ".git" / "refs" / "heads" / "pr", Path(user_site) / "zz_pry.pth"
    writes = [str(tmp_path / "measure-env" / "pyvenv.cfg"), str(pth),
              str(home / ".bashrc"), str(repo / ".git" / "HEAD")]
    config = (repo / ".git" / "config").read_text()  # hidden: a write to it meets /dev/null
    runner = (repo / RUNNER_PATH).read_text(encoding="utf-8")
    git(repo, "checkout", "-q", "-b", "pry", "main")
    (repo / PRY_MODULE).write_text(PRY_PY.format(
        loot=str(loot), secret=str(secret), ref=str(ref), pth=str(pth), writes=writes),
        encoding="utf-8")
    (repo / RUNNER_PATH).write_text(runner.replace(INJECT_ANCHOR, (
        "        from tinyllm.tools.layer_wise_benchmarks.pry import pry\n\n"
        "        pry()\n" + INJECT_ANCHOR)), encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-verify", "-m", "a benchmark that pries")
    git(repo, "checkout", "-q", "main")
    pr_before = git(repo, "rev-parse", "refs/heads/pr")
    (home / ".bashrc").write_text("# the user's\n")
    suite = write_suite(tmp_path / "s.yaml", [2, 8])
    out = tmp_path / "out"
    proc = subprocess.run([str(a) for a in (
        measure_python, "-m", "abdiff", "main..pry", "--configs", suite, "--repo", repo,
        "--cache-dir", tmp_path / "cache", "--rounds", 2, "--max-rounds", 2, "--seed", 5,
        "--json", out / "result.json", "--format", "markdown", "--output", out / "report.md")],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1, proc.stderr  # B's benchmark aborts: an unintended change
    seen = [json.loads(p.read_text()) for p in loot.glob("seen-*.json")]
    assert seen, proc.stderr
    # the links it planted for the next worker were removed before that worker's folder was
    # made (they were made: the folder is writable to it), nothing written through them
    assert git(repo, "rev-parse", "refs/heads/pr") == pr_before
    assert not pth.exists()
    # the fork server's pipe to abdiff is out of its reach (the server is not dumpable)
    assert all(s["server pipe"] == "Permission denied" for s in seen), seen
    # abdiff's Python environment, home and .git are read-only (and the user's
    # site-packages, which this environment does not read, cannot be made in a read-only home)
    for path in writes:
        assert all(s[path] in ("Read-only file system", "No such file or directory")
                   for s in seen), (path, seen)
    assert all(s[writes[0]] == s[writes[2]] == "Read-only file system" for s in seen)
    assert (home / ".bashrc").read_text() == "# the user's\n"
    assert (repo / ".git" / "config").read_text() == config
    # its stderr, a link to the user's .netrc, was not read for it: the secret is nowhere
    for text in (proc.stdout, proc.stderr, (out / "result.json").read_text(),
                 (out / "report.md").read_text(),
                 *(p.read_text() for p in (tmp_path / "cache" / "runs").glob("*/[ab].json"))):
        assert CANARY not in text


def test_a_promisor_remote_planted_in_git_config_runs_nothing(tmp_path: Path) -> None:
    """An earlier benchmark wrote into .git/config a "partial clone" remote whose fetch
    runs its own program (remote.X.uploadpack), allowed the file protocol over abdiff's
    `protocol.allow=never`, and deleted a commit's object: git would fetch the missing
    object lazily and run the program with git's environment. abdiff's git refuses every
    protocol, and the secret check comes before its first git command."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "f.txt").write_text("one\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-qm", "one")
    (repo / "f.txt").write_text("two\n")
    git(repo, "commit", "-qam", "two")
    sha = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    (repo / ".git" / "objects" / sha[:2] / sha[2:]).unlink()
    marker = tmp_path / "ran.txt"
    program = tmp_path / "upload-pack.sh"
    program.write_text(f"#!/bin/sh\nenv > {marker}\nexit 1\n")
    program.chmod(0o755)
    for key, value in (("core.repositoryformatversion", "1"),
                       ("extensions.partialClone", "evil"), ("remote.evil.promisor", "true"),
                       ("remote.evil.url", f"file://{tmp_path}/elsewhere"),
                       ("remote.evil.uploadpack", str(program)),
                       ("protocol.file.allow", "always")):
        git(repo, "config", key, value)
    # plain git, as the attacker meant it: the lazy fetch runs the program
    subprocess.run(["git", "-C", str(repo), "cat-file", "-e", sha], env=git_env(),
                   capture_output=True, check=False)
    assert marker.exists(), "the planted remote did not run under plain git: test is void"
    marker.unlink()
    from abdiff.repo.revs import run_git

    assert run_git(repo, "cat-file", "-e", sha, check=False).returncode != 0
    assert not marker.exists()
    # the whole command: the secret check refuses before abdiff runs any git
    env = {**git_env(), "GITHUB_TOKEN": "s3cr3t"}
    proc = run_abdiff(f"main..{sha}", "--configs", write_suite(tmp_path / "s.yaml", [1]),
                      "--repo", repo, "--cache-dir", tmp_path / "cache", env=env)
    assert proc.returncode == 2 and "GITHUB_TOKEN" in proc.stderr, proc.stderr
    assert not marker.exists()


def test_git_gets_an_allow_listed_environment(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    """abdiff blanks its own /proc/PID/environ, but its git commands' environ is readable
    while they run: they get only what git needs (an alias prints what git got)."""
    monkeypatch.setenv("DOCKER_AUTH_CONFIG", "canary-docker")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    from abdiff.repo.revs import run_git

    git(tmp_path, "init", "-q")
    seen = run_git(tmp_path, "-c", "alias.seen=!env", "seen").stdout
    assert "canary-docker" not in seen and "elsewhere" not in seen
    lines = seen.splitlines()
    assert "GIT_ALLOW_PROTOCOL=" in lines
    # git puts its own exec path first in an alias's PATH
    assert any(x.startswith("PATH=") and x.endswith(os.environ["PATH"]) for x in lines)


def test_refs_the_benchmark_moves_are_named(tmp_path: Path) -> None:
    from abdiff.repo.revs import moved_refs, refs_of

    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "one")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "two")
    before = refs_of(tmp_path)
    git(tmp_path, "update-ref", "refs/heads/main", "HEAD~1")
    git(tmp_path, "tag", "v1")
    moved = moved_refs(before, refs_of(tmp_path))
    assert [m.split(":")[0] for m in moved] == ["refs/heads/main", "refs/tags/v1"]
    assert moved[1].endswith("none -> " + git(tmp_path, "rev-parse", "v1").strip()[:10])

