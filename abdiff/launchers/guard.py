"""The exec wrapper every worker command starts through (run by path, standard library
only): `python guard.py PARENT_PID MAX_MEMORY_BYTES -- COMMAND...`.

It sets what used to be set between fork and exec with `preexec_fn`, which is unsafe
once the parent has threads (tqdm starts one): the parent-death signal, so a worker
does not outlive a SIGKILLed abdiff (it runs in its own session, out of reach of the
terminal's signals), and the address-space limit of --max-memory (0: none). Then it
replaces itself with COMMAND, so the launcher watches the command's own process.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h
CANNOT_EXEC = 127  # what a shell returns for a command it cannot run


def arm_parent_death(parent: int) -> bool:
    """Linux: this process gets SIGKILL when its parent dies. False when `parent` is already
    gone (it died before the signal was armed); True elsewhere, where nothing is armed."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        return os.getppid() == parent
    return True


def main(argv: list[str]) -> int:
    parent, max_memory, separator, *command = argv
    if separator != "--" or not command:
        print("usage: guard.py PARENT_PID MAX_MEMORY_BYTES -- COMMAND...", file=sys.stderr)
        return 2
    if not arm_parent_death(int(parent)):
        return 1
    if int(max_memory) > 0:
        resource.setrlimit(resource.RLIMIT_AS, (int(max_memory), int(max_memory)))
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"abdiff: cannot start {command[0]}: {exc.strerror}", file=sys.stderr)
    return CANNOT_EXEC


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
