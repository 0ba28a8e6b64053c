"""Faults injected for real: a benchmark that crashes, hangs, eats memory or corrupts its
record; abdiff itself interrupted, killed, or racing another abdiff; a checkout that fails
half-way. Each must end as a status or a clean stop, with every measured round kept,
no orphan process and no stale checkout.

The benchmark misbehaves on the `faulty` branch of a scratch demo repository
(tests/conftest.py, FAULTS_PY); abdiff runs as a separate process, as a user starts it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import resource
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    FAULT_ORDER,
    FAULT_ROUNDS,
    FAULTS,
    GRANDCHILD,
    HEALTHY,
    FaultRun,
    abdiff_argv,
    config_id,
    git,
    git_env,
    kill_leftovers,
    one_line,
    processes_mentioning,
    run_abdiff,
    state_dir_of,
    wait_for_no_processes,
    write_suite,
)

from abdiff.cli import main
from abdiff.demo import build_demo_repo
from abdiff.store import files, records
from abdiff.store.records import load_run_file

pytestmark = pytest.mark.slow  # one run over every fault, in worker processes


def _config(run: dict, batch_size: int) -> dict:
    return next(c for c in run["configs"] if c["id"] == config_id(batch_size))


# ---------------------------------------------------------------- the benchmark misbehaves


def test_fault_run_exits_1_without_traceback(fault_run: FaultRun) -> None:
    proc = fault_run.proc
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    summary = fault_run.result["summary"]
    assert summary["exit_code"] == 1
    assert summary["unintended"] == len(FAULTS)
    assert summary["configs"] == len(FAULT_ORDER)


@pytest.mark.parametrize("batch_size", sorted(FAULTS))
def test_fault_becomes_the_configs_status(fault_run: FaultRun, batch_size: int) -> None:
    """Abort, segfault, exception, exit code, hang, memory, bad records: each is B's status,
    with a reason that names it (and only its own stderr, never an earlier config's)."""
    status, error = FAULTS[batch_size]
    config = next(c for c in fault_run.result["configs"] if c["id"] == config_id(batch_size))
    assert (config["status_a"], config["status_b"]) == ("ok", status)
    assert re.fullmatch(error, config["error_b"]), config["error_b"]
    assert config["status_change"] == "broken"
    assert config["verdict"] == "unintended"
    # every round of B says the same: a fault is repeated, not a flake of one round
    rounds_b = _config(fault_run.runs["B"], batch_size)["rounds"]
    assert [r["round"] for r in rounds_b] == list(range(FAULT_ROUNDS))
    for record in rounds_b:
        assert record["status"] == status
        assert re.fullmatch(error, record["error"]), record["error"]


@pytest.mark.parametrize("batch_size", HEALTHY)
def test_healthy_configs_finish_with_every_round(fault_run: FaultRun, batch_size: int) -> None:
    """The configs around the faults lose nothing: all rounds, ok, on both sides."""
    config = next(c for c in fault_run.result["configs"] if c["id"] == config_id(batch_size))
    assert (config["status_a"], config["status_b"]) == ("ok", "ok")
    assert config["verdict"] != "unintended"
    for side in "AB":
        rounds = _config(fault_run.runs[side], batch_size)["rounds"]
        assert [r["round"] for r in rounds] == list(range(FAULT_ROUNDS))
        assert all(r["status"] == "ok" and len(r["latency_us"]) == 3 for r in rounds)


def test_no_round_lost_anywhere(fault_run: FaultRun) -> None:
    """Side A (the healthy main) and side B each hold every config's every round."""
    for side in "AB":
        run = fault_run.runs[side]
        assert [c["id"] for c in run["configs"]] == [config_id(b) for b in FAULT_ORDER]
        for config in run["configs"]:
            assert [r["round"] for r in config["rounds"]] == list(range(FAULT_ROUNDS))
    assert all(r["status"] == "ok" for c in fault_run.runs["A"]["configs"] for r in c["rounds"])


def test_fault_run_leaves_no_process(fault_run: FaultRun) -> None:
    """The hung worker, and the helper processes of the hung and the aborted ones, are gone."""
    assert fault_run.orphans == {}


def test_broken_import_fails_every_config_with_its_reason(faulty_repo: Path,
                                                          tmp_path: Path) -> None:
    """A worker that cannot import the benchmark writes no record at all: every config
    gets the import error, once, and the run stops there (nothing measured: exit 3, one
    line), its round kept in the state folder."""
    suite = write_suite(tmp_path / "s.yaml", [1, 2])
    out = tmp_path / "broken.json"
    proc = run_abdiff("run", "broken", "--configs", suite, "--repo", faulty_repo, "--cache-dir",
                      tmp_path / "cache", "--target", "reference", "--rounds", 2, "--out", out)
    assert proc.returncode == 3, proc.stderr
    assert "RuntimeError: injected import failure" in one_line(proc.stderr)
    assert not out.exists()
    run = load_run_file(next((tmp_path / "cache").glob("runs/*/a.json")))
    for config in run.configs:
        assert [(r.status, r.error) for r in config.rounds] == [
            ("failed", "RuntimeError: injected import failure: the harness cannot load")]
    (logs,) = (tmp_path / "cache").glob("runs/*/logs/A/r0")
    assert [p.name for p in logs.iterdir()] == ["worker0"]  # not retried per config


# ---------------------------------------------------------------- abdiff is stopped


def _rounds_on_disk(state: Path) -> dict[tuple[str, str, int], list[float]]:
    """(side, config, round) -> latencies, from the state folder's run files."""
    found = {}
    for side in "AB":
        path = state / f"{side.lower()}.json"
        if not path.exists():
            continue
        for config in load_run_file(path).configs:
            for record in config.rounds:
                found[(side, config.id, record.round)] = record.latency_us
    return found


def _state_dirs(cache: Path) -> list[Path]:
    runs = cache / "runs"
    return [p for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []


def _in_slow_config(state: Path, slow: int) -> Path | None:
    """A B worker that has finished bs1 and is inside the slow config now (its log)."""
    for log in state.glob("logs/B/r*/worker*/records.jsonl"):
        events = []
        for line in log.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line being written
                events.append(json.loads(line))
        done = {e["id"] for e in events if e["event"] == "done"}
        started = {e["id"] for e in events if e["event"] == "start"}
        if config_id(1) in done and config_id(slow) in started - done:
            return log
    return None


def seed_timing_bs1_first(slow: int) -> int:
    """A --seed whose round 0 runs A before B, and whose workers of round 0 time bs1
    before the slow config: workers time their configs in a seeded shuffled order
    (rounds.order_seed, worker.shuffled), the same on both sides of a round."""
    from abdiff.run.rounds import order_seed
    from abdiff.run.schedule import abba_slots
    from abdiff.targets.reference.worker import shuffled

    configs = [{"id": config_id(1)}, {"id": config_id(slow)}]
    return next(seed for seed in range(1000)
                if abba_slots(1, random.Random(seed))[0][0] == "A"
                and shuffled(configs, order_seed(seed, 0, 0))[0]["id"] == config_id(1))


def _start_and_stop_midway(args: list[object], cache: Path, sig: int, slow: int,
                           to_group: bool) -> tuple[subprocess.Popen, Path, Path, dict]:
    """Start abdiff, wait until a round is on disk and a B worker is inside the slow config
    (after finishing bs1), send `sig`. Returns the process, its state folder, the
    interrupted worker's log and the rounds on disk just before the signal."""
    proc = subprocess.Popen(abdiff_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=git_env(), start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        for state in _state_dirs(cache):
            log = _in_slow_config(state, slow)
            before = _rounds_on_disk(state)
            helper = any(GRANDCHILD in c for c in processes_mentioning(str(cache)).values())
            if log is not None and before and (slow != 14 or helper):
                if to_group:
                    os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does
                else:
                    os.kill(proc.pid, sig)  # what a CI runner or `kill` does
                return proc, state, log, before
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"never reached the slow config: {proc.communicate()}")


@pytest.mark.parametrize("sig, code, again", [
    (signal.SIGINT, 130, []),
    (signal.SIGTERM, 143, ["--resume"]),
], ids=["ctrl-c-then-same-command", "sigterm-then-resume"])
def test_stop_mid_suite_keeps_rounds_and_continues(faulty_repo: Path, tmp_path: Path, sig: int,
                                                   code: int, again: list[str]) -> None:
    suite = write_suite(tmp_path / "s.yaml", [1, 14])  # bs14 runs 2 s with a helper process
    cache = tmp_path / "cache"
    args = ["main..faulty", "--configs", suite, "--repo", faulty_repo, "--cache-dir", cache,
            "--target", "reference", "--rounds", 1, "--max-rounds", 1,
            "--seed", seed_timing_bs1_first(14), "--timeout", 60, "--json",
            tmp_path / "result.json", "--prestart", "on"]
    try:
        proc, state, log, before = _start_and_stop_midway(
            args, cache, sig, 14, to_group=sig == signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == code, stderr
        assert "Traceback" not in stderr
        assert re.search(r"(interrupted|terminated \(SIGTERM\)); measured rounds are kept",
                         stderr), stderr
        # the worker, and the helper it started, were stopped as a process group
        assert wait_for_no_processes(str(tmp_path), timeout=5) == {}

        kept = _rounds_on_disk(state)
        assert before.items() <= kept.items()  # nothing measured before the signal was lost
        # the interrupted round's finished config was saved too, as its worker recorded it
        partial = next(json.loads(line)["record"] for line in log.read_text().splitlines()
                       if '"done"' in line)
        side_round = int(log.parent.parent.name.removeprefix("r"))
        assert kept[("B", config_id(1), side_round)] == partial["latency_us"]
        assert ("B", config_id(14), side_round) not in kept  # interrupted: not a failure
        assert json.loads((state / "state.json").read_text())["complete"] is False
        first_logs = {p: p.stat().st_mtime_ns for p in state.glob("logs/*/*/worker*/job.json")}

        started = time.time_ns()
        rerun = run_abdiff(*args, *again)
        assert rerun.returncode in (0, 1), rerun.stderr
        assert "Traceback" not in rerun.stderr
        assert state_dir_of(rerun.stderr) == state
    finally:
        kill_leftovers(str(tmp_path))
    final = _rounds_on_disk(state)
    assert kept.items() <= final.items()  # the kept rounds were reused, not measured again
    expected = {(side, config_id(b), 0) for side in "AB" for b in (1, 14)}
    assert set(final) == expected
    # the interrupted round re-ran only the config it had not finished
    job = json.loads((log.parent.parent / "worker0" / "job.json").read_text())
    assert [c["id"] for c in job["configs"]] == [config_id(14)]
    # rounds finished before the signal started no new worker
    for path, mtime in first_logs.items():
        if path.parent.parent != log.parent.parent:
            assert path.stat().st_mtime_ns == mtime < started, path
    assert json.loads((state / "state.json").read_text())["complete"] is True


def test_sigkill_leaves_valid_files_and_no_worker(faulty_repo: Path, tmp_path: Path) -> None:
    """abdiff killed outright (OOM killer, power cut of a CI job): the state files are
    whole JSON (they are only ever renamed into place), and the running worker dies with
    abdiff instead of running on unsupervised."""
    suite = write_suite(tmp_path / "s.yaml", [1, 15])  # bs15 runs 2 s
    cache = tmp_path / "cache"
    args = ["main..faulty", "--configs", suite, "--repo", faulty_repo, "--cache-dir", cache,
            "--target", "reference", "--rounds", 1, "--max-rounds", 1,
            "--seed", seed_timing_bs1_first(15), "--timeout", 60, "--prestart", "on"]
    try:
        proc, state, _, before = _start_and_stop_midway(args, cache, signal.SIGKILL, 15,
                                                        to_group=False)
        proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        assert wait_for_no_processes(str(tmp_path), timeout=5) == {}
    finally:
        kill_leftovers(str(tmp_path))
    assert before.items() <= _rounds_on_disk(state).items()
    assert not list(state.glob(".*.tmp"))


# ---------------------------------------------------------------- atomic files


def test_reports_and_baselines_are_written_atomically(
        fault_run: FaultRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file abdiff writes for a user (report, JSON, HTML, baseline) is written to a
    temporary file in the same folder, fsynced, then renamed over the target."""
    calls: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        calls.append(("replace", f"{src} -> {dst}"))
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "fsync", fsync)
    monkeypatch.setattr(files.os, "replace", replace)
    a, b = fault_run.state_dir / "a.json", fault_run.state_dir / "b.json"
    outputs = [tmp_path / "out" / n for n in ("report.md", "result.json", "report.html")]
    assert main(["compare", str(a), str(b), "--format", "markdown", "--output", str(outputs[0]),
                 "--json", str(outputs[1]), "--html", str(outputs[2])]) == 1
    # a baseline is stored the same way (no measurement needed: it is a run file)
    records.write_run_file(tmp_path / "baselines" / "rel.json", load_run_file(b))
    outputs.append(tmp_path / "baselines" / "rel.json")
    for target in outputs:
        tmp = next(c[1].split(" -> ")[0] for c in calls
                   if c[0] == "replace" and c[1].endswith(f" -> {target}"))
        assert Path(tmp).parent == target.parent and Path(tmp).name.startswith(f".{target.name}.")
        assert calls.index(("fsync", tmp)) < calls.index(("replace", f"{tmp} -> {target}"))
        assert not Path(tmp).exists()
    assert json.loads(outputs[1].read_text())["summary"]["exit_code"] == 1


# ---------------------------------------------------------------- two abdiffs, one cache


def _worktrees(repo: Path) -> list[str]:
    out = git(repo, "worktree", "list", "--porcelain")
    return [ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("worktree ")][1:]


def test_two_abdiffs_share_one_cache(tmp_path: Path) -> None:
    """main..pr and main..pr-v1 at once on one cache: both need main's checkout; the lock
    makes one of them create it and the other reuse it, and both runs succeed."""
    repo = tmp_path / "repo"
    shas = build_demo_repo(repo)
    suite = write_suite(tmp_path / "s.yaml", [1])
    cache = tmp_path / "cache"
    procs = [subprocess.Popen(
        abdiff_argv(rng, "--configs", suite, "--repo", repo, "--cache-dir", cache, "--target",
                    "reference", "--rounds", 1, "--max-rounds", 1, "--json",
                    tmp_path / f"{n}.json"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=git_env())
        for n, rng in enumerate(["main..pr", "main..pr-v1"])]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        kill_leftovers(str(tmp_path))
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode in (0, 1), err  # q1 configs: unchanged, or noise on one round
        assert "Traceback" not in err
    for n in range(2):
        assert json.loads((tmp_path / f"{n}.json").read_text())["summary"]["configs"] == 1
    trees = _worktrees(repo)
    assert sorted(Path(t).name for t in trees) == sorted(shas[b] for b in ("main", "pr", "pr-v1"))
    for tree in map(Path, trees):
        assert git(tree, "rev-parse", "HEAD") == tree.name
        assert git(tree, "status", "--porcelain") == ""
        assert tree.with_name(tree.name + ".done").read_text().strip() == tree.name
    assert not [p for p in Path(trees[0]).parent.iterdir() if p.name.startswith(".tmp-")]


def test_the_same_command_twice_at_once(faulty_repo: Path, tmp_path: Path) -> None:
    """A CI bot retrying a job while the first is still running: the second waits for or
    refuses the measurement in progress; neither ever reports a status it did not see."""
    suite = write_suite(tmp_path / "s.yaml", [1, 15])  # both healthy; bs15 takes 2 s
    cache = tmp_path / "cache"
    args = ["main..faulty", "--configs", suite, "--repo", faulty_repo, "--cache-dir", cache,
            "--target", "reference", "--rounds", 1, "--max-rounds", 1, "--seed", 1, "--quiet"]
    procs = [subprocess.Popen(abdiff_argv(*args, "--json", tmp_path / "first.json"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=git_env())]
    try:
        deadline = time.monotonic() + 60
        while not list(cache.glob("runs/*/logs/A/r0/worker0/records.jsonl")) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        procs.append(subprocess.Popen(abdiff_argv(*args, "--json", tmp_path / "second.json"),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=git_env()))
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        kill_leftovers(str(tmp_path))
    for proc, name, (_, err) in zip(procs, ("first", "second"), outs, strict=True):
        assert "Traceback" not in err
        if proc.returncode == 3 and name == "second":
            assert "another abdiff" in one_line(err)
            continue
        assert proc.returncode in (0, 1), err
        result = json.loads((tmp_path / f"{name}.json").read_text())
        assert {(c["status_a"], c["status_b"]) for c in result["configs"]} == {("ok", "ok")}


# ---------------------------------------------------------------- a full disk, a killed checkout


def _file_size_limit(limit: int):
    """preexec_fn: every file abdiff (and what it starts) writes stops at `limit` bytes,
    as on a full disk (EFBIG instead of ENOSPC)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_full_disk_and_killed_checkout_are_recovered(tmp_path: Path) -> None:
    """1. The disk fills while git checks out: exit 3, one line, nothing half-made left.
    2. abdiff dies in the middle of a checkout: the next run finds it unfinished (no marker)
       and builds it again.
    3. The disk fills while the report is written: exit 3, one line, the measured rounds
       stay; `--resume` then writes the report without measuring again."""
    repo = tmp_path / "repo"
    shas = build_demo_repo(repo)
    suite = write_suite(tmp_path / "s.yaml", [1])
    cache = tmp_path / "cache"
    args = ["main..pr", "--configs", suite, "--repo", repo, "--cache-dir", cache, "--target",
            "reference", "--rounds", 1, "--max-rounds", 1, "--json", tmp_path / "result.json",
            "--html", tmp_path / "report.html"]
    try:
        # 1. a checkout that cannot be written
        full = subprocess.run(abdiff_argv(*args), capture_output=True, text=True, env=git_env(),
                              preexec_fn=_file_size_limit(2000), timeout=120, check=False)
        assert full.returncode == 3, full.stderr
        assert "cannot check out main" in one_line(full.stderr)
        assert _worktrees(repo) == []
        assert not [p for p in cache.glob("checkouts/*/*") if p.name in shas.values()]

        # 2. abdiff killed after git wrote the files, before the checkout was marked complete
        # (a git first on PATH that stops there: abdiff runs no hook of the repository)
        flag = tmp_path / "in-checkout"
        slow_git = tmp_path / "slow-git" / "git"
        slow_git.parent.mkdir()
        real_git = next(Path(d) / "git" for d in os.environ["PATH"].split(os.pathsep)
                        if (Path(d) / "git").is_file())
        slow_git.write_text(f'#!/bin/sh\n"{real_git}" "$@"\nrc=$?\ncase " $* " in\n'
                            f'  *" worktree add "*) touch \'{flag}\'; sleep 60 ;;\nesac\n'
                            'exit $rc\n')
        slow_git.chmod(0o755)
        env = git_env()
        env["PATH"] = f"{slow_git.parent}{os.pathsep}{env['PATH']}"
        proc = subprocess.Popen(abdiff_argv(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert flag.exists()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        (half,) = [p for p in cache.glob("checkouts/*/*") if p.name == shas["main"]]
        assert (half / "tinyllm").is_dir() and not half.with_name(half.name + ".done").exists()
        (half / "tinyllm" / "__init__.py").write_text("raise SystemExit('half-made')\n")
        ok = run_abdiff(*args)
        assert ok.returncode == 0, ok.stderr
        assert "Traceback" not in ok.stderr
        state = state_dir_of(ok.stderr)
        measured = _rounds_on_disk(state)
        assert set(measured) == {(side, config_id(1), 0) for side in "AB"}

        # 3. the report does not fit on the disk
        (tmp_path / "report.html").unlink()
        jobs = {p: p.stat().st_mtime_ns for p in state.glob("logs/*/*/worker*/job.json")}
        full = subprocess.run(abdiff_argv(*args, "--resume", "--quiet"), capture_output=True,
                              text=True, env=git_env(), preexec_fn=_file_size_limit(2000),
                              timeout=120, check=False)
        assert full.returncode == 3, full.stderr
        assert "File too large" in one_line(full.stderr)
        assert not (tmp_path / "report.html").exists()
        assert not list(tmp_path.glob(".report.html.*"))
        assert _rounds_on_disk(state) == measured
        again = run_abdiff(*args, "--resume")
        assert again.returncode == 0, again.stderr
    finally:
        kill_leftovers(str(tmp_path))
    assert "</html>" in (tmp_path / "report.html").read_text()
    assert {p: p.stat().st_mtime_ns for p in state.glob("logs/*/*/worker*/job.json")} == jobs
    assert _rounds_on_disk(state) == measured
    assert sorted(Path(t).name for t in _worktrees(repo)) == sorted([shas["main"], shas["pr"]])
    assert git(half, "status", "--porcelain") == ""
    assert half.with_name(half.name + ".done").read_text().strip() == shas["main"]
