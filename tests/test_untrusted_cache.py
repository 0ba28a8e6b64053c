"""What a pull request's benchmark leaves in the folders it can write, and what abdiff does
with it (issue 43): each attack planted as a real commit of a pull request of the demo
repository and measured with a real run, each with a control showing the attack works
where the defence is not.

- without a sandbox (`--sandbox off`, as where the OS refuses namespaces), the benchmark
  fabricates a run folder naming main's SHA, swaps a lock for a link to a file of the
  user, and replaces the cache's `runs/` by a link to a folder of the user's: `history`
  leaves the unsigned folder out and names it, the next run refuses the lock (the file is
  intact), the measurement stops and `cache clean --runs` refuses the link (the user's
  folders are intact);
- the CI script: a pull request commits `abdiff-out` as a link to a folder its benchmark
  can write, and its benchmark writes a forged green result there and kills its own
  record log: the script refuses the link, and where the benchmark could still write
  the output folder the posted comment says the measurement failed;
- text: a config id with an OSC 52 clipboard write in the record log, a fact name with a
  clear-screen sequence, an error line that wraps onto `::add-mask::`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    INJECT_ANCHOR,
    config_id,
    git,
    git_env,
    run_abdiff,
    worker_writable_folder,
    write_suite,
)
from test_github import REPO, TOKEN, FakeGitHub, _result_json, github  # noqa: F401

from abdiff import cli
from abdiff.demo import build_demo_repo
from abdiff.demo.builder import RUNNER_PATH
from abdiff.reports import table
from abdiff.reports.printable import no_ci_commands, printable
from abdiff.run.progress import latest_started
from abdiff.store import records
from abdiff.store.records import load_run_file
from abdiff.store.state import write_state
from abdiff.verdict.policy import VERDICTS

ROOT = Path(__file__).resolve().parents[1]
CI_SCRIPT = ROOT / "ci" / "abdiff-ci.sh"
PLANT_MODULE = "tinyllm/tools/layer_wise_benchmarks/plant.py"


def commit_benchmark(repo: Path, branch: str, module_text: str) -> str:
    """A pull request `branch` off main whose runner calls plant() of PLANT_MODULE before
    each config; its SHA."""
    runner = (repo / RUNNER_PATH).read_text(encoding="utf-8")
    git(repo, "checkout", "-q", "-b", branch, "main")
    (repo / PLANT_MODULE).write_text(module_text, encoding="utf-8")
    (repo / RUNNER_PATH).write_text(runner.replace(INJECT_ANCHOR, (
        "        from tinyllm.tools.layer_wise_benchmarks.plant import plant\n\n"
        "        plant()\n" + INJECT_ANCHOR)), encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-verify", "-m", f"{branch}: a benchmark that plants")
    sha = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    return sha


# ---------------------------------------------------------------- the cache without a sandbox

CACHE_PLANT = '''\
"""Plants in abdiff's cache (abdiff's tests): a fabricated run folder, a lock swapped for a
link to a file of the user, and runs/ replaced by a link to a folder of the user's."""
import json
import os
import sys
from pathlib import Path

MAIN, VICTIM_FILE, VICTIM_DIR = {main!r}, {victim_file!r}, {victim_dir!r}


def plant():
    job = json.loads(Path(sys.argv[-1]).read_text())
    state = next(p for p in Path(job["record_path"]).parents if (p / "state.json").exists())
    runs, locks = state.parent, state.parent.parent / "locks"
    fake = runs / "ffffffffffffffff"
    if not fake.exists():  # main's latencies, invented, "measured" in the future
        fake.mkdir()
        run = json.loads((state / "a.json").read_text())
        run["sha"] = MAIN
        run["sessions"] = {{"s": {{"started": "2099-01-01T00:00:00+00:00", "host": "x"}}}}
        for config in run["configs"]:
            config["rounds"] = [{{"status": "ok", "round": 0, "latency_us": [1.0, 1.0],
                                 "facts": {{"invented": 1}}}}]
        (fake / "a.json").write_text(json.dumps(run))
        (fake / "state.json").write_text(json.dumps({{"seed": 1, "complete": True}}))
    lock = locks / (state.name + ".lock")
    if not lock.is_symlink():
        lock.unlink()
        lock.symlink_to(VICTIM_FILE)
    if job["round"] == 1 and not runs.is_symlink():  # its last round: runs/ itself
        os.rename(runs, str(runs) + ".moved")
        os.symlink(VICTIM_DIR, runs)
