"""`abdiff A..B --configs mtp` on the demo repository, as a user runs it (issue 3's done-when).

Real git, real worker processes, real torch. Rounds are kept small (CI has two
cores); the statistics of larger budgets are the calibration benchmark's job.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import git, git_env, run_abdiff, unwrapped, write_suite

from abdiff.demo import build_demo_repo
from abdiff.store.records import load_run_file

pytestmark = pytest.mark.slow  # whole suites measured in worker processes

RESULT_KEYS = {"schema", "a", "b", "expect", "configs", "summary"}
CONFIG_KEYS = {"id", "params", "status_change", "facts_changed", "kernels_added",
               "kernels_removed", "latency", "in_scope", "verdict"}
LATENCY_KEYS = {"verdict", "ratio", "ci", "p"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("e2e") / "demo"
    build_demo_repo(repo)
    return repo


def diff(demo: Path, rev_range: str, out: Path, *extra: object) -> tuple[int, dict, str]:
    """The mtp suite in 2 rounds, each worker started ahead of its job (--prestart): every
    worker must still run its own side's code. Temporary files go to out/tmp."""
    (out / "tmp").mkdir(parents=True)
    done = run_abdiff(rev_range, "--configs", "mtp", "--repo", demo, "--cache-dir",
                      out / "cache", "--rounds", 2, "--max-rounds", 2, "--prestart", "on",
                      "--json", out / "result.json", "--format", "markdown", "--output",
                      out / "report.md", *extra, env={**git_env(), "TMPDIR": str(out / "tmp")})
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads((out / "result.json").read_text()), done.stderr


def by_id(result: dict) -> dict[str, dict]:
    return {c["id"]: c for c in result["configs"]}


def test_pr_v1_changes_trtllm_unintentionally(demo: Path, tmp_path: Path) -> None:
    before = (git(demo, "status", "--porcelain"), git(demo, "rev-parse", "HEAD"),
              git(demo, "branch", "--list"))
    code, result, stderr = diff(demo, "main..pr-v1", tmp_path)
    assert code == 1 and result["summary"]["exit_code"] == 1
    # every worker, the first too (started before the checks and checkouts), was waiting
    started = re.search(r"(\d+) worker processes this run \((\d+) started ahead\)", stderr)
    assert started and started.group(1) == started.group(2), stderr
    assert not any((tmp_path / "tmp").glob("abdiff-ahead-*"))  # its folder went with it
    configs = by_id(result)
    for cid, config in configs.items():
        q = config["params"]["seq_len_q"]
        if config["params"]["backend"] == "TRTLLM" and q > 1:
            assert config["verdict"] == "unintended", cid
            assert config["facts_changed"]["attn_metadata.max_total_draft_tokens"] == [None, q - 1]
            # a different attention path: SDPA with a draft mask instead of bmm + softmax
            assert any("scaled_dot_product" in k for k in config["kernels_added"]), cid
            assert "aten::bmm" in config["kernels_removed"], cid
            # the kernel times name what the change is made of: the new or the dropped path
            changed = set(config["kernels_added"]) | set(config["kernels_removed"])
            assert config["kernel_deltas"], cid
            assert any(d["kernel"] in changed for d in config["kernel_deltas"]), cid
        elif config["params"]["backend"] == "DSA" and q > 1:
            assert (config["verdict"], config["status_change"]) == ("expected", "fixed"), cid
            assert config["facts_changed"]["attn_metadata.kv_lens_cuda_2d.shape"][1][1] == q
        else:
            assert config["verdict"] in ("unchanged", "inconclusive"), cid
            assert not config["facts_changed"] and not config["kernels_added"], cid
    # A and B ran their own checkouts' code: the same config recorded different facts
    run_a = load_run_file(next((tmp_path / "cache" / "runs").glob("*/a.json")))
    assert run_a.sha == git(demo, "rev-parse", "main") and run_a.env["worker_start"] == "standby"
    # the user's repository is untouched
    assert before == (git(demo, "status", "--porcelain"), git(demo, "rev-parse", "HEAD"),
                      git(demo, "branch", "--list"))
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("<!-- abdiff -->\n")
    unintended_table = report.split("<details>")[0]
    assert "GEN-TRTLLM-bs32-q4-kv2049" in unintended_table and "None -&gt; 3" in unintended_table
    assert "GEN-DSA-bs32-q4-kv2049" in report.split("<details>")[1]


