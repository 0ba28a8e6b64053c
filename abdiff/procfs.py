"""The process tree as /proc shows it (Linux): who is whose child, and what runs below."""

from __future__ import annotations

from pathlib import Path


def children() -> dict[int, list[int]]:
    """Each process's children."""
    table: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            table.setdefault(parent, []).append(int(entry.name))
    return table


def below(roots: list[int], table: dict[int, list[int]]) -> list[int]:
    """`roots` and every process below them in `table` (from `children`)."""
    found, todo = list(roots), list(roots)
    while todo:
        under = [pid for pid in table.get(todo.pop(), []) if pid not in found]
        found += under
        todo += under
    return found
