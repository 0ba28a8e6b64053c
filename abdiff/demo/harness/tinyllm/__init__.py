"""tinyllm: a miniature of TensorRT-LLM's PyTorch attention backends and layer-wise benchmark.

Only what a layer-wise attention benchmark touches is here, with upstream's
names, so that a harness change behaves as it would upstream.
"""

__version__ = "0.1.0"
