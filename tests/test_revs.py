"""Range parsing and resolution against real git repositories made in tmp_path."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abdiff.errors import InputError
from abdiff.repo.revs import (
    WORKTREE,
    RevRange,
    SideSpec,
    open_repo,
    parse_range,
    resolve_range,
    resolve_rev,
)

pytestmark = pytest.mark.usefixtures("isolated_git")

def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def commit(repo: Path, name: str, text: str, message: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> dict[str, str | Path]:
    """main: c1 - c2; feature: c1 - c3 (so main...feature has merge base c1)."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    c1 = commit(root, "a.txt", "one\n", "c1")
    git(root, "branch", "feature")
    c2 = commit(root, "a.txt", "two\n", "c2")
    git(root, "checkout", "-q", "feature")
    c3 = commit(root, "b.txt", "three\n", "c3")
    git(root, "checkout", "-q", "main")
    return {"root": root, "c1": c1, "c2": c2, "c3": c3}


# ---------------------------------------------------------------- parse_range


@pytest.mark.parametrize(("text", "expected"), [
    ("main..pr", RevRange("main", "pr", False)),
    ("main...pr", RevRange("main", "pr", True)),
    ("main..", RevRange("main", None, False)),
    ("v1.0..v1.1", RevRange("v1.0", "v1.1", False)),
    ("HEAD~3..HEAD^", RevRange("HEAD~3", "HEAD^", False)),
    ("origin/main...feature/x", RevRange("origin/main", "feature/x", True)),
    ("HEAD@{1}..HEAD", RevRange("HEAD@{1}", "HEAD", False)),
])
def test_parse_range_valid(text: str, expected: RevRange) -> None:
    assert parse_range(text) == expected


@pytest.mark.parametrize("text", [
    "", "main", "..pr", "...pr", "main...", "a....b", "a..b..c", "a..b...c", "..",
    "--upload-pack=x..main", "main..--upload-pack=x", "-x..main", "main..-x",
    "ma in..pr", "main..p\tr", "main..pr\n", "main\x00..pr", "main..pr\x1b",
])
def test_parse_range_invalid(text: str) -> None:
    with pytest.raises(InputError):
        parse_range(text)


@given(st.text())
def test_parse_range_total(text: str) -> None:
    """Arbitrary text: a RevRange or an InputError, never anything else."""
    try:
        result = parse_range(text)
    except InputError:
        return
    assert isinstance(result, RevRange)
    assert result.a and not result.a.startswith("-")
    assert result.b is None or (result.b and not result.b.startswith("-"))


_REV = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_/~^.]{0,12}", fullmatch=True).filter(
    lambda r: ".." not in r and not r.endswith("."))


@given(_REV, _REV, st.sampled_from(["..", "..."]))
def test_parse_range_roundtrip(a: str, b: str, sep: str) -> None:
    assert parse_range(f"{a}{sep}{b}") == RevRange(a, b, sep == "...")


# ---------------------------------------------------------------- resolution


def test_two_dots(repo: dict) -> None:
    a, b = resolve_range(repo["root"], "main..feature")
    assert a == SideSpec("main", repo["c2"])
    assert b == SideSpec("feature", repo["c3"])


def test_three_dots_uses_merge_base(repo: dict) -> None:
    a, b = resolve_range(repo["root"], "main...feature")
    assert a.sha == repo["c1"]
    assert "main" in a.rev and "feature" in a.rev
    assert b == SideSpec("feature", repo["c3"])


def test_open_end_is_worktree(repo: dict) -> None:
    a, b = resolve_range(repo["root"], "main~1..")
    assert a == SideSpec("main~1", repo["c1"])
    assert b.sha == WORKTREE


def test_open_end_with_detached_head(repo: dict) -> None:
    git(repo["root"], "checkout", "-q", "--detach", repo["c1"])
    a, b = resolve_range(repo["root"], "HEAD..")
    assert a.sha == repo["c1"]
    assert b.sha == WORKTREE


def test_full_sha(repo: dict) -> None:
    assert resolve_rev(repo["root"], repo["c3"]).sha == repo["c3"]
    assert resolve_rev(repo["root"], repo["c3"][:10]).sha == repo["c3"]


def test_unknown_rev(repo: dict) -> None:
    with pytest.raises(InputError, match="unknown revision 'nope'") as info:
        resolve_range(repo["root"], "main..nope")
    assert str(repo["root"]) in str(info.value)


def test_not_a_commit(repo: dict) -> None:
    with pytest.raises(InputError, match="tree"):
        resolve_rev(repo["root"], "HEAD^{tree}")


@pytest.mark.parametrize("rev", [
    "--upload-pack=touch pwned", "--upload-pack=x", "-x", "--output=pwned", "-", "",
    "main branch", "a\nb", "a..b",
])
def test_option_like_revs_refused(repo: dict, rev: str) -> None:
    with pytest.raises(InputError):
        resolve_rev(repo["root"], rev)
    assert not (repo["root"] / "pwned").exists()
    assert not Path("pwned").exists()


def test_unrelated_histories(repo: dict) -> None:
    root = repo["root"]
    git(root, "checkout", "-q", "--orphan", "other")
    git(root, "rm", "-q", "-rf", ".")
    commit(root, "c.txt", "other\n", "unrelated")
    git(root, "checkout", "-q", "main")
    with pytest.raises(InputError, match="no merge base"):
        resolve_range(root, "main...other")
    a, b = resolve_range(root, "main..other")  # two dots need no common history
    assert a.sha == repo["c2"]


def test_shallow_clone_missing_commit(repo: dict, tmp_path: Path) -> None:
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "main",
        f"file://{repo['root']}", str(shallow))
    assert resolve_rev(shallow, "HEAD").sha == repo["c2"]
    for rev in (repo["c1"], "HEAD~1"):
        with pytest.raises(InputError, match="shallow") as info:
            resolve_rev(shallow, rev)
        assert "git fetch --unshallow" in str(info.value)


def test_not_a_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(InputError, match="not in a git repository"):
        open_repo(plain)
    with pytest.raises(InputError, match="does not exist"):
        open_repo(tmp_path / "missing")


def test_open_repo_from_subfolder(repo: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = repo["root"] / "deep" / "er"
    sub.mkdir(parents=True)
    assert open_repo(sub) == repo["root"].resolve()
    monkeypatch.chdir(sub)
    assert open_repo() == repo["root"].resolve()
    assert open_repo(repo["root"] / ".git") == repo["root"].resolve()


def test_bare_repository(repo: dict, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo["root"]), str(bare))
    root = open_repo(bare)
    assert root == bare.resolve()
    with pytest.raises(InputError, match="bare"):
        resolve_range(root, "main..")
    a, b = resolve_range(root, "main...feature")
    assert (a.sha, b.sha) == (repo["c1"], repo["c3"])
