"""The `command` target: any benchmark executable that writes Google Benchmark or nvbench
JSON (target.py: the suite's options and configs; formats.py: the two formats; worker.py:
one round, one benchmark process)."""
