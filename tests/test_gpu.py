"""GPU-only checks (marked `gpu`, skipped without CUDA): kernel selection, events, graphs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PROBE = """
import json, sys
sys.path.insert(0, ".")
from tinyllm.tools.layer_wise_benchmarks import Runner
from abdiff.worker.measure import find_attn_metadata, profile_kernels, time_iterations
pack = Runner("TRTLLM", device="cuda").create_run_pack(
    "GEN", batch_size=32, seq_len_q=4, seq_len_kv_cache=2049)
events = time_iterations(pack, 3, 10, "cuda", cuda_graph=False).latency_us
graph = time_iterations(pack, 3, 10, "cuda").latency_us  # graph replay: the default
warmup = time_iterations(pack, 3, 10, "cuda").warmup_json()
# a kernel round's names: the timed graph's nodes (graph_kernels.py)
graph_named = time_iterations(pack, 3, 10, "cuda", name_kernels=True).kernels.counts
# profiled once warm, as the capture of kernel times is (a cold pack's first call also runs
# the libraries' one-time memsets)
profiled = profile_kernels(pack, "cuda")
print(json.dumps({
    "max_total_draft_tokens": find_attn_metadata(pack).max_total_draft_tokens,
    "kernels": profiled.counts, "kernel_us": profiled.us, "events": events,
    "graph": graph, "warmup": warmup, "graph_named": graph_named,
}))
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from abdiff.demo.builder import build_demo_repo

    repo = tmp_path_factory.mktemp("gpu") / "demo"
    build_demo_repo(repo)
    for branch in ("main", "pr-v1"):
        # --detach: the demo repository itself has main checked out
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach",
                        str(repo.parent / branch), branch], check=True)
    return repo.parent


def probe(checkout: Path) -> dict:
    import json

    from abdiff.launchers.spec import ABDIFF_ROOT

    # abdiff from this tree, however pytest was started (the demo checkout comes first)
    env = {**os.environ, "PYTHONPATH": str(ABDIFF_ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=checkout, capture_output=True,
                          text=True, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_trtllm_kernel_selection_changes_on_pr_v1(demo: Path) -> None:
    main, pr_v1 = probe(demo / "main"), probe(demo / "pr-v1")
    assert main["max_total_draft_tokens"] is None and pr_v1["max_total_draft_tokens"] == 3
    assert main["kernels"] and pr_v1["kernels"]
    for result in (main, pr_v1):  # every kernel has a device time, a few us to a few ms each
        assert set(result["kernel_us"]) == set(result["kernels"])
        assert all(0 < us < 5e4 for us in result["kernel_us"].values()), result["kernel_us"]
    assert set(main["kernels"]) != set(pr_v1["kernels"])
    for result in (main, pr_v1):  # the graph's nodes name what the profiler names
        assert result["graph_named"] == result["kernels"]
    assert any("softmax" in k.lower() for k in main["kernels"])
    assert any("sdpa" in k.lower() or "flash" in k.lower() for k in pr_v1["kernels"])
    for result in (main, pr_v1):
        assert len(result["events"]) == 10 and min(result["events"]) > 0
        assert len(result["graph"]) == 10 and min(result["graph"]) > 0
        # the stopping rule: at least the 3 warm-up calls, at most about its 0.3 s cap
        assert result["warmup"]["calls"] >= 3 and result["warmup"]["seconds"] < 1.0


GRAPH_NAMES = """
import json, sys
sys.path.insert(0, ".")
from tinyllm.tools.layer_wise_benchmarks import Runner
from abdiff.worker.measure import profile_kernels, time_iterations
pack = Runner("DSA", device="cuda").create_run_pack(
    "GEN", batch_size=8, seq_len_q=2, seq_len_kv_cache=2049)
named = time_iterations(pack, 3, 10, "cuda", name_kernels=True).kernels
profiled = profile_kernels(pack, "cuda").counts
print(json.dumps({"graph": named and named.counts, "profiler": profiled}))
"""


def test_a_graph_with_device_copies_is_named_as_the_profiler_names_it(demo: Path) -> None:
    # DSA's indexer copies between device buffers inside the step: 4 copy nodes a graph
    import json

    from abdiff.launchers.spec import ABDIFF_ROOT

    subprocess.run(["git", "-C", str(demo / "demo"), "checkout", "-q", "pr"], check=True)
    done = subprocess.run([sys.executable, "-c", GRAPH_NAMES], cwd=demo / "demo",
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ABDIFF_ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["graph"] == result["profiler"]
    assert result["graph"]["Memcpy DtoD (Device -> Device)"] >= 1


def test_a_preimport_that_creates_a_cuda_context_leaves_that_side_cold(tmp_path: Path) -> None:
    """A fork cannot carry a CUDA context: the fork server checks after the target's
    preimport and ends instead of forking; that side's workers start cold."""
    from abdiff.launchers.forkserver import ForkServers
    from abdiff.launchers.process import run_process
    from abdiff.launchers.runtime import Runtime
    from abdiff.launchers.spec import ABDIFF_ROOT, LaunchSpec

    folder = tmp_path / "a"
    (folder / "cudapkg").mkdir(parents=True)
    (folder / "cudapkg" / "__init__.py").write_text("import torch\ntorch.cuda.init()\n")
    (folder / "job.py").write_text("import os\nprint(os.getppid())\n")
    env = {"PYTHONPATH": str(ABDIFF_ROOT)}
    pool = ForkServers(tmp_path / "servers")
    try:
        pool.prepare([folder], env, ("cudapkg",))
        spec = LaunchSpec([sys.executable, "-m", "job"], folder, env)
        outcome = run_process(spec, tmp_path / "w0", tmp_path / "w0" / "progress", 120,
                              runtime=Runtime(pool=pool))
        assert outcome.returncode == 0
        assert int((tmp_path / "w0" / "stdout.txt").read_text()) == os.getpid()  # cold
        said = pool.preimported(folder)
        assert said is not None and "a CUDA context exists" in said
    finally:
        pool.close()


def test_the_gpu_identity_read_through_nvml_says_what_nvidia_smi_says() -> None:
    """A worker reads its GPU's driver and clock policy through the NVML sensor it opens
    anyway; the words must be nvidia-smi's, which runs recorded before used."""
    from abdiff.worker.measure import current_gpu_uuid, gpu_identity, gpu_sensor

    sensor, _ = gpu_sensor("cuda")
    if sensor is None:
        pytest.skip("nvidia-ml-py is not installed")
    assert sensor.identity() == gpu_identity(current_gpu_uuid())
