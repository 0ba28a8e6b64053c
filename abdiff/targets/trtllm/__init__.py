"""The TensorRT-LLM target: upstream's layer-wise run.py, probed from inside its ranks."""
