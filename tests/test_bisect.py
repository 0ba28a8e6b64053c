"""`abdiff bisect`: the search and the classification on made-up outcomes (milliseconds), and
real bisects on the CPU over real git histories: the demo's `history` branch (a fact/kernel
culprit and a latency culprit), an unbuildable commit that is skipped, a slowdown spread over
two commits, and an interrupted bisect that resumes."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import abdiff_argv, config_id, git, git_env, run_abdiff, write_suite

from abdiff.demo import build_demo_repo
from abdiff.demo.builder import RUNNER_PATH, slowed_runner
from abdiff.store.records import ConfigResult, LatencyResult
from abdiff.verdict.bisection import (
    ChangeSignature,
    Commit,
    Outcome,
    classify,
    culprits_of,
    search,
)

PATH = [Commit(f"{i:040x}", f"commit {i}") for i in range(9)]  # 0 = A, 8 = B


def outcomes_for(first_new: dict[str, int], skip: set[int] = frozenset(),
           stuck: dict[str, int] | None = None, log: list[int] | None = None):
    """Outcomes as a real history with these culprits would give them."""
    index = {c.sha: i for i, c in enumerate(PATH)}

    def test(commit: Commit, ids: list[str]) -> dict[str, Outcome]:
        i = index[commit.sha]
        if log is not None:
            log.append(i)
        out: dict[str, Outcome] = {}
        for cid in ids:
            if i in skip:
                out[cid] = "skip"
            elif stuck and stuck.get(cid) == i:
                out[cid] = "inconclusive"
            else:
                out[cid] = "new" if i >= first_new[cid] else "old"
        return out

    return test


def test_search_finds_two_culprits_in_one_pass() -> None:
    log: list[int] = []
    outcomes = outcomes_for({"facts": 3, "latency": 6}, log=log)
    first_new, unresolved, steps, skipped = search(PATH, ["facts", "latency"], outcomes)
    assert first_new == {"facts": 3, "latency": 6} and not unresolved and not skipped
    assert len(log) <= 5  # log2(8) = 3 per config, shared steps measure both
    assert [c.configs for c in culprits_of(first_new, PATH)] == [["facts"], ["latency"]]
    assert all(step.outcomes for step in steps)


def test_search_skips_commits_that_cannot_run_and_stops_on_inconclusive() -> None:
    first_new, unresolved, _, skipped = search(PATH, ["x"], outcomes_for({"x": 7}, skip={4}))
    assert first_new == {"x": 7} and skipped == {4}
    # the commit before the first new one cannot run: the answer is a range, not a guess
    first_new, unresolved, _, skipped = search(PATH, ["x"], outcomes_for({"x": 5}, skip={4}))
    assert not first_new and f"one of {PATH[4].sha[:12]}..{PATH[5].sha[:12]}" in unresolved["x"]
    first_new, unresolved, _, skipped = search(PATH, ["x", "y"],
                                               outcomes_for({"x": 5, "y": 2}, stuck={"x": 4}))
    assert first_new == {"y": 2} and "inconclusive" in unresolved["x"]
    # every candidate between the last old and the first new is unrunnable: a range, no guess
    outcomes = outcomes_for({"x": 5}, skip={1, 2, 3, 4})
    first_new, unresolved, _, skipped = search(PATH, ["x"], outcomes)
    assert not first_new and "could not run" in unresolved["x"]


def result(status_a: str = "ok", status_b: str = "ok", facts: dict | None = None,
           verdict: str = "unchanged") -> ConfigResult:
    change = {("ok", "ok"): "same", ("ok", "aborted"): "broken", ("ok", "failed"): "broken",
              ("aborted", "ok"): "fixed"}.get((status_a, status_b), "still-failing")
    return ConfigResult(id="c", params={}, status_a=status_a, status_b=status_b,
                        status_change=change, error_a=None, error_b=None,
                        facts_changed=facts or {}, kernels_added={}, kernels_removed={},
                        latency=LatencyResult(verdict))


def test_classification_against_both_ends() -> None:
    facts = ChangeSignature.of(result(facts={"f": [None, 3]}))
    assert classify(facts, result(facts={"f": [None, 3]}), None) == "new"
    assert classify(facts, result(), None) == "old"
    assert classify(facts, result(facts={"f": [None, 2]}), None) == "partial"
    assert classify(facts, result(status_b="failed"), None) == "skip"
    slower = ChangeSignature.of(result(verdict="slower"))
    assert classify(slower, result(verdict="slower"), result(verdict="unchanged")) == "new"
    assert classify(slower, result(verdict="unchanged"), result(verdict="slower")) == "old"
    assert classify(slower, result(verdict="slower"), result(verdict="slower")) == "partial"
    assert classify(slower, result(verdict="inconclusive"),
                    result(verdict="slower")) == "old"
    assert classify(slower, result(verdict="inconclusive"),
                    result(verdict="inconclusive")) == "inconclusive"
    # facts and a latency move: the facts moved at C, latency undecided on both sides
    both = ChangeSignature.of(result(facts={"f": [None, 3]}, verdict="slower"))
    assert classify(both, result(facts={"f": [None, 3]}, verdict="inconclusive"),
                    result(verdict="inconclusive")) == "new"
    assert classify(both, result(verdict="inconclusive"),
                    result(facts={"f": [None, 3]}, verdict="inconclusive")) == "old"
    assert classify(both, result(facts={"f": [None, 2]}, verdict="inconclusive"),
                    result(verdict="inconclusive")) == "partial"



def test_confirmation_of_a_fact_change_with_an_undecided_latency_part() -> None:
    both = ChangeSignature.of(result(facts={"f": [None, 3]}, verdict="faster"))
    # the sandwich comparison on a noisy machine: the facts again, latency undecided
    undecided = result(facts={"f": [None, 3]}, verdict="inconclusive")
    assert both.shown_by(undecided) and both.latency_undecided(undecided)
    # an equivalence proof or the opposite move contradicts the latency part
    assert not both.shown_by(result(facts={"f": [None, 3]}, verdict="unchanged"))
    assert not both.shown_by(result(facts={"f": [None, 3]}, verdict="slower"))
    assert not both.shown_by(result(facts={"f": [None, 2]}, verdict="faster"))
    # a move within the threshold beside a fact change is not part of the change to find:
    # a comparison calling it `unchanged` (inside +-threshold) does not contradict it
    small = result(facts={"f": [None, 3]}, verdict="faster")
    small.latency = LatencyResult("faster", below_threshold=True)
    assert ChangeSignature.of(small).latency is None
    assert ChangeSignature.of(small).shown_by(result(facts={"f": [None, 3]}))
    # alone, a small move is the change (it is searched when --small-changes gate made it
    # unintended)
    alone = result(verdict="faster")
    alone.latency = LatencyResult("faster", below_threshold=True)
    assert ChangeSignature.of(alone).latency == "faster"
    # a latency-only change needs its move: nothing else identifies it
    slower = ChangeSignature.of(result(verdict="slower"))
    assert not slower.shown_by(result(verdict="inconclusive"))
    assert slower.shown_by(result(verdict="slower"))


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("bisect") / "demo"
    return repo, build_demo_repo(repo, history=True)


# The planted changes are large (a 1-3 ms sleep in a step of a few hundred us: the
# step gets 4-10x slower), so a 50% practical threshold keeps every planted change far
# beyond it while three rounds call the other commits "unchanged" on the 2-core CPU,
# whose rounds vary by up to 16%, even with workers started ahead (which widens that
# spread on 2 cores: at a 10-20% threshold an unchanged commit then once stayed
# `inconclusive` after five rounds).
# 8 pairs: enough sign patterns for the family test at 1% (2**8 * 0.01 >= 2)
SPEED = ("--rounds", 8, "--max-rounds", 8, "--min-effect", "50%")


def bisect(repo: Path, tmp_path: Path, rev_range: str, *extra: object,
           timeout: float = 1200) -> tuple[subprocess.CompletedProcess[str], dict]:
    suite = write_suite(tmp_path / "s.yaml", [8], ("TRTLLM",), (1, 2))
    done = run_abdiff("bisect", rev_range, "--configs", suite, "--repo", repo, "--cache-dir",
                      tmp_path / "cache", *SPEED, "--json", tmp_path / "bisect.json", *extra,
                      timeout=timeout)
    data = json.loads((tmp_path / "bisect.json").read_text()) if done.returncode in (0, 1) else {}
    return done, data


@pytest.mark.slow
def test_demo_history_fact_and_latency_culprits(history: tuple[Path, dict[str, str]],
                                                tmp_path: Path) -> None:
    repo, shas = history
    began = time.monotonic()
    done, data = bisect(repo, tmp_path, "main..history")
    took = time.monotonic() - began
    assert done.returncode == 0, done.stdout + done.stderr
    # each evidence's time split counts from its own comparison's start, not the bisect's:
    # the comparisons ran one after another, within the command's wall time
    walls = {c["evidence"]["time"]["wall_s"] for c in data["culprits"]
             if c["evidence"] and c["evidence"].get("time")}
    assert walls and sum(walls) < took, (walls, took)
    subjects = {c["commit"]["subject"]: c for c in data["culprits"]}
    facts = subjects["runner: announce MTP shapes to every backend that has "
                     "update_spec_dec_param"]
    latency = subjects["runner: trace TRTLLM bs8 decode steps on the host"]
    assert facts["configs"] == [config_id(8, q=2)] and facts["confirmed"] is True
    # its latency move (about -15%) is within the 50% threshold: the facts are the change
    assert facts["latency_undecided"] == []
    assert latency["configs"] == [config_id(8, q=1)] and latency["confirmed"] is True
    evidence = {c["id"]: c for c in facts["evidence"]["configs"]}[config_id(8, q=2)]
    assert evidence["facts_changed"]["attn_metadata.max_total_draft_tokens"] == [None, 1]
    evidence = {c["id"]: c for c in latency["evidence"]["configs"]}[config_id(8, q=1)]
    assert evidence["latency"]["verdict"] == "slower"
    assert data["schema"] == "abdiff.bisect/1" and 2 <= len(data["steps"]) <= 6
    assert "culprit " in done.stdout and "path taken:" in done.stdout
    # the same bisect again measures nothing new: every comparison is kept
    again = run_abdiff("bisect", "main..history", "--configs", tmp_path / "s.yaml", "--repo", repo,
                       "--cache-dir", tmp_path / "cache", *SPEED, "--format", "markdown",
                       timeout=600)
    assert again.returncode == 0, again.stderr
    assert "worker processes this run" not in again.stderr or \
        all(" 0 worker processes" in line for line in again.stderr.splitlines()
            if "worker processes this run" in line)
    assert again.stdout.startswith("### abdiff bisect")


def commit_on(repo: Path, base: str, branch: str, runners: list[tuple[str, str]]) -> list[str]:
    """Commits of runner.py texts on a new branch from `base`; returns their SHAs."""
    git(repo, "checkout", "-q", "-b", branch, base)
    shas = []
    for message, text in runners:
        (repo / RUNNER_PATH).write_text(text, encoding="utf-8")
        git(repo, "commit", "-q", "-am", message)
        shas.append(git(repo, "rev-parse", "HEAD").strip())
    git(repo, "checkout", "-q", "main")
    return shas


@pytest.mark.slow
def test_unbuildable_commit_is_skipped_and_spread_change_is_reported(
        history: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    repo, shas = history
    plain = git(repo, "show", f"{shas['main']}:{RUNNER_PATH}") + "\n"
    half = slowed_runner(plain).replace("time.sleep(0.002)", "time.sleep(0.001)")
    full = slowed_runner(plain).replace("time.sleep(0.002)", "time.sleep(0.003)")
    broken = "raise ImportError('this commit does not build')\n" + plain
    spread = commit_on(repo, "main", "spread", [
        ("runner: half of the tracing", half), ("runner: does not build", broken),
        ("runner: the rest of the tracing", full)])
    done, data = bisect(repo, tmp_path, "main..spread", "--config", config_id(8, q=1))
    assert done.returncode == 1, done.stdout + done.stderr
    assert [c["sha"] for c in data["skipped"]] == [spread[1]]
    # half of the slowdown came first: a part of the change, not yet the change...
    outcomes = {s["commit"]["sha"]: s["outcomes"][config_id(8, q=1)] for s in data["steps"]}
    assert outcomes[spread[0]] == "partial"
    # ...and the commit between could not run: the answer is a range, never a guess
    assert not data["culprits"]
    assert f"one of {spread[1][:12]}..{spread[2][:12]}" in data["unresolved"][config_id(8, q=1)]


@pytest.mark.slow
def test_interrupted_bisect_resumes(history: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    repo, _ = history
    suite = write_suite(tmp_path / "s.yaml", [8], ("TRTLLM",), (2,))
    args = ("bisect", "main..history", "--configs", suite, "--repo", repo, "--cache-dir",
            tmp_path / "cache", "--rounds", 1, "--max-rounds", 1)  # facts need one
    proc = subprocess.Popen(abdiff_argv(*args), stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=git_env())
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 600
    for line in proc.stderr:  # interrupt as the first candidate commit is being measured
        seen.append(line)
        if "abdiff bisect: testing" in line or time.monotonic() > deadline:
            proc.send_signal(signal.SIGINT)
            break
    proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen)
    done = run_abdiff(*args, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    first = [line for line in done.stderr.splitlines()
             if "worker processes this run" in line or "no worker started" in line][0]
    # main..history was measured before the interrupt
    assert first.startswith("abdiff: no worker started: the rounds kept in "), first
