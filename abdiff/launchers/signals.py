"""Which rank died of which signal, read back from a launcher's exit code and messages.

A rank killed by a signal does not make mpirun, srun or torchrun die of that
signal: each exits with a code of its own and says what happened in a line:

- Open MPI: exit 128+n and "mpirun noticed that process rank R with PID P on
  node H exited on signal N (Aborted)." (prterun says the same);
- Slurm: "srun: error: HOST: task R: Aborted (core dumped)";
- torchrun: exit 1 and a failure summary whose "Root Cause" entry has
  "rank : R (local_rank: L)" and "exitcode : -N".

Without such a line, an exit code of 128+n still names signal n (rank unknown).
"""

from __future__ import annotations

import re
import signal
from types import MappingProxyType

MPIRUN_LINE = re.compile(r"noticed that process rank (\d+) with PID \S+ on node \S+ "
                         r"exited on signal (\d+)")
SRUN_LINE = re.compile(r"srun: error: \S+: tasks? (\d+)(?:[-,]\S*)?: (.+?)\s*$")
TORCHRUN_RANK = re.compile(r"^\s*rank\s*: (\d+)")
TORCHRUN_EXIT = re.compile(r"^\s*exitcode\s*: -(\d+)")
# The launchers' own report lines around a rank's death: never the reason a config died
# (that is the rank's last line before them).
LAUNCHER_LINES = re.compile(
    r"^(-{10,}|={10,}|\*{10,}|Primary job|a non-zero exit code|\S*run noticed that process"
    r"|srun: |slurmstepd: |Failures:|Root Cause|\[\d+\]:|\S+ FAILED$"
    r"|torch\.distributed\.elastic|[WEI]\d{4} .*torch/distributed/)")


def _name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# srun names a signal by its description ("Aborted", "Segmentation fault").
_BY_DESCRIPTION = MappingProxyType({signal.strsignal(s): s.name for s in signal.Signals
                                    if signal.strsignal(s)})


def _torchrun_root_cause(lines: list[str]) -> tuple[int, str] | None:
    if not any("Root Cause" in line for line in lines):
        return None
    start = max(i for i, line in enumerate(lines) if "Root Cause" in line)
    rank = None
    for line in lines[start:]:
        found = TORCHRUN_RANK.match(line)
        if found:
            rank = int(found.group(1))
        found = TORCHRUN_EXIT.match(line)
        if found and rank is not None:
            return rank, _name(int(found.group(1)))
    return None


def rank_signal(returncode: int, stderr_text: str) -> tuple[int | None, str] | None:
    """(rank or None, signal name) when the launcher says a rank died of a signal, else None."""
    lines = stderr_text.splitlines()
    for line in lines:
        found = MPIRUN_LINE.search(line)
        if found:
            return int(found.group(1)), _name(int(found.group(2)))
        found = SRUN_LINE.search(line)
        if found:
            description = re.sub(r" \(core dumped\)$", "", found.group(2))
            if description in _BY_DESCRIPTION:
                return int(found.group(1)), _BY_DESCRIPTION[description]
    root_cause = _torchrun_root_cause(lines)
    if root_cause:
        return root_cause
    if 128 < returncode <= 128 + 64:
        return None, _name(returncode - 128)
    return None
