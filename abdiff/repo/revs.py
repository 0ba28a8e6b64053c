"""Rev ranges ("A..B", "A...B", "A..") -> two resolved sides.

Everything the user types is checked before git sees it: a side that starts with
'-' could be read by git as an option (`--upload-pack=...`), so it is refused
here, and git is also told where options end (`--end-of-options`). git is run
with argv lists only, never through a shell.

Decisions:

- `A..B`: A and B as given.  `A...B`: side A is the merge base of A and B (what
  the branch B changed since it forked), side B is B.  `A..`: side B is the
  working tree (`WORKTREE`), including uncommitted and untracked-not-ignored files.
- A detached HEAD is fine for `A..`: the working tree is still there.  A bare
  repository has no working tree, so `A..` is refused there (`A..B` works).
- A commit missing from a shallow clone is reported as such, with the fix
  (`git fetch --unshallow`), because "unknown revision" alone would mislead.

`run_git` is the one way abdiff runs git, on the user's repository and on its
cached checkouts alike. Both may have been written by code abdiff measured (a
pull request's benchmark runs as the same user), so git runs hardened: no hooks,
no fsmonitor, no transport (nothing is fetched), and no clean/smudge/process
filter from the repository's configuration. A file under a filter is checked out
as the blob git stores (an LFS file stays a pointer). Nothing planted in `.git`
can stand in for a commit either: replace refs (`refs/replace/<sha>`), grafts
(`info/grafts`) and the commit-graph file are ignored, and checkouts.py checks
every checkout against the commit's own objects, hashed by abdiff.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from abdiff.errors import InfrastructureError, InputError, did_you_mean

WORKTREE = "WORKTREE"
"""The sha of side B in "A..": the working tree, with its uncommitted and untracked files."""

_SHA_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # sha1 and sha256 repositories
_DOTS_RE = re.compile(r"\.{2,}")

# Passed to every git command: nothing configured in a repository runs as a side effect.
GIT_HARDENING = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "protocol.allow=never",
    # the commit-graph file caches each commit's tree: a rewritten one would name another
    "-c", "core.commitGraph=false",
    # checkouts are the commit's bytes (checkouts.verify_commit_checkout compares them)
    "-c", "core.autocrlf=false",
)
# A graft file that cannot exist (a path below /dev/null): no grafts, and no deprecation hint
# on stderr, which an existing empty file would cause.
_NO_GRAFTS = os.path.join(os.devnull, "abdiff-no-grafts")
_FILTER_KEY_RE = re.compile(r"filter\.(.+)\.(?:clean|smudge|process|required)", re.DOTALL)


@dataclass(frozen=True)
class RevRange:
    """A parsed, not yet resolved, range. `b` None means the working tree ("A..")."""

    a: str
    b: str | None
    merge_base: bool


@dataclass(frozen=True)
class SideSpec:
    """One side to measure: what the user called it, and the commit (or WORKTREE).

    `rev` is a label for reports and run files; for the merge-base side of
    "A...B" it is `merge-base(A,B)`, for the working tree it is `WORKTREE`.
    """

    rev: str
    sha: str


# ---------------------------------------------------------------------------- git


GIT_ENV_KEPT = ("PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "XDG_CONFIG_HOME", "GIT_EXEC_PATH")
"""What git gets of abdiff's environment. Not more: a process the benchmark leaves behind
can read /proc/PID/environ of abdiff's git commands, which outlive abdiff's own blanked
environment (exposure.py)."""


def git_env() -> dict[str, str]:
    """The environment for git: an allow-list (GIT_ENV_KEPT), no prompts, C messages, no
    inherited repository choice, no configuration passed by environment (run_git sets
    its own), and no transport of any kind."""
    env = {k: os.environ[k] for k in GIT_ENV_KEPT if k in os.environ}
    env["GIT_TERMINAL_PROMPT"] = "0"
    # refs/replace/<sha> and info/grafts, written by a benchmark into the shared .git, would
    # make another commit's content (or parents) pass for the sha abdiff asked for
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    env["GIT_GRAFT_FILE"] = _NO_GRAFTS
    # empty: every protocol is refused, over any protocol.*.allow in a .git/config the
    # benchmark wrote (a "promisor" remote whose lazy fetch would run its command)
    env["GIT_ALLOW_PROTOCOL"] = ""
    env["GIT_NO_LAZY_FETCH"] = "1"  # git 2.45+: no fetch of a missing object at all
    env["LC_ALL"] = "C"
    return env


def _git(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, check=False,
                              encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        raise InfrastructureError("git is not installed (or not on PATH)") from None
    except OSError as exc:
        raise InfrastructureError(f"cannot run git: {exc}") from None


def _filters_off(cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` plus configuration that empties every filter driver git would see in `cwd`.

    Filter drivers are named in configuration (`filter.NAME.smudge`), which a
    repository can carry; an empty command means no filter, and `required=false`
    keeps git from failing for the lack of one. Passed as GIT_CONFIG_KEY_n
    variables, not `-c`, because a driver's NAME may hold `=`.
    """
    listed = _git(["git", "-C", str(cwd), *GIT_HARDENING, "config", "--null", "--name-only",
                   "--get-regexp", r"^filter\."], env)
    names = {m.group(1) for key in listed.stdout.split("\0")
             if (m := _FILTER_KEY_RE.fullmatch(key))}
    settings = [(f"filter.{name}.{part}", "false" if part == "required" else "")
                for name in sorted(names) for part in ("clean", "smudge", "process", "required")]
    env = dict(env)
    for i, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    return env


