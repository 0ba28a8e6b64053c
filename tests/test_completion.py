"""Shell completion (abdiff/completion.py): what TAB offers, asked as the shell asks it
(a real `abdiff` process with argcomplete's environment), and through bash itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import abdiff_argv, git_env

from abdiff.demo import build_demo_repo

pytest.importorskip("argcomplete")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("completion") / "demo"
    build_demo_repo(repo)
    baselines = repo / "baselines"
    baselines.mkdir()
    for name in ("release-1", "release-2"):
        (baselines / f"{name}.json").write_text("{}")
    return repo


def complete(line: str, cwd: Path, tmp_path: Path) -> list[str]:
    """The completions of `line` with the cursor at its end."""
    out = tmp_path / "completions.txt"
    env = {**git_env(), "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_STDOUT_FILENAME": str(out)}
    done = subprocess.run(abdiff_argv(), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [c.strip() for c in out.read_text().split("\n") if c.strip()]


@pytest.mark.parametrize(("line", "offered"), [
    ("abdiff d", ["diff", "demo", "doctor"]),
    ("abdiff ma", ["main.."]),
    ("abdiff main..p", ["main..pr", "main..pr-v1"]),
    ("abdiff main...pr-", ["main...pr-v1"]),
    ("abdiff doctor main..pr-", ["main..pr-v1"]),
    ("abdiff main..pr --configs m", ["mtp", "mtp-hopper"]),
    ("abdiff main..pr --configs mtp --expect backend=", ["backend=DSA", "backend=TRTLLM"]),
    ("abdiff history GEN-TRTLLM-bs8-q", ["GEN-TRTLLM-bs8-q1-kv2049", "GEN-TRTLLM-bs8-q2-kv2049",
                                         "GEN-TRTLLM-bs8-q4-kv2049"]),
    ("abdiff bisect main..pr --configs mtp --config GEN-DSA-bs32-q", [
        "GEN-DSA-bs32-q1-kv2049", "GEN-DSA-bs32-q2-kv2049", "GEN-DSA-bs32-q4-kv2049"]),
    ("abdiff baseline show rel", ["release-1", "release-2"]),
    ("abdiff main..pr --max-r", ["--max-rounds"]),
])
def test_tab_offers(line: str, offered: list[str], demo: Path, tmp_path: Path) -> None:
    assert complete(line, demo, tmp_path) == offered


# the scripts of the environment running the tests, activated or not (not whatever PATH has)
BIN = Path(sys.executable).parent


@pytest.mark.skipif(not shutil.which("bash") or not (BIN / "register-python-argcomplete").exists()
                    or not (BIN / "abdiff").exists(),
                    reason="needs bash, and abdiff and argcomplete's script installed here")
def test_bash_completes_a_range(demo: Path) -> None:
    """The set-up docs/completion.md gives, in bash: `abdiff main..p<TAB>`, with the
    environment's scripts first on PATH as activating it would put them (the test runs
    the same whether or not it is activated)."""
    script = ('eval "$(register-python-argcomplete abdiff)"; COMP_LINE="abdiff main..p"; '
              "COMP_POINT=${#COMP_LINE}; COMP_WORDS=(abdiff main..p); COMP_CWORD=1; "
              '_python_argcomplete abdiff; printf "%s\\n" "${COMPREPLY[@]}"')
    env = {**git_env(), "PATH": f"{BIN}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], cwd=demo, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.stdout.split() == ["main..pr", "main..pr-v1"], done.stderr