def test_pr_fixes_dsa_and_leaves_trtllm_alone(demo: Path, tmp_path: Path) -> None:
    code, result, _ = diff(demo, "main..pr", tmp_path)
    assert code == 0, result["summary"]
    assert set(result) >= RESULT_KEYS and result["schema"] == "abdiff.result/2"
    assert result["expect"] == {"backend": ["DSA"]}
    for cid, config in by_id(result).items():
        assert set(config) >= CONFIG_KEYS and set(config["latency"]) >= LATENCY_KEYS, cid
        if config["params"]["backend"] == "DSA" and config["params"]["seq_len_q"] > 1:
            assert (config["verdict"], config["status_change"]) == ("expected", "fixed"), cid
            assert config["in_scope"] and "DG_HOST_ASSERT" in config["error_a"]
        else:
            assert config["verdict"] in ("unchanged", "inconclusive"), cid
            assert config["status_change"] == "same" and not config["facts_changed"], cid
            assert not config["kernels_added"] and not config["kernels_removed"], cid
            latency = config["latency"]  # 2 rounds: fewer pairs than a verdict needs
            assert latency["verdict"] == "inconclusive" and latency["ratio"] > 0
            assert latency["ci"] is None and "needs at least 3 rounds" in latency["note"]
    assert result["summary"]["unintended"] == 0 and result["summary"]["expected"] == 4


def test_a_a_never_flags(demo: Path, tmp_path: Path) -> None:
    """`abdiff pr..pr` twice in a row: exit 0 and nothing flagged either time."""
    suite = write_suite(tmp_path / "aa.yaml", [4, 8], ("DSA", "TRTLLM"), (1, 4))
    for attempt in range(2):
        out = tmp_path / f"run{attempt}"
        done = run_abdiff("pr..pr", "--configs", suite, "--repo", demo, "--cache-dir",
                          tmp_path / "cache", "--rounds", 3, "--max-rounds", 3,
                          "--json", out / "result.json")
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stderr.startswith("abdiff: note: A/A run: A and B are the same commit")
        result = json.loads((out / "result.json").read_text())
        assert result["notes"][0].startswith("A/A run: ")
        assert {c["verdict"] for c in result["configs"]} <= {"unchanged", "inconclusive"}
        assert not any(c["facts_changed"] or c["kernels_added"] for c in result["configs"])
    # two runs, one checkout: the cache was reused
    assert len(list((tmp_path / "cache" / "checkouts").glob("*/*.done"))) == 1


def test_run_then_compare_matches(demo: Path, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.yaml", [2], ("DSA", "TRTLLM"), (1, 4))
    for rev in ("main", "pr"):
        done = run_abdiff("run", rev, "--configs", suite, "--repo", demo, "--cache-dir",
                          tmp_path / "cache", "--rounds", 2, "--prestart", "on", "--out",
                          tmp_path / f"{rev}.json")
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines()[-1].startswith(
            f"abdiff: wrote {tmp_path / f'{rev}.json'} (run file of {rev} ")
    run_main = load_run_file(tmp_path / "main.json")
    assert run_main.rev == "main" and len(run_main.configs) == 4
    assert all(len(c.rounds) == 2 for c in run_main.configs)
    done = run_abdiff("compare", tmp_path / "main.json", tmp_path / "pr.json", "--expect",
                      "backend=DSA", "--format", "table")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"expected\s+GEN-DSA-bs2-q4-kv64\s+aborted -> ok \(fixed\)", done.stdout)
    assert unwrapped(done.stdout)[-1].startswith("abdiff: no unintended change: ")
    assert unwrapped(done.stdout)[-1].endswith(
        "(exit 0: nothing changed outside the expected scope)")
    # With the report in a file, stdout still ends with the verdict, stderr says what was written.
    done = run_abdiff("compare", tmp_path / "main.json", tmp_path / "pr.json", "--expect",
                      "backend=DSA", "--format", "markdown", "--output", tmp_path / "r.md",
                      "--html", tmp_path / "r.html")
    assert done.returncode == 0, done.stdout + done.stderr
    # the next step when latency is undecided, wrapped to the width like the verdict
    *step, last = unwrapped(done.stdout)
    assert all(line.startswith("next: latency undecided") for line in step), step
    # the fixed config ran on B only: measured means on both sides
    assert last.startswith("abdiff: no unintended change") and \
        "3 of 4 configs measured; 1 failed on one side" in last
    assert unwrapped(done.stderr) == [f"abdiff: wrote {tmp_path / 'r.md'} (markdown), "
                                      f"{tmp_path / 'r.html'} (html)"]
    # 2 rounds decide no latency: exit 0, but the comment is not green
    assert (tmp_path / "r.md").read_text().splitlines()[1].startswith(
        ":warning: **abdiff: no unintended change found, but latency undecided")


