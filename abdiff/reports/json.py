"""JSON report: the `abdiff.result/2` document, exactly what `--json FILE` writes.

Serialization lives in records.py (one place produces and parses JSON), so
this format is only the adapter to the `render(result) -> str` interface.
"""

from __future__ import annotations

from abdiff.store.records import Result, dump_json


def render(result: Result) -> str:
    """`result` as `abdiff.result/2` JSON (NaN and infinity become null)."""
    return dump_json(result.to_json())
