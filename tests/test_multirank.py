"""Multi-rank runs for real: the demo harness tensor-parallel under mpirun, srun and torchrun.

Each launcher starts two ranks of the reference worker on this CPU (gloo).
The seed story must hold per rank, a rank that dies must be named with its
signal, a hang in one rank must end every rank, and a launcher that cannot
start must be exit 3 with its own line. Last, the trtllm target under srun from
a "login node" without CUDA (this file owns the session's Slurm cluster).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    abdiff_argv,
    git,
    git_env,
    kill_leftovers,
    launcher_env,
    one_line,
    run_abdiff,
    state_dir_of,
    wait_for_no_processes,
)
from slurm import slurm  # noqa: F401 - the session fixture
from test_hooks import make_upstream_repo

from abdiff.demo import build_demo_repo
from abdiff.demo.builder import RUNNER_PATH
from abdiff.launchers import make_launcher
from abdiff.launchers.process import run_process
from abdiff.launchers.spec import LaunchSpec
from abdiff.run.protocol import RecordWriter, rank_record_path
from abdiff.run.ranks import merge_rank_logs, merge_records, read_rank_logs
from abdiff.store.records import RoundRecord

FACT = "attn_metadata.max_total_draft_tokens"
TRTLLM_Q4 = "GEN-TRTLLM-bs8-q4-kv256"
DSA_Q4 = "GEN-DSA-bs8-q4-kv256"
# Rank 1 aborts at batch size 3 and hangs at batch size 9; rank 0 then waits in the
# all-reduce of that step until the launcher (or abdiff's timeout) ends it.
RANK_FAULT = """\
        if self.tp_rank == 1 and batch_size == 3:
            print("rank 1 gives up: injected abort", file=__import__("sys").stderr, flush=True)
            __import__("os").abort()
        if self.tp_rank == 1 and batch_size == 9:
            __import__("time").sleep(1000)
"""
FAULT_ANCHOR = "        s = self.local_shapes\n        kv_cache_manager"
mpirun_missing = pytest.mark.skipif(
    shutil.which("mpirun") is None,
    reason="Open MPI is not installed (apt-get install openmpi-bin)")


def write_story_suite(path: Path) -> Path:
    """The MTP story in two configs: the TRTLLM control of pr-v1's leak and the DSA fix."""
    path.write_text(
        "warmup_times: 1\nrun_times: 5\nexpect:\n  backend: [DSA]\n"
        f"facts: [{FACT}, attn_metadata.kv_lens_cuda_2d.shape]\n"
        "matrix:\n  run_type: [GEN]\n  backend: [DSA, TRTLLM]\n  batch_size: [8]\n"
        "  seq_len_q: [4]\n  seq_len_kv_cache: [256]\n", encoding="utf-8")
    return path


