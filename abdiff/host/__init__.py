"""The machine: its state before measuring, clocks, /proc, what a benchmark could read (exposure),
doctor's checks.
"""
