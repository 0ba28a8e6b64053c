"""The TRTLLM attention backend: metadata whose draft-token count selects the kernel.

A miniature of `tensorrt_llm/_torch/attention_backend/trtllm.py`. What matters
for the benchmark: `max_total_draft_tokens` on the metadata reaches the
attention op, is part of the op cache key, and selects the generation kernel.
Upstream it becomes `mSpecDecodingTargetMaxGenLen` in attentionOp and steers
FMHA/XQA kernel selection; here, when it is set, generation runs SDPA with an
explicit draft-token mask instead of batched matmul plus softmax. Both compute
the same attention (the demo's tests check that), but they are different
operators on the CPU and different kernels on a GPU, so a benchmark that sets
the value by accident measures a different kernel than before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from .interface import AttentionMetadata, append_kv

# (queries [B, Hkv, G*n, D], keys [B, Hkv, L, D], values, n, past, groups, scale) -> output
KernelFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, int, int, float], torch.Tensor]


@dataclass(kw_only=True, eq=False)
class TrtllmAttentionMetadata(AttentionMetadata):
    """Metadata of the TRTLLM backend, with the speculative-decoding settings.

    `max_total_draft_tokens` stays None unless someone announces MTP shapes
    through `update_spec_dec_param`; None and an integer select different
    generation kernels (see `TrtllmAttention`).
    """

    is_spec_decoding_enabled: bool = False
    is_spec_dec_tree: bool = False
    is_spec_dec_dynamic_tree: bool = False
    max_total_draft_tokens: int | None = None
    spec_decoding_position_offsets: torch.Tensor | None = field(init=False, default=None)
    spec_decoding_packed_mask: torch.Tensor | None = field(init=False, default=None)

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
        """Record the announced draft shapes; allocate masks only when spec decoding is on.

        As upstream (trtllm.py), `max_total_draft_tokens` is assigned
        unconditionally, even with `is_spec_decoding_enabled=False`: only the
        buffer allocation is gated. That assignment is what changes the kernel.
        """
        self.is_spec_decoding_enabled = is_spec_decoding_enabled
        self.is_spec_dec_tree = is_spec_dec_tree
        self.is_spec_dec_dynamic_tree = is_spec_dec_dynamic_tree
        self.max_total_draft_tokens = max_total_draft_tokens
        if self.is_spec_decoding_enabled:
            width = max_total_draft_tokens + 1
            self.spec_decoding_position_offsets = torch.zeros(
                (self.max_num_requests, width), dtype=torch.int32, device=self.device
            )
            self.spec_decoding_packed_mask = torch.zeros(
                (self.max_num_requests, width, width), dtype=torch.bool, device=self.device
            )

    def prepare(self) -> None:
        """Derive the per-step counts; with spec decoding on, fill the draft-tree mask."""
        super().prepare()
        if self.is_spec_decoding_enabled and self.spec_decoding_packed_mask is not None:
            width = self.spec_decoding_packed_mask.shape[-1]
            chain = torch.ones((width, width), dtype=torch.bool, device=self.device).tril()
            self.spec_decoding_packed_mask[:] = chain
            self.spec_decoding_position_offsets[:] = torch.arange(width, device=self.device)


def draft_token_mask(n: int, past: int, groups: int, device: torch.device) -> torch.Tensor:
    """Which cached positions each folded query row may see: `[groups * n, past + n]`.

    Row `g * n + j` is draft token `j` of query-head group member `g`; it sees
    the `past` cached tokens and draft tokens `0..j` (a linear draft chain).
    """
    pos = torch.arange(past + n, device=device)
    limit = past + 1 + torch.arange(n, device=device)
    return (pos[None, :] < limit[:, None]).repeat(groups, 1)


def mmha_bmm_softmax(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    n: int,
    past: int,
    groups: int,
    scale: float,
) -> torch.Tensor:
    """Generation kernel without announced drafts: batched matmul, softmax, matmul."""
    scores = torch.matmul(q * scale, k.transpose(-1, -2))
    if n > 1:
        allowed = draft_token_mask(n, past, groups, q.device)
        scores.masked_fill_(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
    return torch.matmul(probs, v)


def fmha_spec_dec_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    n: int,
    past: int,
    groups: int,
    scale: float,
) -> torch.Tensor:
    """Generation kernel with announced drafts: fused SDPA with an explicit draft mask."""
    allowed = draft_token_mask(n, past, groups, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)


def fmha_context(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    n: int,
    past: int,
    groups: int,
    scale: float,
) -> torch.Tensor:
    """Context-phase kernel: causal SDPA over `[B, H, n, D]` (KV heads repeated)."""
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    if past == 0:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    allowed = draft_token_mask(n, past, 1, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)


@dataclass(frozen=True)
class AttentionOp:
    """One configured attention op, as cached per key by `TrtllmAttention`."""

    kernel: str
    is_generation: bool
    tokens_per_seq: int
    max_total_draft_tokens: int | None
    fn: KernelFn


class TrtllmAttention:
    """Dense attention whose generation kernel depends on `max_total_draft_tokens`.

    Inputs are token-major: q `[num_tokens, num_heads, head_dim]`, k and v
    `[num_tokens, num_kv_heads, head_dim]`, context tokens first. Heads are
    grouped (GQA): query head `h` reads KV head `h // (num_heads // num_kv_heads)`.
    """

    Metadata = TrtllmAttentionMetadata

    def __init__(
        self, layer_idx: int, num_heads: int, head_dim: int, num_kv_heads: int | None = None
    ) -> None:
        self.layer_idx = layer_idx
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.num_kv_heads = num_kv_heads or num_heads
        if num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        self.groups = num_heads // self.num_kv_heads
        self.scale = head_dim**-0.5
        # Keyed like upstream's attention op cache: the draft-token count is part of the key.
        self.op_cache: dict[tuple[bool, int, int | None], AttentionOp] = {}

    def get_op(
        self, is_generation: bool, tokens_per_seq: int, max_total_draft_tokens: int | None
    ) -> AttentionOp:
        """The op for this step's shape; created once per key, then reused."""
        key = (is_generation, tokens_per_seq, max_total_draft_tokens)
        op = self.op_cache.get(key)
        if op is None:
            if not is_generation:
                kernel, fn = "fmha_context", fmha_context
            elif max_total_draft_tokens is None:
                kernel, fn = "mmha_bmm_softmax", mmha_bmm_softmax
            else:
                kernel, fn = "fmha_spec_dec_sdpa", fmha_spec_dec_sdpa
            op = AttentionOp(kernel, is_generation, tokens_per_seq, max_total_draft_tokens, fn)
            self.op_cache[key] = op
        return op

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        metadata: TrtllmAttentionMetadata,
    ) -> torch.Tensor:
        """Append this step's K/V to the cache and attend; returns `[num_tokens, H, D]`."""
        if not metadata.prepared:
            raise RuntimeError("attention metadata used before prepare()")
        outputs = []
        nctx = metadata.num_ctx_tokens
        if metadata.num_contexts:
            outputs.append(self._phase(q[:nctx], k[:nctx], v[:nctx], metadata, "context"))
        if metadata.num_generations:
            outputs.append(self._phase(q[nctx:], k[nctx:], v[nctx:], metadata, "generation"))
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)

    def _phase(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        metadata: TrtllmAttentionMetadata,
        phase: str,
    ) -> torch.Tensor:
        is_generation = phase == "generation"
        n = metadata.tokens_per_seq(phase)
        past = metadata.past_len(phase)
        k_all, v_all = append_kv(metadata, phase, k, v)
        rows = k_all.shape[0]
        op = self.get_op(is_generation, n, metadata.max_total_draft_tokens)
        if is_generation:
            # Fold the query heads that share a KV head into the row dimension,
            # ordered (group member, draft token): [B, Hkv, G * n, D].
            qf = q.view(rows, n, self.num_kv_heads, self.groups, self.head_dim)
            qf = qf.permute(0, 2, 3, 1, 4).reshape(rows, self.num_kv_heads, -1, self.head_dim)
            out = op.fn(qf, k_all, v_all, n, past, self.groups, self.scale)
            out = out.view(rows, self.num_kv_heads, self.groups, n, self.head_dim)
            out = out.permute(0, 3, 1, 2, 4)
        else:
            qc = q.view(rows, n, self.num_heads, self.head_dim).transpose(1, 2)
            out = op.fn(qc, k_all, v_all, n, past, self.groups, self.scale).transpose(1, 2)
        return out.reshape(rows * n, self.num_heads, self.head_dim)
