"""What runs inside a benchmark's worker process: timing, facts, kernel capture, the environment
fingerprint.
"""
