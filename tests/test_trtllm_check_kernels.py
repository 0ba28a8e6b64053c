"""`abdiff check-kernels`: golden kernel sets and launch counts per GPU architecture,
checked against one measured side (abdiff/verdict/kernel_golden.py, commands/check_kernels.py).

The run files hold what the trtllm probe records per round (kernels with launch counts);
the command runs for real in a subprocess.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import h200_with_kernels, run_abdiff

from abdiff.store.records import ConfigRuns, RoundRecord, RunFile, load_run_file, write_run_file
from abdiff.verdict.kernel_golden import golden_path

FMHA, XQA, GEMM = "fmha_v2_kernel", "xqa_kernel_spec_dec", "nvjet_gemm"


def run_file(path: Path, steady: dict[str, int], split_k: list[int]) -> Path:
    """Two configs: one with a fixed kernel set, one whose GEMM split varies by round
    (autotuned: 2-4 launches), eight rounds each."""
    params = {"run_type": "GEN", "backend": "TRTLLM", "batch_size": 32, "seq_len_kv_cache": 2049}
    configs = [
        ConfigRuns("GEN-TRTLLM-bs32-q1-kv2049", {**params, "seq_len_q": 1},
                   [RoundRecord("ok", latency_us=[10.0], kernels=dict(steady), round=r)
                    for r in range(8)]),
        ConfigRuns("GEN-TRTLLM-bs32-q4-kv2049", {**params, "seq_len_q": 4},
                   [RoundRecord("ok", latency_us=[12.0], kernels={XQA: 1, GEMM: n}, round=r)
                    for r, n in enumerate(split_k)]),
    ]
    write_run_file(path, RunFile("pr", "ab" * 20, "trtllm", "mtp", {"device": "cuda"}, configs))
    return path


VARYING = [2, 3, 4, 3, 2, 4, 3, 3]


def test_a_run_matching_its_golden_file_passes(tmp_path: Path) -> None:
    golden_run = run_file(tmp_path / "golden.json", {FMHA: 1, GEMM: 2}, VARYING)
    done = run_abdiff("check-kernels", golden_run, "--arch", "sm100", "--update",
                      "--baselines-dir", tmp_path / "baselines")
    assert done.returncode == 0, done.stderr
    path = golden_path(tmp_path / "baselines", "sm100", "mtp")
    data = json.loads(path.read_text())
    assert data["arch"] == "sm100" and data["configs"]["GEN-TRTLLM-bs32-q1-kv2049"][
        "kernels"] == {FMHA: 1, GEMM: 2}
    again = run_file(tmp_path / "again.json", {FMHA: 1, GEMM: 2}, [3, 2, 4, 3, 3, 2, 4, 3])
    done = run_abdiff("check-kernels", again, "--arch", "sm100",
                      "--baselines-dir", tmp_path / "baselines")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "abdiff: 0 of 2 configs changed" in done.stdout


def test_a_dispatch_change_or_an_extra_launch_trips(tmp_path: Path) -> None:
    run_abdiff("check-kernels", run_file(tmp_path / "g.json", {FMHA: 1, GEMM: 2}, VARYING),
               "--arch", "sm90", "--update", "--baselines-dir", tmp_path / "b")
    # another attention kernel on the fixed config, and one more launch on it
    changed = run_file(tmp_path / "c.json", {XQA: 1, GEMM: 3}, VARYING)
    done = run_abdiff("check-kernels", changed, "--arch", "sm90", "--baselines-dir",
                      tmp_path / "b")
    assert done.returncode == 1
    assert (f"CHANGED GEN-TRTLLM-bs32-q1-kv2049: kernel set changed: +{XQA}, -{FMHA}; "
            "launches 4 per call, golden 3 ± 0.5") in done.stdout
    assert "ok      GEN-TRTLLM-bs32-q4-kv2049" in done.stdout  # within its varying band


def test_the_band_follows_the_launch_variance(tmp_path: Path) -> None:
    run_abdiff("check-kernels", run_file(tmp_path / "g.json", {FMHA: 1, GEMM: 2}, VARYING),
               "--arch", "sm100", "--update", "--baselines-dir", tmp_path / "b")
    # the varying config moves by one launch on average: inside 4 sigma of its spread
    shifted = run_file(tmp_path / "s.json", {FMHA: 1, GEMM: 2}, [n + 1 for n in VARYING])
    done = run_abdiff("check-kernels", shifted, "--arch", "sm100", "--baselines-dir",
                      tmp_path / "b")
    assert done.returncode == 0, done.stdout
    far = run_file(tmp_path / "f.json", {FMHA: 1, GEMM: 2}, [n + 8 for n in VARYING])
    done = run_abdiff("check-kernels", far, "--arch", "sm100", "--baselines-dir",
                      tmp_path / "b")
    assert done.returncode == 1 and "CHANGED GEN-TRTLLM-bs32-q4-kv2049: launches" in done.stdout


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    run = run_file(tmp_path / "r.json", {FMHA: 1}, VARYING)
    for args, words in ((["--arch", "hopper"], "give the GPU architecture as smNN"),
                        (["--arch", "sm90"], "no golden kernel baseline; write one with")):
        done = run_abdiff("check-kernels", run, *args, "--baselines-dir", tmp_path / "none")
        assert done.returncode == 2 and words in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_sm90_golden_file_catches_the_seed_prs_first_version(
        tmp_path: Path) -> None:
    """Real H200 data: baselines/kernels/sm90/mtp.json was written from the committed
    H200 baseline (reference target, `pr`); `main..pr-v1`'s B side, measured on the same
    GPU in another session, trips exactly on the four TRTLLM MTP configs whose attention
    kernel changed; a later `pr` run passes."""
    golden = ["--arch", "sm90", "--baselines-dir", ROOT / "baselines"]
    done = run_abdiff("check-kernels", h200_with_kernels("baseline-graph..pr-b", tmp_path), *golden)
    assert done.returncode == 0, done.stdout
    done = run_abdiff("check-kernels", h200_with_kernels("graph-main..pr-v1-b", tmp_path),
                      *golden)
    assert done.returncode == 1
    changed = sorted(line.split()[1].rstrip(":") for line in done.stdout.splitlines()
                     if line.startswith("CHANGED"))
    assert changed == ["GEN-TRTLLM-bs32-q2-kv2049", "GEN-TRTLLM-bs32-q4-kv2049",
                       "GEN-TRTLLM-bs8-q2-kv2049", "GEN-TRTLLM-bs8-q4-kv2049"]
    assert "+cudnn_generated_fort_native_sdpa_sm90_flash_fprop" in done.stdout


def test_a_cpu_run_is_no_gpu_architectures_golden_file(tmp_path: Path) -> None:
    """A run of the CPU names aten operators, not an architecture's kernels: refused for
    --update (it wrote sm90's golden file from it) and for a check."""
    path = run_file(tmp_path / "cpu.json", {FMHA: 1}, [2] * 8)
    cpu = load_run_file(path)
    cpu.env = {"device": "cpu"}
    write_run_file(path, cpu)
    for extra in (["--update"], []):
        done = run_abdiff("check-kernels", path, "--arch", "sm90", *extra,
                          "--baselines-dir", tmp_path / "baselines")
        assert done.returncode == 2 and "measured on cpu, not a GPU" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "baselines").exists()
    cpu.env = {}  # upstream's run folders, imported, name no device: taken as they are
    write_run_file(path, cpu)
    done = run_abdiff("check-kernels", path, "--arch", "sm90", "--update",
                      "--baselines-dir", tmp_path / "baselines")
    assert done.returncode == 0, done.stderr
