"""DSA (DeepSeek sparse attention) on top of the TRTLLM backend.

A miniature of `tensorrt_llm/_torch/attention_backend/sparse/dsa.py`. An
indexer scores every cached token for every query token (the paged MQA logits
step, DeepGEMM's `fp8_paged_mqa_logits` upstream), keeps the top-k, and the
attention then runs over those tokens only.

The part the layer-wise benchmark trips over: the indexer's 2-D context-length
buffer `kv_lens_cuda_2d` is shaped `(max_num_sequences, 1 + max_draft_tokens)`
and `max_draft_tokens` is only ever set by `update_spec_dec_param()`. The
decode path derives the real draft width locally (`next_n = num_gen_tokens //
num_generations`) and slices `kv_lens_cuda_2d[:num_generations, :next_n]`; when
nobody announced the draft tokens the slice is one column wide, and DeepGEMM's
host check `batch_size == __batch_size and next_n == _next_n` aborts the
process. This module keeps that check (and the abort) on every device.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from ..interface import append_kv
from ..trtllm import TrtllmAttention, TrtllmAttentionMetadata

_REPO_ROOT = Path(__file__).resolve().parents[4]


def _dg_host_assert(condition: bool, expression: str, detail: str = "") -> None:
    """Fail like DeepGEMM's `DG_HOST_ASSERT`: one line on stderr, then SIGABRT.

    The C++ assert ends the process; an exception here would let a Python
    caller survive, which is not what a benchmark on real hardware sees. Core
    dumps are switched off first so an abort never drops a core file into the
    benchmark's checkout.
    """
    if condition:
        return
    caller = sys._getframe(1)
    try:
        where = Path(caller.f_code.co_filename).resolve().relative_to(_REPO_ROOT).as_posix()
    except ValueError:
        where = caller.f_code.co_filename
    sys.stdout.flush()
    if detail:
        print(detail, file=sys.stderr)
    print(
        f"Assertion error ({where}:{caller.f_lineno}): DG_HOST_ASSERT({expression})",
        file=sys.stderr,
        flush=True,
    )
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    os.abort()


@functools.cache
def _load_deep_gemm(device_type: str, device_index: int) -> ModuleType | None:
    """The real `deep_gemm` package where it can run (CUDA, sm90 or newer), else None.

    Optional by design: the torch implementation below computes the same
    logits everywhere else. `TINYLLM_DISABLE_DEEP_GEMM=1` forces the torch path.
    """
    if device_type != "cuda" or os.environ.get("TINYLLM_DISABLE_DEEP_GEMM") == "1":
        return None
    if torch.cuda.get_device_capability(device_index)[0] < 9:
        return None
    try:
        import deep_gemm
    except ImportError:
        return None
    return deep_gemm


def _pack_fp8_kv_cache(kv_cache: torch.Tensor) -> torch.Tensor:
    """`[blocks, tokens, dim]` -> DeepGEMM's fused layout `[blocks, tokens, 1, dim + 4]` uint8.

    Per block: `tokens * dim` FP8 E4M3 values, then `tokens` float32 scales.
    """
    num_blocks, block_kv, dim = kv_cache.shape
    amax = kv_cache.abs().float().amax(dim=-1, keepdim=True).clamp(min=1e-4)
    scale = amax / 448.0
    values = (kv_cache.float() / scale).to(torch.float8_e4m3fn)
    fused = torch.empty(
        (num_blocks, block_kv * (dim + 4)), dtype=torch.uint8, device=kv_cache.device
    )
    fused[:, : block_kv * dim] = values.view(num_blocks, block_kv * dim).view(torch.uint8)
    fused[:, block_kv * dim :] = scale.view(num_blocks, block_kv).view(torch.uint8)
    return fused.view(num_blocks, block_kv, 1, dim + 4)


def _deep_gemm_paged_mqa_logits(
    deep_gemm: ModuleType,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    schedule_meta: torch.Tensor | None,
    max_context_len: int,
) -> torch.Tensor:
    """The one place that calls DeepGEMM, the way upstream dsa.py does.

    Upstream: `get_paged_mqa_logits_metadata(context_lens, tokens_per_block,
    num_sms)` once per step (half the SMs for next_n == 4 on sm90, where the
    kernel multicasts KV over two-CTA clusters), then
    `fp8_paged_mqa_logits(q_fp8, k_cache, weights, context_lens, block_table,
    schedule_meta, max_seq_len)`. Here the cache is kept in the model dtype, so
    it is quantized into DeepGEMM's fused FP8 layout on the way in.
    """
    batch_size, next_n = q.shape[:2]
    context_lens = context_lens.to(torch.int32).contiguous()
    if schedule_meta is None:
        props = torch.cuda.get_device_properties(q.device)
        num_sms = props.multi_processor_count
        if props.major == 9 and next_n == 4:
            num_sms //= 2
        schedule_meta = deep_gemm.get_paged_mqa_logits_metadata(
            context_lens, kv_cache.shape[1], num_sms
        )
    return deep_gemm.fp8_paged_mqa_logits(
        q.to(torch.float8_e4m3fn),
        _pack_fp8_kv_cache(kv_cache),
        weights.float().contiguous(),
        context_lens,
        block_table.to(torch.int32).contiguous(),
        schedule_meta,
        max_context_len,
    )


def _torch_paged_mqa_logits(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    block_table: torch.Tensor,
    max_context_len: int,
) -> torch.Tensor:
    """Paged MQA logits in torch: `sum_h relu(q[t, h] . k[s]) * weights[t, h]`.

    q `[batch, next_n, heads, dim]`, the paged pool `[blocks, tokens, dim]`,
    block_table `[batch, blocks_per_seq]`; returns float32 `[batch * next_n,
    max_context_len]`. Positions past a token's context length are left for
    the caller to mask, as with DeepGEMM's `clean_logits=False`.
    """
    batch_size, next_n, num_heads, dim = q.shape
    keys = kv_cache.index_select(0, block_table.reshape(-1).long())  # page gather
    keys = keys.view(batch_size, -1, dim)[:, :max_context_len]
    scores = torch.matmul(q.reshape(batch_size, next_n * num_heads, dim), keys.transpose(1, 2))
    scores = scores.float().relu_().view(batch_size, next_n, num_heads, -1)
    scores = scores * weights.float().view(batch_size, next_n, num_heads, 1)
    return scores.sum(dim=2).view(batch_size * next_n, -1)


def fp8_paged_mqa_logits(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    schedule_meta: torch.Tensor | None,
    max_context_len: int,
) -> torch.Tensor:
    """DeepGEMM's paged MQA logits entry point: host checks first, then a kernel.

    The checks are those of DeepGEMM's `csrc/apis/attention.hpp` that the
    benchmark can reach; they run before either implementation, so a shape
    mismatch aborts the same way with or without the real DeepGEMM.
    """
    batch_size, next_n, _num_heads, _head_dim = q.shape
    _dg_host_assert(context_lens.dim() == 2, "context_lens.dim() == 2")
    __batch_size, _next_n = context_lens.shape
    _dg_host_assert(
        batch_size == __batch_size and next_n == _next_n,
        "batch_size == __batch_size and next_n == _next_n",
        detail=(
            f"fp8_paged_mqa_logits: q has batch_size={batch_size} next_n={next_n}, "
            f"context_lens has __batch_size={__batch_size} _next_n={_next_n}"
        ),
    )
    device = q.device
    deep_gemm = _load_deep_gemm(device.type, device.index or 0)
    if deep_gemm is not None:
        return _deep_gemm_paged_mqa_logits(
            deep_gemm,
            q,
            kv_cache,
            weights,
            context_lens,
            block_table,
            schedule_meta,
            max_context_len,
        )
    return _torch_paged_mqa_logits(q, kv_cache, weights, block_table, max_context_len)


@dataclass(kw_only=True, eq=False)
class DSAtrtllmAttentionMetadata(TrtllmAttentionMetadata):
    """TRTLLM metadata plus the indexer's buffers, sized by `max_draft_tokens`.

    `max_draft_tokens` is not a construction parameter (as upstream, where
    it is not a field of DSAMetadataParams): it starts at 0 and only
    `update_spec_dec_param()` changes it, rebuilding the buffers.
    """

    index_topk: int = 256
    max_draft_tokens: int = 0
    kv_lens_cuda_2d: torch.Tensor = field(init=False, repr=False)
    kv_lens_expanded_cuda: torch.Tensor = field(init=False, repr=False)
    indexer_k_cache_block_offsets: torch.Tensor = field(init=False, repr=False)
    topk_indices_buffer: torch.Tensor = field(init=False, repr=False)
    scheduler_metadata_buffer: torch.Tensor | None = field(init=False, default=None)
    slot_mapping: torch.Tensor | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.create_buffers_for_indexer()

    def create_buffers_for_indexer(self) -> None:
        """(Re)allocate the indexer buffers at width `1 + max_draft_tokens`."""
        width = 1 + self.max_draft_tokens
        device = self.device
        blocks = self.kv_cache_manager.max_blocks_per_seq
        self.kv_lens_cuda_2d = torch.zeros(
            (self.max_num_sequences, width), dtype=torch.int32, device=device
        )
        self.kv_lens_expanded_cuda = torch.zeros(
            (self.max_num_sequences * width,), dtype=torch.int32, device=device
        )
        self.indexer_k_cache_block_offsets = torch.zeros(
            (self.max_num_sequences, blocks), dtype=torch.int32, device=device
        )
        rows = max(self.max_num_tokens, self.max_num_sequences * width)
        self.topk_indices_buffer = torch.full(
            (rows, self.index_topk), -1, dtype=torch.int32, device=device
        )
        self.scheduler_metadata_buffer = None

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
        """TRTLLM's bookkeeping first, then rebuild the indexer buffers at the new width.

        The rebuild is not gated on `is_spec_decoding_enabled`: announcing
        shapes with spec decoding off still sizes the buffers.
        """
        super().update_spec_dec_param(
            batch_size,
            is_spec_decoding_enabled,
            is_spec_dec_tree,
            is_spec_dec_dynamic_tree,
            max_draft_len,
            max_total_draft_tokens,
            model_is_wrapped=model_is_wrapped,
            spec_metadata=spec_metadata,
            spec_tree_manager=spec_tree_manager,
            spec_decoding_tensor=spec_decoding_tensor,
        )
        self.max_draft_tokens = max_draft_len
        self.create_buffers_for_indexer()

    def prepare(self) -> None:
        super().prepare()
        Indexer.prepare(self)


class Indexer:
    """Scores cached tokens per query token and keeps the top-k positions."""

    def __init__(self, n_heads: int, head_dim: int, index_topk: int, layer_idx: int = 0):
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.index_topk = index_topk
        self.layer_idx = layer_idx

    @staticmethod
    def prepare(metadata: DSAtrtllmAttentionMetadata) -> None:
        """Fill block offsets, 2-D context lengths and slot mappings for this step.

        `kv_lens_cuda_2d[i, j]` is the context length draft token `j` of
        generation request `i` sees. Only as many columns as the buffer has are
        filled: a one-column buffer stays one column wide whatever `next_n` is.
        """
        mgr = metadata.kv_cache_manager
        num_seqs = metadata.num_seqs
        assert mgr.block_offsets is not None, "DSA needs a KV cache manager with an indexer cache"
        metadata.indexer_k_cache_block_offsets[:num_seqs] = mgr.block_offsets[:num_seqs]

        kv_lens = metadata.kv_lens_cuda_runtime
        assert kv_lens is not None
        if metadata.num_generations:
            next_n = metadata.tokens_per_seq("generation")
            width = metadata.kv_lens_cuda_2d.shape[1]
            cols = min(width, next_n)
            gen_kv_lens = kv_lens[metadata.num_contexts : num_seqs].to(torch.int32)
            offsets = torch.arange(cols, dtype=torch.int32, device=metadata.device)
            lens_2d = gen_kv_lens[:, None] - next_n + 1 + offsets[None, :]
            metadata.kv_lens_cuda_2d[: metadata.num_generations, :cols] = lens_2d
            metadata.kv_lens_expanded_cuda[: lens_2d.numel()] = lens_2d.reshape(-1)

        # Slot of every new token in the paged indexer pool.
        tpb = mgr.tokens_per_block
        slots = []
        for row in range(num_seqs):
            past = metadata.num_cached_tokens_per_seq[row]
            pos = torch.arange(past, past + int(metadata.seq_lens[row]), device=metadata.device)
            block = mgr.block_offsets[row, pos // tpb].to(torch.int64)
            slots.append(block * tpb + pos % tpb)
        metadata.slot_mapping = torch.cat(slots)

    def update_k_cache(self, k: torch.Tensor, metadata: DSAtrtllmAttentionMetadata) -> None:
        """Scatter this step's indexer keys `[num_tokens, head_dim]` into the paged pool."""
        pool = metadata.kv_cache_manager.get_indexer_k_cache_buffers()
        assert metadata.slot_mapping is not None
        pool.view(-1, self.head_dim).index_copy_(0, metadata.slot_mapping, k)

    def sparse_attn_indexer(
        self, metadata: DSAtrtllmAttentionMetadata, q: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """Top-k cached positions per token, `[num_tokens, index_topk]`, -1 where none.

        Positions are local to each request's sequence. Context tokens score
        their own request's gathered keys; generation tokens go through the
        paged MQA logits step with the 2-D context lengths.
        """
        num_contexts = metadata.num_contexts
        num_generations = metadata.num_generations
        num_ctx_tokens = metadata.num_ctx_tokens
        num_tokens = metadata.num_tokens
        num_gen_tokens = num_tokens - num_ctx_tokens
        k_cache = metadata.kv_cache_manager.get_indexer_k_cache_buffers()
        block_offsets = metadata.indexer_k_cache_block_offsets
        max_seq_len = metadata.kv_cache_manager.max_seq_len
        topk_indices_buffer = metadata.topk_indices_buffer[:num_tokens]
        topk_indices_buffer.fill_(-1)

        if num_contexts:
            n = metadata.tokens_per_seq("context")
            q_ctx = q[:num_ctx_tokens].view(num_contexts, n, self.n_heads, self.head_dim)
            logits = _torch_paged_mqa_logits(
                q_ctx,
                k_cache,
                weights[:num_ctx_tokens],
                block_offsets[:num_contexts],
                max_seq_len,
            )
            self._topk(logits, metadata, 0, num_contexts, n, topk_indices_buffer[:num_ctx_tokens])

        if num_generations:
            q_decode = q[num_ctx_tokens:num_tokens].view(
                num_generations, -1, self.n_heads, self.head_dim
            )
            next_n = num_gen_tokens // num_generations
            context_lens = metadata.kv_lens_cuda_2d[:num_generations, :next_n]
            block_table = block_offsets[num_contexts : num_contexts + num_generations]
            assert num_gen_tokens == num_generations * next_n
            logits_decode = fp8_paged_mqa_logits(
                q_decode,
                k_cache,
                weights[num_ctx_tokens:num_tokens],
                context_lens,
                block_table,
                metadata.scheduler_metadata_buffer,
                max_seq_len,
            )
            self._topk(
                logits_decode,
                metadata,
                num_contexts,
                num_contexts + num_generations,
                next_n,
                topk_indices_buffer[num_ctx_tokens:],
            )
        return topk_indices_buffer

    def _topk(
        self,
        logits: torch.Tensor,
        metadata: DSAtrtllmAttentionMetadata,
        lo: int,
        hi: int,
        n: int,
        out: torch.Tensor,
    ) -> None:
        """Mask positions a token may not see, keep the top-k, mark the rest -1."""
        rows = (hi - lo) * n
        device = logits.device
        assert metadata.kv_lens_cuda_runtime is not None
        request = lo + torch.arange(rows, device=device) // n
        offset = torch.arange(rows, device=device) % n
        index_end_pos = (metadata.kv_lens_cuda_runtime[request] - n + offset).unsqueeze(1)
        positions = torch.arange(logits.shape[-1], device=device).unsqueeze(0)
        logits = logits.masked_fill(positions > index_end_pos, float("-inf"))
        k = min(self.index_topk, logits.shape[-1])
        values, indices = logits.topk(k, dim=-1)
        indices = indices.masked_fill(values == float("-inf"), -1)
        out[:, :k] = indices.to(torch.int32)


def sparse_attention(
    q: torch.Tensor,
    k_all: torch.Tensor,
    v_all: torch.Tensor,
    topk: torch.Tensor,
    groups: int,
    scale: float,
) -> torch.Tensor:
    """Attention over the selected positions only.

    q `[rows, n, kv_heads, groups, dim]`, k_all and v_all `[rows, kv_heads,
    length, dim]`, topk `[rows, n, k]` local positions (-1: none). Returns
    `[rows, n, kv_heads, groups, dim]`.
    """
    rows, kv_heads, length, dim = k_all.shape
    n, k = topk.shape[1:]
    valid = topk >= 0
    # Flat token index into the phase's history, gathered token-major:
    # [rows * length, kv_heads, dim] is a view when kv_heads == 1 (MLA-like).
    base = torch.arange(rows, device=q.device).view(rows, 1, 1) * length
    flat = (topk.clamp(min=0).long() + base).view(-1)
    k_sel = k_all.transpose(1, 2).reshape(rows * length, kv_heads, dim).index_select(0, flat)
    v_sel = v_all.transpose(1, 2).reshape(rows * length, kv_heads, dim).index_select(0, flat)
    k_sel = k_sel.view(rows, n, k, kv_heads, dim).permute(0, 1, 3, 4, 2)  # [.., h, dim, k]
    v_sel = v_sel.view(rows, n, k, kv_heads, dim).permute(0, 1, 3, 2, 4)  # [.., h, k, dim]
    scores = torch.matmul(q, k_sel) * scale  # [rows, n, kv_heads, groups, k]
    scores = scores.masked_fill(~valid[:, :, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v_sel.dtype)
    return torch.matmul(probs, v_sel)


class DSATrtllmAttention(TrtllmAttention):
    """TRTLLM attention whose tokens attend only to the indexer's top-k positions."""

    Metadata = DSAtrtllmAttentionMetadata

    def __init__(
        self,
        layer_idx: int,
        num_heads: int,
        head_dim: int,
        num_kv_heads: int | None = None,
        *,
        index_n_heads: int,
        index_head_dim: int,
        index_topk: int,
    ) -> None:
        super().__init__(layer_idx, num_heads, head_dim, num_kv_heads)
        self.indexer = Indexer(index_n_heads, index_head_dim, index_topk, layer_idx)

    def forward(  # type: ignore[override]
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        metadata: DSAtrtllmAttentionMetadata,
        *,
        indexer_q: torch.Tensor,
        indexer_k: torch.Tensor,
        indexer_weights: torch.Tensor,
    ) -> torch.Tensor:
        """Indexer (cache update, logits, top-k), then sparse attention per phase."""
        if not metadata.prepared:
            raise RuntimeError("attention metadata used before prepare()")
        self.indexer.update_k_cache(indexer_k, metadata)
        topk = self.indexer.sparse_attn_indexer(metadata, indexer_q, indexer_weights)
        outputs = []
        nctx = metadata.num_ctx_tokens
        spans = []
        if metadata.num_contexts:
            spans.append(("context", 0, nctx))
        if metadata.num_generations:
            spans.append(("generation", nctx, metadata.num_tokens))
        for phase, lo, hi in spans:
            n = metadata.tokens_per_seq(phase)
            k_all, v_all = append_kv(metadata, phase, k[lo:hi], v[lo:hi])
            rows = k_all.shape[0]
            qp = q[lo:hi].view(rows, n, self.num_kv_heads, self.groups, self.head_dim)
            out = sparse_attention(
                qp, k_all, v_all, topk[lo:hi].view(rows, n, -1), self.groups, self.scale
            )
            outputs.append(out.reshape(rows * n, self.num_heads, self.head_dim))
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)
