"""`abdiff cache clean`: never removes checkouts or run folders a running measurement
uses; `--runs --older-than DAYS` removes old run folders."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import git, git_env, one_line, run_abdiff

pytestmark = pytest.mark.slow  # several abdiff processes and a holder process

# A measurement's hold, as session.py takes them: checkouts through CheckoutCache, the
# run folder through schedule.exclusive; it holds both until its stdin closes.
HOLDER = """
import sys
from pathlib import Path
from abdiff.repo.checkouts import CheckoutCache
from abdiff.repo.revs import resolve_rev
from abdiff.run.schedule import exclusive
repo, cache = Path(sys.argv[1]), Path(sys.argv[2])
CheckoutCache(repo, cache).checkout(resolve_rev(repo, "HEAD"))
with exclusive(cache / "runs" / "held"):
    print("holding", flush=True)
    sys.stdin.read()
"""


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q")
    (path / "file.txt").write_text("x\n")
    git(path, "add", "file.txt")
    git(path, "commit", "-q", "-m", "one")
    return path


def age(folder: Path, days: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state.json").write_text("{}")
    then = time.time() - days * 86400
    for path in (folder / "state.json", folder):
        os.utime(path, (then, then))


def test_clean_refuses_what_a_running_measurement_uses(tmp_path: Path) -> None:
    repo, cache = make_repo(tmp_path / "repo"), tmp_path / "cache"
    age(cache / "runs" / "held", 30)
    age(cache / "runs" / "old", 30)
    age(cache / "runs" / "recent", 0.5)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(repo), str(cache)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=git_env())
    try:
        assert holder.stdout.readline().strip() == "holding"
        for argv in (("--repo", repo), ()):
            refused = run_abdiff("cache", "clean", "--cache-dir", cache, *argv)
            assert refused.returncode == 3
            assert "in use by a running abdiff" in one_line(refused.stderr)
        assert len(list((cache / "checkouts").glob("*/" + "?" * 40))) == 1

        runs = run_abdiff("cache", "clean", "--runs", "--older-than", 7, "--cache-dir", cache)
        assert runs.returncode == 0, runs.stderr
        assert "removed 1 run folder older than 7 days" in runs.stdout
        assert "kept 1 in use" in runs.stdout
        assert sorted(p.name for p in (cache / "runs").iterdir()) == ["held", "recent"]
    finally:
        holder.communicate("", timeout=60)

    cleaned = run_abdiff("cache", "clean", "--cache-dir", cache, "--repo", repo)
    assert cleaned.returncode == 0 and "removed 1 cached checkout" in cleaned.stdout
    assert git(repo, "worktree", "list").count("\n") == 0  # only the main worktree is left
    everything = run_abdiff("cache", "clean", "--runs", "--cache-dir", cache)
    assert everything.returncode == 0 and "removed 2 run folders" in everything.stdout
    assert not list((cache / "runs").iterdir())


def test_clean_caches_removes_every_sides_folders_unless_in_use(tmp_path: Path) -> None:
    """`cache clean --caches`: the side caches (compiled kernels, tuned picks) removed, a
    link among them removed and not followed; refused while a measurement holds them."""
    from abdiff.store.sides import SideFolders

    cache, outside = tmp_path / "cache", tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    side = SideFolders.of(cache, "a" * 40, {})
    side.make()
    (side.caches / "triton" / "kernel.cubin").write_text("x")
    (cache / "sides" / "planted").symlink_to(outside)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from abdiff.store.files import hold_in_use; from abdiff.store.sides import "
         "in_use_lock; hold_in_use(in_use_lock(Path(sys.argv[1]))); print('holding', "
         "flush=True); sys.stdin.read()", str(cache)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=git_env())
    try:
        assert holder.stdout.readline().strip() == "holding"
        refused = run_abdiff("cache", "clean", "--caches", "--cache-dir", cache)
        assert refused.returncode == 3 and "in use by a running abdiff" in refused.stderr
        assert (side.caches / "triton" / "kernel.cubin").exists()
    finally:
        holder.communicate("", timeout=60)
    done = run_abdiff("cache", "clean", "--caches", "--cache-dir", cache)
    assert done.returncode == 0 and "removed the caches of 2 sides" in done.stdout, done.stderr
    assert not list((cache / "sides").iterdir()) and (outside / "keep").is_dir()


def test_older_than_needs_runs(tmp_path: Path) -> None:
    done = run_abdiff("cache", "clean", "--older-than", 3, "--cache-dir", tmp_path)
    assert done.returncode == 2 and "add --runs" in one_line(done.stderr)
    done = run_abdiff("cache", "clean", "--runs", "--older-than", -1, "--cache-dir", tmp_path)
    assert done.returncode == 2 and "days >= 0" in one_line(done.stderr)


def test_a_cache_folder_that_does_not_exist_is_named(tmp_path: Path) -> None:
    """It said "removed 0 cached checkouts from /nonexistent" (a typo looked like a clean
    cache)."""
    for extra in ([], ["--runs"], ["--caches"]):
        done = run_abdiff("cache", "clean", *extra, "--cache-dir", tmp_path / "nope")
        assert done.returncode == 2 and "no such folder" in one_line(done.stderr), done.stderr
