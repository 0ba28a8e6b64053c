"""The ast hook checker (abdiff/targets/hooks.py) on trees laid out like upstream TensorRT-LLM.

`write_upstream_tree` writes a *stand-in* of the parts of TensorRT-LLM that
abdiff's trtllm probe touches: the real module paths, class and method names
and attribute assignments, with tiny CPU bodies. It is the interface upstream
exposes, not upstream's code; test_trtllm_target.py runs the probe against it.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from abdiff.targets.hooks import Hook, HookChecker, class_assigns, missing_hooks
from abdiff.targets.trtllm.target import TRTLLM_HOOKS, TrtllmTarget

ATT = "tensorrt_llm/_torch/attention_backend"

STANDIN = '"""Test stand-in for upstream TensorRT-LLM: only the interface abdiff probes."""\n'

FILES: dict[str, str] = {
    "tensorrt_llm/__init__.py": STANDIN + "from tensorrt_llm.version import __version__\n",
    "tensorrt_llm/version.py": '__version__ = "1.3.0rc0-checkout"\n',
    "tensorrt_llm/tools/__init__.py": "",
    "tensorrt_llm/_torch/__init__.py": "",
    f"{ATT}/__init__.py": "",
    f"{ATT}/sparse/__init__.py": "",
    "tensorrt_llm/_torch/autotuner.py": STANDIN + '''
import contextlib
import sys

import torch


class AutoTuner:
    """upstream: one instance; `is_tuning_mode` is True inside `autotune()`."""

    _instance = None

    def __init__(self):
        self.is_tuning_mode = False
        self.tactics = {}

    @classmethod
    def get(cls):
        if cls._instance is None:
            cls._instance = AutoTuner()
        return cls._instance

    def clear_cache(self):
        self.tactics.clear()

    def choose(self, op):
        """A tactic per op, chosen in tuning mode; profiling while tuning skews the choice."""
        if self.is_tuning_mode:
            if torch.autograd.profiler._is_profiler_enabled:
                print("autotuner: tuning under torch.profiler", file=sys.stderr, flush=True)
            self.tactics[op] = "tuned"
        return self.tactics.get(op, "fallback")


@contextlib.contextmanager
def autotune(tune_mode=True, cache_path=None):
    old_mode = AutoTuner.get().is_tuning_mode
    AutoTuner.get().is_tuning_mode = tune_mode
    try:
        yield
    finally:
        AutoTuner.get().is_tuning_mode = old_mode
''',
    f"{ATT}/interface.py": STANDIN + '''
class AttentionMetadata:
    """Base metadata; update_spec_dec_param is a hook (a no-op here, as upstream's base)."""

    max_num_requests: int = 0

    def __init__(self, max_num_requests):
        self.max_num_requests = max_num_requests

    def prepare(self):
        pass

    def update_spec_dec_param(self, batch_size, is_spec_decoding_enabled, is_spec_dec_tree,
                              is_spec_dec_dynamic_tree, max_draft_len, max_total_draft_tokens):
        pass
''',
    f"{ATT}/trtllm.py": STANDIN + '''
from tensorrt_llm._torch.attention_backend.interface import AttentionMetadata


class TrtllmAttentionMetadata(AttentionMetadata):
    def __init__(self, max_num_requests):
        super().__init__(max_num_requests)
        self.is_spec_decoding_enabled = False
        self.max_total_draft_tokens = None

    def update_spec_dec_param(self, batch_size, is_spec_decoding_enabled, is_spec_dec_tree,
                              is_spec_dec_dynamic_tree, max_draft_len, max_total_draft_tokens):
        self.is_spec_decoding_enabled = is_spec_decoding_enabled
        self.max_total_draft_tokens = max_total_draft_tokens
''',
    f"{ATT}/sparse/dsa.py": STANDIN + '''
import torch

from ..trtllm import TrtllmAttentionMetadata


class DSAtrtllmAttentionMetadata(TrtllmAttentionMetadata):
    max_draft_tokens: int = 0

    def __init__(self, max_num_requests):
        super().__init__(max_num_requests)
        self.create_buffers()

    def create_buffers(self):
        self.kv_lens_cuda_2d = torch.zeros(self.max_num_requests, 1 + self.max_draft_tokens)

    def update_spec_dec_param(self, batch_size, is_spec_decoding_enabled, is_spec_dec_tree,
                              is_spec_dec_dynamic_tree, max_draft_len, max_total_draft_tokens):
        super().update_spec_dec_param(batch_size, is_spec_decoding_enabled, is_spec_dec_tree,
                                      is_spec_dec_dynamic_tree, max_draft_len,
                                      max_total_draft_tokens)
        self.max_draft_tokens = max_draft_len
        self.create_buffers()


class Indexer:
    def check(self, attn_metadata, num_generations, next_n):
        width = attn_metadata.kv_lens_cuda_2d[:num_generations, :next_n].shape[1]
        return width == next_n
''',
    "tensorrt_llm/tools/layer_wise_benchmarks/__init__.py":
        "from .runner import BalanceMethod, Runner\n",
    "tensorrt_llm/tools/layer_wise_benchmarks/runner.py": STANDIN + '''
import enum
import os
import sys

import torch

from tensorrt_llm._torch.attention_backend.sparse.dsa import (DSAtrtllmAttentionMetadata,
                                                              Indexer)
from tensorrt_llm._torch.attention_backend.trtllm import TrtllmAttentionMetadata
from tensorrt_llm._torch.autotuner import AutoTuner

ANNOUNCE = "none"  # "none" (main), "kv_lens_cuda_2d" (pr), "method" (pr-v1)


class BalanceMethod(enum.IntEnum):
    NotModified = 1
    Balanced = 2


class Runner:
    def __init__(self, pretrained_model_name_or_path, mapping=None, *, load_format="DUMMY",
                 moe_backend="CUTLASS", **kwargs):
        dsa = "V3.2" in pretrained_model_name_or_path or "V4" in pretrained_model_name_or_path
        self.metadata_cls = DSAtrtllmAttentionMetadata if dsa else TrtllmAttentionMetadata
        self.load_format = load_format

    def create_run_pack(self, run_type, *, batch_size, request_id_begin=0, seq_len_q,
                        seq_len_kv_cache, kv_cache_manager=None, attn_workspace=None):
        attn_metadata = self.metadata_cls(max_num_requests=batch_size)
        attn_metadata.prepare()
        announce = (hasattr(attn_metadata, "kv_lens_cuda_2d") if ANNOUNCE == "kv_lens_cuda_2d"
                    else hasattr(attn_metadata, "update_spec_dec_param")
                    if ANNOUNCE == "method" else False)
        if run_type == "GEN" and seq_len_q > 1 and announce:
            attn_metadata.update_spec_dec_param(batch_size, False, False, False,
                                                seq_len_q - 1, seq_len_q - 1)
        x = torch.rand(batch_size * seq_len_q, 8,
                       device="cuda" if torch.cuda.is_available() else "cpu")

        def run_pack(*, check=False):
            AutoTuner.get().choose("attention")
            if isinstance(attn_metadata, DSAtrtllmAttentionMetadata) and run_type == "GEN":
                if not Indexer().check(attn_metadata, batch_size, seq_len_q):
                    print("DG_HOST_ASSERT(batch_size == __batch_size and next_n == _next_n)",
                          file=sys.stderr, flush=True)
                    os.abort()
            if attn_metadata.max_total_draft_tokens:
                out = torch.softmax(x @ x.T, dim=-1)
            else:
                out = x @ x.T
            return out, x

        return run_pack
''',
    "examples/layer_wise_benchmarks/config_gen.yaml": '''model: nvidia/DeepSeek-R1-0528-FP4-v2
layer_indices: [5]
run_type: GEN
scaled_from: null

# KV cache related args
tokens_per_block: 32
max_seq_len: 9220  # 8192 + 1024 + 4
enable_attention_dp: true

# Model init args
max_num_tokens: 4096  # MTP3 as max
moe_backend: CUTLASS
use_cuda_graph: false  # upstream's says true; the CPU stand-in cannot capture graphs

# Per iteration args
batch_size: 128
seq_len_q: 1  # Set to (1 + MTP)
seq_len_kv_cache: 8193
balance_method: Balanced
balance_ratio: null
''',
    "examples/layer_wise_benchmarks/run.py": STANDIN + '''
# The call order of upstream's examples/layer_wise_benchmarks/run.py (module level):
# argparse + YAML merge; AutoTuner.get().clear_cache(); Runner(...); the autotune pack at
# the largest shape run inside `with autotune(cache_path=...)`; for GEN the KV-cache
# prefill with a second Runner's CTX packs (seq_len_kv_cache=0); one warm-up pack per
# shape (`run_pack(check=True)`); then per shape the timed loop: a new pack, one untimed
# call (newer run.py only), a graph capture with use_cuda_graph, warmup+run timed calls.
import argparse
import itertools
import os

import yaml

from tensorrt_llm._torch.autotuner import AutoTuner, autotune
from tensorrt_llm.tools.layer_wise_benchmarks.runner import BalanceMethod, Runner


def comma_separated_ints(s):
    return [int(x) for x in s.split(",")]


def comma_separated_floats(s):
    return [float(x) for x in s.split(",")]


parser = argparse.ArgumentParser()
parser.add_argument("config_path", type=str)
parser.add_argument("--model", type=str)
parser.add_argument("--layer-indices", type=comma_separated_ints)
parser.add_argument("--run-type", type=str, choices=["CTX", "GEN"])
parser.add_argument("--scaled-from", type=int)
parser.add_argument("--max-batch-size", type=int)
parser.add_argument("--tokens-per-block", type=int)
parser.add_argument("--max-seq-len", type=int)
group = parser.add_mutually_exclusive_group()
group.add_argument("--enable-attention-dp", action="store_true", dest="enable_attention_dp")
group.add_argument("--no-enable-attention-dp", action="store_false", dest="enable_attention_dp")
parser.set_defaults(enable_attention_dp=None)
parser.add_argument("--load-format", type=str, choices=["AUTO", "DUMMY"])
parser.add_argument("--max-num-tokens", type=int)
parser.add_argument("--moe-backend", type=str)
parser.add_argument("--moe-backend-for-prefill", type=str)
group = parser.add_mutually_exclusive_group()
group.add_argument("--use-cuda-graph", action="store_true", dest="use_cuda_graph")
group.add_argument("--no-use-cuda-graph", action="store_false", dest="use_cuda_graph")
parser.set_defaults(use_cuda_graph=None)
parser.add_argument("--batch-size", type=comma_separated_ints, dest="batch_size_list")
parser.add_argument("--seq-len-q", type=comma_separated_ints, dest="seq_len_q_list")
parser.add_argument("--seq-len-kv-cache", type=comma_separated_ints,
                    dest="seq_len_kv_cache_list")
parser.add_argument("--balance-method", type=str)
parser.add_argument("--balance-ratio", type=comma_separated_floats, dest="balance_ratio_list")
parser.add_argument("--warmup-times", type=int, default=20)
parser.add_argument("--run-times", type=int, default=100)
args = parser.parse_args()
with open(args.config_path) as f:
    config = yaml.safe_load(f)
del args.config_path
for k, v in vars(args).items():
    key = k[: -len("_list")] if k.endswith("_list") else k
    if v is None and key in config:
        v = config[key]
        setattr(args, k, v if isinstance(v, list) or not k.endswith("_list") else [v])
    config.pop(key, None)
if config:
    raise ValueError(f"Config {','.join(config.keys())} from file are not options")
print(args, flush=True)

AutoTuner.get().clear_cache()
runner = Runner(args.model, load_format=args.load_format, moe_backend=args.moe_backend,
                use_cuda_graph=args.use_cuda_graph)

run_pack = runner.create_run_pack(args.run_type, batch_size=max(args.batch_size_list),
                                  request_id_begin=0, seq_len_q=max(args.seq_len_q_list),
                                  seq_len_kv_cache=args.seq_len_kv_cache_list[0])
with autotune(cache_path=os.getenv("TLLM_AUTOTUNER_CACHE_PATH") or None):
    run_pack()

if args.run_type == "GEN":
    ctx_runner = Runner(args.model, load_format=args.load_format,
                        moe_backend=args.moe_backend_for_prefill, use_cuda_graph=False)
    run_pack = ctx_runner.create_run_pack("CTX", batch_size=1, request_id_begin=0,
                                          seq_len_q=max(args.seq_len_kv_cache_list),
                                          seq_len_kv_cache=0)
    run_pack(check=True)
    del ctx_runner

for batch_size, seq_len_q, seq_len_kv_cache in itertools.product(
        args.batch_size_list, args.seq_len_q_list, args.seq_len_kv_cache_list):
    run_pack = runner.create_run_pack(args.run_type, batch_size=batch_size, request_id_begin=0,
                                      seq_len_q=seq_len_q, seq_len_kv_cache=seq_len_kv_cache)
    run_pack(check=True)
BalanceMethod[args.balance_method]
for batch_size, seq_len_q, seq_len_kv_cache in itertools.product(
        args.batch_size_list, args.seq_len_q_list, args.seq_len_kv_cache_list):
    run_pack = runner.create_run_pack(args.run_type, batch_size=batch_size, request_id_begin=0,
                                      seq_len_q=seq_len_q, seq_len_kv_cache=seq_len_kv_cache)
    run_pack()  # untimed first call
    if args.use_cuda_graph:
        import torch

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run_pack()
    for i in range(args.warmup_times + args.run_times):
        if args.use_cuda_graph:
            graph.replay()
        else:
            run_pack()
    print(f"[RANK 0]  batch_size {batch_size}  seq_len_q {seq_len_q}  "
          f"seq_len_kv_cache {seq_len_kv_cache}  mean 1.0  (us)", flush=True)
''',
}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def write_upstream_tree(root: Path, announce: str = "none",
                        edits: dict[str, str] | None = None) -> Path:
    """Write the stand-in tree under `root` (announce: none | kv_lens_cuda_2d | method)."""
    for rel, text in {**FILES, **(edits or {})}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    runner = root / "tensorrt_llm/tools/layer_wise_benchmarks/runner.py"
    runner.write_text(runner.read_text().replace('ANNOUNCE = "none"', f'ANNOUNCE = "{announce}"'))
    return root


def make_upstream_repo(root: Path) -> Path:
    """A git repository: `main` (never announces MTP shapes) and `pr` (announces for DSA)."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "test")
    write_upstream_tree(root)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "main")
    git(root, "checkout", "-q", "-b", "pr")
    write_upstream_tree(root, announce="kv_lens_cuda_2d")
    git(root, "commit", "-q", "-am", "announce MTP shapes for DSA")
    git(root, "checkout", "-q", "main")
    return root


# ----------------------------------------------------------------------------- tests
def test_all_hooks_hold_in_an_upstream_layout(tmp_path: Path) -> None:
    root = write_upstream_tree(tmp_path / "trt")
    assert missing_hooks(root, TRTLLM_HOOKS) == []
    assert TrtllmTarget().hook_problems(root) == []
    assert TrtllmTarget.detect(root)
    assert not TrtllmTarget.detect(tmp_path)


def test_moved_attribute_is_named_with_where_it_went(tmp_path: Path) -> None:
    root = write_upstream_tree(tmp_path / "trt")
    dsa = root / ATT / "sparse/dsa.py"
    text = dsa.read_text()
    text = text.replace("        self.kv_lens_cuda_2d = torch.zeros(",
                        "        buffer = torch.zeros(")
    text = text.replace("        return width == next_n",
                        "        self.kv_lens_cuda_2d = None\n        return width == next_n")
    dsa.write_text(text)
    problems = missing_hooks(root, TRTLLM_HOOKS)
    assert len(problems) == 1
    assert problems[0].startswith(
        f"{ATT}/sparse/dsa.py: class DSAtrtllmAttentionMetadata no longer assigns kv_lens_cuda_2d"
        " (nor do its bases TrtllmAttentionMetadata, AttentionMetadata)")
    assert f"assigned in {ATT}/sparse/dsa.py: class Indexer" in problems[0]


def test_module_moved_to_a_package_is_found_by_its_alternative_path(tmp_path: Path) -> None:
    root = write_upstream_tree(tmp_path / "trt")
    old = root / ATT / "sparse/dsa.py"
    new = root / ATT / "sparse/dsa/metadata.py"
    new.parent.mkdir()
    new.write_text(old.read_text().replace("from ..trtllm", "from ...trtllm"))
    old.unlink()
    assert missing_hooks(root, TRTLLM_HOOKS) == []


def test_class_moved_to_an_unknown_module_is_reported_with_its_new_place(tmp_path: Path) -> None:
    root = write_upstream_tree(tmp_path / "trt")
    old = root / ATT / "sparse/dsa.py"
    moved = root / ATT / "sparse/deepseek_sparse.py"
    moved.write_text(old.read_text())
    old.unlink()
    problems = missing_hooks(root, TRTLLM_HOOKS)
    assert problems and all("missing; class DSAtrtllmAttentionMetadata is now in "
                            f"{ATT}/sparse/deepseek_sparse.py" in p for p in problems)


def test_renamed_method_parameter_and_lost_closure(tmp_path: Path) -> None:
    root = write_upstream_tree(tmp_path / "trt")
    runner = root / "tensorrt_llm/tools/layer_wise_benchmarks/runner.py"
    text = runner.read_text().replace("seq_len_kv_cache, kv_cache_manager=None",
                                      "past_kv_len, kv_cache_manager=None")
    text = text.replace("            if attn_metadata.max_total_draft_tokens:",
                        "            if False:")
    text = text.replace("            if isinstance(attn_metadata, DSAtrtllmAttentionMetadata)",
                        "            if isinstance(x, DSAtrtllmAttentionMetadata)")
    text = text.replace("Indexer().check(attn_metadata,", "Indexer().check(x,")
    runner.write_text(text)
    problems = missing_hooks(root, TRTLLM_HOOKS)
    assert any("Runner.create_run_pack() no longer takes seq_len_kv_cache" in p for p in problems)
    assert any("no longer returns a closure over attn_metadata" in p for p in problems)


def test_missing_method_and_call(tmp_path: Path) -> None:
    root = write_upstream_tree(tmp_path / "trt")
    runner = root / "tensorrt_llm/tools/layer_wise_benchmarks/runner.py"
    runner.write_text(runner.read_text().replace("def create_run_pack(", "def make_run_pack("))
    run_py = root / "examples/layer_wise_benchmarks/run.py"
    run_py.write_text(run_py.read_text().replace(".create_run_pack(", ".make_run_pack("))
    problems = missing_hooks(root, TRTLLM_HOOKS)
    assert "examples/layer_wise_benchmarks/run.py: no longer calls create_run_pack()" in problems[0]
    assert any("class Runner no longer defines create_run_pack()" in p for p in problems)


def test_syntax_error_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    root = write_upstream_tree(tmp_path / "trt")
    (root / ATT / "trtllm.py").write_text("class TrtllmAttentionMetadata(:\n")
    problems = missing_hooks(root, TRTLLM_HOOKS)
    assert any("trtllm.py: does not parse" in p for p in problems)


def test_generic_hooks_for_another_layout(tmp_path: Path) -> None:
    """The checker knows nothing of TensorRT-LLM: the reference target uses its own list."""
    (tmp_path / "tinyllm").mkdir()
    (tmp_path / "tinyllm/mod.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass

        def helper():
            pass

        @dataclass
        class Params:
            width: int = 1

        class Thing:
            @property
            def size(self):
                return 1

            def go(self, a, **kwargs):
                setattr(self, "late", 1)
    '''))
    hooks = [Hook(("tinyllm/mod.py",), function="helper"),
             Hook(("tinyllm/mod.py",), cls="Params", attribute="width"),
             Hook(("tinyllm/mod.py",), cls="Thing", attribute="size"),
             Hook(("tinyllm/mod.py",), cls="Thing", attribute="late"),
             Hook(("tinyllm/mod.py",), cls="Thing", method="go", params=("a", "anything")),
             Hook(("tinyllm/mod.py",), cls="Thing", attribute="absent", why="a fact")]
    assert missing_hooks(tmp_path, hooks) == [
        "tinyllm/mod.py: class Thing no longer assigns absent [a fact]"]


def test_class_assigns_tuple_targets_and_annotations() -> None:
    import ast

    node = ast.parse(textwrap.dedent('''
        class C:
            a: int
            def m(me):
                me.b, (me.c, d) = 1, (2, 3)
                me.e += 1
    ''')).body[0]
    assert all(class_assigns(node, n) for n in "abce")
    assert not class_assigns(node, "d")


def test_both_commits_of_a_repository(tmp_path: Path) -> None:
    """Hooks of two commits, as `abdiff doctor A..B` checks them (via worktrees)."""
    repo = make_upstream_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "pr")
    dsa = repo / ATT / "sparse/dsa.py"
    dsa.write_text(dsa.read_text().replace("max_draft_tokens: int = 0\n", "").replace(
        "self.max_draft_tokens = max_draft_len", "self.draft_width = max_draft_len").replace(
        "1 + self.max_draft_tokens", "1 + getattr(self, 'draft_width', 0)"))
    git(repo, "commit", "-q", "-am", "rename max_draft_tokens")
    checker_main = HookChecker(repo)
    assert len(checker_main.problems(TRTLLM_HOOKS)) == 1
    git(repo, "checkout", "-q", "main")
    assert HookChecker(repo).problems(TRTLLM_HOOKS) == []
