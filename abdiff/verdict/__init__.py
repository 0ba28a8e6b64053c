"""From run files to verdicts: the per-config comparison, the latency statistics, the scope policy,
kernel attribution, bisect's classification.
"""
