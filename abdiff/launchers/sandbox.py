"""Benchmark processes in a sandbox of their own, where the OS allows (`--sandbox`).

A pull request's benchmark runs as abdiff's user. Outside a sandbox it can read
abdiff's key for stored rounds (a 0600 file of that user) and the user's credentials,
write the repository's `.git` (a replace ref, a moved branch), the cached checkouts,
abdiff's own Python environment (a `.pth` file) and the home folder, and see every
process of the user. In the sandbox (guard.py enters it before the worker's command
starts: Linux user, mount, pid and network namespaces, no privilege needed) abdiff's state
folder and the credential files are empty, every file system is read-only (the cache
folder and the temporary folders too) but, per worker, its round's folder and its side's
folders (store/sides.py: HOME, TMPDIR, tool caches), root is nobody, /proc shows the
worker's own processes only, and the network is a loopback of its own (no other host, no
service of this one: a cloud's metadata address, a socket bound to localhost). A process
started ahead of its job (a fork server, a standby worker) may write every round's and
side's folder until its job narrows it (`Sandbox.narrowing`, guard.narrow).

`--sandbox auto` (the default) uses it when a trial start works and says once why not
otherwise; `on` refuses to measure without it (exit 3); `off` runs without it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import site
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

from abdiff.errors import InfrastructureError
from abdiff.launchers.guard import CANNOT_CONFINE_LINE, NOBODY, Confinement
from abdiff.launchers.spec import ABDIFF_ROOT
from abdiff.store.files import own_folder

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
NAMESPACES = "user, mount, pid and network namespaces"  # the whole sandbox, in words
# what a run without the sandbox loses, said once on stderr and recorded in its run files
LOST_WITHOUT = ("benchmark code can write the repository's .git, abdiff's Python environment "
                "and every folder of abdiff's cache (runs/, locks/, the other side's caches; "
                "the side caches still point per side, but nothing stops a write elsewhere), "
                "and read abdiff's key for stored rounds and the user's credentials (docs/ci.md)")
PROBE_TIMEOUT_S = 30.0
GUARD = Path(__file__).with_name("guard.py")
# what a trial start checks inside: that the namespaces and mounts were made (root is NOBODY),
# and that one more user and mount namespace can be made there (a job narrowing a process
# started ahead, guard.narrow; CLONE_NEWUSER | CLONE_NEWNS)
PROBE = ("import ctypes, os, sys\n"
         "if os.getuid() != int(sys.argv[1]): sys.exit(1)\n"
         "libc = ctypes.CDLL(None, use_errno=True)\n"
         "if libc.unshare(0x10000000 | 0x00020000) != 0:\n"
         "    print(sys.argv[2] + 'a nested user namespace is refused: '\n"
         "          + os.strerror(ctypes.get_errno()), file=sys.stderr)\n"
         "    sys.exit(1)\n")
# where a user's credentials live under their home folder: hidden from the benchmark (its
# HOME is a fresh folder already; these are the real home's, which it can still name)
# git's own configuration too: a token kept as http.extraHeader or in a url
CREDENTIALS = (".ssh", ".netrc", ".git-credentials", ".config/git/credentials", ".gitconfig",
               ".config/git/config", ".docker",
               ".aws", ".azure", ".config/gcloud", ".config/gh", ".kube", ".gnupg", ".pypirc",
               ".npmrc", ".cargo/credentials", ".cargo/credentials.toml",
               ".cache/huggingface/token", ".huggingface/token", ".config/hub")


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """What a measurement's workers run in (`start`; held by launchers/runtime.py's Runtime):
    the confinement in force (None: no sandbox), the folders under which processes started
    ahead of their job (a fork server, a standby worker) write until each job narrows them to
    its round's and side's folders, and what it is in words (recorded with the run)."""

    words: str
    confinement: Confinement | None = None
    ahead_writable: tuple[str, ...] = ()

    def options(self, writable: tuple[str, ...] | None = None, ahead: bool = False) -> list[str]:
        """guard.py's options for a process started in this sandbox (none without one): with
        `writable`, a round's worker that may write there; with `ahead`, a process that waits
        for its job (it writes nothing itself; each job narrows it, `narrowing`)."""
        return guard_options(self.confinement,
                             writable or (self.ahead_writable if ahead else None))

    def narrowing(self, writable: tuple[str, ...]) -> str | None:
        """What a job given to a process started ahead narrows its sandbox to (guard.narrow):
        the folders of every round and side read-only again, but `writable`; None without a
        sandbox."""
        if self.confinement is None:
            return None
        return Confinement(read_only=self.ahead_writable, writable=writable,
                           own_proc=False).encode()


NO_SANDBOX = Sandbox("none")  # a process of abdiff's own outside a measurement (doctor)


def python_folders() -> set[Path]:
    """Where abdiff's Python comes from: its prefixes (a virtual environment's `bin/abdiff`
    and `pyvenv.cfg`), the standard library, every site-packages on its path, the user's
    base folder and abdiff's own folder (a `.pth` file, a module or a script written there
    would run in abdiff's next command, and in the posting step)."""
    folders = {Path(ABDIFF_ROOT), Path(sys.executable).parent,
               *([Path(site.USER_BASE)] if site.USER_BASE else [])}
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        folders.add(Path(prefix))  # a virtual environment's bin/ and pyvenv.cfg too
        paths = sysconfig.get_paths(vars={"base": prefix, "platbase": prefix})
        folders |= {Path(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    folders.add(Path(site.getusersitepackages()))
    folders |= {Path(entry) for entry in sys.path
                if Path(entry).name in ("site-packages", "dist-packages")}
    return folders


# The sockets bound to a path in this network namespace, as the kernel lists them (a walk of
# the folders would miss those deeper than it looks or past its budget): tmux, screen,
# ssh-agent, git's credential cache, D-Bus, docker. A read-only mount does not stop a
# connect(), and what answers runs outside the sandbox, as the user.
UNIX_SOCKETS = Path("/proc/net/unix")
MOST_SOCKETS = 500  # each is a mount at every worker's start, and a path in its argv (128 KiB)
# NVIDIA's own, which CUDA and NVML talk to: MPS's pipe folder, the persistence daemon's
GPU_SOCKET_FOLDERS = ("/run/nvidia-persistenced", "/var/run/nvidia-persistenced")
DEFAULT_MPS_FOLDER = "/tmp/nvidia-mps"


def gpu_socket_folders() -> list[Path]:
    """Where NVIDIA's services listen: the persistence daemon and MPS (CUDA's clients find
    it by CUDA_MPS_PIPE_DIRECTORY, else the default folder)."""
    mps = os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_MPS_FOLDER
    return [Path(folder).resolve() for folder in (*GPU_SOCKET_FOLDERS, mps)]


def listening_sockets(kept: list[Path], listing: Path = UNIX_SOCKETS) -> list[Path]:
    """The sockets bound to a path that this user can connect to (write permission on the
    socket), as they are seen here, but those under `kept` (NVIDIA's, the workers' own):
    at most MOST_SOCKETS, the kernel's first."""
    try:
        lines = listing.read_text(encoding="utf-8", errors="replace").splitlines()[1:]
    except OSError:
        return []
    found: list[Path] = []
    keep = set(kept)
    for line in lines:
        fields = line.split(maxsplit=7)
        if len(fields) < 8 or not fields[7].startswith("/"):
            continue  # unbound, or an abstract name (the network namespace takes those)
        path = Path(os.path.realpath(fields[7]))  # /var/run/x is /run/x, as mounts see it
        try:
            if not stat.S_ISSOCK(path.lstat().st_mode) or not os.access(path, os.W_OK):
                continue
        except OSError:
            continue  # gone, or bound in another mount namespace
        if path not in found and not _under(path, keep):
            found.append(path)
    return found[:MOST_SOCKETS]


# what makes a repository's git configuration a credential (actions/checkout leaves its token
# as http.<url>.extraheader in .git/config and in each submodule's): such a file is hidden
# (git in a worker then reads none: its extensions, a partial clone's or sha256, are lost
# with it); one without a credential stays, as git needs it
CREDENTIAL_CONFIG = re.compile(r"extraheader|^\s*\[credential|://[^/\s@]+@",
                               re.IGNORECASE | re.MULTILINE)


def git_configs_with_credentials(git_common_dir: Path) -> list[Path]:
    """The configuration files of the repository and of its submodules that hold one."""
    found = []
    for path in [git_common_dir / "config", *sorted(git_common_dir.glob("modules/**/config"))]:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")[:1 << 20]
        except OSError:
            continue
        if CREDENTIAL_CONFIG.search(text):
            found.append(path.resolve())
    return found


def _under(path: Path, folders: set[Path]) -> bool:
    return any(path == folder or folder in path.parents for folder in folders)


def plan(repo_root: Path, git_common_dir: Path, cache_dir: Path,
         state_folder: Path) -> Confinement:
    """The sandbox of a measurement: abdiff's state folder, the user's credentials
    (CREDENTIALS), the repository's git configurations that hold one
    (`git_configs_with_credentials`) and the sockets processes of the user listen on
    (`listening_sockets`: a connect() would reach outside) hidden; every mount read-only,
    and by name (strictly) the repository (its working tree and its git common dir), the
    cache folder, the user's home folder (a .bashrc runs later too) and abdiff's Python
    environment. What a worker may write is added per worker (`guard_options`): its
    round's folder and its side's folders."""
    # the home folder by $HOME, as Python finds it; an empty or relative one names none
    home = Path(os.path.expanduser("~"))
    homes = [home] if home.is_absolute() else []
    hidden = {state_folder.resolve(), *((h / name).resolve() for h in homes
                                        for name in CREDENTIALS if (h / name).exists()),
              *git_configs_with_credentials(git_common_dir),
              # but the workers' own (sandboxed too: one they bind again at its path must
              # not find a mount there) and NVIDIA's
              *listening_sockets([*(p.resolve() for p in worker_folders_root(cache_dir)),
                                  *gpu_socket_folders()])}
    read_only = {p.resolve() for p in (repo_root, git_common_dir, cache_dir,
                                       *homes, *python_folders())}
    read_only = {p for p in read_only if p.is_dir() and not _under(p, hidden)}
    return Confinement(tuple(sorted(map(str, hidden))), tuple(sorted(map(str, read_only))),
                       (), all_read_only=True)


def worker_folders_root(cache_dir: Path) -> tuple[Path, Path]:
    """Where round folders (runs/) and side folders (sides/) live in the cache."""
    return cache_dir / "runs", cache_dir / "sides"


def guard_options(confinement: Confinement | None,
                  writable: tuple[str, ...] | None = None) -> list[str]:
    """guard.py's options for `confinement` (none without one), writable also in
    `writable`."""
    if confinement is None:
        return []
    if writable:
        confinement = dataclasses.replace(
            confinement, writable=tuple(sorted({*confinement.writable, *writable})))
    return ["--confine", confinement.encode()]


def trial(confinement: Confinement) -> str | None:
    """Start one small process in `confinement`, for real: None when it ran, else why not
    (guard.py's own line)."""
    argv = [sys.executable, "-S", str(GUARD), str(os.getpid()), "0",
            *guard_options(confinement), "--", sys.executable, "-S", "-c", PROBE,
            str(os.geteuid() or NOBODY), CANNOT_CONFINE_LINE]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"a trial start did not end within {PROBE_TIMEOUT_S:g} s"
    if done.returncode == 0:
        return None
    lines = [line.removeprefix(CANNOT_CONFINE_LINE) for line in done.stderr.splitlines()
             if line.strip()]
    return lines[-1] if lines else f"a trial start ended with exit code {done.returncode}"


def start(mode: str, repo_root: Path, git_common_dir: Path, cache_dir: Path,
          state_folder: Path, elsewhere: str | None = None) -> Sandbox:
    """The sandbox `mode` asks for, for the workers of one measurement (its runtime holds
    it), with what they run in, in words (recorded with the run). `elsewhere`: why the
    benchmark's processes do not start below abdiff (the launcher's words), so that no
    sandbox of abdiff's can hold them. `on` without a sandbox: InfrastructureError."""
    if mode == "off":
        log.info(f"note: --sandbox off: {LOST_WITHOUT}")
        return Sandbox(f"none (--sandbox off: {LOST_WITHOUT})")
    if elsewhere is not None:
        why = f"{elsewhere}, outside abdiff's process tree"
    elif not sys.platform.startswith("linux"):
        why = f"namespaces are Linux's, this is {sys.platform}"
    else:
        # what is read-only must exist before the workers start: a folder made later would
        # be writable to a fork server started earlier, and a missing one cannot be mounted
        for folder in (cache_dir / "checkouts", *worker_folders_root(cache_dir)):
            own_folder(folder)
        if site.ENABLE_USER_SITE:  # where a .pth would run in abdiff's next command
            Path(site.getusersitepackages()).mkdir(parents=True, exist_ok=True)
        confinement = plan(repo_root, git_common_dir, cache_dir, state_folder)
        ahead = tuple(str(p.resolve()) for p in worker_folders_root(cache_dir))
        failed = trial(confinement)
        if failed is None:
            return Sandbox(NAMESPACES, confinement, ahead)
        # what the kernel refuses goes; what it allows stays, and the run says what is missing
        for own_proc, own_net, words in (
                (True, False, "user, mount and pid namespaces (no network namespace"),
                (False, True, "user, mount and network namespaces (no /proc of its own"),
                (False, False, "user and mount namespaces (no /proc or network of its own")):
            partial = dataclasses.replace(confinement, own_proc=own_proc, own_net=own_net)
            if trial(partial) is None:
                log.info(f"note: the benchmark's sandbox is partial here: {words}: {failed})")
                return Sandbox(f"{words}: {failed})", partial, ahead)
        why = failed
    if mode == "on":
        fix = ("isolate them with the cluster's means (containers) and measure with --sandbox "
               "auto" if elsewhere else "allow unprivileged user namespaces (docs/ci.md), or "
               "measure with --sandbox auto in a throwaway container")
        raise InfrastructureError(f"--sandbox on: workers cannot be sandboxed here ({why}); "
                                  f"{fix}")
    log.info(f"note: benchmark code runs without a sandbox here ({why}): {LOST_WITHOUT}")
    return Sandbox(f"none ({why}; {LOST_WITHOUT})")
