"""The exec wrapper every worker command starts through (run by path, standard library
only): `python guard.py PARENT_PID MAX_MEMORY_BYTES [--cpus LIST] [--confine JSON] --
COMMAND...` (--cpus: the CPU set of a `--devices` lane, set before anything else).

It sets what used to be set between fork and exec with `preexec_fn`, which is unsafe
once the parent has threads (tqdm starts one): the parent-death signal, so a worker
does not outlive a SIGKILLed abdiff (it runs in its own session, out of reach of the
terminal's signals), and the address-space limit of --max-memory (0: none). Then it
replaces itself with COMMAND, so the launcher watches the command's own process.

With `--confine` (launchers/sandbox.py decides what it holds) COMMAND runs in a sandbox:
user and mount namespaces of its own where abdiff's state folder and the user's
credentials are empty, the file systems read-only but for the folders named writable,
the mounts locked, root nobody; and, where /proc can be mounted, a pid namespace of its
own in which no process outside it is seen. Then this process stays, waiting, so that
the launcher still sees COMMAND's exit (or dies of its signal).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import resource
import signal
import socket
import stat
import struct
import sys
from dataclasses import dataclass

PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4  # linux/prctl.h
CANNOT_EXEC = 127  # what a shell returns for a command it cannot run
CANNOT_CONFINE = 126
CANNOT_CONFINE_LINE = "abdiff: cannot sandbox the worker: "  # and why
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000  # sched.h
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # linux/sockios.h, linux/if.h
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8  # sys/mount.h
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
# statvfs flags a remount inside a user namespace must keep (the kernel locked them)
KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
              (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
              (os.ST_RELATIME, MS_RELATIME))
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
NOBODY = 65534  # who root is inside the sandbox: no capabilities there
# mounts left as they are when everything else is made read-only: /proc is replaced,
# /dev holds the devices, /dev/shm and the terminals
LEFT_WRITABLE = ("/proc", "/dev")
# what of the new /proc is read-only (as container runtimes do): for root outside, the
# sandbox's nobody is still root to the kernel's sysctl check (kernel.core_pattern)
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
_libc = ctypes.CDLL(None, use_errno=True)


def arm_parent_death(parent: int) -> bool:
    """Linux: this process gets SIGKILL when its parent dies. False when `parent` is already
    gone (it died before the signal was armed); True elsewhere, where nothing is armed."""
    if sys.platform.startswith("linux"):
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        return os.getppid() == parent
    return True


def not_dumpable() -> None:
    """Linux: no process without capabilities over this one (another of the same user, a
    worker it forked) can read its memory, its /proc/PID/environ or its open files, or
    attach to it."""
    if sys.platform.startswith("linux"):
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


@dataclass(frozen=True)
class Confinement:
    """What a sandboxed worker sees: `hidden` folders are empty and hidden files read as
    empty; with `all_read_only`, every mount but /proc and /dev is read-only (as far as the
    kernel lets each be remounted); `read_only` folders cannot be written, `writable` ones
    (under a read-only one) can; with `own_proc`, a pid namespace and a /proc of its own;
    with `own_net`, a network namespace of its own with a loopback only: no other host, and
    no service of this one (a socket bound to localhost or to an abstract name, a cloud's
    metadata address that hands out the machine's credentials)."""

    hidden: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    own_proc: bool = True
    all_read_only: bool = False
    own_net: bool = True

    def encode(self) -> str:
        return json.dumps({"hidden": self.hidden, "read_only": self.read_only,
                           "writable": self.writable, "own_proc": self.own_proc,
                           "all_read_only": self.all_read_only, "own_net": self.own_net})

    @classmethod
    def decode(cls, text: str) -> Confinement:
        fields = json.loads(text)
        return cls(tuple(fields["hidden"]), tuple(fields["read_only"]),
                   tuple(fields["writable"]), bool(fields["own_proc"]),
                   bool(fields["all_read_only"]), bool(fields["own_net"]))


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def c(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    _check(_libc.mount(c(source), c(target), c(fstype), ctypes.c_ulong(flags), c(data)),
           f"mount {target}")


def loopback_up() -> None:
    """Bring the loopback of a new network namespace up (it starts down): ranks of one job
    may meet on localhost there (torchrun's store), as they would outside."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(handle, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(handle, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _own_user_namespace(inside_uid: int, inside_gid: int, flags: int) -> None:
    """Unshare a user namespace (and `flags`) whose only user is this process's, seen inside
    as `inside_uid`/`inside_gid`."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER | flags), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inside_uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{inside_gid} {gid} 1\n")


def _remount(target: str, read_only: bool) -> None:
    flags = os.statvfs(target).f_flag
    kept = sum(ms for st, ms in KEPT_FLAGS if flags & st)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | kept | (MS_RDONLY if read_only else 0))


