"""The reference target: the embedded layer-wise harness of `abdiff demo`."""