def test_the_plan_times_later_rounds_as_it_chose_on_both_sides(demo: Path,
                                                               tmp_path: Path) -> None:
    """An A/A run extended past its first look: from there every round of a config times
    the count the plan chose from the first rounds (both sides alike), the rounds before
    the suite's 20, and the result keeps the count with the split it came from. The
    threshold (50%) is one that 10 rounds would see, so that no config is futile at the
    first look, and fewer than 11 cannot decide `unchanged`: every config runs 10."""
    suite = tmp_path / "s.yaml"
    suite.write_text("warmup_times: 1\nrun_times: 20\nmatrix:\n  run_type: [GEN]\n"
                     "  backend: [TRTLLM]\n  batch_size: [1, 4]\n  seq_len_q: [1]\n"
                     "  seq_len_kv_cache: [64]\n", encoding="utf-8")
    done = run_abdiff("pr..pr", "--configs", suite, "--repo", demo, "--cache-dir",
                      tmp_path / "cache", "--rounds", 4, "--max-rounds", 10,
                      "--min-effect", "50%", "--json", tmp_path / "result.json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    runs = [load_run_file(p) for p in sorted((tmp_path / "cache" / "runs").glob("*/[ab].json"))]
    plan = runs[0].iterations
    assert plan is not None and plan == runs[1].iterations and plan.from_round == 4
    for config in result["configs"]:
        chosen = plan.configs[config["id"]]
        assert config["iterations"]["run_times"] == chosen.run_times
        assert config["iterations"]["between"] == chosen.between and chosen.rounds == 8
        for run in runs:
            counts = {r.round: len(r.latency_us) for r in run.config(config["id"]).rounds}
            assert counts == {r: 20 if r < 4 else chosen.run_times for r in range(10)}
    changed = [c for c in plan.configs.values() if c.run_times != 20]
    assert any(n.startswith("timed iterations per round from round 5 on") for n in
               result["notes"]) == bool(changed)


def test_a_plan_of_few_rounds_borrows_noise_from_earlier_runs(demo: Path,
                                                              tmp_path: Path) -> None:
    """An earlier A/A run of main in 11 rounds per side (10 df) lends each config's noise to
    the last look of a `main..pr` plan of 6 rounds; the pull request's own A/A does not (its
    benchmark reports its rounds). B's run file records what was borrowed, so `abdiff
    compare` of the kept run files judges alike."""
    suite = write_suite(tmp_path / "s.yaml", [4, 8], ("TRTLLM",), (1, 4))
    common = ("--configs", suite, "--repo", demo, "--cache-dir", tmp_path / "cache")
    for rev_range, rounds in (("pr..pr", 11), ("main..main", 11)):
        done = run_abdiff(rev_range, *common, "--rounds", rounds, "--max-rounds", rounds)
        assert done.returncode == 0, done.stderr
    done = run_abdiff("main..pr", *common, "--rounds", 6, "--max-rounds", 6, "--json",
                      tmp_path / "result.json")
    assert done.returncode == 0, done.stderr
    assert ("abdiff: 4 configs' noise borrowed from 1 earlier run on this machine (a plan of "
            "few rounds)") in unwrapped(done.stderr)
    result = json.loads((tmp_path / "result.json").read_text())
    methods = [c["latency"]["method"] for c in result["configs"]]
    assert all("variances borrowed from 1 earlier run on this machine" in m for m in methods)
    folder = next(p.parent for p in (tmp_path / "cache" / "runs").glob("*/b.json")
                  if load_run_file(p).rev == "pr" and load_run_file(p.parent / "a.json").rev
                  == "main")
    assert {n.runs for n in load_run_file(folder / "b.json").earlier_noise.values()} == {1}
    again = run_abdiff("compare", folder / "a.json", folder / "b.json", "--json",
                       tmp_path / "again.json")
    assert again.returncode == 0, again.stderr
    compared = json.loads((tmp_path / "again.json").read_text())
    assert [c["latency"] for c in compared["configs"]] == [
        c["latency"] for c in result["configs"]]
