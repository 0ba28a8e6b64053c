"""Builds one attention step ("run pack") for a layer-wise benchmark.

A miniature of `tensorrt_llm/tools/layer_wise_benchmarks/runner.py`:
`create_run_pack()` builds the attention metadata the way the executor would
for a batch of `batch_size` requests, each submitting `seq_len_q` new tokens
on top of `seq_len_kv_cache` cached ones, prepares it, and returns a closure
that runs one attention step. In generation (GEN), `seq_len_q > 1` means MTP:
one token plus `seq_len_q - 1` draft tokens per request.

Tensor parallelism (`tp_size` > 1, one Runner per rank): each rank holds
`num_heads / tp_size` query heads (KV heads are split too when they divide,
else replicated, as MLA's shared latent is), computes attention for its heads,
projects them with its rows of the output projection and all-reduces the sum
over the ranks' process group (torch.distributed, initialised by the caller).
Inputs are made for all heads and sliced, so the ranks' sum equals the
single-rank projection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tinyllm._torch.attention_backend import (
    DSATrtllmAttention,
    KVCacheManager,
    TrtllmAttention,
    get_attention_backend,
)

# Shapes per device. On the CPU: a few query heads over one KV head (MQA, as
# MLA's shared latent is), so one step takes milliseconds. On CUDA the indexer
# matches DeepGEMM's paged MQA logits constraints (64 heads of dim 128).
DEFAULT_SHAPES: dict[str, dict[str, int]] = {
    "cpu": {
        "num_heads": 8,
        "num_kv_heads": 1,
        "head_dim": 64,
        "index_n_heads": 4,
        "index_head_dim": 64,
        "index_topk": 128,
    },
    "cuda": {
        "num_heads": 16,
        "num_kv_heads": 2,
        "head_dim": 128,
        "index_n_heads": 64,
        "index_head_dim": 128,
        "index_topk": 512,
    },
}


class Runner:
    """One attention layer of one backend, and the packs that run it.

    The layer (and with it the attention op cache) lives as long as the
    runner, as a model's layer does; each pack gets its own metadata and KV
    cache sized to its shape.
    """

    def __init__(
        self,
        backend: str,
        *,
        device: str = "cpu",
        dtype: torch.dtype | None = None,
        tokens_per_block: int = 64,
        seed: int = 0,
        tp_size: int = 1,
        tp_rank: int = 0,
        **shape_overrides: int,
    ) -> None:
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.device.type not in DEFAULT_SHAPES:
            raise ValueError(f"unsupported device {device!r} (cpu or cuda)")
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        self.backend = backend.upper()
        self.tokens_per_block = tokens_per_block
        self.seed = seed
        unknown = set(shape_overrides) - set(DEFAULT_SHAPES["cpu"])
        if unknown:
            raise TypeError(f"unknown shape arguments: {', '.join(sorted(unknown))}")
        self.shapes = {**DEFAULT_SHAPES[self.device.type], **shape_overrides}
        if not 0 <= tp_rank < tp_size or self.shapes["num_heads"] % tp_size:
            heads = self.shapes["num_heads"]
            raise ValueError(f"tp_rank {tp_rank} of tp_size {tp_size}: the {heads} heads must "
                             "split evenly over the ranks")
        self.tp_size, self.tp_rank = tp_size, tp_rank
        self.full_heads = self.shapes["num_heads"]
        self.local_shapes = dict(self.shapes)
        self.local_shapes["num_heads"] = self.full_heads // tp_size
        if self.shapes["num_kv_heads"] % tp_size == 0:
            self.local_shapes["num_kv_heads"] = self.shapes["num_kv_heads"] // tp_size

        attention_cls = get_attention_backend(self.backend)
        s = self.local_shapes
        self.attention: TrtllmAttention
        self.metadata_kwargs: dict[str, Any] = {}
        if issubclass(attention_cls, DSATrtllmAttention):
            self.attention = attention_cls(
                0,
                s["num_heads"],
                s["head_dim"],
                s["num_kv_heads"],
                index_n_heads=s["index_n_heads"],
                index_head_dim=s["index_head_dim"],
                index_topk=s["index_topk"],
            )
            self.metadata_kwargs["index_topk"] = s["index_topk"]
        else:
            self.attention = attention_cls(0, s["num_heads"], s["head_dim"], s["num_kv_heads"])

    @property
    def is_sparse(self) -> bool:
        return isinstance(self.attention, DSATrtllmAttention)

    def create_run_pack(
        self,
        run_type: str,
        *,
        batch_size: int,
        seq_len_q: int,
        seq_len_kv_cache: int,
    ) -> Callable[[], torch.Tensor]:
        """Metadata, KV cache and inputs for one step; the returned callable runs it once."""
        if run_type not in ("CTX", "GEN"):
            raise ValueError(f"run_type must be CTX or GEN, not {run_type!r}")
        if batch_size < 1 or seq_len_q < 1 or seq_len_kv_cache < 0:
            raise ValueError("batch_size and seq_len_q must be >= 1, seq_len_kv_cache >= 0")
        s = self.local_shapes
        kv_cache_manager = KVCacheManager(
            max_batch_size=batch_size,
            max_seq_len=seq_len_kv_cache + seq_len_q,
            num_kv_heads=s["num_kv_heads"],
            head_dim=s["head_dim"],
            dtype=self.dtype,
            device=self.device,
            tokens_per_block=self.tokens_per_block,
            index_head_dim=s["index_head_dim"] if self.is_sparse else None,
            seed=self.seed,
        )
        attn_metadata = self.attention.Metadata(
            seq_lens=torch.tensor([seq_len_q] * batch_size, dtype=torch.int),
            request_ids=list(range(batch_size)),
            max_num_requests=batch_size,
            max_num_tokens=batch_size * seq_len_q,
            num_contexts={"CTX": batch_size, "GEN": 0}[run_type],
            kv_cache_manager=kv_cache_manager,
            num_cached_tokens_per_seq=[seq_len_kv_cache] * batch_size,
            **self.metadata_kwargs,
        )
        # @abdiff-demo: announcement (abdiff's demo builder replaces this line per branch)
        attn_metadata.prepare()

        inputs = self._make_inputs(batch_size * seq_len_q)
        attention = self.attention
        if self.tp_size == 1:

            def run_pack() -> torch.Tensor:
                with torch.no_grad():
                    return attention.forward(metadata=attn_metadata, **inputs)

            return run_pack

        import torch.distributed as dist

        o_proj = self._o_proj_rows()

        def tp_run_pack() -> torch.Tensor:
            with torch.no_grad():
                out = attention.forward(metadata=attn_metadata, **inputs)
                hidden = out.flatten(1) @ o_proj
                dist.all_reduce(hidden)
                return hidden

        return tp_run_pack

    def _heads(self, count: int) -> slice:
        """This rank's share of `count` heads (all of them when they do not split)."""
        if count % self.tp_size:
            return slice(0, count)
        per_rank = count // self.tp_size
        return slice(self.tp_rank * per_rank, (self.tp_rank + 1) * per_rank)

    def _o_proj_rows(self) -> torch.Tensor:
        """This rank's rows of a seeded output projection `[heads * dim, heads * dim]`."""
        s = self.shapes
        width = self.full_heads * s["head_dim"]
        gen = torch.Generator().manual_seed(self.seed + 2)
        weight = torch.randn(width, width, generator=gen) * width**-0.5
        rows = self._heads(self.full_heads)
        weight = weight.view(self.full_heads, s["head_dim"], width)[rows].reshape(-1, width)
        return weight.to(device=self.device, dtype=self.dtype)

    def _make_inputs(self, num_tokens: int) -> dict[str, torch.Tensor]:
        """Seeded random activations for one step, identical on every checkout."""
        s = self.shapes
        gen = torch.Generator().manual_seed(self.seed + 1)

        def randn(*shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
            t = torch.randn(shape, generator=gen)
            return t.to(device=self.device, dtype=dtype or self.dtype)

        q_heads, kv_heads = self._heads(s["num_heads"]), self._heads(s["num_kv_heads"])
        inputs = {
            "q": randn(num_tokens, s["num_heads"], s["head_dim"])[:, q_heads].contiguous(),
            "k": randn(num_tokens, s["num_kv_heads"], s["head_dim"])[:, kv_heads].contiguous(),
            "v": randn(num_tokens, s["num_kv_heads"], s["head_dim"])[:, kv_heads].contiguous(),
        }
        if self.is_sparse:
            heads, dim = s["index_n_heads"], s["index_head_dim"]
            inputs["indexer_q"] = randn(num_tokens, heads, dim)
            inputs["indexer_k"] = randn(num_tokens, dim)
            weight_scale = (heads * dim) ** -0.5
            inputs["indexer_weights"] = randn(num_tokens, heads, dtype=torch.float32) * weight_scale
        return inputs
