"""abdiff: differential A/B regression testing for layer-wise GPU benchmarks."""

__version__ = "0.1.0"
