"""Tools built on tinyllm (upstream: tensorrt_llm/tools)."""
