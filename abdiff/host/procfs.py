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


def namespace_pid(pid: int) -> int | None:
    """`pid`'s number in its own (innermost) pid namespace, None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return pid  # a kernel without NSpid has no nested pid namespaces to tell apart


def seen_from_here(inner: int, root: int) -> int | None:
    """The pid, in this process's namespace, of the process below `root` that is `inner` in
    its own pid namespace (a fork server's worker in a sandbox); None if none is."""
    found = [pid for pid in below([root], children()) if namespace_pid(pid) == inner]
    return found[0] if len(found) == 1 else None
