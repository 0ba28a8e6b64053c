"""The process tree as /proc shows it (Linux): who is whose child, and what runs below."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcStat:
    """One line of /proc/PID/stat: the command name and the fields after it (proc(5) numbers
    them from 1; `rest[0]` is field 3, the state)."""
    name: str
    rest: tuple[str, ...]

    @property
    def parent(self) -> int:
        return int(self.rest[1])

    @property
    def cpu_ticks(self) -> int:
        """utime + stime, in clock ticks."""
        return int(self.rest[11]) + int(self.rest[12])

    @property
    def start_ticks(self) -> int:
        """When the process started, in clock ticks since boot."""
        return int(self.rest[19])

    @property
    def environ_span(self) -> tuple[int, int]:
        """Where the process's environment block lies in its memory (env_start, env_end)."""
        return int(self.rest[47]), int(self.rest[48])


def read_stat(pid: int | str) -> ProcStat | None:
    """/proc/PID/stat parsed (the name may hold spaces and parentheses: it ends at the
    last ")"), None where the process is gone or the line is unreadable."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if "(" not in line or ")" not in line:
        return None
    return ProcStat(line[line.index("(") + 1:line.rindex(")")],
                    tuple(line[line.rindex(")") + 1:].split()))


def children() -> dict[int, list[int]]:
    """Each process's children. Read after every round: only each stat line's parent field
    is parsed (a third of `read_stat`'s time per process)."""
    table: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                line = stat.read()
        except OSError:
            continue
        # after the name's last ")": " STATE PPID ..."
        fields = line[line.rfind(b")") + 2:].split(b" ", 2)
        try:
            parent = int(fields[1])
        except (IndexError, ValueError):
            continue
        table.setdefault(parent, []).append(int(name))
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
