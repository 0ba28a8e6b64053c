"""The worktree cache against real git repositories made in tmp_path."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from abdiff.errors import InfrastructureError, InputError
from abdiff.repo import checkouts as checkouts_module
from abdiff.repo.checkouts import (
    CheckoutCache,
    clean_cache,
    default_cache_dir,
    verify_commit_checkout,
)
from abdiff.repo.revs import WORKTREE, SideSpec, resolve_range, resolve_rev

pytestmark = pytest.mark.usefixtures("isolated_git")

def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def commit_files(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_repo(path: Path) -> tuple[Path, str, str]:
    """A repository with a tiny importable package; returns (root, c1, c2)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    c1 = commit_files(path, {"bench/__init__.py": "", "bench/value.py": "VALUE = 1\n",
                             ".gitignore": "*.log\n", "gone.txt": "x\n"}, "c1")
    c2 = commit_files(path, {"bench/value.py": "VALUE = 2\n"}, "c2")
    return path, c1, c2


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def user_state(root: Path) -> dict[str, str]:
    """Everything of the user's repository that a checkout must leave as it was."""
    return {
        "status": git(root, "status", "--porcelain", "--untracked-files=all", "--ignored"),
        "head": git(root, "rev-parse", "HEAD"),
        "symbolic": git(root, "symbolic-ref", "-q", "HEAD"),
        "branches": git(root, "for-each-ref", "--format=%(refname) %(objectname)"),
        "index": git(root, "ls-files", "-s"),
        "staged": git(root, "diff", "--cached"),
        "unstaged": git(root, "diff"),
        "stash": git(root, "stash", "list"),
    }


def dirty(root: Path) -> None:
    """An uncommitted modification, a staged file, an untracked file, an ignored one, a deletion."""
    (root / "bench" / "value.py").write_text("VALUE = 3\n")
    (root / "staged.txt").write_text("staged\n")
    git(root, "add", "staged.txt")
    (root / "bench" / "extra.py").write_text("EXTRA = 'untracked'\n")
    (root / "debug.log").write_text("ignored\n")
    (root / "gone.txt").unlink()


