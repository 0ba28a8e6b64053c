"""Report formats: each module has `render(result: Result) -> str`.

One interface so the CLI picks a format by name and every format renders the
same `Result`; what the formats share (ordering, summary sentence, cell texts)
lives in `common.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType, ModuleType

from abdiff.errors import InputError
from abdiff.reports import csv, html, json, markdown, table
from abdiff.store.records import Result

FORMATS: Mapping[str, ModuleType] = MappingProxyType({
    "table": table,
    "markdown": markdown,
    "json": json,
    "html": html,
    "csv": csv,
})


def render(result: Result, fmt: str) -> str:
    """Render `result` in the named format; an unknown name is a usage error."""
    try:
        module = FORMATS[fmt]
    except KeyError:
        choices = ", ".join(FORMATS)
        raise InputError(f"unknown report format '{fmt}' (choose from {choices})") from None
    return module.render(result)