'''


@pytest.mark.slow
def test_what_the_benchmark_plants_in_the_cache_without_a_sandbox(tmp_path: Path) -> None:
    repo, cache = tmp_path / "repo", tmp_path / "cache"
    shas = build_demo_repo(repo)
    victim_file, victim_dir = tmp_path / "user" / "notes.txt", tmp_path / "user" / "projects"
    (victim_dir / "thesis").mkdir(parents=True)
    victim_file.write_text("the user's notes\n")
    commit_benchmark(repo, "plant", CACHE_PLANT.format(
        main=shas["main"], victim_file=str(victim_file), victim_dir=str(victim_dir)))
    suite = write_suite(tmp_path / "s.yaml", [2])
    measure = ("main..plant", "--configs", suite, "--repo", repo, "--cache-dir", cache,
               "--rounds", 2, "--max-rounds", 2, "--seed", 3, "--sandbox", "off")
    done = run_abdiff(*measure)
    # runs/ replaced by a link in B's last round: the measurement stops, nothing written
    # through the link (the user's folder holds what it held)
    assert done.returncode == 3, done.stderr
    assert "runs is a link, where abdiff keeps a folder of its own" in done.stderr
    assert sorted(p.name for p in victim_dir.iterdir()) == ["thesis"]
    # and `cache clean --runs` refuses it; control: through the link the old clean went
    # on to the user's folders (every folder under runs/ was a run folder to remove)
    runs = cache / "runs"
    clean = run_abdiff("cache", "clean", "--runs", "--cache-dir", cache)
    assert clean.returncode == 3 and "is a link" in clean.stderr, clean.stderr
    assert (victim_dir / "thesis").is_dir()
    assert [p.name for p in runs.iterdir() if p.is_dir()] == ["thesis"]
    runs.unlink()
    os.rename(f"{runs}.moved", runs)

    # the lock swapped for a link to the user's file: the same command again refuses it,
    # the file intact; control: opened as filelock 3.13 opened it, the file is emptied
    again = run_abdiff(*measure)
    assert again.returncode == 3 and "cannot open the lock" in again.stderr, again.stderr
    lock = next((cache / "locks").glob("*.lock"))
    assert lock.is_symlink() and victim_file.read_text() == "the user's notes\n"

    # the fabricated run folder: left out of the history, and named
    history = run_abdiff("history", config_id(2), "--repo", repo, "--cache-dir", cache,
                         "--baselines-dir", tmp_path / "no-baselines")
    assert "ffffffff" not in history.stdout and "2099" not in history.stdout
    assert "ffffffffffffffff: its state.json fails authentication" in " ".join(
        history.stderr.split())
    # control: it is a run file of main that the history would have shown
    fabricated = load_run_file(runs / "ffffffffffffffff" / "a.json")
    assert fabricated.sha == shas["main"] and fabricated.configs[0].rounds
    os.close(os.open(lock, os.O_RDWR | os.O_CREAT | os.O_TRUNC))
    assert victim_file.read_text() == ""


def test_a_lock_or_runs_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    """Unit level: every folder and lock abdiff keeps in the cache, refused as a link."""
    from abdiff.errors import InfrastructureError
    from abdiff.run.schedule import clean_runs, exclusive

    cache, victim = tmp_path / "cache", tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    (cache / "runs").mkdir(parents=True)
    (cache / "locks").symlink_to(victim)
    with pytest.raises(InfrastructureError, match="locks is a link"), exclusive(
            cache / "runs" / "k"):
        pass
    (cache / "locks").unlink()
    (cache / "locks").mkdir()
    (cache / "locks" / "k.lock").symlink_to(victim / "file")
    with pytest.raises(InfrastructureError, match="cannot open the lock"), exclusive(
            cache / "runs" / "k"):
        pass
    assert not (victim / "file").exists()
    (cache / "runs").rmdir()
    (cache / "runs").symlink_to(victim)
    with pytest.raises(InfrastructureError, match="runs is a link"):
        clean_runs(cache / "runs", None)
    assert (victim / "keep").is_dir()


# ---------------------------------------------------------------- the CI script

FORGE_PLANT = '''\
"""A benchmark that forges the CI script's result (abdiff's tests): a green result.json
where the output folder lies, and no record log of its own, so abdiff exits 3."""
import json
import os
import shutil
import sys
from pathlib import Path

