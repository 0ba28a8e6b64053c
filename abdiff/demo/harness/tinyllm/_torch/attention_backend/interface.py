"""Backend-independent attention metadata and the KV cache the benchmark attends over.

A miniature of `tensorrt_llm/_torch/attention_backend/interface.py`: the
metadata describes one forward step (which requests are in context phase,
which in generation, how many tokens each submits and how much KV cache each
already holds). `prepare()` turns that description into the derived values and
device buffers the attention kernels read. `update_spec_dec_param()` is the
hook through which the executor announces speculative-decoding (MTP) shapes; it
is a no-op here and overridden by the backends that care.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


class KVCacheManager:
    """Per-request KV cache plus, for sparse (DSA) attention, a paged indexer K cache.

    The main cache is laid out `[batch, num_kv_heads, max_seq_len, head_dim]` so
    the dense kernels read a request's history without a gather. The indexer
    cache is paged like TensorRT-LLM's: blocks of `tokens_per_block` tokens
    scattered over a pool and addressed through a block table, so the indexer's
    logits step really is a paged gather. Past tokens are filled with seeded
    random values, so every checkout computes on identical data.
    """

    def __init__(
        self,
        *,
        max_batch_size: int,
        max_seq_len: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        tokens_per_block: int = 64,
        index_head_dim: int | None = None,
        seed: int = 0,
    ) -> None:
        self.max_batch_size = max_batch_size
        self.max_seq_len = max_seq_len
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.tokens_per_block = tokens_per_block
        self.dtype = dtype
        self.device = device
        self.max_blocks_per_seq = -(-max_seq_len // tokens_per_block)

        # Filled where it lives: a seeded generator on the GPU takes milliseconds where
        # the CPU's took most of a config's set-up, and gives every checkout the same data.
        gen = torch.Generator(device=device).manual_seed(seed)
        shape = (max_batch_size, num_kv_heads, max_seq_len, head_dim)
        self.k_cache = torch.randn(shape, generator=gen, device=device).to(dtype)
        self.v_cache = torch.randn(shape, generator=gen, device=device).to(dtype)

        self.index_head_dim = index_head_dim
        self.indexer_k_cache: torch.Tensor | None = None
        self.block_offsets: torch.Tensor | None = None
        if index_head_dim is not None:
            num_blocks = max_batch_size * self.max_blocks_per_seq
            # A fixed permutation: requests' blocks are not contiguous in the pool.
            perm = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32)
            self.block_offsets = perm.view(max_batch_size, self.max_blocks_per_seq)
            pool = torch.randn((num_blocks, tokens_per_block, index_head_dim), generator=gen,
                               device=device)
            self.indexer_k_cache = pool.to(dtype)

    def get_indexer_k_cache_buffers(self) -> torch.Tensor:
        """The paged indexer K pool, `[num_blocks, tokens_per_block, index_head_dim]`."""
        if self.indexer_k_cache is None:
            raise RuntimeError("this KV cache manager was created without an indexer cache")
        return self.indexer_k_cache


@dataclass(kw_only=True, eq=False)
class AttentionMetadata:
    """What one forward step looks like, as the attention backends see it.

    Requests `[0, num_contexts)` are in context phase, the rest in generation
    phase (the order TensorRT-LLM uses). Fields set by `prepare()` are derived
    and must not be set by callers.
    """

    seq_lens: torch.Tensor  # new tokens per request, int32 on the host
    request_ids: list[int]
    max_num_requests: int
    max_num_tokens: int
    num_contexts: int
    kv_cache_manager: KVCacheManager
    num_cached_tokens_per_seq: list[int] = field(default_factory=list)
    max_num_sequences: int = 0

    # Derived by prepare().
    num_seqs: int = field(init=False, default=0)
    num_generations: int = field(init=False, default=0)
    num_ctx_tokens: int = field(init=False, default=0)
    num_tokens: int = field(init=False, default=0)
    kv_lens_cuda: torch.Tensor | None = field(init=False, default=None)
    kv_lens_cuda_runtime: torch.Tensor | None = field(init=False, default=None)
    prepared: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.max_num_sequences == 0:
            self.max_num_sequences = self.max_num_requests
        if not self.num_cached_tokens_per_seq:
            self.num_cached_tokens_per_seq = [0] * len(self.request_ids)

    @property
    def device(self) -> torch.device:
        return self.kv_cache_manager.device

    def update_spec_dec_param(
        self,
        batch_size: int,
        is_spec_decoding_enabled: bool,
        is_spec_dec_tree: bool,
        is_spec_dec_dynamic_tree: bool,
        max_draft_len: int,
        max_total_draft_tokens: int,
        model_is_wrapped: bool = False,
        spec_metadata: Any = None,
        spec_tree_manager: Any = None,
        spec_decoding_tensor: Any = None,
    ) -> None:
        """Hook: the executor announces speculative-decoding shapes through this call.

        It lives on the base class so the executor can call it on any backend
        without knowing which one it holds; the base ignores it. Backends whose
        kernels or buffers depend on the number of draft tokens override it.
        """

    def prepare(self) -> None:
        """Derive per-step counts and the KV-length buffers the kernels read."""
        seq_lens = self.seq_lens.to(torch.int64)
        self.num_seqs = int(seq_lens.numel())
        if self.num_seqs != len(self.request_ids):
            raise ValueError("seq_lens and request_ids disagree on the number of requests")
        if self.num_seqs > self.max_num_requests:
            raise ValueError(f"{self.num_seqs} requests exceed max_num_requests")
        self.num_generations = self.num_seqs - self.num_contexts
        self.num_ctx_tokens = int(seq_lens[: self.num_contexts].sum())
        self.num_tokens = int(seq_lens.sum())
        if self.num_tokens > self.max_num_tokens:
            raise ValueError(f"{self.num_tokens} tokens exceed max_num_tokens")
        for phase, lens in (
            ("context", seq_lens[: self.num_contexts]),
            ("generation", seq_lens[self.num_contexts :]),
        ):
            # The kernels here, like upstream's decode path, need one length per phase.
            if lens.numel() and int(lens.max()) != int(lens.min()):
                raise ValueError(f"{phase} requests must submit equal token counts (no padding)")
        cached = torch.tensor(self.num_cached_tokens_per_seq, dtype=torch.int64)
        kv_lens = cached + seq_lens
        if int(kv_lens.max()) > self.kv_cache_manager.max_seq_len:
            raise ValueError("KV length exceeds the KV cache manager's max_seq_len")
        self.kv_lens_cuda = kv_lens.to(device=self.device, dtype=torch.int32)
        self.kv_lens_cuda_runtime = self.kv_lens_cuda
        self.prepared = True

    def tokens_per_seq(self, phase: str) -> int:
        """New tokens each request of `phase` ("context"/"generation") submits this step."""
        if phase == "context":
            return self.num_ctx_tokens // self.num_contexts if self.num_contexts else 0
        num_gen_tokens = self.num_tokens - self.num_ctx_tokens
        return num_gen_tokens // self.num_generations if self.num_generations else 0

    def past_len(self, phase: str) -> int:
        """Cached tokens each request of `phase` already holds (uniform per phase)."""
        lo, hi = (
            (0, self.num_contexts) if phase == "context" else (self.num_contexts, self.num_seqs)
        )
        past = self.num_cached_tokens_per_seq[lo:hi]
        if past and max(past) != min(past):
            raise ValueError(f"{phase} requests must hold equal cached lengths")
        return past[0] if past else 0


def append_kv(
    metadata: AttentionMetadata, phase: str, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write this step's K/V (`[tokens, kv_heads, dim]`) into the cache; return the phase's views.

    The returned views are `[requests, kv_heads, past + new, dim]`, the history
    every new token of the phase may attend to (causality is the kernel's job).
    """
    lo, hi = (
        (0, metadata.num_contexts)
        if phase == "context"
        else (metadata.num_contexts, metadata.num_seqs)
    )
    n = metadata.tokens_per_seq(phase)
    past = metadata.past_len(phase)
    mgr = metadata.kv_cache_manager
    rows = hi - lo
    k_new = k.view(rows, n, mgr.num_kv_heads, mgr.head_dim).transpose(1, 2)
    v_new = v.view(rows, n, mgr.num_kv_heads, mgr.head_dim).transpose(1, 2)
    mgr.k_cache[lo:hi, :, past : past + n].copy_(k_new)
    mgr.v_cache[lo:hi, :, past : past + n].copy_(v_new)
    return mgr.k_cache[lo:hi, :, : past + n], mgr.v_cache[lo:hi, :, : past + n]