def run_git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `git -C cwd ARGS...` hardened (argv list, no shell, GIT_HARDENING, filters off).

    A missing git is an infrastructure error. With check=True a non-zero exit
    raises InfrastructureError with git's message; callers that turn a failure
    into an InputError pass check=False.
    """
    env = _filters_off(cwd, git_env())
    proc = _git(["git", "-C", str(cwd), *GIT_HARDENING, *args], env)
    if check and proc.returncode != 0:
        raise InfrastructureError(
            f"git {' '.join(args[:2])} failed in {cwd}: {git_message(proc.stderr)}")
    return proc


def run_git_bytes(cwd: Path, *args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    """`run_git` for binary input and output (`git cat-file --batch`); never raises on git's
    exit status (the caller checks it)."""
    argv = ["git", "-C", str(cwd), *GIT_HARDENING, *args]
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, check=False,
                              env=_filters_off(cwd, git_env()))
    except FileNotFoundError:
        raise InfrastructureError("git is not installed (or not on PATH)") from None
    except OSError as exc:
        raise InfrastructureError(f"cannot run git: {exc}") from None


def git_message(stderr: str) -> str:
    """git's stderr as one line (the CLI prints errors as one line)."""
    lines = [ln.strip() for ln in stderr.splitlines()
             if ln.strip() and not ln.startswith("hint:")]
    return "; ".join(lines) if lines else "no message from git"


# ---------------------------------------------------------------------------- parsing


def check_rev_syntax(rev: str, what: str = "revision") -> str:
    """Refuse what cannot be a rev, before git sees it (an option, whitespace, control chars).

    Everything git accepts as a commit-ish otherwise is left to git (`main~3`,
    `v1.0^`, `HEAD@{1}`, a sha): `git rev-parse --verify` is the real check.
    """
    if not rev:
        raise InputError(f"empty {what}")
    if rev.startswith("-"):
        raise InputError(f"{what} {rev!r} starts with '-': refused (it would read as an option)")
    for ch in rev:
        if ch.isspace() or unicodedata.category(ch).startswith(("C", "Z")):
            raise InputError(f"{what} {rev!r} contains whitespace or a control character")
    if ".." in rev:
        raise InputError(f"{what} {rev!r} contains '..'")
    return rev