FORGED, OUT = {forged!r}, {out!r}


def plant():
    shutil.copyfile(FORGED, os.path.join(OUT, "result.json"))
    record = Path(json.loads(Path(sys.argv[-1]).read_text())["record_path"])
    record.unlink(missing_ok=True)
    os._exit(1)
'''


def _ci_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in git_env().items() if not k.startswith("ABDIFF_")}
    env.update(ABDIFF_BIN=f"{sys.executable} -m abdiff.cli", **extra)
    return env


@pytest.mark.slow
def test_the_ci_script_posts_only_what_it_measured(tmp_path: Path,
                                                   fake_github: FakeGitHub) -> None:
    repo = tmp_path / "repo"
    shas = build_demo_repo(repo)
    reachable = worker_writable_folder("ci-out")  # a folder the benchmark can write
    forged = green_result(shas["main"], "b" * 40)
    forged_file = tmp_path / "forged.json"
    forged_file.write_text(records.dump_json(forged), encoding="utf-8")
    sha = commit_benchmark(repo, "forge", FORGE_PLANT.format(forged=str(forged_file),
                                                             out=str(reachable)))
    git(repo, "checkout", "-q", "forge")
    (repo / "abdiff-out").symlink_to(reachable)  # committed by the pull request
    git(repo, "add", "abdiff-out")
    git(repo, "commit", "-q", "--no-verify", "-m", "the output folder, as a link")
    git(repo, "checkout", "-q", "main")
    head = git(repo, "rev-parse", "forge")
    checkout = tmp_path / "pr-checkout"  # where a CI job runs the script: the PR's tree
    git(repo, "worktree", "add", "-q", str(checkout), head)
    suite = write_suite(tmp_path / "s.yaml", [2])
    measure = ["bash", str(CI_SCRIPT), "--base", "main", "--head", head, "--suite", str(suite),
               "--repo", str(repo), "--", "--rounds", "2", "--max-rounds", "2"]

    # the committed link is refused: nothing measured, nothing written through it
    linked = subprocess.run(measure, cwd=checkout, env=_ci_env(), capture_output=True,
                            text=True, timeout=300, check=False)
    assert linked.returncode == 2 and "is a link" in linked.stderr, linked.stderr
    assert not (reachable / "result.json").exists()

    # the output folder given where the benchmark can still write it: it forges the result
    # and kills its record log (exit 3); the script records 3 once the benchmark is gone
    out = subprocess.run([*measure[:-5], "--out", str(reachable), *measure[-5:]], cwd=checkout,
                         env=_ci_env(), capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 3, out.stderr
    assert json.loads((reachable / "result.json").read_text())["b"]["sha"] == "b" * 40
    assert (reachable / "exit_code").read_text() == "3\n"
    post = subprocess.run(["bash", str(CI_SCRIPT), "--post-only", "--out", str(reachable)],
                          env=_ci_env(ABDIFF_GH_REPO=REPO, ABDIFF_PR="7", GITHUB_TOKEN=TOKEN,
                                      ABDIFF_API_URL=fake_github.base),
                          capture_output=True, text=True, timeout=120, check=False)
    assert post.returncode == 0, post.stderr
    body = fake_github.comments[-1]["body"]
    assert "the measurement failed" in body and "exited with code 3" in body
    assert ":white_check_mark:" not in body and "no unintended change" not in body
    # control: the forged result, posted without the script's exit code, is green
    fake_github.comments.clear()
    env = {**os.environ, "GITHUB_TOKEN": TOKEN}
    plain = subprocess.run([*cli_argv(), "comment", "--repo", REPO, "--pr", "7", "--result",
                            str(reachable / "result.json"), "--api-url", fake_github.base],
                           env=env, capture_output=True, text=True, timeout=120, check=False)
    assert plain.returncode == 0, plain.stderr
    assert ":white_check_mark:" in fake_github.comments[-1]["body"]
    assert sha


@pytest.fixture
def fake_github(github: FakeGitHub) -> FakeGitHub:  # noqa: F811 - test_github's fixture
    return github


def cli_argv() -> list[str]:
    return [sys.executable, "-m", "abdiff.cli"]


def green_result(sha_a: str, sha_b: str) -> dict:
    """A valid result of one config measured on both sides and unchanged: what a forger
    would write (the SHAs real)."""
    return records.Result(
        a=records.Side("main", sha_a), b=records.Side("pr", sha_b), expect={},
        configs=[records.ConfigResult(
            id=config_id(2), params={"batch_size": 2}, status_a="ok", status_b="ok",
            status_change="same", error_a=None, error_b=None, facts_changed={},
            kernels_added={}, kernels_removed={},
            latency=records.LatencyResult("unchanged", ratio=1.0, ci=[0.99, 1.01],
                                          rounds_a=5, rounds_b=5),
            in_scope=False, verdict="unchanged")],
        summary={**dict.fromkeys(VERDICTS, 0), "unchanged": 1, "configs": 1, "measured": 1,
                 "exit_code": 0},
        suite="s", target="reference").to_json()


def test_a_result_that_disagrees_with_itself_is_not_posted(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    """A result whose summary says 12 measured where it holds no config, or exit 0 beside an
    unintended change: "the measurement failed", never a check mark; control: the same
    result rendered as a report is green."""
    from abdiff.commands.comment import failed_body, measurement_failed
    from abdiff.reports import markdown

    data = green_result("a" * 40, "b" * 40)
    data["configs"] = []
    data["summary"].update(configs=12, measured=12, unchanged=12, exit_code=0)
    path = tmp_path / "result.json"
    path.write_text(records.dump_json(data), encoding="utf-8")
    result = records.load_result(path)
    why = measurement_failed(result, None)
    assert why is not None and "measured 12 but 0 in its configs" in why
    assert ":white_check_mark:" not in failed_body(why)
    assert "12 measured" not in markdown.render(result)  # the headline counts its configs
    assert measurement_failed(result, 3) == "the measuring step exited with code 3"


# ---------------------------------------------------------------- text from the benchmark

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
CLEAR = "\x1b[2J\x1b[H"


def test_a_config_id_in_the_record_log_reaches_the_progress_line_printable(
        tmp_path: Path) -> None:
    worker = tmp_path / "worker0"
    worker.mkdir()
    (worker / "records.jsonl").write_text(json.dumps(
        {"event": "start", "id": f"GEN-bs2{OSC52}\x1b]0;pwned\x07"}) + "\n")
    shown = latest_started(tmp_path)
    assert shown is not None and "\x1b" not in shown and "\x07" not in shown
    assert shown.startswith("GEN-bs2]52;c;")
    # control: the log holds the escape sequences as written
    assert OSC52 in json.loads((worker / "records.jsonl").read_text())["id"]


def test_an_error_line_that_wraps_onto_a_workflow_command_is_neutralized() -> None:
    """A benchmark's error line, wrapped in the terminal table, starts a line with
    `::add-mask::` at some width: what abdiff prints never does (emit_reports)."""
    error = ("x" * 20 + " ::add-mask::secret ") * 6
    path = tmp_path_of(error)
    result = records.load_result(path)
    raw = [table.render(result, width=width, colour=False) for width in range(40, 130)]
    # control: the table as rendered puts a workflow command at the start of a line
    assert any(line.lstrip().startswith("::") for text in raw for line in text.splitlines())
    for text in raw:
        shown = no_ci_commands(text)
        assert not any(line.lstrip().startswith("::") for line in shown.splitlines())
    assert not printable("  ::error::x\n##[warning]y").lstrip().startswith("::")
    assert "##[" not in printable("a ##[warning] b")


def tmp_path_of(error: str) -> Path:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="abdiff-test-"))
    path = folder / "result.json"
    path.write_text(records.dump_json(_result_json(error_b=error)), encoding="utf-8")
    return path


def test_history_prints_a_fact_name_printable(tmp_path: Path) -> None:
    """A signed run folder (as abdiff writes one) whose facts a benchmark named with a
    clear-screen sequence: `abdiff history` prints no escape."""
    repo = tmp_path / "repo"
    shas = build_demo_repo(repo)
    run = _run_file(shas["main"], {f"evil{CLEAR}name": 1, "plain": 2})
    run["env"]["repository"] = str(repo.resolve())
    state = tmp_path / "cache" / "runs" / "1234abcd1234abcd"
    state.mkdir(parents=True)
    (state / "a.json").write_text(json.dumps(run))
    write_state(state, 1, True, {"a.json": hashlib.sha256((state / "a.json").read_bytes())
                                 .hexdigest(), "b.json": None})
    done = run_abdiff("history", config_id(2), "--repo", repo, "--cache-dir", tmp_path / "cache",
                      "--baselines-dir", tmp_path / "none")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "evil" in done.stdout
    # control: the run file holds the sequence
    assert CLEAR in (state / "a.json").read_text(encoding="utf-8") or \
        "\\u001b[2J" in (state / "a.json").read_text()


def _run_file(sha: str, facts: dict[str, int]) -> dict:
    return {"schema": "abdiff.run/1", "rev": "main", "sha": sha, "target": "reference",
            "suite": "s", "env": {"repository": "x"}, "sessions": {
                "s1": {"started": "2026-12-05T10:00:00+00:00", "host": "h"}},
            "configs": [{"id": config_id(2), "params": {"batch_size": 2}, "rounds": [
                {"status": "ok", "round": 0, "latency_us": [10.0, 11.0], "facts": facts}]}]}


def test_a_main_entry_point_prints_errors_printable(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    """An error line quoting a file name with escapes: printed without them."""
    code = cli.main(["compare", str(tmp_path / f"a{OSC52}.json"), str(tmp_path / "b.json")])
    err = capsys.readouterr().err
    assert code == 2 and "\x1b" not in err and "\x07" not in err


ESCAPES_PLANT = '''\
"""A benchmark whose record log names its config with an OSC 52 clipboard write and a
window-title change (abdiff's tests), then takes its time: the progress line shows it."""
import json
import sys
import time
from pathlib import Path

