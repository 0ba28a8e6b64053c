"""Sparse attention backends (upstream: tensorrt_llm/_torch/attention_backend/sparse)."""

from .dsa import DSATrtllmAttention, DSAtrtllmAttentionMetadata, Indexer

__all__ = ["DSATrtllmAttention", "DSAtrtllmAttentionMetadata", "Indexer"]