def parse_range(text: str) -> RevRange:
    """"A..B", "A...B" or "A.." -> RevRange; anything else -> InputError.

    Exactly one run of two or three dots separates the sides, so "a....b" or
    "a..b..c" are refused rather than guessed at. Side A is required (git's
    implicit HEAD in "..B" is a common typo here); "A..." is refused because
    "merge base of A and the working tree" has no meaning.
    """
    if not isinstance(text, str):
        raise InputError(f"range must be text, not {type(text).__name__}")
    runs = list(_DOTS_RE.finditer(text))
    if not runs:
        raise InputError(f"{text!r} is not a range: expected A..B, A...B or A..")
    if len(runs) > 1 or len(runs[0].group()) > 3:
        raise InputError(f"{text!r} is not a range: expected exactly one '..' or '...'")
    sep = runs[0]
    a, b = text[: sep.start()], text[sep.end():]
    merge_base = len(sep.group()) == 3
    if not a:
        raise InputError(f"{text!r}: side A is missing (write it out, e.g. HEAD{sep.group()}B)")
    check_rev_syntax(a, "side A")
    if not b:
        if merge_base:
            raise InputError(f"{text!r}: A...B needs side B (A.. compares with the working tree)")
        return RevRange(a, None, False)
    check_rev_syntax(b, "side B")
    return RevRange(a, b, merge_base)


# ---------------------------------------------------------------------------- resolving