def registered(root: Path) -> list[str]:
    out = git(root, "worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def checkout_is_valid(folder: Path, sha: str) -> bool:
    return (folder.is_dir() and git(folder, "rev-parse", "HEAD") == sha
            and git(folder, "status", "--porcelain") == ""
            and folder.with_name(folder.name + ".done").read_text().strip() == sha)


# ---------------------------------------------------------------- commits


def test_checkout_both_sides(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    root, c1, c2 = repo
    side_a, side_b = resolve_range(root, "main~1..main")
    cache = CheckoutCache(root, cache_dir)
    folder_a, folder_b = cache.checkout(side_a), cache.checkout(side_b)
    assert (folder_a / "bench" / "value.py").read_text() == "VALUE = 1\n"
    assert (folder_b / "bench" / "value.py").read_text() == "VALUE = 2\n"
    assert checkout_is_valid(folder_a, c1) and checkout_is_valid(folder_b, c2)
    assert cache.created == [folder_a, folder_b]
    assert folder_a.parent.parent == cache_dir.resolve() / "checkouts"
    assert "abdiff" in (folder_a.parent / "README.txt").read_text()
    assert {str(folder_a), str(folder_b)} <= set(registered(root))
    # The checkout is where the benchmark runs: it imports from it.
    out = subprocess.run([sys.executable, "-c", "import bench.value as v; print(v.VALUE)"],
                         cwd=folder_a, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"


def test_second_run_reuses(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    root, c1, _ = repo
    first = CheckoutCache(root, cache_dir)
    folder = first.checkout(SideSpec("main~1", c1))
    second = CheckoutCache(root, cache_dir)
    assert second.checkout(SideSpec("main~1", c1)) == folder
    assert second.created == []
    assert first.checkout(SideSpec("x", c1)) == folder and first.created == [folder]


def test_user_state_untouched(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    root, c1, c2 = repo
    git(root, "branch", "side", c1)
    dirty(root)
    before = user_state(root)
    cache = CheckoutCache(root, cache_dir)
    for text in ("main~1..main", "main~1..", "side...main"):
        for side in resolve_range(root, text):
            cache.checkout(side)
    assert user_state(root) == before
    cache.clean()
    assert user_state(root) == before
    assert (root / "bench" / "value.py").read_text() == "VALUE = 3\n"


def test_repositories_do_not_collide(tmp_path: Path, cache_dir: Path) -> None:
    root1, _, _ = make_repo(tmp_path / "one" / "repo")
    root2, _, _ = make_repo(tmp_path / "two" / "repo")
    only_in_one = commit_files(root1, {"one.txt": "1\n"}, "c3")
    cache1, cache2 = CheckoutCache(root1, cache_dir), CheckoutCache(root2, cache_dir)
    assert cache1.key != cache2.key and cache1.key.startswith("repo-")
    with pytest.raises(InputError, match="not in"):
        cache2.checkout(SideSpec("c3", only_in_one))
    assert checkout_is_valid(cache1.checkout(SideSpec("c3", only_in_one)), only_in_one)


def test_bare_repository(repo: tuple[Path, str, str], tmp_path: Path, cache_dir: Path) -> None:
    root, c1, _ = repo
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(root), str(bare))
    cache = CheckoutCache(bare, cache_dir)
    assert checkout_is_valid(cache.checkout(resolve_rev(bare, "main~1")), c1)
    with pytest.raises(InputError, match="bare"):
        cache.checkout(SideSpec(WORKTREE, WORKTREE))
    assert cache.clean() == 1
    assert registered(bare) == [str(bare.resolve())]


def test_missing_marker_is_rebuilt(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    root, c1, _ = repo
    folder = CheckoutCache(root, cache_dir).checkout(SideSpec("c1", c1))
    folder.with_name(folder.name + ".done").unlink()
    (folder / "half-written.tmp").write_text("garbage")
    again = CheckoutCache(root, cache_dir)
    assert again.checkout(SideSpec("c1", c1)) == folder
    assert again.created == [folder]
    assert checkout_is_valid(folder, c1)
    assert not (folder / "half-written.tmp").exists()


def test_garbage_folder_and_bad_marker(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    root, c1, _ = repo
    cache = CheckoutCache(root, cache_dir)
    folder = cache.key_dir / c1
    folder.mkdir(parents=True)
    (folder / "junk").write_text("left by a crash")
    folder.with_name(folder.name + ".done").write_text("not the sha\n")
    assert cache.checkout(SideSpec("c1", c1)) == folder
    assert checkout_is_valid(folder, c1)
    assert not (folder / "junk").exists()


def test_folder_deleted_by_hand(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    """Marker present, folder gone, registration stale: rebuilt, one registration only."""
    root, c1, _ = repo
    folder = CheckoutCache(root, cache_dir).checkout(SideSpec("c1", c1))
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    again = CheckoutCache(root, cache_dir)
    assert again.checkout(SideSpec("c1", c1)) == folder and again.created == [folder]
    assert checkout_is_valid(folder, c1)
    assert registered(root).count(str(folder)) == 1


_CONCURRENT = """
import pathlib, sys, time
from abdiff.repo.checkouts import CheckoutCache
from abdiff.repo.revs import SideSpec
root, cache, sha, ready, go = sys.argv[1:6]
pathlib.Path(ready).touch()
while not pathlib.Path(go).exists():
    time.sleep(0.002)
cc = CheckoutCache(pathlib.Path(root), pathlib.Path(cache))
print(cc.checkout(SideSpec("x", sha)), len(cc.created))
"""


@pytest.mark.parametrize("which", ["sha", "worktree"])
def test_concurrent_processes(repo: tuple[Path, str, str], cache_dir: Path, tmp_path: Path,
                              which: str) -> None:
    root, c1, _ = repo
    if which == "worktree":
        dirty(root)
    sha = c1 if which == "sha" else WORKTREE
    go = tmp_path / "go"
    procs, ready = [], []
    for i in range(3):
        ready.append(tmp_path / f"ready{i}")
        procs.append(subprocess.Popen(
            [sys.executable, "-c", _CONCURRENT, str(root), str(cache_dir), sha,
             str(ready[-1]), str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=os.environ.copy()))
    deadline = time.monotonic() + 20
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        time.sleep(0.005)
    go.touch()
    results = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    lines = [out.split() for out, _ in results]
    assert len({path for path, _ in lines}) == 1
    assert sorted(int(n) for _, n in lines) == [0, 0, 1]  # exactly one made it
    folder = Path(lines[0][0])
    if which == "sha":
        assert checkout_is_valid(folder, c1)
        assert registered(root).count(str(folder)) == 1
    else:
        assert (folder / "bench" / "value.py").read_text() == "VALUE = 3\n"
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".tmp-")]


# ---------------------------------------------------------------- working tree


def test_worktree_side(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    root, _, _ = repo
    dirty(root)
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    os.symlink("bench/value.py", root / "link.py")
    _, side_b = resolve_range(root, "main..")
    cache = CheckoutCache(root, cache_dir)
    folder = cache.checkout(side_b)
    assert folder.name.startswith("worktree-") and cache.created == [folder]
    assert (folder / "bench" / "value.py").read_text() == "VALUE = 3\n"  # modified
    assert (folder / "bench" / "extra.py").exists()  # untracked
    assert (folder / "staged.txt").exists()  # staged, new
    assert not (folder / "debug.log").exists()  # ignored
    assert not (folder / "gone.txt").exists()  # deleted
    assert not (folder / ".git").exists()
    assert os.access(folder / "run.sh", os.X_OK)
    assert os.readlink(folder / "link.py") == "bench/value.py"
    out = subprocess.run(
        [sys.executable, "-B", "-c", "import bench.value, bench.extra; print(bench.value.VALUE)"],
        cwd=folder, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "3"
    # Same content: reused. Changed content: a new folder, the old one kept.
    again = CheckoutCache(root, cache_dir)
    assert again.checkout(side_b) == folder and again.created == []
    (root / "bench" / "extra.py").write_text("EXTRA = 'changed'\n")
    changed = again.checkout(side_b)
    assert changed != folder and again.created == [changed]
    assert (changed / "bench" / "extra.py").read_text() == "EXTRA = 'changed'\n"


def test_worktree_copy_without_marker_is_rebuilt(repo: tuple[Path, str, str],
                                                 cache_dir: Path) -> None:
    root, _, _ = repo
    dirty(root)
    folder = CheckoutCache(root, cache_dir).checkout(SideSpec(WORKTREE, WORKTREE))
    folder.with_name(folder.name + ".done").unlink()
    (folder / "bench" / "value.py").write_text("half")
    again = CheckoutCache(root, cache_dir)
    assert again.checkout(SideSpec(WORKTREE, WORKTREE)) == folder
    assert again.created == [folder]
    assert (folder / "bench" / "value.py").read_text() == "VALUE = 3\n"


# ---------------------------------------------------------------- hostile repositories and caches


def test_hooks_and_filters_of_the_repository_never_run(repo: tuple[Path, str, str],
                                                       cache_dir: Path, tmp_path: Path) -> None:
    """A repository (or whoever wrote its .git) with a post-checkout hook, an fsmonitor and
    smudge filters: abdiff's git commands run none of them, and the checkout holds the blobs
    git stores."""
    root, _, _ = repo
    c3 = commit_files(root, {".gitattributes": "*.py filter=evil\n*.txt filter=a=b\n",
                             "bench/value.py": "VALUE = 3\n", "note.txt": "plain\n"}, "c3")
    pwned = tmp_path / "pwned"
    pwned.mkdir()
    script = tmp_path / "evil.sh"
    script.write_text(f'#!/bin/sh\ntouch "{pwned}/$(basename "$0")-$$"\ncat\n')
    script.chmod(0o755)
    hook = root / ".git" / "hooks" / "post-checkout"
    hook.write_text(f'#!/bin/sh\ntouch "{pwned}/hook"\n')
    hook.chmod(0o755)
    for key, value in [("filter.evil.smudge", f"{script} smudge"), ("filter.evil.required", "true"),
                       ("filter.a=b.process", f"{script} process"),
                       ("core.fsmonitor", str(script))]:
        git(root, "config", key, value)
    cache = CheckoutCache(root, cache_dir)
    folder = cache.checkout(resolve_rev(root, "main"))
    CheckoutCache(root, cache_dir).checkout(resolve_rev(root, "main"))  # the reuse path too
    assert sorted(p.name for p in pwned.iterdir()) == []
    assert git(folder, "rev-parse", "HEAD") == c3
    assert (folder / "bench" / "value.py").read_text() == "VALUE = 3\n"
    assert (folder / "note.txt").read_text() == "plain\n"


def test_tampered_commit_checkout_is_restored(repo: tuple[Path, str, str],
                                             cache_dir: Path) -> None:
    """What one run's benchmark did to a cached checkout does not reach the next run: an
    edit that keeps size and modification time, a rewritten index, added and ignored files
    (a planted .pyc would be imported) are all undone."""
    root, c1, _ = repo
    folder = CheckoutCache(root, cache_dir).checkout(SideSpec("main~1", c1))
    value = folder / "bench" / "value.py"
    before = value.stat()
    value.write_text("VALUE = 9\n")
    os.utime(value, ns=(before.st_atime_ns, before.st_mtime_ns))
    git(folder, "update-index", "--assume-unchanged", "bench/value.py")  # the index vouches
    (folder / "bench" / "evil.py").write_text("import os\n")
    (folder / "bench" / "__pycache__").mkdir()
    (folder / "bench" / "__pycache__" / "value.cpython-311.pyc").write_bytes(b"planted")
    (folder / "run.log").write_text("ignored\n")
    (folder / "gone.txt").unlink()
    again = CheckoutCache(root, cache_dir)
    assert again.checkout(SideSpec("main~1", c1)) == folder
    assert value.read_text() == "VALUE = 1\n"
    assert (folder / "gone.txt").exists()
    assert not (folder / "bench" / "evil.py").exists()
    assert not (folder / "bench" / "__pycache__").exists()
    assert not (folder / "run.log").exists()
    assert checkout_is_valid(folder, c1)


def test_checkout_linked_to_another_repository_is_rebuilt(repo: tuple[Path, str, str],
                                                         cache_dir: Path,
                                                         tmp_path: Path) -> None:
    root, c1, _ = repo
    folder = CheckoutCache(root, cache_dir).checkout(SideSpec("main~1", c1))
    other, _, _ = make_repo(tmp_path / "other")
    git(other, "worktree", "add", "-q", "--detach", str(tmp_path / "decoy"), "main~1")
    (folder / ".git").write_text((tmp_path / "decoy" / ".git").read_text())
    again = CheckoutCache(root, cache_dir)
    assert again.checkout(SideSpec("main~1", c1)) == folder and again.created == [folder]
    assert checkout_is_valid(folder, c1)
    assert str(folder) in registered(root)


def test_tampered_worktree_copy_is_rebuilt(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    root, _, _ = repo
    dirty(root)
    folder = CheckoutCache(root, cache_dir).checkout(SideSpec(WORKTREE, WORKTREE))
    (folder / "bench" / "value.py").write_text("VALUE = 9\n")
    again = CheckoutCache(root, cache_dir)
    assert again.checkout(SideSpec(WORKTREE, WORKTREE)) == folder and again.created == [folder]
    assert (folder / "bench" / "value.py").read_text() == "VALUE = 3\n"
    (folder / "sitecustomize.py").write_text("import os\n")  # an added file counts too
    third = CheckoutCache(root, cache_dir)
    assert third.checkout(SideSpec(WORKTREE, WORKTREE)) == folder and third.created == [folder]
    assert not (folder / "sitecustomize.py").exists()


# ---------------------------------------------------------------- clean


def test_clean_one_repository(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    root, c1, c2 = repo
    dirty(root)
    cache = CheckoutCache(root, cache_dir)
    folders = [cache.checkout(SideSpec("a", c1)), cache.checkout(SideSpec("b", c2)),
               cache.checkout(SideSpec(WORKTREE, WORKTREE))]
    (cache_dir / "runs").mkdir()  # measured rounds live beside the checkouts
    assert cache.clean() == 3
    assert not any(f.exists() for f in folders)
    assert not cache.key_dir.exists()
    assert registered(root) == [str(root.resolve())]
    assert (cache_dir / "runs").is_dir()
    assert cache.clean() == 0


def test_clean_command_all_repositories(tmp_path: Path, cache_dir: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    root1, a1, _ = make_repo(tmp_path / "one")
    root2, a2, b2 = make_repo(tmp_path / "two")
    root3, a3, _ = make_repo(tmp_path / "three")
    CheckoutCache(root1, cache_dir).checkout(SideSpec("a", a1))
    for sha in (a2, b2):
        CheckoutCache(root2, cache_dir).checkout(SideSpec("x", sha))
    CheckoutCache(root3, cache_dir).checkout(SideSpec("a", a3))
    subprocess.run(["rm", "-rf", str(root3)], check=True)  # a repository deleted since

    from abdiff.commands import cache as cache_command  # here: the other commands load too

    parser = argparse.ArgumentParser()
    cache_command.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["cache", "clean", "--cache-dir", str(cache_dir),
                              "--repo", str(root1)])
    assert args.run(args) == 0
    assert "removed 1 cached checkout " in capsys.readouterr().out
    assert registered(root1) == [str(root1.resolve())]
    assert len(registered(root2)) == 3

    args = parser.parse_args(["cache", "clean", "--cache-dir", str(cache_dir)])
    assert args.run(args) == 0
    assert "removed 3 cached checkouts" in capsys.readouterr().out
    assert registered(root2) == [str(root2.resolve())]
    assert not [p for p in (cache_dir / "checkouts").iterdir() if not p.name.startswith(".")]
    assert clean_cache(cache_dir) == 0


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "abdiff"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "abdiff"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "abdiff"
    monkeypatch.setenv("ABDIFF_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"


def test_bad_sha(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    with pytest.raises(InputError):
        CheckoutCache(repo[0], cache_dir).checkout(SideSpec("main", "main"))
    with pytest.raises(InputError, match="not a git repository"):
        CheckoutCache(cache_dir.parent, cache_dir)


# ---------------------------------------------------------------- .git rewritten by a benchmark


def test_a_replace_ref_cannot_stand_in_for_a_commit(repo: tuple[Path, str, str],
                                                   cache_dir: Path) -> None:
    """`refs/replace/<c1>` (what a benchmark can write into the shared .git) makes plain git
    show c2 as c1; the checkout of c1, fresh and reused, is still c1's content."""
    root, c1, c2 = repo
    git(root, "replace", c1, c2)
    assert git(root, "show", f"{c1}:bench/value.py") == "VALUE = 2"  # the attack works on git
    cache = CheckoutCache(root, cache_dir)
    folder = cache.checkout(SideSpec("main~1", c1))
    assert (folder / "bench/value.py").read_text() == "VALUE = 1\n"
    assert CheckoutCache(root, cache_dir).checkout(SideSpec("main~1", c1)) == folder
    assert (folder / "bench/value.py").read_text() == "VALUE = 1\n"


def test_grafts_do_not_change_history(repo: tuple[Path, str, str], cache_dir: Path) -> None:
    """An `info/grafts` line that makes c2 a root commit: abdiff's git still sees c1 as its
    parent (merge bases and `main~1` are resolved through it)."""
    root, c1, c2 = repo
    (root / ".git" / "info").mkdir(exist_ok=True)
    (root / ".git" / "info" / "grafts").write_text(f"{c2}\n")
    assert git(root, "rev-list", "--count", c2) == "1"  # plain git follows the graft
    assert resolve_rev(root, "main~1").sha == c1


def _rewrite_loose_object(root: Path, object_id: str, content: bytes) -> None:
    """Overwrite a loose object in place with other content under the same name, as a
    benchmark with write access to .git can."""
    import zlib

    path = root / ".git" / "objects" / object_id[:2] / object_id[2:]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob %d\0" % len(content) + content))


def test_a_rewritten_object_is_never_checked_out(repo: tuple[Path, str, str],
                                                 cache_dir: Path) -> None:
    """c1's blob of bench/value.py rewritten in the object store: git itself checks it out
    without complaint, abdiff refuses (exit 3) naming the file, and leaves no checkout."""
    root, c1, _ = repo
    blob = git(root, "rev-parse", f"{c1}:bench/value.py")
    _rewrite_loose_object(root, blob, b"VALUE = 666\n")
    assert git(root, "show", f"{c1}:bench/value.py") == "VALUE = 666"  # git does not notice
    cache = CheckoutCache(root, cache_dir)
    with pytest.raises(InfrastructureError, match=r"bench/value.py differs from the commit.*"
                                                  r"were rewritten \(`git fsck`\)"):
        cache.checkout(SideSpec("main~1", c1))
    assert not (cache.key_dir / c1).exists()


def test_a_reused_checkout_is_verified_not_trusted(repo: tuple[Path, str, str],
                                                   cache_dir: Path) -> None:
    """After a cached checkout was made, the benchmark rewrites the blob and the checked-out
    file together: `git reset --hard` would keep its content; the next use refuses."""
    root, c1, _ = repo
    cache = CheckoutCache(root, cache_dir)
    folder = cache.checkout(SideSpec("main~1", c1))
    blob = git(root, "rev-parse", f"{c1}:bench/value.py")
    _rewrite_loose_object(root, blob, b"VALUE = 666\n")
    (folder / "bench/value.py").write_text("VALUE = 666\n")
    with pytest.raises(InfrastructureError, match="differs from the commit"):
        CheckoutCache(root, cache_dir).checkout(SideSpec("main~1", c1))


@pytest.mark.parametrize("change", ["planted", "edited", "mode", "symlink", "removed"])
def test_verify_commit_checkout_names_what_differs(repo: tuple[Path, str, str], cache_dir: Path,
                                                   change: str) -> None:
    root, _, c2 = repo
    folder = CheckoutCache(root, cache_dir).checkout(SideSpec("main", c2))
    assert verify_commit_checkout(root, folder, c2) is None
    value = folder / "bench" / "value.py"
    if change == "planted":
        (folder / "bench" / "sitecustomize.py").write_text("import os\n")
    elif change == "edited":
        value.write_text("VALUE = 3\n")
    elif change == "mode":
        value.chmod(0o755)
    elif change == "symlink":
        value.unlink()
        value.symlink_to(folder / "gone.txt")
    else:
        value.unlink()
    expected = {"planted": "bench/sitecustomize.py is not in the commit",
                "removed": "bench/value.py is missing"}.get(change,
                                                           "bench/value.py differs from the commit")
    assert verify_commit_checkout(root, folder, c2) == expected


@pytest.mark.parametrize("tamper", ["none", "edit", "planted", "relinked"])
def test_a_run_checks_its_checkout_again_before_each_round(
        repo: tuple[Path, str, str], cache_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, tamper: str) -> None:
    """Within one run (one CheckoutCache) a checkout is hashed against the commit again
    before each round: untouched (read-only in the sandbox) it is used without a git
    process; whatever a worker changed (a file, a planted .pyc, the git link) sends it
    through git's full check, which restores or rebuilds it."""
    root, c1, _ = repo
    cache = CheckoutCache(root, cache_dir)
    folder = cache.checkout(SideSpec("main~1", c1))
    if tamper == "edit":
        (folder / "bench" / "value.py").write_text("VALUE = 9\n")
    elif tamper == "planted":
        (folder / "bench" / "__pycache__").mkdir()
        (folder / "bench" / "__pycache__" / "value.cpython-311.pyc").write_bytes(b"planted")
    elif tamper == "relinked":
        other, _, _ = make_repo(tmp_path / "other")
        git(other, "worktree", "add", "-q", "--detach", str(tmp_path / "decoy"), "main~1")
        (folder / ".git").write_text((tmp_path / "decoy" / ".git").read_text())
    calls: list[tuple[str, ...]] = []
    real = checkouts_module.run_git

    def counted(cwd: Path, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return real(cwd, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(checkouts_module, "run_git", counted)
    assert cache.checkout(SideSpec("main~1", c1)) == folder
    assert (calls == []) is (tamper == "none")
    assert (folder / "bench" / "value.py").read_text() == "VALUE = 1\n"
    assert not (folder / "bench" / "__pycache__").exists()
    monkeypatch.undo()
    assert checkout_is_valid(folder, c1)
