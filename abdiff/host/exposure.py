"""What the benchmark's code could take from the process tree it runs in, checked before it runs.

A worker gets an allow-listed environment (launchers/process.py), but it runs as
the same user as abdiff and as every process above abdiff: it can read
`/proc/<pid>/environ` of each of them (root reads every process's). A token in
abdiff's environment, or in the CI script or shell that started it, is therefore
in reach of pull-request code. Measuring refuses to start when one is there
(`refuse_secrets`), naming it; `--unsafe-allow-secret-env` measures anyway.

abdiff's own state (`state_home()`: the key that authenticates stored rounds,
schedule.py) lives outside the cache folder, where workers are not told to look
and which no worker is given in its environment.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from abdiff.errors import InfrastructureError, InputError
from abdiff.host import procfs

log = logging.getLogger(__name__)

# Names of variables that hold credentials (case-insensitive). `*TOKEN*` would also take
# TOKENIZERS_PARALLELISM (Hugging Face), hence the underscores.
SECRET_NAME_PATTERNS = ("*_TOKEN", "TOKEN", "*_TOKEN_*", "*SECRET*", "*PASSWORD*", "*PASSWD*",
                        "*_PASS", "*_PWD", "*_PAT", "*JWT*", "*_KEY", "*APIKEY*",
                        "*PRIVATE_KEY*", "*ACCESS_KEY*", "*CREDENTIAL*", "*_AUTH", "*_AUTH_*",
                        "AUTH_*", "*WEBHOOK*", "*COOKIE*", "*_DSN", "*CONNECTION_STRING*")
# Names that match a pattern and hold no secret: the official Python images' GPG_KEY is the
# public fingerprint of the key that signed the interpreter's release; Buildkite's step and
# group keys name a step of the pipeline.
PUBLIC_NAMES = frozenset({"GPG_KEY", "BUILDKITE_STEP_KEY", "BUILDKITE_GROUP_KEY"})
# Values that are credentials whatever their variable is called: a URL with a password
# (PIP_INDEX_URL=https://user:pass@host), a private key, and tokens with a known prefix.
SECRET_VALUE_RE = re.compile(
    r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@|-----BEGIN [A-Z ]*PRIVATE KEY|"
    r"AccountKey=|hooks\.slack\.com/services/|"
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{20,}|"
    r"xox[abprs]-[\w-]{10,}|AKIA[0-9A-Z]{16}|hf_[A-Za-z0-9]{30,}|sk_live_\w{10,}|"
    r"sk-[\w-]{20,})", re.IGNORECASE)
# Switches whose names end like a secret's (HF_HUB_DISABLE_IMPLICIT_TOKEN=1) hold no secret.
_FLAG_VALUES = frozenset({"0", "1", "true", "false", "yes", "no", "on", "off"})
UNSAFE_FLAG = "--unsafe-allow-secret-env"
_KEY_FILE = "resume.key"
_KEY_BYTES = 32


def secret_looking(name: str) -> bool:
    upper = name.upper()
    return upper not in PUBLIC_NAMES and any(fnmatch.fnmatchcase(upper, pattern)
                                             for pattern in SECRET_NAME_PATTERNS)


def secret_names(environ: Mapping[str, str], pass_env: list[str] | None = None) -> list[str]:
    """Variables of `environ` that hold a secret: a secret-looking name set to something
    other than empty or a switch (0/1, true/false, ...), or a value that is a credential
    (SECRET_VALUE_RE); but those handed to the benchmark on purpose with --pass-env."""
    return sorted(name for name, value in environ.items()
                  if name not in (pass_env or ())
                  and ((value.strip().lower() not in _FLAG_VALUES | {""} and secret_looking(name))
                       or SECRET_VALUE_RE.search(value)))


def _ancestors() -> Iterator[tuple[int, str]]:
    """(pid, command name) of each process above this one, up to and including pid 1."""
    pid = os.getppid()
    seen = set()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        stat = procfs.read_stat(pid)
        if stat is None:
            return
        yield pid, stat.name
        try:
            pid = stat.parent
        except (IndexError, ValueError):
            return


def _environ_of(pid: int) -> dict[str, str]:
    """The environment process `pid` was started with, as far as this user can read it,
    which is as far as the benchmark (the same user) can."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (entry.partition(b"=") for entry in raw.split(b"\0") if entry)
    return {os.fsdecode(name): os.fsdecode(value) for name, _, value in pairs}


