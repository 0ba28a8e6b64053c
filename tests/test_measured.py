"""Issue 12, "a green result means something was measured", end to end.

Real git repositories, `abdiff` in its own process, real worker processes, on
the reference target (the demo repository with a `broken` branch whose harness
cannot be imported) and on the trtllm target (the upstream-shaped stand-in
tree of test_hooks.py): nothing importable on both sides is exit 3 after one
round; one side that cannot import breaks every config (exit 1); the same
failure on both sides is `still-failing`, a different one is a change; a bug
inside abdiff is exit 3 with its traceback kept beside the measured rounds.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    FAULTS_MODULE,
    HOSTILE,
    build_faulty_repo,
    config_id,
    git,
    git_env,
    one_line,
    run_abdiff,
    unwrapped,
    write_suite,
)
from test_hooks import make_upstream_repo

from abdiff.store.records import load_run_file

pytestmark = pytest.mark.slow

NOTHING_MEASURED = re.compile(
    r"abdiff: error: nothing measured: no config ran on either side in the first round; "
    r"first cause: (\S+) on A \((\S+)\): failed: (.+) \(full text in (\S+)\); fix that, "
    r"then re-run \(`abdiff doctor A\.\.B` checks the probe's hooks in both sides\)$")


def run_reports(*args: object, out: Path, env: dict[str, str] | None = None
                ) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`abdiff ARGS` writing every format under `out`; returns the process and the JSON."""
    out.mkdir(parents=True, exist_ok=True)
    proc = run_abdiff(*args, "--format", "markdown", "--output", out / "report.md", "--json",
                      out / "result.json", "--html", out / "report.html", env=env, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr
    result = json.loads((out / "result.json").read_text()) if proc.returncode in (0, 1) else {}
    return proc, result


def by_id(result: dict) -> dict[str, dict]:
    return {c["id"]: c for c in result["configs"]}


def assert_stopped_after_first_round(state: Path) -> None:
    """One round per side, one worker each: no process was spent after the first round."""
    assert sorted(p.name for p in (state / "logs").iterdir()) == ["A", "B"]
    for side in "AB":
        assert [p.name for p in (state / "logs" / side).iterdir()] == ["r0"]
        assert [p.name for p in (state / "logs" / side / "r0").iterdir()] == ["worker0"]
    for side in "ab":  # the failed first round is kept, as every round is
        run = load_run_file(state / f"{side}.json")
        assert all([r.round for r in c.rounds] == [0] for c in run.configs)


# ------------------------------------------------------------------ the reference target

@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo repository with `faulty`, `broken` and `faulty-b`: `faulty` with batch
    size 3's assert message changed and every line of the fault module moved down."""
    path = tmp_path_factory.mktemp("measured") / "demo"
    build_faulty_repo(path)
    git(path, "checkout", "-q", "-b", "faulty-b", "faulty")
    faults = path / FAULTS_MODULE
    text = faults.read_text()
    old = '"DG_HOST_ASSERT failed: " + HOSTILE'
    assert old in text
    text = text.replace(old, '"DG_HOST_ASSERT failed: next_n <= 1"')
    faults.write_text(text.replace("import ctypes\n", "import ctypes\n" + "# moved\n" * 7))
    git(path, "commit", "-q", "--no-verify", "-am", "another assert for batch size 3")
    git(path, "checkout", "-q", "main")
    return path


@pytest.mark.parametrize("prestart", ["off", "on", "fork"])
def test_nothing_importable_on_both_sides_is_exit_3_after_one_round(demo: Path, tmp_path: Path,
                                                                    prestart: str) -> None:
    """Also with workers started ahead of their job or forked: the waiting process (the
    fork server) imports torch fine, then the checkout's harness fails, and that is what
    is reported."""
    suite = write_suite(tmp_path / "s.yaml", [1, 2])
    proc = run_abdiff("broken..broken", "--configs", suite, "--repo", demo, "--cache-dir",
                      tmp_path / "cache", "--target", "reference", "--rounds", 3,
                      "--prestart", prestart)
    assert proc.returncode == 3, proc.stderr
    match = NOTHING_MEASURED.fullmatch(one_line(proc.stderr))
    assert match, proc.stderr
    assert match.group(1, 2, 3) == (config_id(1), "broken", "RuntimeError: injected import "
                                    "failure: the harness cannot load")
    full_text = Path(match.group(4))
    assert "Traceback" in full_text.read_text()
    assert proc.stdout == ""  # no report that could be mistaken for a result
    assert_stopped_after_first_round(full_text.parents[4])


def test_one_side_that_cannot_import_breaks_every_config(demo: Path, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.yaml", [1, 2])
    proc, result = run_reports("main..broken", "--configs", suite, "--repo", demo,
                               "--cache-dir", tmp_path / "cache", "--target", "reference",
                               "--rounds", 1, "--max-rounds", 1, out=tmp_path)
    assert proc.returncode == 1, proc.stderr
    for cid, config in by_id(result).items():
        assert (config["status_change"], config["verdict"]) == ("broken", "unintended"), cid
        assert config["error_b"] == "RuntimeError: injected import failure: the harness cannot load"
    assert result["summary"]["measured"] == 0 and result["summary"]["exit_code"] == 1
    assert "0 of 2 configs measured; 2 failed on one side" in \
        (tmp_path / "report.md").read_text().splitlines()[3]  # under the headline


@pytest.fixture(scope="module")
def failures(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`faulty..faulty-b` on batch sizes 1 (runs), 3 (a different assert on B) and 6 (the
    same ValueError on both sides)."""
    tmp = tmp_path_factory.mktemp("failures")
    suite = write_suite(tmp / "s.yaml", [1, 3, 6])
    proc, result = run_reports("faulty..faulty-b", "--configs", suite, "--repo", demo,
                               "--cache-dir", tmp / "cache", "--target", "reference",
                               "--rounds", 2, "--max-rounds", 2, out=tmp)
    table = run_abdiff("faulty..faulty-b", "--configs", suite, "--repo", demo, "--cache-dir",
                       tmp / "cache", "--target", "reference", "--rounds", 2, "--max-rounds",
                       2, "--resume")
    (state,) = (tmp / "cache" / "runs").iterdir()
    return {"proc": proc, "result": result, "tmp": tmp, "table": table, "state": state}


def test_the_same_failure_on_both_sides_is_still_failing(failures: dict) -> None:
    assert failures["proc"].returncode == 1, failures["proc"].stderr
    result = failures["result"]
    assert result["schema"] == "abdiff.result/2"
    still = by_id(result)[config_id(6)]
    assert (still["status_change"], still["verdict"]) == ("still-failing", "still-failing")
    assert still["error_a"] == still["error_b"] == "ValueError: injected failure for batch_size 6"
    assert by_id(result)[config_id(1)]["verdict"] in ("unchanged", "inconclusive")
    summary = result["summary"]
    assert (summary["still-failing"], summary["measured"], summary["configs"]) == (1, 1, 3)


def test_a_different_abort_line_is_an_unintended_change(failures: dict) -> None:
    changed = by_id(failures["result"])[config_id(3)]
    assert (changed["status_a"], changed["status_b"]) == ("aborted", "aborted")
    assert changed["error_a"] == "SIGABRT: DG_HOST_ASSERT failed: " + HOSTILE
    assert changed["error_b"] == "SIGABRT: DG_HOST_ASSERT failed: next_n <= 1"
    assert (changed["status_change"], changed["verdict"]) == ("failure-changed", "unintended")
    assert failures["result"]["summary"]["unintended"] == 1


def test_every_format_shows_still_failing_first_and_what_was_measured(failures: dict) -> None:
    measured = "1 of 3 configs measured; 2 failed on both sides"
    markdown = (failures["tmp"] / "report.md").read_text()
    headline = markdown.splitlines()[1]
    assert headline.startswith(":x: **abdiff: 1 unintended change")
    assert measured in markdown.splitlines()[3]  # the summary line under the headline
    visible = markdown.split("<details>")[0]  # never folded away
    assert visible.index("Still failing") < visible.index("Unintended changes")
    assert config_id(6) in visible.split("Unintended changes")[0]
    html = (failures["tmp"] / "report.html").read_text()
    assert measured in html
    assert html.index('<section class="still-failing">') < html.index('<section class="unint')
    table = failures["table"]
    assert table.returncode == 1, table.stderr
    rows = [line.split()[:2] for line in table.stdout.splitlines()
            if line.startswith(("STILL-FAILING", "UNINTENDED", "unchanged", "inconclusive"))]
    assert rows[0] == ["STILL-FAILING", config_id(6)]
    assert measured in unwrapped(table.stdout)[-1]


def test_compare_follows_the_same_rules_and_require_all(failures: dict) -> None:
    state = failures["state"]
    args = ("compare", state / "a.json", state / "b.json", "--format", "json")
    in_scope = run_abdiff(*args, "--expect", "batch_size=3")
    assert in_scope.returncode == 0, in_scope.stderr
    result = json.loads(in_scope.stdout)
    assert by_id(result)[config_id(3)]["verdict"] == "expected"
    assert by_id(result)[config_id(6)]["verdict"] == "still-failing"
    release = run_abdiff(*args, "--expect", "batch_size=3", "--require-all")
    assert release.returncode == 1, release.stderr
    assert json.loads(release.stdout)["summary"]["require_all"] is True


def test_compare_of_runs_that_measured_nothing_is_exit_3(failures: dict,
                                                          tmp_path: Path) -> None:
    state = failures["state"]
    for side in "ab":  # only the configs that failed on both sides
        data = json.loads((state / f"{side}.json").read_text())
        data["configs"] = [c for c in data["configs"] if c["id"] == config_id(6)]
        (tmp_path / f"{side}.json").write_text(json.dumps(data))
    proc = run_abdiff("compare", tmp_path / "a.json", tmp_path / "b.json", "--format",
                      "markdown")
    assert proc.returncode == 3
    assert one_line(proc.stderr) == (
        f"abdiff: error: nothing measured: no config ran on either side; first failure: "
        f"{config_id(6)}: ValueError: injected failure for batch_size 6; fix it and re-run "
        "(`abdiff doctor A..B` checks the hooks) (exit 3)")
    assert proc.stdout.splitlines()[1].startswith(":warning: **abdiff: nothing measured")


INJECTED = """\
import sys

from abdiff.verdict import stats
from abdiff.cli import main


def latency_verdicts(*args, **kwargs):
    raise RuntimeError("injected bug in the compare step")


stats.latency_verdicts = latency_verdicts
sys.exit(main(sys.argv[1:]))
"""


def test_a_bug_in_abdiff_is_exit_3_with_its_traceback_and_the_rounds_kept(
        demo: Path, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.yaml", [1])
    args = ["main..main", "--configs", suite, "--repo", demo, "--cache-dir", tmp_path / "cache",
            "--target", "reference", "--rounds", 2, "--max-rounds", 2]
    proc = subprocess.run([sys.executable, "-c", INJECTED, *map(str, args)], capture_output=True,
                          text=True, env=git_env(), timeout=600, check=False)
    assert proc.returncode == 3, proc.stderr
    line = [ln for ln in proc.stderr.splitlines() if "internal error" in ln]
    match = re.fullmatch(r"abdiff: internal error: RuntimeError: injected bug in the compare "
                         r"step \(traceback in (\S+); measured rounds are kept: the same "
                         r"command with --resume reports them\)", line[0])
    assert match and "Traceback" not in proc.stderr, proc.stderr
    traceback_file = Path(match.group(1))
    (state,) = (tmp_path / "cache" / "runs").iterdir()
    assert traceback_file.parent == state
    assert "compare_runs" in traceback_file.read_text()
    for side in "ab":
        (config,) = load_run_file(state / f"{side}.json").configs
        assert [(r.round, r.status) for r in config.rounds] == [(0, "ok"), (1, "ok")]
    # the same command without the bug reports from the kept rounds, measuring nothing again
    again = run_abdiff(*args, "--resume")
    assert again.returncode == 0, again.stderr
    # no worker, and no fork server importing torch for none (--resume re-prints fast)
    assert f"abdiff: no worker started: the rounds kept in {state} are reported" in again.stderr
    assert "forked" not in again.stderr
    assert not (state / "pool").exists()  # the run's warm pool made no server ready


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_preflight_refuses_before_any_checkout(demo: Path, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.yaml", [1])
    proc = run_abdiff("main..pr", "--configs", suite, "--repo", demo, "--cache-dir",
                      tmp_path / "cache", "--device", "cuda")
    assert proc.returncode == 3
    assert one_line(proc.stderr).startswith(
        "abdiff: error: target reference cannot run here: needs GPU, torch with CUDA (")
    assert not (tmp_path / "cache").exists()


# ------------------------------------------------------------------ an upstream-shaped tree

TRTLLM_SUITE = """\
warmup_times: 1
run_times: 3
facts: [attn_metadata.max_total_draft_tokens]
matrix:
  run_type: [GEN]
  backend: [DSA]
  batch_size: [2]
  seq_len_q: [1, 2, 4]
  seq_len_kv_cache: [16]
"""
RUNNER = "tensorrt_llm/tools/layer_wise_benchmarks/runner.py"
ASSERT_LINE = 'print("DG_HOST_ASSERT(batch_size == __batch_size and next_n == _next_n)",'


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in tree (`main`: DSA with seq_len_q > 1 aborts in the indexer's host
    assert) plus `noimport` (tensorrt_llm imports a module this machine lacks) and
    `abort-b` (seq_len_q 2 aborts with another assert line)."""
    repo = make_upstream_repo(tmp_path_factory.mktemp("upstream") / "TensorRT-LLM")
    git(repo, "checkout", "-q", "-b", "noimport", "main")
    init = repo / "tensorrt_llm/__init__.py"
    init.write_text("import abdiff_test_missing_module  # a dependency the machine lacks\n"
                    + init.read_text())
    git(repo, "commit", "-q", "-am", "needs a module this machine lacks")
    git(repo, "checkout", "-q", "-b", "abort-b", "main")
    runner = repo / RUNNER
    text = runner.read_text()
    assert ASSERT_LINE in text
    runner.write_text(text.replace(ASSERT_LINE, 'print("DG_HOST_ASSERT(next_n <= 1)" if '
                                   'seq_len_q == 2 else\n' + " " * 26 + ASSERT_LINE[6:]))
    git(repo, "commit", "-q", "-am", "another host assert for seq_len_q 2")
    git(repo, "checkout", "-q", "main")
    return repo


def trtllm_diff(upstream: Path, rev_range: str, tmp: Path, rounds: int = 1
                ) -> tuple[subprocess.CompletedProcess[str], dict]:
    """The stand-in runs on the CPU, where the preflight (which asks for a GPU) would stop it."""
    suite = tmp / "dsa.yaml"
    suite.write_text(TRTLLM_SUITE)
    env = {**git_env(), "CUDA_VISIBLE_DEVICES": ""}
    return run_reports(rev_range, "--configs", suite, "--repo", upstream, "--cache-dir",
                       tmp / "cache", "--launcher", "local", "--skip-preflight", "--rounds",
                       rounds, "--max-rounds", rounds, out=tmp, env=env)


def test_trtllm_nothing_importable_is_exit_3_after_one_round(upstream: Path,
                                                             tmp_path: Path) -> None:
    proc, _ = trtllm_diff(upstream, "noimport..noimport", tmp_path, rounds=2)
    assert proc.returncode == 3, proc.stderr
    match = NOTHING_MEASURED.fullmatch(one_line(proc.stderr))
    assert match, proc.stderr
    assert match.group(2, 3) == (
        "noimport", "ModuleNotFoundError: No module named 'abdiff_test_missing_module'")
    assert_stopped_after_first_round(Path(match.group(4)).parents[4])


def test_trtllm_one_side_that_cannot_import_breaks_every_config(upstream: Path,
                                                                tmp_path: Path) -> None:
    proc, result = trtllm_diff(upstream, "main..noimport", tmp_path)
    assert proc.returncode == 1, proc.stderr
    configs = by_id(result)
    assert configs["GEN-DSA-bs2-q1-kv16"]["status_change"] == "broken"
    for cid, config in configs.items():
        assert config["verdict"] == "unintended", cid
        assert config["status_b"] == "failed", cid
        assert "No module named 'abdiff_test_missing_module'" in config["error_b"], cid


def test_trtllm_same_abort_is_still_failing_and_another_abort_is_a_change(
        upstream: Path, tmp_path: Path) -> None:
    proc, result = trtllm_diff(upstream, "main..abort-b", tmp_path)
    assert proc.returncode == 1, proc.stderr
    configs = by_id(result)
    same, other = configs["GEN-DSA-bs2-q4-kv16"], configs["GEN-DSA-bs2-q2-kv16"]
    assert (same["status_change"], same["verdict"]) == ("still-failing", "still-failing")
    assert "DG_HOST_ASSERT(batch_size == __batch_size" in same["error_b"]
    assert (other["status_change"], other["verdict"]) == ("failure-changed", "unintended")
    assert other["error_b"] == "SIGABRT: DG_HOST_ASSERT(next_n <= 1)"
    assert configs["GEN-DSA-bs2-q1-kv16"]["status_change"] == "same"
    assert "1 of 3 configs measured; 2 failed on both sides" in \
        (tmp_path / "report.md").read_text().splitlines()[3]  # under the headline