def write_fault_suite(path: Path, batch_sizes: list[int]) -> Path:
    path.write_text(
        f"warmup_times: 1\nrun_times: 3\nfacts: [{FACT}]\n"
        "matrix:\n  run_type: [GEN]\n  backend: [TRTLLM]\n"
        f"  batch_size: [{', '.join(map(str, batch_sizes))}]\n"
        "  seq_len_q: [1]\n  seq_len_kv_cache: [64]\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def rank_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo repository plus `rankfault`: main with RANK_FAULT in the runner."""
    path = tmp_path_factory.mktemp("multirank") / "repo"
    build_demo_repo(path)
    runner = (path / RUNNER_PATH).read_text(encoding="utf-8")
    assert runner.count(FAULT_ANCHOR) == 1, "the demo runner changed: update FAULT_ANCHOR"
    git(path, "checkout", "-q", "-b", "rankfault", "main")
    (path / RUNNER_PATH).write_text(runner.replace(FAULT_ANCHOR, RANK_FAULT + FAULT_ANCHOR),
                                    encoding="utf-8")
    git(path, "commit", "-q", "--no-verify", "-am", "rank 1 misbehaves")
    git(path, "checkout", "-q", "main")
    return path


def abdiff_ranks(launcher: str, env: dict[str, str],
                 *args: object) -> subprocess.CompletedProcess[str]:
    """`abdiff ARGS --launcher L --np 2`, under `salloc -n 2` for srun (as users run it)."""
    argv = [*args, "--launcher", launcher, "--np", "2"]
    if launcher != "srun":
        return run_abdiff(*argv, env=env, timeout=900)
    return subprocess.run(["salloc", "-Q", "-n", "2", *abdiff_argv(*argv)], capture_output=True,
                          text=True, timeout=900, env=env, stdin=subprocess.DEVNULL, check=False)


def run_file(stderr: str, side: str) -> dict:
    return json.loads((state_dir_of(stderr) / f"{side}.json").read_text(encoding="utf-8"))


def rank_facts(run: dict, config_id: str) -> list:
    """FACT of every rank in every round of one config."""
    config = next(c for c in run["configs"] if c["id"] == config_id)
    return [rank["facts"][FACT] for record in config["rounds"] for rank in record["ranks"]]


# ---------------------------------------------------------------- merging


def test_merged_record_takes_the_slowest_rank_and_notes_disagreeing_facts() -> None:
    rank0 = RoundRecord("ok", None, [10.0, 30.0, 20.0], {"a": 1, "b": [8, 4]}, {"mm": 1}, 2)
    rank1 = RoundRecord("ok", None, [12.0, 25.0, 21.0], {"a": 1, "b": [8, 1]}, {"mm": 2}, 2)
    merged = merge_records([rank0, rank1])
    assert merged.latency_us == [12.0, 30.0, 21.0]
    assert merged.facts == rank0.facts and merged.kernels == {"mm": 1}
    assert merged.rank_differences == {"b": [[8, 4], [8, 1]]}
    assert [r["kernels"] for r in merged.ranks] == [{"mm": 1}, {"mm": 2}]
    failed = merge_records([rank0, RoundRecord("failed", "ValueError: x", round=2)])
    assert (failed.status, failed.error, failed.latency_us) == ("failed", "rank 1: ValueError: x",
                                                                [])


def test_merged_log_blames_the_config_the_dead_rank_was_in(tmp_path: Path) -> None:
    """Rank 1 died in bs3; rank 0 saw its peer vanish, failed bs3 and bs4 on its own and
    exited: bs3 is the crash site, bs4 is not finished, a finished bs2 stays."""
    record_path = tmp_path / "records.jsonl"
    ok = RoundRecord("ok", None, [5.0], {"f": 1}, round=0)
    lost = RoundRecord("failed", "RuntimeError: Connection reset by peer", round=0)
    rank0, rank1 = (RecordWriter(rank_record_path(record_path, r)) for r in (0, 1))
    for writer in (rank0, rank1):
        writer.start("bs2")
        writer.done("bs2", ok)
        writer.start("bs3")
    for cid in ("bs3", "bs4"):
        if cid == "bs4":
            rank0.start(cid)
        rank0.done(cid, lost)
    merged = merge_rank_logs(read_rank_logs(record_path, 2))
    assert set(merged.done) == {"bs2"} and merged.done["bs2"].latency_us == [5.0]
    assert merged.in_progress == "bs3"


TP_CHECK = """\
import os, sys
import torch
import torch.distributed as dist
sys.path.insert(0, sys.argv[1])
from tinyllm.tools.layer_wise_benchmarks import Runner

dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
for backend, q in (("TRTLLM", 4), ("DSA", 1)):  # (DSA with drafts aborts on main)
    shape = dict(batch_size=3, seq_len_q=q, seq_len_kv_cache=70)
    split = Runner(backend, tp_size=size, tp_rank=rank).create_run_pack("GEN", **shape)()
    whole = Runner(backend)
    reference = whole.create_run_pack("GEN", **shape)().flatten(1) @ whole._o_proj_rows()
    torch.testing.assert_close(split, reference, rtol=1e-4, atol=1e-4)
    print(f"rank {rank} {backend} matches", flush=True)
dist.destroy_process_group()  # left to the interpreter's teardown, gloo can abort the rank
"""


@pytest.mark.slow
def test_tensor_parallel_harness_equals_one_rank(rank_repo: Path, tmp_path: Path) -> None:
    """Heads split over 2 ranks, projected and all-reduced: the single-rank result."""
    script = tmp_path / "tp_check.py"
    script.write_text(TP_CHECK, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", str(script), str(rank_repo)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for rank in (0, 1):
        for backend in ("TRTLLM", "DSA"):
            assert f"rank {rank} {backend} matches" in done.stdout


# ---------------------------------------------------------------- launchers alone


ABORT_RANK_1 = ("import os, sys, time\n"
                "rank = next(os.environ[v] for v in ('OMPI_COMM_WORLD_RANK', 'SLURM_PROCID', "
                "'RANK') if v in os.environ)\n"
                "os.abort() if rank == '1' else time.sleep(60)\n")


@pytest.mark.parametrize("name", [pytest.param("mpirun", marks=mpirun_missing),
                                  pytest.param("torchrun", marks=pytest.mark.slow)])
def test_launcher_names_the_rank_that_died_and_ends_the_others(name: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    monkeypatch.setenv("ABDIFF_MPIRUN_ARGS", "--oversubscribe")
    launcher = make_launcher(name, 2)
    marker = f"abdiff-rank-abort-{tmp_path.name}"
    spec = LaunchSpec([sys.executable, "-c", ABORT_RANK_1, marker], tmp_path)
    try:
        outcome = run_process(launcher.wrap(spec), tmp_path / "logs", tmp_path / "progress",
                              timeout_s=120)
        assert not outcome.timed_out
        assert outcome.returncode > 0  # the launcher exits; it does not die of the signal
        stderr = outcome.stderr_path.read_text()
        assert launcher.rank_death(outcome.returncode, stderr) == (1, "SIGABRT")
        assert wait_for_no_processes(marker) == {}  # rank 0 did not sleep on
    finally:
        kill_leftovers(marker)


@mpirun_missing
def test_mpirun_that_cannot_start_is_exit_3_with_its_line(rank_repo: Path,
                                                          tmp_path: Path) -> None:
    suite = write_fault_suite(tmp_path / "suite.yaml", [4])
    env = git_env()  # no --oversubscribe: 64 ranks do not fit this machine's slots
    done = run_abdiff("main..main", "--configs", suite, "--repo", rank_repo, "--cache-dir",
                      tmp_path / "cache", "--rounds", "1", "--launcher", "mpirun", "--np", "64",
                      env=env)
    assert done.returncode == 3, done.stderr
    line = one_line(done.stderr)
    assert "mpirun could not launch the worker: There are not enough slots available" in line


# ---------------------------------------------------------------- the story, per launcher

LAUNCHERS = [pytest.param("mpirun", marks=[pytest.mark.slow, mpirun_missing]),
             pytest.param("torchrun", marks=pytest.mark.slow),
             pytest.param("srun", marks=pytest.mark.slow)]


@pytest.fixture
def cluster_env(request: pytest.FixtureRequest) -> dict[str, str] | None:
    """The Slurm cluster's environment for srun tests, else None."""
    if request.node.callspec.params.get("launcher") != "srun":
        return None
    return request.getfixturevalue("slurm").env


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_seed_story_holds_on_every_rank(launcher: str, rank_repo: Path, tmp_path: Path,
                                        cluster_env: dict[str, str] | None) -> None:
    env = launcher_env(cluster_env)
    suite = write_story_suite(tmp_path / "suite.yaml")
    # one round per side: the facts of every rank are the story (latency needs no verdict)
    common = ("--configs", suite, "--repo", rank_repo, "--cache-dir", tmp_path / "cache",
              "--rounds", "1", "--max-rounds", "1", "--json", tmp_path / "r.json")

    leak = abdiff_ranks(launcher, env, "main..pr-v1", *common)
    assert leak.returncode == 1, leak.stdout + leak.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    trtllm = next(c for c in result["configs"] if c["id"] == TRTLLM_Q4)
    assert trtllm["verdict"] == "unintended"
    assert trtllm["facts_changed"][FACT] == [None, 3]
    # every rank: None on main, 3 on pr-v1
    assert rank_facts(run_file(leak.stderr, "a"), TRTLLM_Q4) == [None] * 2
    assert rank_facts(run_file(leak.stderr, "b"), TRTLLM_Q4) == [3] * 2
    dsa = next(c for c in result["configs"] if c["id"] == DSA_Q4)
    assert dsa["status_a"] == "aborted" and dsa["error_a"].startswith("rank ")
    assert "SIGABRT" in dsa["error_a"]
    assert any("ran 2 ranks: per-iteration latency is the slowest rank's" in n
               for n in result["notes"])

    # the fix: every rank, None for TRTLLM and 3 for DSA
    fixed = abdiff_ranks(launcher, env, "main..pr", *common)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert rank_facts(run_file(fixed.stderr, "b"), TRTLLM_Q4) == [None] * 2
    assert rank_facts(run_file(fixed.stderr, "b"), DSA_Q4) == [3] * 2


# ---------------------------------------------------------------- faults through launchers


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_abort_and_hang_in_one_rank_are_named_and_the_other_config_still_runs(
        launcher: str, rank_repo: Path, tmp_path: Path,
        cluster_env: dict[str, str] | None) -> None:
    """One launch per launcher and side: rank 1 aborts in bs3 and hangs in bs9 (whichever
    the seeded order reaches first); bs4 runs on a fresh launch, and no rank is left."""
    env = launcher_env(cluster_env)
    suite = write_fault_suite(tmp_path / "suite.yaml", [3, 4, 9])
    cache = tmp_path / "cache"
    try:
        done = abdiff_ranks(launcher, env, "main..rankfault", "--configs", suite, "--repo",
                            rank_repo, "--cache-dir", cache, "--rounds", "1", "--max-rounds", "1",
                            "--timeout", "12", "--json", tmp_path / "r.json")
        assert done.returncode == 1, done.stdout + done.stderr
        configs = {c["id"]: c for c in json.loads((tmp_path / "r.json").read_text())["configs"]}
        aborted = configs["GEN-TRTLLM-bs3-q1-kv64"]
        assert aborted["status_b"] == "aborted"
        assert aborted["error_b"] == "rank 1, SIGABRT: rank 1 gives up: injected abort"
        assert configs["GEN-TRTLLM-bs9-q1-kv64"]["status_b"] == "timeout"
        assert configs["GEN-TRTLLM-bs4-q1-kv64"]["status_b"] == "ok"
        # no rank of any launch is left: the process table holds nothing of this run
        assert wait_for_no_processes(str(cache)) == {}
    finally:
        kill_leftovers(str(cache))


@pytest.mark.slow
def test_srun_job_that_slurm_refuses_is_exit_3_with_slurms_line(
        rank_repo: Path, tmp_path: Path, slurm) -> None:  # noqa: F811 - the fixture
    env = launcher_env(slurm.env)
    suite = write_fault_suite(tmp_path / "suite.yaml", [4])
    done = subprocess.run(
        ["salloc", "-Q", "-n", "2", *abdiff_argv(
            "main..main", "--configs", suite, "--repo", rank_repo, "--cache-dir",
            tmp_path / "cache", "--rounds", "1", "--launcher", "srun",
            "--np", str(2 * slurm.cpus + 2))],
        capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL,
        check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert line.startswith("abdiff: error: srun could not launch the worker: srun: error: "
                           "Unable to create step"), line


# ---------------------------------------------------------------- doctor --launcher


@mpirun_missing
def test_doctor_starts_a_two_rank_hello_through_mpirun(tmp_path: Path) -> None:
    done = run_abdiff("doctor", "--launcher", "mpirun", env=launcher_env())
    assert done.stdout.startswith("mpirun: 2 ranks started and said hello"), done.stdout
    assert done.returncode != 3, done.stderr


def test_doctor_says_what_srun_is_missing(tmp_path: Path) -> None:
    env = {k: v for k, v in git_env().items() if not k.startswith("SLURM_")}
    done = run_abdiff("doctor", "--launcher", "srun", env=env)
    assert done.returncode == 3
    assert "srun" in one_line(done.stderr)


# ---------------------------------------------------------------- trtllm under srun


@pytest.mark.slow
def test_a_login_node_without_cuda_can_ask_srun_ranks_for_graphs(
        tmp_path: Path, slurm) -> None:  # noqa: F811 - the fixture
    """`abdiff run --launcher srun` inside an allocation, for a suite that asks for CUDA
    graphs, where abdiff's own process sees no CUDA (a login node): not refused, since the
    ranks run on the allocation's nodes; the ranks get --use-cuda-graph. (This cluster's
    ranks have no CUDA either, so the config then fails there, visibly: exit 3.)"""
    repo = make_upstream_repo(tmp_path / "TensorRT-LLM")
    suite = tmp_path / "one.yaml"
    suite.write_text("warmup_times: 1\nrun_times: 2\ntarget: {use_cuda_graph: true}\n"
                     "matrix: {run_type: [GEN], backend: [TRTLLM], batch_size: [2], "
                     "seq_len_q: [1], seq_len_kv_cache: [16]}\n")
    env = {**launcher_env(slurm.env), "CUDA_VISIBLE_DEVICES": ""}
    argv = abdiff_argv("run", "pr", "--repo", repo, "--target", "trtllm", "--launcher", "srun",
                       "--np", "1", "--configs", suite, "--rounds", "1",
                       "--out", tmp_path / "pr.json", "--cache-dir", tmp_path / "cache")
    done = subprocess.run(["salloc", "-Q", "-n", "1", *argv], capture_output=True, text=True,
                          timeout=300, env=env, stdin=subprocess.DEVNULL, check=False)
    assert "cannot run here" not in done.stderr, done.stderr
    logs = list((tmp_path / "cache").rglob("worker0/stdout.txt"))
    assert logs, (done.returncode, done.stderr)
    assert "use_cuda_graph=True" in logs[0].read_text()
    assert done.returncode == 3, done.stderr  # nothing measured is never green