def _mount_points() -> list[str]:
    """This mount namespace's mount points, from /proc/self/mountinfo (octal escapes
    decoded)."""
    with open("/proc/self/mountinfo") as handle:
        fields = [line.split() for line in handle]
    return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[4])
            for f in fields if len(f) > 4]


def _all_read_only() -> None:
    """Every mount read-only but those under LEFT_WRITABLE. A mount the kernel does not let
    a user namespace remount stays as it is: what must be read-only is also bound and
    remounted by name (`Confinement.read_only`), where a failure stops the sandbox."""
    for point in _mount_points():
        if any(point == kept or point.startswith(kept + "/") for kept in LEFT_WRITABLE):
            continue
        with contextlib.suppress(OSError):
            _remount(point, read_only=True)


def confine_mounts(confinement: Confinement) -> None:
    """In mount and user namespaces of this process's own: hide, make read-only and
    writable again what `confinement` says, shallow paths first (a writable folder under a
    read-only one is bound again from a handle opened before anything was covered)."""
    # a link at a writable path (planted by an earlier worker) is refused (ELOOP, ENOTDIR),
    # never bound: what it names would become writable
    sources = {path: os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC)
               for path in confinement.writable}
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates out
    if confinement.all_read_only:
        _all_read_only()
    steps = sorted([(path, "hide") for path in confinement.hidden]
                   + [(path, "read_only") for path in confinement.read_only]
                   + [(path, "writable") for path in confinement.writable],
                   key=lambda step: step[0].rstrip("/").count("/"))
    for path, kind in steps:
        if kind == "hide":
            _hide(path)
        elif kind == "read_only":
            if path != "/":  # nothing is mounted over / (a user namespace made on top of
                _mount(path, path, None, MS_BIND | MS_REC)  # that would be refused: EPERM)
            _remount(path, read_only=True)
        else:
            _mount(f"/proc/self/fd/{sources[path]}", path, None, MS_BIND | MS_REC)
            _remount(path, read_only=False)
    for handle in sources.values():
        os.close(handle)


def _hide(path: str) -> None:
    """A folder becomes an empty one, anything else reads as empty (a socket refuses a
    connect()). Through a handle of the very path the plan named: a path gone since (a
    socket whose server ended), or a link now (another user's socket under /tmp swapped
    for one), is skipped, never mounted over where it points."""
    try:
        handle = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        here = f"/proc/self/fd/{handle}"
        if os.readlink(here) != path:  # a folder on the way became a link
            return
        if stat.S_ISDIR(os.fstat(handle).st_mode):
            _mount("tmpfs", here, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
                   "size=4k,mode=555")
        else:
            _mount(os.devnull, here, None, MS_BIND)
    finally:
        os.close(handle)


def lock(uid: int, gid: int) -> None:
    """Enter one more user namespace (and mount namespace): the mounts made so far become
    locked there, so that nothing inside can unmount or remount them. Inside it is
    `uid`/`gid`, the user it runs as outside, except root, who is NOBODY there: a command
    with a uid other than 0 keeps no capability over its namespace (no ptrace of the fork
    server, no mount) once it execs."""
    _own_user_namespace(uid or NOBODY, gid or NOBODY, CLONE_NEWNS)


def narrow(confinement: Confinement) -> None:
    """In a process started ahead of its job, in a sandbox already (a fork server's worker, a
    standby worker): one more user and mount namespace where `confinement` applies on top
    (what its job may write), locked as the first. Needs no privilege: a user namespace may
    be made inside another. OSError when the kernel refuses."""
    uid, gid = os.geteuid(), os.getegid()
    _own_user_namespace(0, 0, CLONE_NEWNS)
    confine_mounts(confinement)
    lock(uid, gid)


