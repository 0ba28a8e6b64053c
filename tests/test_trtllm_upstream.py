"""The trtllm target against today's upstream: arguments upstream has grown
(--spec-max-draft-len, --moe-backend, balance ratios), the doctor naming the file it
looked at, and docs/trtllm.md's suite examples checked against run.py's options.

The checkouts are the stand-in tree of test_hooks.py (upstream's run.py argparse and
config_gen.yaml layout); the options added here are the ones upstream's own
tests/unittest/tools/test_layer_wise_benchmarks.py passes to run.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from conftest import unwrapped
from test_hooks import git, make_upstream_repo, write_upstream_tree

from abdiff.errors import InputError
from abdiff.store.records import ConfigRuns, RoundRecord, RunFile
from abdiff.suites import load_suite
from abdiff.suites.loader import parse_suite
from abdiff.targets.trtllm import seed
from abdiff.targets.trtllm.meanings import fact_meanings
from abdiff.targets.trtllm.target import (
    RUN_PY,
    TrtllmOptions,
    TrtllmTarget,
    base_config,
    plan_block,
    run_py_options,
    translate_configs,
)
from abdiff.verdict.compare import compare_runs

ROOT = Path(__file__).resolve().parents[1]
# the run.py options of today's upstream that the stand-in's run.py lacks (upstream's test
# passes --spec-max-draft-len=3 and --mamba-ssm-cache-dtype=float16 to run.py)
TODAYS_OPTIONS = '''parser.add_argument("--spec-max-draft-len", type=int)
parser.add_argument("--mamba-ssm-cache-dtype", type=str)
parser.add_argument("--moe-max-num-tokens", type=int)
'''


def todays_upstream(root: Path) -> Path:
    write_upstream_tree(root)
    run_py = root / RUN_PY
    text = run_py.read_text()
    anchor = 'parser.add_argument("--moe-backend-for-prefill", type=str)\n'
    run_py.write_text(text.replace(anchor, anchor + TODAYS_OPTIONS))
    return root


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return todays_upstream(tmp_path_factory.mktemp("today") / "TensorRT-LLM")


def block_of(qs: tuple[int, ...], backend: str = "TRTLLM", run_type: str = "GEN") -> list[dict]:
    return [{"id": f"q{q}", "params": {"run_type": run_type, "backend": backend, "batch_size": 32,
                                       "seq_len_q": q, "seq_len_kv_cache": 2049}} for q in qs]


def args_for(checkout: Path, block: list[dict], target: dict) -> list[str]:
    known = run_py_options(checkout / RUN_PY)
    _, base = base_config(checkout, block[0]["params"]["run_type"])
    return translate_configs(block, TrtllmOptions.parse(target, known), [], warmup_times=1,
                             run_times=3, cuda_graph=True, known=known, base=base)


def value_of(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_spec_max_draft_len_auto_follows_the_blocks_draft_tokens(upstream: Path) -> None:
    args = args_for(upstream, block_of((1, 2, 4)), {"spec_max_draft_len": "auto"})
    assert value_of(args, "--spec-max-draft-len") == "3"
    assert "--spec-max-draft-len" not in args_for(upstream, block_of((1,)),
                                                  {"spec_max_draft_len": "auto"})
    assert "--spec-max-draft-len" not in args_for(
        upstream, block_of((4,), run_type="CTX"), {"spec_max_draft_len": "auto"})
    assert value_of(args_for(upstream, block_of((2,)), {"spec_max_draft_len": 5}),
                    "--spec-max-draft-len") == "5"


def test_a_spec_max_draft_len_too_small_for_the_shapes_is_refused(upstream: Path) -> None:
    """upstream's runner raises `seq_len_q 4 needs --spec-max-draft-len 3` deep in the rank
    for hybrid models; abdiff says it before anything starts."""
    with pytest.raises(InputError, match=r"spec_max_draft_len=2: seq_len_q 4 needs at least 3"):
        args_for(upstream, block_of((1, 4)), {"spec_max_draft_len": 2})
    with pytest.raises(InputError, match="give a number of draft tokens or `auto`"):
        args_for(upstream, block_of((2,)), {"spec_max_draft_len": "three"})


def test_an_older_run_py_without_the_option_is_named(tmp_path: Path) -> None:
    old = write_upstream_tree(tmp_path / "old")  # the seed's run.py: no --spec-max-draft-len
    with pytest.raises(InputError, match="target.spec_max_draft_len is neither a trtllm target "
                                         "option .* nor an option of this checkout's run.py"):
        args_for(old, block_of((4,)), {"spec_max_draft_len": "auto"})


def test_moe_backend_per_backend_reaches_run_py(upstream: Path) -> None:
    target = {"backend_options": {"DSA": {"moe_backend": "DEEPGEMM",
                                          "moe_backend_for_prefill": "DEEPGEMM"},
                                  "TRTLLM": {"moe_backend": "TRTLLM"}}}
    dsa = args_for(upstream, block_of((1,), "DSA"), target)
    trtllm = args_for(upstream, block_of((1,), "TRTLLM"), target)
    assert value_of(dsa, "--moe-backend") == "DEEPGEMM"
    assert value_of(dsa, "--moe-backend-for-prefill") == "DEEPGEMM"
    assert value_of(trtllm, "--moe-backend") == "TRTLLM"


def test_configs_differing_only_by_balance_ratio_never_share_a_process() -> None:
    suite = parse_suite({"matrix": {"run_type": "GEN", "backend": "TRTLLM", "batch_size": [8, 32],
                                    "seq_len_q": 1, "seq_len_kv_cache": 2049,
                                    "balance_ratio": [0.0, 0.5]}}, "br", "br.yaml")
    ids = [c.id for c in suite.configs]
    assert len(set(ids)) == 4 and "GEN-TRTLLM-bs8-q1-kv2049-br0.5" in ids
    remaining = [{"id": c.id, "params": c.params} for c in suite.configs]
    blocks = []
    while remaining:
        block = plan_block(remaining)
        blocks.append(sorted(c["id"] for c in block))
        remaining = [c for c in remaining if c not in block]
    assert blocks == [["GEN-TRTLLM-bs32-q1-kv2049-br0.0", "GEN-TRTLLM-bs8-q1-kv2049-br0.0"],
                      ["GEN-TRTLLM-bs32-q1-kv2049-br0.5", "GEN-TRTLLM-bs8-q1-kv2049-br0.5"]]


def test_doctor_names_the_library_file_it_looked_at(upstream: Path, tmp_path: Path) -> None:
    """A tree without tensorrt_llm/_torch/autotuner.py: the problem is that file, not run.py."""
    tree = todays_upstream(tmp_path / "no-autotuner")
    os.remove(tree / "tensorrt_llm/_torch/autotuner.py")
    problems = TrtllmTarget().hook_problems(tree)
    assert problems == ["tensorrt_llm/_torch/autotuner.py: missing (so the benchmark no longer "
                        "autotunes inside `with autotune():` (AutoTuner.is_tuning_mode), so "
                        "tuning calls are neither timed nor profiled)"]
    assert TrtllmTarget().hook_problems(upstream) == []


def doc_suites() -> list[str]:
    """The suite YAML blocks of docs/trtllm.md (fenced ```yaml blocks with a matrix)."""
    text = (ROOT / "docs" / "trtllm.md").read_text()
    return [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "matrix:" in b]


def test_every_suite_example_in_the_docs_translates_against_run_py(upstream: Path) -> None:
    """docs/trtllm.md's suites as written: valid suites whose every block becomes a run.py
    command line of today's (stand-in) run.py, with the options upstream's own tests use."""
    examples = doc_suites()
    assert examples
    for text in examples:
        suite = parse_suite(yaml.safe_load(text), "doc", "docs/trtllm.md")
        remaining = [{"id": c.id, "params": c.params} for c in suite.configs]
        while remaining:
            block = plan_block(remaining)
            args = args_for(upstream, block, suite.target_options)
            assert args[args.index("--run-type") + 1] == block[0]["params"]["run_type"]
            remaining = [c for c in remaining if c not in block]
        if "DeepSeek-V4" in text:  # upstream's V4 path: DeepGEMM MoE, 0-based layer indices
            dsa = args_for(upstream, [{"id": "x", "params": suite.configs[0].params}],
                           suite.target_options)
            assert value_of(dsa, "--moe-backend") == "DEEPGEMM"


def test_the_built_in_suites_translate_against_todays_run_py(upstream: Path) -> None:
    for name in ("mtp", "mtp-hopper", "decode", "ctx"):
        suite = load_suite(name)
        block = plan_block([{"id": c.id, "params": c.params} for c in suite.configs])
        assert "--run-type" in args_for(upstream, block, suite.target_options)


# -------------------------------------------------- facts whose meaning changed (item 2)
DSA_PY = "tensorrt_llm/_torch/attention_backend/sparse/dsa.py"
SEED_BUFFERS = ("        self.kv_lens_cuda_2d = torch.zeros(self.max_num_requests, "
                "1 + self.max_draft_tokens)\n")
# today's dsa.py: the buffer is sized by a capacity that only grows (upstream's
# `_draft_sizing_cap`: the larger of `_draft_alloc_cap` and max_draft_tokens)
TODAYS_BUFFERS = '''        self.kv_lens_cuda_2d = torch.zeros(self.max_num_requests,
                                           1 + self._draft_sizing_cap)

    @property
    def _draft_sizing_cap(self):
        return max(getattr(self, "_draft_alloc_cap", 0) or 0, self.max_draft_tokens)
'''


def todays_dsa(root: Path) -> Path:
    dsa = root / DSA_PY
    text = dsa.read_text()
    assert SEED_BUFFERS in text
    dsa.write_text(text.replace(SEED_BUFFERS, TODAYS_BUFFERS).replace(
        "        self.max_draft_tokens = max_draft_len\n",
        "        self.max_draft_tokens = max_draft_len\n"
        "        self._draft_alloc_cap = max(max_total_draft_tokens,\n"
        "                                    getattr(self, '_draft_alloc_cap', 0) or 0)\n"))
    return root


def kv_lens_run(rev: str, env: dict, shape: list[int], draft: int | None) -> RunFile:
    params = {"run_type": "GEN", "backend": "DSA", "batch_size": 32, "seq_len_q": 2,
              "seq_len_kv_cache": 2049}
    facts = {"attn_metadata.kv_lens_cuda_2d.shape": shape,
             "attn_metadata.max_total_draft_tokens": draft}
    # 15 rounds a side whose medians move by a few tenths of a percent, differently per side
    # (identical rounds would give the latency statistic nothing to resolve)
    shift = len(rev) % 5
    rounds = [RoundRecord("ok", latency_us=[50.0 + 0.1 * ((3 * r + shift) % 5) + i % 2
                                            for i in range(10)],
                          facts=facts, round=r, kernels={"indexer": 1}) for r in range(15)]
    return RunFile(rev, rev, "trtllm", "mtp", env,
                   [ConfigRuns("GEN-DSA-bs32-q2-kv2049", params, rounds)])


def test_kv_lens_cuda_2d_means_a_capacity_today_and_a_draft_length_at_the_seed(
        tmp_path: Path) -> None:
    seed = write_upstream_tree(tmp_path / "seed", announce="kv_lens_cuda_2d")
    today = todays_dsa(write_upstream_tree(tmp_path / "today", announce="kv_lens_cuda_2d"))
    at_seed = TrtllmTarget().env_info(seed)["fact_meanings"]
    at_today = TrtllmTarget().env_info(today)["fact_meanings"]
    assert at_seed["attn_metadata.kv_lens_cuda_2d.shape"].startswith(
        "columns = 1 + max_draft_tokens: the draft length")
    assert at_today["attn_metadata.kv_lens_cuda_2d.shape"].startswith(
        "columns = 1 + _draft_sizing_cap: a capacity that only grows")
    # the dsa/ package layout of later commits is read too
    moved = tmp_path / "moved" / DSA_PY.replace("dsa.py", "dsa/metadata.py")
    moved.parent.mkdir(parents=True)
    moved.write_text((today / DSA_PY).read_text())
    assert fact_meanings(tmp_path / "moved") == {k: v for k, v in at_today.items()}


def test_a_change_of_meaning_is_reported_as_such_not_as_a_regression(tmp_path: Path) -> None:
    seed = write_upstream_tree(tmp_path / "seed", announce="kv_lens_cuda_2d")
    today = todays_dsa(write_upstream_tree(tmp_path / "today", announce="kv_lens_cuda_2d"))
    env_a = {"device": "cuda", **TrtllmTarget().env_info(seed)}
    env_b = {"device": "cuda", **TrtllmTarget().env_info(today)}
    # B's buffer kept the width of a q=4 pack made earlier in the process: [32, 4]
    result = compare_runs(kv_lens_run("seed", env_a, [32, 2], 1),
                          kv_lens_run("today", env_b, [32, 4], 1), {})
    config = result.configs[0]
    assert config.facts_changed == {} and config.verdict == "unchanged"
    assert result.summary["facts_redefined"] == ["attn_metadata.kv_lens_cuda_2d.shape"]
    note = next(n for n in result.notes if n.startswith("attn_metadata.kv_lens_cuda_2d.shape"))
    assert "means something else on each side, values not compared" in note
    assert "A: columns = 1 + max_draft_tokens" in note
    assert "B: columns = 1 + _draft_sizing_cap" in note
    # other facts are still compared: a draft-token change stays unintended
    result = compare_runs(kv_lens_run("seed", env_a, [32, 2], None),
                          kv_lens_run("today", env_b, [32, 4], 1), {})
    assert result.configs[0].facts_changed == {
        "attn_metadata.max_total_draft_tokens": [None, 1]}
    assert result.configs[0].verdict == "unintended"


def test_the_same_meaning_on_both_sides_compares_values(tmp_path: Path) -> None:
    seed = write_upstream_tree(tmp_path / "seed", announce="kv_lens_cuda_2d")
    env = {"device": "cuda", **TrtllmTarget().env_info(seed)}
    result = compare_runs(kv_lens_run("a", env, [32, 1], 1), kv_lens_run("b", env, [32, 2], 1), {})
    assert result.configs[0].facts_changed == {
        "attn_metadata.kv_lens_cuda_2d.shape": [[32, 1], [32, 2]]}
    assert "facts_redefined" not in result.summary


# ------------------------------------------------ the seed story's real commits (item 1)
def test_the_seed_story_names_the_real_upstream_merge_and_its_parent() -> None:
    docs = (ROOT / "docs" / "trtllm.md").read_text()
    assert seed.SEED_MERGE == "6d72d24b8fb6c922ff896f51140f5a8a4f4d7f90"
    assert f"`{seed.SEED_MERGE}`" in docs and f"`{seed.SEED_MERGE}^`" in docs


def test_the_stand_in_story_changes_what_the_real_merge_changed(tmp_path: Path) -> None:
    """upstream's merge touched runner.py only; the stand-in's main..pr does the same."""
    repo = make_upstream_repo(tmp_path / "TensorRT-LLM")
    assert git(repo, "diff", "--name-only", "main", "pr").split() == [seed.SEED_FILE]


def test_doctor_resolves_the_seed_commits_in_a_clone(tmp_path: Path, capsys,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from abdiff.cli import main

    repo = make_upstream_repo(tmp_path / "TensorRT-LLM")
    common = ["doctor", "--target", "trtllm", "--repo", str(repo),
              "--cache-dir", str(tmp_path / "cache")]
    main(common)
    out = " ".join(unwrapped(capsys.readouterr().out))
    assert (f"seed story (PR #17247): merge {seed.SEED_MERGE} is not in this clone; fetch "
            "upstream's main, then `abdiff 6d72d24b8fb6^..6d72d24b8fb6 --configs mtp`") in out
    # a clone that has it: the stand-in's pr commit plays the merge
    parent, merge = git(repo, "rev-parse", "main"), git(repo, "rev-parse", "pr")
    monkeypatch.setattr(seed, "SEED_MERGE", merge)
    assert seed.seed_range(repo) == (parent, merge)
    main(common)
    out = " ".join(unwrapped(capsys.readouterr().out))
    assert (f"seed story (PR #17247): A = {parent} (the merge's parent: DSA aborts at "
            f"seq_len_q > 1), B = {merge} (the merge); `abdiff {parent[:12]}..{merge[:12]} "
            "--configs mtp`") in out
