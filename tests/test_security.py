"""abdiff runs no one's code by accident: no shell, revs checked before git sees them, YAML
loaded safely, credentials kept from benchmark processes, benchmark text escaped in reports.

The end-to-end checks read the session's fault run (tests/conftest.py), whose benchmark
really crashed with a hostile line on stderr and really saw the environment abdiff gave it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import (
    HOSTILE,
    PASSED_SECRET,
    SECRET_VALUE,
    SECRETS,
    FaultRun,
    config_id,
    git_env,
    one_line,
    run_abdiff,
    write_suite,
)

from abdiff.cli import main
from abdiff.launchers.process import worker_environment

SRC = Path(__file__).resolve().parents[1] / "abdiff"
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}


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
    parent's /proc environ no longer holds the values, and HOME is a fresh folder without
    the CI user's ~/.netrc."""
    seen = fault_run.env_seen
    names = set(seen["names"])
    assert not names & set(SECRETS), names & set(SECRETS)
    assert PASSED_SECRET in names and "PATH" in names
    assert "ABDIFF_TEST_PLAIN" not in names
    assert SECRET_VALUE not in seen["parent_environ"]
    assert "s3cr3t" not in seen["parent_environ"] and "PATH=" in seen["parent_environ"]
    assert seen["netrc"] is None
    assert seen["home"] != str(fault_run.home) and "abdiff-home-" in seen["home"]
    assert not Path(seen["home"]).exists()  # removed after the worker


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
from abdiff.targets.base import LaunchSpec
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


def test_measuring_with_a_write_token_is_refused(tmp_path: Path, faulty_repo: Path) -> None:
    """GITHUB_TOKEN in the measuring process: exit 2, one line, before any checkout."""
    suite = write_suite(tmp_path / "s.yaml", [1])
    env = git_env()
    env["GITHUB_TOKEN"] = "ghs_write"
    proc = run_abdiff("main..pr", "--configs", suite, "--repo", faulty_repo,
                      "--cache-dir", tmp_path / "cache", env=env)
    assert proc.returncode == 2, proc.stderr
    assert "GITHUB_TOKEN is set" in one_line(proc.stderr)
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
