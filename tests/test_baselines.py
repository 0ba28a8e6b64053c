"""Stored baselines: refresh, list, show, append, compare against, fingerprint checks,
the margin measured from a baseline's sessions (on H200 rounds: tests/data/h200/),
and the committed baselines/reference-cpu.json against a fresh run of the demo's `pr`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import run_abdiff, write_suite

from abdiff.demo import build_demo_repo
from abdiff.store.baselines import (
    append_rounds,
    busy_readings,
    drift_allowance,
    fingerprint_notes,
    interleaved,
    session_drift,
)
from abdiff.store.records import RunFile, load_run_file, write_run_file

pytestmark = pytest.mark.slow  # baselines measured in worker processes

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "data" / "h200"
# Graph-replay runs of the demo's `pr` on one H200 (2026-12-02), each its own abdiff
# invocation minutes apart: the baseline refresh, then side A of the A/A run, then side B
# of main..pr. They predate session records, so each file is given its session here.
H200_SESSIONS = {"refresh": "baseline-graph-reference.json", "aa": "graph-pr..pr-a.json",
                 "main-pr": "graph-main..pr-b.json"}
H200_FRESH = "baseline-graph..pr-b.json"  # `pr` measured against the baseline, later


def recorded(path: str, session: str, scale: float = 1.0) -> RunFile:
    """A recorded H200 run file whose rounds all belong to `session`, latencies x `scale`;
    its first 5 rounds only, those that ran every config in each process as a refresh's do
    (main..pr's adaptive rounds ran fewer, and a config's place in its process moved its
    latency by 4%: a refresh never has such rounds, nor does B against a baseline)."""
    run = load_run_file(H200 / path)
    run.sessions = {session: {"started": run.env.get("recorded_at") or "2026-12-02"}}
    for config in run.configs:
        config.rounds = [r for r in config.rounds if r.round is None or r.round < 5]
        for record in config.rounds:
            record.session = session
            record.latency_us = [x * scale for x in record.latency_us]
    return run


def three_session_baseline() -> RunFile:
    runs = [recorded(path, name) for name, path in H200_SESSIONS.items()]
    baseline = runs[0]
    for run in runs[1:]:
        baseline = append_rounds(baseline, run)
    return baseline


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("baselines") / "demo"
    build_demo_repo(repo)
    return repo


# workers started ahead of their job: a quarter less wall time on 2 cores
AHEAD = ("--prestart", "on")


def test_refresh_list_show_append_and_compare(demo: Path, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.yaml", [2], ("DSA", "TRTLLM"), (1, 4))
    folder, cache = tmp_path / "baselines", tmp_path / "cache"
    common = ("--configs", suite, "--repo", demo, "--cache-dir", cache, "--baselines-dir", folder)
    done = run_abdiff("baseline", "refresh", "rel-1", "--rev", "main", *AHEAD, "--rounds", 2,
                      "--sessions", 1, *common)
    assert done.returncode == 0, done.stderr
    stored = load_run_file(folder / "rel-1.json")
    assert stored.rev == "main" and stored.env["cpu_model"] and stored.env["torch"]
    assert stored.env["recorded_at"] and all(len(c.rounds) == 2 for c in stored.configs)

    assert len(stored.sessions) == 1
    shown = run_abdiff("baseline", "show", "rel-1", "--repo", demo, "--baselines-dir", folder)
    assert "session drift: not measured (one measuring session)" in shown.stdout
    assert "does not fail a run" in shown.stdout

    # the default records several sessions; --append adds them to the stored one
    done = run_abdiff("baseline", "refresh", "rel-1", "--rev", "main", *AHEAD, "--rounds", 1,
                      "--append", "--sessions", 2, "--session-gap", 0, "--seed", 5, *common)
    assert done.returncode == 0, done.stderr
    assert "4 configs, 4 rounds in 3 sessions" in " ".join(done.stderr.split())
    appended = load_run_file(folder / "rel-1.json")
    assert all(sorted(r.round for r in c.rounds) == [0, 1, 2, 3] for c in appended.configs)
    # each session has its own id, the host it ran on, and its own worker processes
    assert len(appended.sessions) == 3
    assert all(where["host"] for where in appended.sessions.values())
    assert {r.session for c in appended.configs for r in c.rounds} == set(appended.sessions)
    # every session's workers and the order each timed its configs in are kept
    assert {order["round"] for order in appended.orders} == {0, 1, 2, 3}
    # another commit is refused before anything is measured (it measured a session first)
    measured = set((cache / "runs").iterdir())
    done = run_abdiff("baseline", "refresh", "rel-1", "--rev", "pr", *AHEAD, "--rounds", 1,
                      "--append", "--sessions", 1, *common)
    assert done.returncode == 2 and "--append: the baseline holds" in done.stderr, done.stderr
    assert set((cache / "runs").iterdir()) == measured
    # a suite the baseline holds none of: refused before B is measured
    other = write_suite(tmp_path / "other.yaml", [8], ("DSA",), (1,))
    done = run_abdiff("baseline:rel-1..pr", "--configs", other, "--repo", demo, "--cache-dir",
                      cache, "--baselines-dir", folder, *AHEAD)
    assert done.returncode == 2 and "holds none of the 1 configs of suite" in done.stderr, \
        done.stderr
    assert set((cache / "runs").iterdir()) == measured

    listed = run_abdiff("baseline", "list", "--repo", demo, "--baselines-dir", folder)
    assert listed.returncode == 0 and "rel-1" in listed.stdout and "main" in listed.stdout
    shown = run_abdiff("baseline", "show", "rel-1", "--repo", demo, "--baselines-dir", folder)
    assert shown.returncode == 0 and "DG_HOST_ASSERT" in shown.stdout
    assert "max_total_draft_tokens=None" in shown.stdout
    assert "session drift: over 3 sessions, SD" in shown.stdout and "shared by" in shown.stdout
    flat = " ".join(shown.stdout.split())  # the lines wrap to the terminal
    assert "the drift alone makes a comparison's latency interval" in flat
    # gated beyond it on a quiet machine; this shared one is often busy, and then says so
    assert ("latency against this baseline gates beyond that" in flat) != (
        "machine check: busy while it measured" in flat)

    # 2 rounds leave latency inconclusive; B still gets no adaptive rounds (max-rounds 15)
    done = run_abdiff("baseline:rel-1..pr", "--expect", "backend=DSA", *AHEAD, "--rounds", 2,
                      "--json", tmp_path / "r.json", *common)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["a"]["baseline"] == "rel-1"
    assert "not interleaved" in result["notes"][0] and "3 sessions" in result["notes"][0]
    assert "no adaptive rounds" in result["notes"][1]
    assert {c["latency"]["rounds_b"] for c in result["configs"]} <= {0, 2}
    assert result["summary"]["min_effect"] == 0.02
    # three sessions: their measured drift is added to each latency interval and latency
    # gates; a busy machine (this one, shared, often) leaves the drift unmeasured, latency soft
    drift = result["summary"]["drift"]
    if drift["measured"]:
        assert not busy_readings(appended) and "soft_gates" not in result["summary"]
        assert "drift between sessions measured in baseline 'rel-1' (3 sessions" in \
            result["notes"][2]
    else:
        assert "the machine was busy while" in drift["missing"], drift
        assert result["summary"]["soft_gates"] == ["latency"]
        assert drift["missing"] in result["notes"][2]
    assert all(len(note) < 400 for note in result["notes"][:3])  # never cut mid-sentence
    # the result names both sides' environments and sessions, as their run files hold them
    for side, sessions in (("a", 3), ("b", 1)):
        env = result[side]["env"]
        assert env["torch"] == stored.env["torch"] and env["device"] == "cpu"
        assert env["sandbox"] and env["machine"] and "kernel_env" in env
        assert len(result[side]["sessions"]) == sessions
    fixed = [c for c in result["configs"] if c["status_change"] == "fixed"]
    assert [c["id"] for c in fixed] == ["GEN-DSA-bs2-q4-kv64"]


def test_other_machine_is_refused_unless_allowed(demo: Path, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.yaml", [2])
    folder, cache = tmp_path / "baselines", tmp_path / "cache"
    common = ("--configs", suite, "--repo", demo, "--cache-dir", cache, "--baselines-dir", folder)
    assert run_abdiff("baseline", "refresh", "b", "--rev", "pr", *AHEAD, "--rounds", 1,
                      "--sessions", 1, *common).returncode == 0
    data = json.loads((folder / "b.json").read_text())
    data["env"].update(torch="1.0.0", cpu_model="Some Other CPU")
    (folder / "b.json").write_text(json.dumps(data))
    refused = run_abdiff("baseline:b..pr", *AHEAD, "--rounds", 1, "--max-rounds", 1, *common)
    assert refused.returncode == 2
    line = refused.stderr.strip()
    assert "\n" not in line and "torch: '1.0.0' in the baseline" in line
    assert "--allow-env-mismatch" in line
    allowed = run_abdiff("baseline:b..pr", *AHEAD, "--rounds", 1, "--max-rounds", 1,
                         "--allow-env-mismatch", "--format", "markdown", *common)
    assert allowed.returncode in (0, 1), allowed.stderr
    assert "environment differs from the baseline" in allowed.stdout
    appended = run_abdiff("baseline", "refresh", "b", "--rev", "pr", *AHEAD, "--rounds", 1,
                          "--append", *common)
    assert appended.returncode == 2 and "environment differs" in appended.stderr


def test_committed_reference_baseline_matches_a_fresh_run(demo: Path, tmp_path: Path) -> None:
    """baselines/reference-cpu.json holds the demo's `pr` on the CPU; a fresh run of `pr`
    must agree with it on every status, fact and kernel (latency depends on the machine)."""
    committed = load_run_file(ROOT / "baselines" / "reference-cpu.json")
    assert committed.rev == "pr" and committed.suite == "mtp"
    done = run_abdiff("baseline:reference-cpu..pr", "--configs", "mtp", "--repo", demo,
                      "--cache-dir", tmp_path / "cache", "--baselines-dir", ROOT / "baselines",
                      "--allow-env-mismatch", *AHEAD, "--rounds", 1, "--max-rounds", 1,
                      "--json", tmp_path / "r.json", timeout=400)
    assert done.returncode in (0, 1), done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert len(result["configs"]) == 12
    for config in result["configs"]:
        assert config["status_change"] == "same", config["id"]
        assert not config["facts_changed"], config["id"]
        assert not config["kernels_added"] and not config["kernels_removed"], config["id"]


def test_drift_allowance_from_recorded_h200_sessions() -> None:
    """Three graph-replay sessions of one commit: a measured drift, added to the intervals,
    latency gated; one session: nothing measured, latency soft unless the user named it."""
    baseline = three_session_baseline()
    drift = session_drift(baseline)
    assert drift is not None and drift.sessions == 3 and drift.df == 2 * 12
    # graph replays: sessions within a fraction of a percent, round noise included
    assert 0 <= drift.shared < 0.003 and 0 <= drift.own < 0.005
    assert set(drift.spread) == {c.id for c in baseline.configs}
    fresh = recorded(H200_FRESH, "fresh")
    allowed = drift_allowance(baseline, fresh, "baseline 'h200'", {})
    assert allowed.drift is not None and allowed.drift.df == 24
    assert allowed.drift.shared == pytest.approx(drift.shared ** 2 * (1 + 1 / 3))
    assert allowed.drift.own == pytest.approx(drift.own ** 2 * (1 + 1 / 3))
    assert allowed.gates == {} and "3 sessions" in allowed.why

    single = recorded(H200_SESSIONS["refresh"], "refresh")
    assert session_drift(single) is None
    unmeasured = drift_allowance(single, fresh, "baseline 'h200'", {"kernels": "hard"})
    assert unmeasured.drift is None and unmeasured.gates == {"kernels": "hard",
                                                             "latency": "soft"}
    assert "one measuring session" in unmeasured.why and "--append" in unmeasured.why
    assert "not gated (--gate latency=hard gates it)" in unmeasured.why
    knowingly = drift_allowance(single, fresh, "baseline 'h200'", {"latency": "hard"})
    assert knowingly.gates == {"latency": "hard"} and "may be that drift" in knowingly.why


def test_a_busy_machine_leaves_the_drift_unmeasured() -> None:
    """A load that comes and goes moves latency between sessions by more than sessions under
    one load measure (on the 2-core CPU, a baseline refreshed under load ran 5x slower in
    a config than the same commit later): where either side's machine check flagged the
    machine busy, latency does not gate."""
    baseline, fresh = three_session_baseline(), recorded(H200_FRESH, "fresh")
    next(iter(baseline.sessions.values()))["machine"] = [
        {"name": "CPU load", "value": "1.9 of 2 cores", "ok": False, "advice": "idle"}]
    busy = drift_allowance(baseline, fresh, "baseline 'h200'", {})
    assert busy.drift is None and busy.gates == {"latency": "soft"}
    assert "the machine was busy while the baseline measured (CPU load: 1.9 of 2 cores)" in \
        busy.why and "idle machine" in busy.why
    fresh.env["machine"] = [{"name": "GPU 0 throttling", "value": "sw power cap", "ok": False}]
    both = drift_allowance(baseline, fresh, "baseline 'h200'", {})
    assert "and this run measured (GPU 0 throttling: sw power cap)" in both.why
    assert len(both.why) < 400  # a report clips a longer note
    quiet = three_session_baseline()
    next(iter(quiet.sessions.values()))["machine"] = [  # settings that stay are no load
        {"name": "CPU load", "value": "0.1 of 2 cores", "ok": True, "advice": ""},
        {"name": "CPU governor", "value": "powersave", "ok": False, "advice": "performance"},
        {"name": "turbo", "value": "on", "ok": False, "advice": "off"}]
    assert drift_allowance(quiet, recorded(H200_FRESH, "fresh"), "b", {}).drift is not None


def test_another_machine_than_the_baselines_leaves_its_drift_unmeasured() -> None:
    """Sessions all on one host measure nothing of a move to another: latency soft there;
    a baseline whose sessions span two hosts has measured it."""
    baseline = three_session_baseline()
    for where in baseline.sessions.values():
        where["host"] = "node-1"
    fresh = recorded(H200_FRESH, "fresh")
    fresh.sessions["fresh"]["host"] = "node-2"
    moved = drift_allowance(baseline, fresh, "baseline 'h200'", {})
    assert moved.drift is None and moved.gates == {"latency": "soft"}
    assert "host node-2 (the baseline's sessions ran on node-1)" in moved.why
    next(iter(baseline.sessions.values()))["host"] = "node-2"
    assert drift_allowance(baseline, fresh, "baseline 'h200'", {}).drift is not None
    fresh.sessions["fresh"]["host"] = "node-1"
    assert drift_allowance(baseline, fresh, "baseline 'h200'", {}).drift is not None


def test_recorded_h200_sessions_compared_against_the_others_flag_nothing(
        tmp_path: Path) -> None:
    """Each of the four recorded sessions of `pr` against a baseline of the other three:
    the A/A `baseline:X..X` exits 0 and flags no latency; the same session 5% slower is
    flagged in every config (the power at +5% against a baseline)."""
    sessions = {**H200_SESSIONS, "fresh": H200_FRESH}
    for left_out, path in sessions.items():
        kept = [recorded(p, name) for name, p in sessions.items() if name != left_out]
        baseline = kept[0]
        for run in kept[1:]:
            baseline = append_rounds(baseline, run)
        write_run_file(tmp_path / "a.json", baseline)
        for scale, code in ((1.0, 0), (1.05, 1)):
            write_run_file(tmp_path / "b.json", recorded(path, left_out, scale))
            done = run_abdiff("compare", tmp_path / "a.json", tmp_path / "b.json",
                              "--json", tmp_path / "r.json")
            assert done.returncode == code, (left_out, scale, done.stdout)
            verdicts = [c["latency"]["verdict"]
                        for c in json.loads((tmp_path / "r.json").read_text())["configs"]]
            if scale == 1.0:
                assert "slower" not in verdicts and "faster" not in verdicts, left_out
            else:
                assert verdicts.count("slower") == len(verdicts), (left_out, verdicts)


@pytest.mark.parametrize(("scale", "exit_code"), [(1.0, 0), (1.03, 1)])
def test_compare_of_separate_sessions_allows_for_the_measured_drift(
    tmp_path: Path, scale: float, exit_code: int
) -> None:
    """`abdiff compare` sees that the files were not measured interleaved and widens each
    interval by the measured drift: a fresh run of the same commit flags nothing, the same
    run 3% slower is flagged in every config that has no odd process."""
    write_run_file(tmp_path / "a.json", three_session_baseline())
    write_run_file(tmp_path / "b.json", recorded(H200_FRESH, "fresh", scale))
    done = run_abdiff("compare", tmp_path / "a.json", tmp_path / "b.json",
                      "--json", tmp_path / "r.json")
    assert done.returncode == exit_code, done.stdout + done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert any("measured in different sessions, not interleaved" in n and "3 sessions" in n
               for n in result["notes"])
    verdicts = [c["latency"]["verdict"] for c in result["configs"]]
    if scale == 1.0:
        assert "slower" not in verdicts and "faster" not in verdicts
    else:
        assert verdicts.count("slower") >= 10, verdicts


def test_compare_tells_interleaved_from_separate_and_unknown(tmp_path: Path) -> None:
    a, b = recorded(H200_SESSIONS["aa"], "s1"), recorded("graph-pr..pr-b.json", "s1")
    assert interleaved(a, b) is True
    assert interleaved(a, recorded(H200_FRESH, "s2")) is False
    legacy = load_run_file(H200 / H200_FRESH)
    assert interleaved(a, legacy) is None
    write_run_file(tmp_path / "a.json", a)
    write_run_file(tmp_path / "b.json", b)
    together = run_abdiff("compare", tmp_path / "a.json", tmp_path / "b.json",
                          "--json", tmp_path / "r.json")
    assert together.returncode == 0, together.stderr
    notes = json.loads((tmp_path / "r.json").read_text())["notes"]
    assert not any("session" in n for n in notes)
    write_run_file(tmp_path / "legacy.json", legacy)
    unknown = run_abdiff("compare", tmp_path / "a.json", tmp_path / "legacy.json",
                         "--json", tmp_path / "r.json")
    assert unknown.returncode == 0, unknown.stderr
    notes = json.loads((tmp_path / "r.json").read_text())["notes"]
    assert any("predates session records" in n for n in notes)


def test_one_session_baseline_reports_latency_without_gating_it(tmp_path: Path) -> None:
    """One session of baseline: its drift is not measured, so latency does not fail the run:
    B 3% slower is still shown flagged, with its interval, and the notes name the missing
    drift; `--gate latency=hard` gates it knowingly (exit 1)."""
    write_run_file(tmp_path / "a.json", recorded(H200_SESSIONS["refresh"], "refresh"))
    write_run_file(tmp_path / "b.json", recorded(H200_FRESH, "fresh", 1.03))
    done = run_abdiff("compare", tmp_path / "a.json", tmp_path / "b.json",
                      "--json", tmp_path / "r.json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert any("drift between sessions is not measured" in n and "not gated" in n
               for n in result["notes"])
    assert result["summary"]["soft_gates"] == ["latency"]
    assert result["summary"]["drift"] == {"measured": False, "missing": result["summary"][
        "drift"]["missing"]} and "one measuring session" in result["summary"]["drift"]["missing"]
    verdicts = [c["latency"]["verdict"] for c in result["configs"]]
    assert "unchanged" not in verdicts and verdicts.count("slower") >= 10, verdicts
    assert all(c["latency"]["ci"] for c in result["configs"])
    assert "soft gate classes only (latency): reported, not failing" in " ".join(
        done.stdout.split())  # the line wraps to the terminal
    gated = run_abdiff("compare", tmp_path / "a.json", tmp_path / "b.json",
                       "--gate", "latency=hard")
    assert gated.returncode == 1, gated.stdout


def test_another_host_or_gpu_is_a_note_not_a_refusal() -> None:
    here = {"host": "node-2", "gpu_uuid": "GPU-b", "clock_policy": "x", "device_name": "H200"}
    there = {"host": "node-1", "gpu_uuid": "GPU-a", "clock_policy": "x", "device_name": "H200"}
    notes = fingerprint_notes(there, here)
    assert notes == ["host: 'node-1' in the baseline, 'node-2' here",
                     "gpu_uuid: 'GPU-a' in the baseline, 'GPU-b' here"]
    assert fingerprint_notes(there, {}) == []  # nothing known here: nothing to say


def test_the_drift_alone_is_said_as_a_number_a_reader_can_act_on() -> None:
    """`baseline show`: a small drift as +-x%, a larger one as a range of ratios, and one
    no interval can carry (two sessions, 8% apart: 3.62e-06x to 2.76e+05x before) as
    wider than 0.1x to 10x."""
    from abdiff.commands.baseline import drift_alone
    from abdiff.store.baselines import SessionDrift

    def said(shared: float, sessions: int) -> str:
        return drift_alone(SessionDrift(shared, shared, sessions, 2 * (sessions - 1), {}), 2)

    assert re.fullmatch(r"\+-\d+\.\d%", said(0.002, 5))
    assert said(0.0676, 2) == "wider than 0.1x to 10x"