def _secret_in_reach(pass_env: list[str] | None) -> tuple[str, int | None, str] | None:
    """(name, pid, command) of the first secret-looking variable in this process's environment
    (pid None) or, on Linux, in an ancestor's; None when there is none."""
    own = secret_names(os.environ, pass_env)
    if own:
        return own[0], None, ""
    if sys.platform.startswith("linux"):
        for pid, command in _ancestors():
            names = secret_names(_environ_of(pid), pass_env)
            if names:
                return names[0], pid, command
    return None


def refuse_secrets(pass_env: list[str] | None, unsafe_allowed: bool) -> None:
    """Refuse to measure (InputError, exit 2) while a secret-looking variable is in this
    process's environment or in an ancestor's; with `unsafe_allowed`, say so and go on."""
    found = _secret_in_reach(pass_env)
    if found is None:
        return
    name, pid, command = found
    where = f"{name} (in abdiff's environment)" if pid is None else \
        f"{name} (in process {pid}, {command}, above abdiff)"
    if unsafe_allowed:
        log.warning(f"warning: {UNSAFE_FLAG}: measuring with {where} in reach of the "
                    "benchmark's code (/proc/PID/environ)")
        if os.geteuid() == 0:
            log.warning("warning: as root, the benchmark can also read the memory and "
                        "environment of every process on this machine (docs/ci.md)")
        return
    step = f"unset {name} for the measuring step" if pid is None else (
        f"start the measuring step from an environment without {name} (it can be read from "
        "that process's /proc/PID/environ)")
    raise InputError(f"{where} looks like a secret, and the benchmark's code could read it: "
                     f"{step}; post with `abdiff comment` in a separate step (docs/ci.md)")


def state_home() -> Path:
    """abdiff's own state, outside the cache folder: $ABDIFF_STATE_DIR, else
    $XDG_STATE_HOME/abdiff, else ~/.local/state/abdiff."""
    explicit = os.environ.get("ABDIFF_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "abdiff"
    return Path.home() / ".local" / "state" / "abdiff"


def private_dir() -> Path:
    """state_home(), made if missing, mode 0700."""
    folder = state_home()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(folder, 0o700)
    except OSError as exc:
        raise InfrastructureError(f"cannot create abdiff's state folder {folder}: {exc}") from exc
    return folder


def resume_key() -> bytes:
    """The key that authenticates stored rounds; made on first use, mode 0600. A key file
    someone else could have read or replaced (another owner, group or other bits, not a
    plain file) is replaced: what it signed is then measured again."""
    path = private_dir() / _KEY_FILE
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() \
                and not st.st_mode & 0o077 and st.st_size == _KEY_BYTES:
            return path.read_bytes()
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise InfrastructureError(f"cannot read abdiff's key {path}: {exc}") from exc
    key = secrets.token_bytes(_KEY_BYTES)
    tmp = path.with_name(f".{_KEY_FILE}.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InfrastructureError(f"cannot write abdiff's key {path}: {exc}") from exc
    return key


def authenticate(data: bytes) -> str:
    """HMAC-SHA-256 of `data` under resume_key()."""
    return hmac.new(resume_key(), data, hashlib.sha256).hexdigest()


def authentic(data: bytes, tag: object) -> bool:
    return isinstance(tag, str) and hmac.compare_digest(authenticate(data), tag)


def warn_if_root() -> None:
    """Once per state folder: measuring as root hands the benchmark root's files in the
    folders it may write, and without the sandbox every process's memory and environment on
    this machine."""
    if os.geteuid() != 0:
        return
    marker = private_dir() / "root-warned"
    if marker.exists():
        return
    log.info("note: measuring as root: in the sandbox the benchmark's code runs as "
             "nobody but still owns root's files in the folders it may write; without one it "
             "runs as root and can read every process's memory and environment here; measure "
             "as an unprivileged user (docs/ci.md)")
    marker.touch()