ID = {id!r}


def plant():
    record = Path(json.loads(Path(sys.argv[-1]).read_text())["record_path"])
    with open(record, "a") as log:
        log.write(json.dumps({{"event": "start", "id": ID}}) + "\\n")
    time.sleep(2.5)
'''


@pytest.mark.slow
def test_escape_sequences_from_the_record_log_never_reach_the_terminal(tmp_path: Path) -> None:
    """The progress line on a real terminal (a pty), for a real run of a pull request whose
    benchmark writes OSC 52 and a title change as its config id: the terminal gets the id's
    text, never the sequences; control: the record log holds them as written."""
    import pty
    import select

    repo = tmp_path / "repo"
    build_demo_repo(repo)
    evil_id = f"GEN-pwned{OSC52}\x1b]0;owned-title\x07{CLEAR}"
    commit_benchmark(repo, "escapes", ESCAPES_PLANT.format(id=evil_id))
    suite = write_suite(tmp_path / "s.yaml", [2])
    main_fd, worker_fd = pty.openpty()
    proc = subprocess.Popen(cli_argv() + [
        "main..escapes", "--configs", str(suite), "--repo", str(repo), "--cache-dir",
        str(tmp_path / "cache"), "--rounds", "1", "--max-rounds", "1", "--seed", "3"],
        stdin=subprocess.DEVNULL, stdout=worker_fd, stderr=worker_fd, env=git_env())
    os.close(worker_fd)
    seen = b""
    while True:
        if select.select([main_fd], [], [], 1.0)[0]:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=300)
    os.close(main_fd)
    shown = seen.decode(errors="replace")
    assert proc.returncode in (0, 1), shown
    assert "B: GEN-pwned]52;c;" in shown  # the progress line showed the planted id
    assert "\x1b]" not in shown and "\x07" not in shown and "\x1b[2J" not in shown
    logs = list((tmp_path / "cache" / "runs").glob("*/logs/B/r0/worker*/records.jsonl"))
    assert any(OSC52 in line for log in logs for line in
               (json.loads(text).get("id", "") for text in log.read_text().splitlines()))


JIT_PLANT = '''\
"""A benchmark whose "JIT compile" is kept where DeepGEMM keeps its (abdiff's tests): once
per shape into $DG_JIT_CACHE_DIR, each compile counted in $HOME/compiles.log."""
import os
from pathlib import Path