def exit_as(child: int) -> int:
    """Wait for `child` and end as it ended: its exit code, or death by its signal (signals
    meant for it reach it through its process group, not through this process)."""
    for number in RELAYED:
        signal.signal(number, signal.SIG_IGN)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def exec_command(command: list[str]) -> int:
    """Replace this process with `command`, with the signal dispositions a new program
    expects (Python ignores SIGPIPE and SIGXFSZ); returns only when it cannot."""
    for number in (signal.SIGPIPE, signal.SIGXFSZ, *RELAYED):
        signal.signal(number, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"abdiff: cannot start {command[0]}: {exc.strerror}", file=sys.stderr)
    return CANNOT_EXEC


def _quiet_stdio() -> None:
    """Let go of stdin and stdout (the fork server's pipes to abdiff): only the command
    holds them, so abdiff sees their end when the command's comes."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


def _init(command: list[str], uid: int, gid: int, report: int) -> None:
    """Process 1 of the new pid namespace: mount its /proc, lock the mounts, start the
    command and reap what ends until the command does; write how it ended to `report`.
    When this process exits, the kernel kills whatever is left in the namespace."""
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in PROC_READ_ONLY:
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _remount(path, read_only=True)
    # the default action of a signal to a namespace's first process is no action: a
    # benchmark's SIGINT to process 1 must not end the sandbox (Python handles SIGINT)
    for number in RELAYED:
        signal.signal(number, signal.SIG_DFL)
    lock(uid, gid)
    child = os.fork()
    if child == 0:
        os.close(report)
        os._exit(exec_command(command))
    _quiet_stdio()
    while True:
        pid, status = os.wait()
        if pid == child:
            os.write(report, str(os.waitstatus_to_exitcode(status)).encode())
            return


def run_confined(confinement: Confinement, command: list[str]) -> int:
    """Run `command` in the sandbox `confinement` describes; returns its exit code (or dies
    of its signal), or CANNOT_CONFINE with the reason on stderr."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        _own_user_namespace(0, 0, CLONE_NEWNS | (CLONE_NEWPID if confinement.own_proc else 0)
                            | (CLONE_NEWNET if confinement.own_net else 0))
        if confinement.own_net:
            loopback_up()
        confine_mounts(confinement)
        if not confinement.own_proc:
            lock(uid, gid)
            return exec_command(command)
    except OSError as exc:
        print(f"{CANNOT_CONFINE_LINE}{exc.strerror or exc}", file=sys.stderr)
        return CANNOT_CONFINE
    read_end, write_end = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(read_end)
        try:
            arm_parent_death(os.getppid())
            _init(command, uid, gid, write_end)
        except OSError as exc:
            print(f"{CANNOT_CONFINE_LINE}{exc.strerror or exc}", file=sys.stderr)
            os.write(write_end, str(CANNOT_CONFINE).encode())
        os._exit(0)
    os.close(write_end)
    _quiet_stdio()
    for number in RELAYED:  # they reach the command through its process group
        signal.signal(number, signal.SIG_IGN)
    os.waitpid(init, 0)
    with os.fdopen(read_end, "rb") as handle:
        said = handle.read().decode()
    code = int(said) if said.lstrip("-").isdigit() else CANNOT_CONFINE
    if code < 0:  # die of the command's signal, as the launcher expects of the command
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def main(argv: list[str]) -> int:
    parent, max_memory, *rest = argv
    confinement = None
    if rest[:1] == ["--cpus"] and len(rest) > 1:  # --devices: the CPU set it runs on
        os.sched_setaffinity(0, [int(cpu) for cpu in rest[1].split(",")])
        rest = rest[2:]
    if rest[:1] == ["--confine"] and len(rest) > 1:
        confinement, rest = Confinement.decode(rest[1]), rest[2:]
    if rest[:1] != ["--"] or len(rest) < 2:
        print("usage: guard.py PARENT_PID MAX_MEMORY_BYTES [--cpus LIST] [--confine JSON] -- "
              "COMMAND...",
              file=sys.stderr)
        return 2
    command = rest[1:]
    if not arm_parent_death(int(parent)):
        return 1
    if int(max_memory) > 0:
        resource.setrlimit(resource.RLIMIT_AS, (int(max_memory), int(max_memory)))
    if confinement is not None:
        return run_confined(confinement, command)
    return exec_command(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
