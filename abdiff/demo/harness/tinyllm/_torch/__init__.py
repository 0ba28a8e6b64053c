"""PyTorch-flow modules (upstream: tensorrt_llm/_torch)."""
