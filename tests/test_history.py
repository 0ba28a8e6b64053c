"""`abdiff history`: configs across baselines and recorded runs, as a user reads it.

The sources are the run files measured on the H200 (tests/data/h200/, baselines/), as a
repository's baselines and as runs kept in a cache's state folders, their commits
rewritten to the demo repository's (abdiff keeps only runs of the repository's own
commits), each given the session it was measured in.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from conftest import git, h200_with_kernels, run_abdiff

from abdiff.demo import build_demo_repo
from abdiff.store.state import write_state

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "data" / "h200"  # extracts of H200 run files (tests/data/README.md)
CONFIG = "GEN-TRTLLM-bs8-q2-kv2049"
SHA: dict[str, str] = {}  # the demo's commits, 10 digits (the `sources` fixture fills it)


def _copy(source: Path, target: Path, sha: str, started: str) -> None:
    data = json.loads(source.read_text())
    data["sha"] = sha
    data["sessions"] = {f"s{started[8:10]}{started[11:13]}": {"started": started, "host": "h200"}}
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data))


def signed(state: Path) -> None:
    """A state.json for the run files in `state`, signed as abdiff signs its own (a run
    folder whose MAC does not hold is left out of the history)."""
    write_state(state, 1, True, {name: hashlib.sha256((state / name).read_bytes()).hexdigest()
                                 if (state / name).exists() else None
                                 for name in ("a.json", "b.json")})


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("history")
    repo = base / "demo"
    build_demo_repo(repo)
    sha = {rev: git(repo, "rev-parse", rev).strip() for rev in ("main", "pr", "pr-v1")}
    SHA.update({rev: value[:10] for rev, value in sha.items()})
    baselines, runs = base / "baselines", base / "cache" / "runs"
    unpacked = base / "h200"
    runs_with_kernels = {name: h200_with_kernels(name, unpacked) for name in (
        "graph-main..pr-v1-a", "graph-main..pr-v1-b", "graph-main..pr-b")}
    _copy(runs_with_kernels["graph-main..pr-v1-a"], baselines / "release-0.json", sha["main"],
          "2026-12-01T10:00:00+00:00")
    _copy(ROOT / "baselines/reference-h200.json", baselines / "release-1.json", sha["pr"],
          "2026-12-03T10:00:00+00:00")
    for key, files, started in (
            ("1111aaaa", ("graph-main..pr-v1-a", "graph-main..pr-v1-b"), "2026-12-02T09:00:00"),
            ("2222bbbb", ("graph-main..pr-v1-a", "graph-main..pr-b"), "2026-12-02T12:00:00")):
        a, b = (json.loads(runs_with_kernels[name].read_text())["rev"] for name in files)
        _copy(runs_with_kernels[files[0]], runs / key / "a.json", sha[a], started + "+00:00")
        _copy(runs_with_kernels[files[1]], runs / key / "b.json", sha[b], started + "+00:01")
        signed(runs / key)
    # another repository's run in the same cache: not this history's
    _copy(H200 / "graph-pr..pr-a.json", runs / "3333cccc" / "a.json", "f" * 40,
          "2026-12-02T13:00:00+00:00")
    signed(runs / "3333cccc")
    return {"repo": repo, "baselines": baselines, "cache": base / "cache", "base": base}


def history(sources: dict[str, Path], *args: object, columns: int = 100):
    env = {**__import__("conftest").git_env(), "COLUMNS": str(columns)}
    return run_abdiff("history", *args, "--repo", sources["repo"], "--baselines-dir",
                      sources["baselines"], "--cache-dir", sources["cache"], env=env)


def test_the_table_shows_each_point_and_what_changed(sources: dict[str, Path]) -> None:
    page = sources["base"] / "history.html"
    done = history(sources, CONFIG, "GEN-DSA-bs8-q2-kv2049", "--html", page)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert " ".join(" ".join(lines[:2]).split()).startswith(
        "abdiff history: 6 points: 2 baselines, 4 sides of 2 recorded runs (")
    start = lines.index(f"{CONFIG}: 6 points on 3 commits")
    block = lines[start:lines.index("", start)]
    # grouped by commit, in the order first measured: main's three points (a baseline, the
    # A sides of both runs), then pr-v1's, then pr's: a fact changes once per commit, never
    # back and forth between the A and B sides of each run
    assert [ln.strip() for ln in block if re.match(r"  \S", ln)] == [
        f"{rev} ({sha})" for rev, sha in (("main", SHA["main"]), ("pr-v1", SHA["pr-v1"]),
                                          ("pr", SHA["pr"]))]
    rows = [ln for ln in block if re.match(r"    2026-12-0\d", ln)]
    assert [r.split()[2:5] for r in rows] == [
        ["baseline", "release-0", "ok"], ["run", "1111aaaa", "A"], ["run", "2222bbbb", "A"],
        ["run", "1111aaaa", "B"], ["run", "2222bbbb", "B"], ["baseline", "release-1", "ok"]]
    assert re.match(r"    2026-12-01 10:00  baseline release-0\s+ok\s+\d+(\.\d+)? µs ±\d+"
                    r"(\.\d+)?\s+cuda", rows[0]), rows[0]
    text = "\n".join(block)
    # pr-v1 set TRTLLM's max_total_draft_tokens; pr (the merged fix) does not
    assert text.count("      facts: attn_metadata.max_total_draft_tokens None -> 1") == 1
    assert text.count("      facts: attn_metadata.max_total_draft_tokens 1 -> None") == 1
    assert re.search(r"      kernels \+4 -8: \+", text), text
    assert "3333cccc" not in done.stdout  # another repository's run
    dsa = lines[lines.index("GEN-DSA-bs8-q2-kv2049: 6 points on 3 commits"):]
    assert any(ln.strip() == "status aborted -> ok" for ln in dsa)
    assert any("error: SIGABRT" in ln for ln in dsa)
    assert done.stderr == f"abdiff: wrote {page} (html)\n"

    html = page.read_text()
    assert "<script" not in html and "http" not in html.replace(
        "http://www.w3.org", "")  # self-contained
    assert html.count('class="point-mark') == 6 + 6  # a mark per point of each config
    # diamonds: both baselines of TRTLLM, release-1 of DSA; DSA aborted on main: an x
    assert html.count('class="point-mark baseline"') == 3
    assert html.count('class="point-mark failed"') == 3  # release-0, runs' A sides
    assert html.count('class="change-mark"') >= 3
    assert "attn_metadata.max_total_draft_tokens None -&gt; 1" in html


def test_a_mistyped_config_gets_the_closest_ids(sources: dict[str, Path]) -> None:
    done = history(sources, "GEN-TRTLLM-bs8-q3-kv2049")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("abdiff: error: config 'GEN-TRTLLM-bs8-q3-kv2049' is in none "
                                  "of 6 baselines and recorded runs")
    assert done.stderr.rstrip().endswith(
        "; did you mean GEN-TRTLLM-bs8-q4-kv2049 or GEN-TRTLLM-bs8-q2-kv2049?")


def test_nothing_recorded_says_how_to_record(sources: dict[str, Path], tmp_path: Path) -> None:
    done = run_abdiff("history", CONFIG, "--repo", sources["repo"], "--baselines-dir",
                      tmp_path / "none", "--cache-dir", tmp_path / "cache")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"abdiff: error: no baselines or recorded runs in {tmp_path / 'none'}/*.json and the "
        f"runs in {tmp_path / 'cache' / 'runs'}; record one with `abdiff baseline refresh NAME "
        "--rev REV --configs SUITE` or run `abdiff A..B --configs SUITE`")


def test_baseline_show_fits_the_terminal(sources: dict[str, Path]) -> None:
    """Provenance first, then each config's time per step with its spread, facts, kernels."""
    env = {**__import__("conftest").git_env(), "COLUMNS": "80"}
    done = run_abdiff("baseline", "show", "release-1", "--repo", sources["repo"],
                      "--baselines-dir", sources["baselines"], env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    said = done.stdout.replace("\n    ", " ").splitlines()  # wrapped lines joined
    assert re.fullmatch(r"baseline release-1: pr at commit [0-9a-f]{12}, suite mtp, target "
                        r"reference, 12 configs", said[0])
    assert said[1].startswith("recorded 2026-12-02T15:02:54+00:00 on NVIDIA H200")
    assert said[1].endswith("; 1 session: s0310 (2026-12-03 10:00, h200)")
    assert said[2].startswith("machine fingerprint: target=reference, device=cuda")
    assert said[3].startswith("session drift: not measured (one measuring session)")
    config = next(ln for ln in lines if ln.startswith(CONFIG))
    assert re.fullmatch(rf"{CONFIG}  ok  5 rounds  \d+(\.\d+)? µs ±\d+(\.\d+)?", config), config
    block = lines[lines.index(config):]
    assert block[1].startswith("    facts    attn_metadata.")
    assert any(ln.startswith("    kernels  ") for ln in block[1:6])


def test_another_launcher_another_clone_and_another_target(sources: dict[str, Path],
                                                           tmp_path: Path) -> None:
    """A run of pr-v1 under another launcher is no kernel change of pr-v1 (it says how it
    was measured, its kernels are not compared); a run of the same commits made from
    another clone of the repository (the shared cache names the repository each run
    measured) is not this repository's; --target keeps one target's points."""
    import shutil

    cache = tmp_path / "cache"
    shutil.copytree(sources["cache"], cache)
    other = json.loads((cache / "runs" / "1111aaaa" / "b.json").read_text())
    other["env"]["launcher"] = "mpirun x2"
    other["sessions"] = {"s0214": {"started": "2026-12-02T14:00:00+00:00", "host": "h200"}}
    other["configs"][0]["rounds"][0]["kernels"] = {"a_kernel_only_mpirun_runs": 1}
    (cache / "runs" / "4444dddd").mkdir()
    (cache / "runs" / "4444dddd" / "a.json").write_text(json.dumps(other))
    signed(cache / "runs" / "4444dddd")
    clone = dict(other, env={**other["env"], "repository": str(tmp_path / "another-clone")})
    (cache / "runs" / "5555eeee").mkdir()
    (cache / "runs" / "5555eeee" / "a.json").write_text(json.dumps(clone))
    signed(cache / "runs" / "5555eeee")
    env = {**__import__("conftest").git_env(), "COLUMNS": "120"}
    args = ("history", CONFIG, "--repo", sources["repo"], "--baselines-dir",
            sources["baselines"], "--cache-dir", cache)
    done = run_abdiff(*args, env=env)
    assert done.returncode == 0, done.stderr
    assert "5555eeee" not in done.stdout  # another clone's run
    block = done.stdout.split(f"{CONFIG}: ")[1]
    pr_v1 = block.split(f"  pr-v1 ({SHA['pr-v1']})")[1].split("\n  pr (")[0]
    assert "run 4444dddd A" in pr_v1 and "mpirun x2" in pr_v1
    assert "measured as mpirun x2, cuda (run 1111aaaa B: cuda): kernels not compared" in \
        " ".join(pr_v1.split())
    assert "a_kernel_only_mpirun_runs" not in done.stdout
    only = run_abdiff(*args, "--target", "trtllm", env=env)
    assert only.returncode == 2 and "(target trtllm)" in only.stderr


def test_earlier_paired_runs_are_this_machine_s_authenticated_runs_of_a_s_line(
        tmp_path: Path) -> None:
    """What a plan of few rounds borrows noise from: run folders whose MAC holds, A and B
    measured interleaved, of the same target, repository, machine and set-up (read from A:
    B's environment is what a pull request's worker reports), both sides commits of A's
    first-parent chain; not the run's own folder, not a one-sided run, not a folder a
    benchmark wrote into, not a pull request's run, before or after its merge (its
    benchmark reports its rounds: one config's noise made wide there would hide that
    config's next change)."""
    from abdiff.store.history import earlier_paired_runs
    from abdiff.store.records import ConfigRuns, RoundRecord, RunFile

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for message in ("one", "two"):
        git(repo, "commit", "-q", "--allow-empty", "-m", message)
    old, main = git(repo, "rev-parse", "main~1"), git(repo, "rev-parse", "main")
    git(repo, "checkout", "-q", "-b", "pr", old)
    git(repo, "commit", "-q", "--allow-empty", "-m", "a pull request")
    pr = git(repo, "rev-parse", "pr")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge the pull request", "pr")
    merged = git(repo, "rev-parse", "main")
    env = {"repository": "/r", "cpu_model": "Xeon", "host": "vm", "device": "cpu",
           "launcher": "local", "timing": "eager"}

    def side(sha: str, session: str, **changed: str) -> RunFile:
        rounds = [RoundRecord("ok", latency_us=[100.0], round=r) for r in range(5)]
        return RunFile("rev", sha, "reference", "s", {**env, **changed},
                       [ConfigRuns("c", {}, rounds)], sessions={session: {}})

    def folder(name: str, a: RunFile | None, b: RunFile | None) -> Path:
        path = tmp_path / "runs" / name
        path.mkdir(parents=True)
        for file, run in (("a.json", a), ("b.json", b)):
            if run is not None:
                (path / file).write_text(json.dumps(run.to_json()))
        signed(path)
        return path

    now = folder("now", side(merged, "s0"), side(pr, "s0"))
    folder("main-line", side(old, "s1"), side(main, "s1", host="claimed-by-b"))
    folder("other-host", side(old, "s2", host="gpu1"), side(main, "s2"))
    folder("other-timing", side(old, "s3", timing="graph replay"),
           side(main, "s3", timing="graph replay"))
    folder("baseline-refresh", side(main, "s4"), None)
    folder("apart", side(old, "s5"), side(main, "s6"))
    folder("pull-request", side(old, "s8"), side(pr, "s8"))
    forged = folder("forged", side(old, "s7"), side(main, "s7"))
    (forged / "b.json").write_text(json.dumps(side(old, "s7").to_json()))
    found = earlier_paired_runs(tmp_path / "runs", now, side(merged, "s0"), repo)
    assert [(a.sha, b.sha, b.sessions) for a, b in found] == [(old, main, {"s1": {}})]
    # a run whose A is the pull request's commit: its own line holds that run's sides
    found = earlier_paired_runs(tmp_path / "runs", now, side(pr, "s0"), repo)
    assert [b.sessions for _, b in found] == [{"s8": {}}]
    assert earlier_paired_runs(tmp_path / "runs", now, side("WORKTREE", "s0"), repo) == []
    assert earlier_paired_runs(tmp_path / "nothing", now, side(merged, "s0"), repo) == []


def test_an_html_path_that_cannot_be_written_is_refused_first(sources: dict[str, Path]) -> None:
    """--html naming a folder, or a folder /proc will not make: one line, exit 2, before the
    history is printed (not exit 3 after it)."""
    for page, says in ((sources["base"], "that is a folder"),
                       (Path("/proc/nope/h.html"), "cannot write in /proc (")):
        done = history(sources, CONFIG, "--html", page)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr


def test_an_unknown_target_is_refused_with_the_known_ones(sources: dict[str, Path]) -> None:
    """It printed an empty history; `abdiff A..B` and doctor answer the same typo so."""
    done = history(sources, CONFIG, "--target", "refernce")
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "--target 'refernce' is unknown; choose one of" in done.stderr
    assert "reference" in done.stderr and done.stderr.count("\n") == 1
