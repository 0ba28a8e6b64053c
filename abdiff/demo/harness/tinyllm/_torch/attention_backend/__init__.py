"""Attention backends and their metadata (upstream: tensorrt_llm/_torch/attention_backend)."""

from .interface import AttentionMetadata, KVCacheManager
from .sparse import DSATrtllmAttention, DSAtrtllmAttentionMetadata
from .trtllm import TrtllmAttention, TrtllmAttentionMetadata

_BACKENDS: dict[str, type[TrtllmAttention]] = {
    "TRTLLM": TrtllmAttention,
    "DSA": DSATrtllmAttention,
}


def get_attention_backend(backend: str) -> type[TrtllmAttention]:
    """The attention class for a backend name (`TRTLLM` or `DSA`)."""
    try:
        return _BACKENDS[backend.upper()]
    except KeyError:
        known = ", ".join(sorted(_BACKENDS))
        raise ValueError(f"unknown attention backend {backend!r} (known: {known})") from None


__all__ = [
    "AttentionMetadata",
    "DSATrtllmAttention",
    "DSAtrtllmAttentionMetadata",
    "KVCacheManager",
    "TrtllmAttention",
    "TrtllmAttentionMetadata",
    "get_attention_backend",
]
