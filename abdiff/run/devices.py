"""`--devices`: where rounds run at once (a run spread over several GPUs or CPU sets).

The syntax: devices separated by `:`, each a comma list of numbers and ranges
(`a-b`), as taskset and CUDA_VISIBLE_DEVICES write them:

- on a GPU host, GPU indices: `--devices 0:1:2:3` is four devices of one GPU each
  (a worker sees only its own: CUDA_VISIBLE_DEVICES); `--devices 0,1:2,3` two of two
  GPUs each (a tensor-parallel suite's ranks);
- on a CPU host (`--device cpu`, or no GPU), CPU sets: `--devices 0-3:4-7` is two
  devices of four CPUs each (every worker of a device is pinned to its set:
  sched_setaffinity, as `taskset -c 0-3` does); `--devices 0:1` two of one CPU each.

ABBA blocks are dealt to the devices in turn and run on all of them at once; an A
round and the B round it is paired with always run on the same device, so a pair
never mixes two devices' speeds (the run file records each round's device).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from abdiff.errors import InputError


@dataclass(frozen=True)
class Device:
    """One device rounds run on: a GPU set (the workers' CUDA_VISIBLE_DEVICES) or a CPU set
    (their CPU affinity)."""

    name: str  # as the run file and the reports say it: "GPU 0", "CPUs 0-3"
    env: dict[str, str] = field(default_factory=dict)
    cpus: tuple[int, ...] = ()


def numbers(text: str, where: str) -> list[int]:
    """`0,2-3` -> [0, 2, 3]; InputError naming `where` for anything else."""
    found: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high) if dash else int(low)
        except ValueError:
            raise InputError(f"--devices {where}: {part.strip()!r} is not a number or a range "
                             "like 0-3 (devices are separated by ':', e.g. 0-3:4-7)") from None
        if first < 0 or last < first:
            raise InputError(f"--devices {where}: {part.strip()!r} is not a range of numbers "
                             "from low to high")
        found += range(first, last + 1)
    return found


def compact(values: list[int]) -> str:
    """[0, 1, 2, 5] -> `0-2,5`."""
    parts: list[str] = []
    start = previous = values[0]
    for value in [*values[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        parts.append(f"{start}-{previous}" if previous > start else f"{start}")
        if value is not None:
            start = previous = value
    return ",".join(parts)


def parse_devices(text: str, gpu: bool) -> list[Device]:
    """The devices `--devices TEXT` names on this host (`gpu`: GPU indices, else CPU sets
    of the CPUs this process may run on); one clear InputError for anything else."""
    devices: list[Device] = []
    seen: set[int] = set()
    allowed = set(os.sched_getaffinity(0)) if not gpu and hasattr(os, "sched_getaffinity") \
        else None
    for n, part in enumerate(text.split(":")):
        if not part.strip():
            raise InputError(f"--devices {text}: device {n + 1} is empty (devices are "
                             "separated by ':', e.g. 0-3:4-7)")
        members = sorted(set(numbers(part, text)))
        if seen & set(members):
            raise InputError(f"--devices {text}: {compact(sorted(seen & set(members)))} is "
                             "in two devices; each GPU or CPU belongs to one")
        seen |= set(members)
        if gpu:
            devices.append(Device(f"GPU {compact(members)}",
                                  {"CUDA_VISIBLE_DEVICES": ",".join(map(str, members))}))
            continue
        if allowed is not None and not set(members) <= allowed:
            raise InputError(f"--devices {text}: CPU {compact(sorted(set(members) - allowed))} "
                             f"is not one this process may run on ({compact(sorted(allowed))})")
        devices.append(Device(f"CPUs {compact(members)}", cpus=tuple(members)))
    return devices
