"""The CI templates under ci/ and the Jenkins example of docs/ci.md, read as the files a
user copies: pinned installs and actions, a cache per job, one comment job at a time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / "ci" / "github-actions").glob("*.yml"))


def _steps(path: Path) -> list[dict]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [step for job in data["jobs"].values() for step in job["steps"]]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_to_commits(path: Path) -> None:
    uses = [step["uses"] for step in _steps(path) if "uses" in step]
    assert uses
    assert [u for u in uses if not re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u)] == []


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_abdiff_is_never_installed_by_name(path: Path) -> None:
    """`abdiff==X` from a package index runs whoever registers the name."""
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"abdiff\s*[=<>~]=", text)
    assert "pip install" in text


def test_the_comment_job_installs_one_hashed_wheel_and_waits_its_turn() -> None:
    path = ROOT / "ci" / "github-actions" / "abdiff-comment.yml"
    job = yaml.safe_load(path.read_text(encoding="utf-8"))["jobs"]["comment"]
    install = next(s["run"] for s in job["steps"] if "Install" in s.get("name", ""))
    assert "--require-hashes" in install and "--no-deps" in install
    assert "head_branch" in job["concurrency"]["group"]
    assert job["concurrency"]["cancel-in-progress"] is False
    post = next(s["run"] for s in job["steps"] if "Post" in s.get("name", ""))
    assert "--result" in post and "--body" not in post and "--stale" in post
    assert "--head-sha" in post and "--run-url" in post


def test_the_measuring_job_keeps_its_cache_to_itself() -> None:
    run = next(s["run"] for s in _steps(ROOT / "ci" / "github-actions" / "abdiff.yml")
               if s.get("id") == "abdiff")
    assert '--cache-dir "$RUNNER_TEMP/abdiff-cache"' in run
    assert "GITHUB_TOKEN" not in run


def test_jenkins_example_archives_the_result_only() -> None:
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    archives = re.findall(r"archiveArtifacts artifacts: '([^']+)'(.*)", text)
    assert archives == [("abdiff-out/result.json", ", allowEmptyArchive: true, "
                                                   "followSymlinks: false")]


def test_the_release_baseline_is_measured_read_only_and_proposed_by_another_job() -> None:
    """ci/github-actions/abdiff-baseline.yml: on a release tag, the measuring job (read-only
    token) records several sessions; the job that may write runs no benchmark, validates the
    file and opens a pull request with it."""
    path = ROOT / "ci" / "github-actions" / "abdiff-baseline.yml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert data[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as True
    assert data["env"]["ABDIFF_SESSIONS"] != "1"
    refresh, proposal = data["jobs"]["refresh"], data["jobs"]["pull-request"]
    assert refresh["permissions"] == {"contents": "read"}
    measure = next(s["run"] for s in refresh["steps"] if s.get("id") == "refresh")
    assert "abdiff baseline refresh" in measure and '--sessions "$ABDIFF_SESSIONS"' in measure
    assert "${{" not in measure  # event values reach the shell through env only
    assert proposal["needs"] == "refresh" and proposal["permissions"]["contents"] == "write"
    opened = next(s["run"] for s in proposal["steps"] if "pull request" in s.get("name", ""))
    assert "baseline refresh" not in opened and "abdiff baseline show" in opened
    assert "gh pr create" in opened and "${{" not in opened