def open_repo(path: Path | None = None) -> Path:
    """The root of the repository containing `path` (default: cwd); not a repo -> InputError.

    For a bare repository the root is its git directory (there is no working
    tree; "A..B" still works there, "A.." does not).
    """
    where = Path.cwd() if path is None else Path(path)
    if not where.exists():
        raise InputError(f"repository path {where} does not exist; pass --repo with the "
                         "benchmark's git clone")
    if not where.is_dir():
        where = where.parent
    proc = run_git(where, "rev-parse", "--is-bare-repository", "--absolute-git-dir", check=False)
    if proc.returncode != 0:
        raise InputError(f"{where} is not in a git repository ({git_message(proc.stderr)}); run "
                         "abdiff inside the benchmark's clone or pass --repo PATH")
    bare, git_dir = proc.stdout.splitlines()[:2]
    if bare == "true":
        return Path(git_dir).resolve()
    top = run_git(where, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0 or not top.stdout.strip():
        # Inside the .git directory of a non-bare repository: its working tree is the parent.
        return Path(git_dir).resolve().parent
    return Path(top.stdout.strip()).resolve()


def is_bare(repo_root: Path) -> bool:
    return run_git(repo_root, "rev-parse", "--is-bare-repository").stdout.strip() == "true"


def is_shallow(repo_root: Path) -> bool:
    proc = run_git(repo_root, "rev-parse", "--is-shallow-repository", check=False)
    return proc.stdout.strip() == "true"


def _shallow_hint(repo_root: Path) -> str:
    return (f"{repo_root} is a shallow clone and may lack this commit; "
            "run `git fetch --unshallow` there (or fetch the commit) and retry")


def resolve_rev(repo_root: Path, rev: str) -> SideSpec:
    """A rev -> its commit sha; unknown, or not a commit -> InputError with git's reason."""
    check_rev_syntax(rev)
    proc = run_git(repo_root, "rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}",
                   check=False)
    sha = proc.stdout.strip()
    if proc.returncode == 0 and _SHA_RE.fullmatch(sha):
        return SideSpec(rev=rev, sha=sha)
    reason = git_message(proc.stderr)
    if is_shallow(repo_root):
        raise InputError(f"unknown revision {rev!r} in {repo_root}: {reason}; "
                         + _shallow_hint(repo_root))
    if "expected commit type" in reason:
        raise InputError(f"revision {rev!r} in {repo_root} is not a commit: {reason}")
    if "Needed a single revision" in reason and "error:" not in reason:
        reason += " (no branch, tag or commit by that name)"
    guesses = similar_refs(repo_root, rev)
    hint = did_you_mean(rev, [], guesses=guesses) or \
        "; `git branch -a` and `git tag` list the names (git fetch one that is not here)"
    raise InputError(f"unknown revision {rev!r} in {repo_root}: {reason}{hint}")


def ref_names(repo_root: Path) -> list[str]:
    """The repository's branch, tag and remote-branch names (none outside a repository)."""
    proc = run_git(repo_root, "for-each-ref", "--format=%(refname:short)", "refs/heads",
                   "refs/tags", "refs/remotes", check=False)
    return proc.stdout.split() if proc.returncode == 0 else []


def similar_refs(repo_root: Path, rev: str) -> list[str]:
    """Branch and tag names close to a mistyped `rev` (difflib), for "did you mean"."""
    return difflib.get_close_matches(rev, ref_names(repo_root), n=3, cutoff=0.6)


def merge_base(repo_root: Path, a: SideSpec, b: SideSpec) -> SideSpec:
    """The merge base of two resolved sides (git's best one when there are several)."""
    proc = run_git(repo_root, "merge-base", a.sha, b.sha, check=False)
    sha = proc.stdout.strip()
    if proc.returncode == 0 and _SHA_RE.fullmatch(sha):
        return SideSpec(rev=f"merge-base({a.rev},{b.rev})", sha=sha)
    if proc.returncode == 1 and not proc.stderr.strip():
        msg = f"{a.rev}...{b.rev}: {a.rev!r} and {b.rev!r} have no merge base in {repo_root}"
        if is_shallow(repo_root):
            raise InputError(f"{msg}; {_shallow_hint(repo_root)}")
        raise InputError(f"{msg} (unrelated histories); use {a.rev}..{b.rev} to compare them")
    raise InfrastructureError(f"git merge-base failed in {repo_root}: {git_message(proc.stderr)}")


def resolve_side_b(repo_root: Path, rev: str | None, text: str) -> SideSpec:
    """Side B of `text`: the commit `rev`, or the working tree when `rev` is None."""
    if rev is not None:
        return resolve_rev(repo_root, rev)
    if is_bare(repo_root):
        raise InputError(f"{text}: {repo_root} is a bare repository, it has no working tree "
                         "to compare with; name side B (A..B)")
    return SideSpec(rev=WORKTREE, sha=WORKTREE)


def resolve_range(repo_root: Path, text: str) -> tuple[SideSpec, SideSpec]:
    """Parse and resolve a range to (side A, side B)."""
    rng = parse_range(text)
    # the working tree first: a bare repository is refused before any rev is looked up
    worktree = resolve_side_b(repo_root, None, text) if rng.b is None else None
    side_a = resolve_rev(repo_root, rng.a)
    side_b = worktree or resolve_side_b(repo_root, rng.b, text)
    if rng.merge_base:
        side_a = merge_base(repo_root, side_a, side_b)
    return side_a, side_b


def first_parent_chain(repo_root: Path, tip: str) -> set[str]:
    """`tip` and the commits of its first-parent chain (replace refs and grafts off:
    run_git): a branch's own line, not the commits a merge brought in; empty where `tip`
    is not a full commit SHA of this repository."""
    if not re.fullmatch(r"[0-9a-f]{40}", tip):
        return set()
    proc = run_git(repo_root, "rev-list", "--first-parent", f"{tip}^{{commit}}", check=False)
    return set(proc.stdout.split()) if proc.returncode == 0 else set()


def refs_of(repo_root: Path) -> dict[str, str]:
    """Every ref of the repository (branches, tags, replace refs...) -> the object it names."""
    done = run_git(repo_root, "for-each-ref", "--format=%(refname)%00%(objectname)", check=False)
    return dict(line.split("\0", 1) for line in done.stdout.splitlines() if "\0" in line)


def moved_refs(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """"refs/heads/main: 0123456789 -> abcdef0123" for each ref made, moved or deleted."""
    return [f"{name}: {before.get(name, 'none')[:10]} -> {after.get(name, 'deleted')[:10]}"
            for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]

