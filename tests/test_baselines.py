"""Stored baselines: refresh, list, show, append, compare against, fingerprint checks,
and the committed baselines/reference-cpu.json against a fresh run of the demo's `pr`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_abdiff, write_suite

from abdiff.demo import build_demo_repo
from abdiff.records import load_run_file

pytestmark = pytest.mark.slow  # baselines measured in worker processes

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("baselines") / "demo"
    build_demo_repo(repo)
    return repo


def test_refresh_list_show_append_and_compare(demo: Path, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.yaml", [2], ("DSA", "TRTLLM"), (1, 4))
    folder, cache = tmp_path / "baselines", tmp_path / "cache"
    common = ("--configs", suite, "--repo", demo, "--cache-dir", cache, "--baselines-dir", folder)
    done = run_abdiff("baseline", "refresh", "rel-1", "--rev", "main", "--rounds", 2, *common)
    assert done.returncode == 0, done.stderr
    stored = load_run_file(folder / "rel-1.json")
    assert stored.rev == "main" and stored.env["cpu_model"] and stored.env["torch"]
    assert stored.env["recorded_at"] and all(len(c.rounds) == 2 for c in stored.configs)

    done = run_abdiff("baseline", "refresh", "rel-1", "--rev", "main", "--rounds", 1, "--append",
                      "--seed", 5, *common)
    assert done.returncode == 0, done.stderr
    appended = load_run_file(folder / "rel-1.json")
    assert all(sorted(r.round for r in c.rounds) == [0, 1, 2] for c in appended.configs)

    listed = run_abdiff("baseline", "list", "--repo", demo, "--baselines-dir", folder)
    assert listed.returncode == 0 and "rel-1" in listed.stdout and "main" in listed.stdout
    shown = run_abdiff("baseline", "show", "rel-1", "--repo", demo, "--baselines-dir", folder)
    assert shown.returncode == 0 and "DG_HOST_ASSERT" in shown.stdout
    assert "max_total_draft_tokens=None" in shown.stdout

    # 2 rounds leave latency inconclusive; B still gets no adaptive rounds (max-rounds 15)
    done = run_abdiff("baseline:rel-1..pr", "--expect", "backend=DSA", "--rounds", 2,
                      "--json", tmp_path / "r.json", *common)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["a"]["baseline"] == "rel-1"
    assert "not interleaved" in result["notes"][0] and "4.0% margin" in result["notes"][0]
    assert "no adaptive rounds" in result["notes"][0]
    assert {c["latency"]["rounds_b"] for c in result["configs"]} <= {0, 2}
    assert result["summary"]["min_effect"] == pytest.approx(0.04)
    fixed = [c for c in result["configs"] if c["status_change"] == "fixed"]
    assert [c["id"] for c in fixed] == ["GEN-DSA-bs2-q4-kv64"]


def test_other_machine_is_refused_unless_allowed(demo: Path, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.yaml", [2])
    folder, cache = tmp_path / "baselines", tmp_path / "cache"
    common = ("--configs", suite, "--repo", demo, "--cache-dir", cache, "--baselines-dir", folder)
    assert run_abdiff("baseline", "refresh", "b", "--rev", "pr", "--rounds", 1,
                      *common).returncode == 0
    data = json.loads((folder / "b.json").read_text())
    data["env"].update(torch="1.0.0", cpu_model="Some Other CPU")
    (folder / "b.json").write_text(json.dumps(data))
    refused = run_abdiff("baseline:b..pr", "--rounds", 1, "--max-rounds", 1, *common)
    assert refused.returncode == 2
    line = refused.stderr.strip()
    assert "\n" not in line and "torch: '1.0.0' in the baseline" in line
    assert "--allow-env-mismatch" in line
    allowed = run_abdiff("baseline:b..pr", "--rounds", 1, "--max-rounds", 1,
                         "--allow-env-mismatch", "--format", "markdown", *common)
    assert allowed.returncode in (0, 1), allowed.stderr
    assert "environment differs from the baseline" in allowed.stdout
    appended = run_abdiff("baseline", "refresh", "b", "--rev", "pr", "--rounds", 1, "--append",
                          *common)
    assert appended.returncode == 2 and "environment differs" in appended.stderr


def test_committed_reference_baseline_matches_a_fresh_run(demo: Path, tmp_path: Path) -> None:
    """baselines/reference-cpu.json holds the demo's `pr` on the CPU; a fresh run of `pr`
    must agree with it on every status, fact and kernel (latency depends on the machine)."""
    committed = load_run_file(ROOT / "baselines" / "reference-cpu.json")
    assert committed.rev == "pr" and committed.suite == "mtp"
    done = run_abdiff("baseline:reference-cpu..pr", "--configs", "mtp", "--repo", demo,
                      "--cache-dir", tmp_path / "cache", "--baselines-dir", ROOT / "baselines",
                      "--allow-env-mismatch", "--rounds", 1, "--max-rounds", 1,
                      "--json", tmp_path / "r.json", timeout=400)
    assert done.returncode in (0, 1), done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert len(result["configs"]) == 12
    for config in result["configs"]:
        assert config["status_change"] == "same", config["id"]
        assert not config["facts_changed"], config["id"]
        assert not config["kernels_added"] and not config["kernels_removed"], config["id"]
