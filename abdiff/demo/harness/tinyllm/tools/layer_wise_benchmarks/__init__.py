"""Layer-wise benchmarks: build one attention step and run it repeatedly."""

from .runner import Runner

__all__ = ["Runner"]