def plant():
    kernel = Path(os.environ["DG_JIT_CACHE_DIR"]) / "gemm-shape-2.cubin"
    if not kernel.exists():
        kernel.write_text("compiled")
        with open(Path(os.environ["HOME"]) / "compiles.log", "a") as log:
            log.write(f"{os.getpid()} {os.environ['TMPDIR']}\\n")
'''


@pytest.mark.slow
def test_a_sides_caches_are_kept_between_rounds_and_runs_and_apart(tmp_path: Path) -> None:
    """Issue 42, item 1: a shape is compiled once per side, not once per worker, and a
    later run compiles nothing; the other side's folders hold none of it. A cache folder of
    the user's (even passed on purpose) is not used, and abdiff says so."""
    repo, cache, mine = tmp_path / "repo", tmp_path / "cache", tmp_path / "my-dg-cache"
    mine.mkdir()
    build_demo_repo(repo)
    commit_benchmark(repo, "jit", JIT_PLANT)
    suite = write_suite(tmp_path / "s.yaml", [2])
    env = {**git_env(), "DG_JIT_CACHE_DIR": str(mine)}
    for rounds in (2, 3):  # two runs (the second resumes and adds a round per side)
        done = run_abdiff("main..jit", "--configs", suite, "--repo", repo, "--cache-dir", cache,
                          "--rounds", rounds, "--max-rounds", rounds, "--seed", 3,
                          "--pass-env", "DG_JIT_CACHE_DIR", env=env)
        assert done.returncode in (0, 1), done.stderr
        assert "DG_JIT_CACHE_DIR not used by the workers" in " ".join(done.stderr.split())
    assert not list(mine.iterdir())
    logs = list((cache / "sides").glob("*/home/compiles.log"))
    assert len(logs) == 1 and len(logs[0].read_text().splitlines()) == 1
    side_b = logs[0].parents[1]
    assert (side_b / "caches" / "deep_gemm" / "gemm-shape-2.cubin").exists()
    assert logs[0].read_text().split()[1] == str(side_b / "tmp")  # its TMPDIR, its side's
    others = [p for p in (cache / "sides").iterdir() if p != side_b]
    assert others and not [f for p in others for f in (p / "caches" / "deep_gemm").iterdir()]
    run_b = json.loads(next((cache / "runs").glob("*/b.json")).read_text())
    assert run_b["env"]["side_folders"]["root"] == str(side_b)


RACER = """
import os, sys
link, victim = sys.argv[1:3]
while True:  # a link to the user's file wherever exit_code is missing
    try:
        os.symlink(victim, link)
    except OSError:
        pass
"""
WRITTEN_THROUGH = '''rm -rf -- "$out/exit_code"
printf '%s\\n' "$rc" >"$out/exit_code"
'''


@pytest.mark.slow
def test_a_process_left_running_cannot_make_the_ci_script_write_through_a_link(
        tmp_path: Path) -> None:
    """A process of the user that runs while the script records abdiff's exit code (with
    --sandbox off, one the benchmark left) keeps planting `exit_code` as a link to a file of
    the user's. The control, the script as it wrote the file before (remove, then write to
    the name), writes through the link into that file; the script now writes a file of its
    own and renames it over the link: the file stays as it was, exit_code says 2."""
    victim, out, plain = tmp_path / "victim.txt", tmp_path / "out", tmp_path / "plain"
    victim.write_text("the user's file\n")
    plain.mkdir()  # no git repository: abdiff ends with exit 2 at once

    def measure(script: Path) -> int:
        """The script, with the planting process running from when it has emptied its output
        folder (its first line) until it ends."""
        argv = ["bash", str(script), "--base", "main", "--head", "pr", "--suite", "mtp",
                "--repo", str(plain), "--out", str(out)]
        run = subprocess.Popen(argv, env=_ci_env(ABDIFF_CACHE_DIR=str(tmp_path / "cache")),
                               stderr=subprocess.PIPE, text=True)
        assert run.stderr is not None and run.stderr.readline().startswith("abdiff-ci: main")
        racer = subprocess.Popen([sys.executable, "-c", RACER, str(out / "exit_code"),
                                  str(victim)])
        try:
            run.stderr.read()
            return run.wait(timeout=120)
        finally:
            racer.kill()
            racer.wait()

    old = tmp_path / "abdiff-ci-before.sh"
    script = CI_SCRIPT.read_text()
    start = script.index('rm -rf -- "$out/exit_code"')
    old.write_text(script[:start] + WRITTEN_THROUGH + script[script.index("\ncase", start) + 1:])
    tries = 0
    while tries < 200 and victim.read_text() != "2\n":  # a race: a few tries
        tries += 1
        assert measure(old) == 2
    assert victim.read_text() == "2\n", "the link never landed between remove and write"
    victim.write_text("the user's file\n")
    for _ in range(10):
        assert measure(CI_SCRIPT) == 2
        assert not (out / "exit_code").is_symlink()
        assert (out / "exit_code").read_text() == "2\n"
        assert victim.read_text() == "the user's file\n"
