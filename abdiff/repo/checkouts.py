"""Cached checkouts: each commit materialized once as a detached git worktree, reused.

Why worktrees: the user's working tree, index, HEAD and branches must never be
touched, and `git worktree add --detach` creates a separate folder
with its own HEAD and index while sharing the object store (cheap, no clone).

Layout under the cache folder (`default_cache_dir()`):

    checkouts/<repo-key>/README.txt         says what this is and how to remove it
    checkouts/<repo-key>/REPO               the repository's git common dir (for `cache clean`)
    checkouts/<repo-key>/<sha>/             `git worktree add --detach` of that commit
    checkouts/<repo-key>/<sha>.done         marker, written last (atomically), holds the sha
    checkouts/<repo-key>/worktree-<hash>/   copy of the working tree (side B of "A..")
    checkouts/<repo-key>/worktree-<hash>.done
    checkouts/.locks/<repo-key>.lock        one lock per repository

`<repo-key>` is the repository's folder name plus a short hash of its absolute
git common dir, so two repositories (or two clones named alike) never collide,
while the linked worktrees of one repository share a key. The marker sits beside
the folder, not in it, so a checkout is byte-for-byte the commit (`git status`
clean there). A folder without a valid marker was interrupted (crash, disk full)
and is removed and rebuilt.

A cached checkout outlives the run that made it, and the benchmark ran inside
it: a pull request's benchmark could have edited the checkout of `main` that
the next run (or a trusted nightly) measures. So a commit checkout is made
exactly the commit again before every reuse (`git reset --hard`, `git clean
-ffdx`, an index that skips files thrown away first, all through the hardened
git runner), and a working-tree copy is reused only while its content still
hashes to its name; anything else is rebuilt. `abdiff cache clean` removes them all.

The benchmark can also write the repository's `.git` (worktrees share it): a
replace ref, a graft, an alternate object store or a rewritten object could make
git check out other content for the same sha. git runs with replace refs,
grafts and the commit-graph off (revs.run_git), and every commit checkout, fresh
or reused, is then compared with the commit itself (`verify_commit_checkout`):
the commit and tree objects are hashed by abdiff, so no object store content
can pass for them, and every file on disk must hash to its blob, nothing more.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from abdiff.errors import InfrastructureError, InputError
from abdiff.repo.revs import WORKTREE, SideSpec, git_message, is_bare, run_git, run_git_bytes
from abdiff.store.files import hold_in_use, lock_exclusively, unless_in_use, write_atomic

_SHA_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_COPY_PREFIX = "worktree-"
_MARKER_SUFFIX = ".done"
_TMP_PREFIX = ".tmp-"
_CHUNK = 1 << 20


def default_cache_dir() -> Path:
    """$ABDIFF_CACHE_DIR, else $XDG_CACHE_HOME/abdiff, else ~/.cache/abdiff."""
    explicit = os.environ.get("ABDIFF_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec says to ignore relative values
        return Path(xdg) / "abdiff"
    return Path.home() / ".cache" / "abdiff"


def _checkouts_root(cache_dir: Path) -> Path:
    return cache_dir / "checkouts"


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _rmtree(path: Path) -> None:
    """Remove a folder even when the benchmark left read-only files or folders in it."""

    def retry(func: Callable[[str], object], p: str, _exc: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
        with contextlib.suppress(FileNotFoundError):
            func(p)

    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=retry)
        else:
            shutil.rmtree(path, onerror=retry)


def _file_digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.digest()


def tree_digest(base: Path, files: list[str]) -> str:
    """Content hash of these files under `base`: paths, contents, executable bits, symlinks.

    Modification times are left out on purpose: the same content is the same
    checkout, whenever it was written.
    """
    h = hashlib.sha256()
    for rel in sorted(set(files)):
        path = base / rel
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                kind, digest = b"l", hashlib.sha256(os.fsencode(os.readlink(path))).digest()
            elif stat.S_ISREG(st.st_mode):
                kind = b"x" if st.st_mode & 0o111 else b"f"
                digest = _file_digest(path)
            else:
                continue
        except FileNotFoundError:
            continue
        h.update(os.fsencode(rel) + b"\0" + kind + b"\0" + digest + b"\n")
    return h.hexdigest()[:20]


def _object_ids(sha: str) -> tuple[str, int]:
    """The hash algorithm of a repository whose object ids look like `sha`, and their size."""
    return ("sha1", 20) if len(sha) == 40 else ("sha256", 32)


def _read_objects(git_cwd: Path, ids: list[str]) -> dict[str, tuple[bytes, bytes]]:
    """id -> (type, content) for objects whose content hashes to their id; others are left
    out, as missing ones are (the caller reports them)."""
    if not ids:
        return {}
    proc = run_git_bytes(git_cwd, "cat-file", "--batch", stdin="".join(f"{i}\n" for i in ids)
                         .encode())
    if proc.returncode != 0:
        return {}
    algorithm = _object_ids(ids[0])[0]
    found: dict[str, tuple[bytes, bytes]] = {}
    data, pos = proc.stdout, 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        pos = end + 1
        if len(header) != 3:  # "<id> missing"
            continue
        kind, size = header[1], int(header[2])
        content = data[pos:pos + size]
        pos += size + 1
        digest = hashlib.new(algorithm, kind + b" %d\0" % size + content).hexdigest()
        if digest == header[0].decode():
            found[digest] = (kind, content)
    return found


def _tree_entries(content: bytes, id_size: int) -> Iterator[tuple[bytes, str, str]]:
    """(mode, name, object id) of each entry of a raw tree object."""
    pos = 0
    while pos < len(content):
        space = content.index(b" ", pos)
        nul = content.index(b"\0", space)
        yield (content[pos:space], os.fsdecode(content[space + 1:nul]),
               content[nul + 1:nul + 1 + id_size].hex())
        pos = nul + 1 + id_size


def _commit_files(git_cwd: Path, sha: str) -> dict[str, tuple[bytes, str]] | str:
    """Every path of commit `sha` -> (mode, blob id), read from objects abdiff hashed itself;
    a string says what is wrong instead."""
    id_size = _object_ids(sha)[1]
    commit = _read_objects(git_cwd, [sha]).get(sha)
    if commit is None or commit[0] != b"commit" or not commit[1].startswith(b"tree "):
        return f"commit {sha[:12]} is missing or does not hash to its id"
    files: dict[str, tuple[bytes, str]] = {}
    level = {"": commit[1][5:5 + 2 * id_size].decode()}
    while level:
        trees = _read_objects(git_cwd, sorted(set(level.values())))
        below: dict[str, str] = {}
        for prefix, tree_id in level.items():
            tree = trees.get(tree_id)
            if tree is None or tree[0] != b"tree":
                return (f"tree {tree_id[:12]} ({prefix or '/'}) is missing or does not hash "
                        "to its id")
            for mode, name, object_id in _tree_entries(tree[1], id_size):
                path = f"{prefix}{name}"
                if mode == b"40000":
                    below[f"{path}/"] = object_id
                else:
                    files[path] = (mode, object_id)
        level = below
    return files


def _blob_id(path: Path, st: os.stat_result, algorithm: str) -> str:
    """The git blob id of a file or symbolic link on disk, as `git hash-object` computes it."""
    if stat.S_ISLNK(st.st_mode):
        content = os.fsencode(os.readlink(path))
        return hashlib.new(algorithm, b"blob %d\0" % len(content) + content).hexdigest()
    h = hashlib.new(algorithm, b"blob %d\0" % st.st_size)
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify_commit_checkout(git_cwd: Path, folder: Path, sha: str) -> str | None:
    """None when `folder` holds exactly commit `sha`'s files; else what differs, in words.

    The commit and its trees are hashed here, not trusted from git: a replace ref, a
    graft, an alternate store or a rewritten object cannot make other content pass for
    `sha`. Each file must hash to its blob with its mode (executable bit, symbolic link);
    a file the commit does not have (a planted `.pyc`, `sitecustomize.py`) fails too,
    and so does anything inside a submodule's folder (abdiff checks out no submodule).
    """
    expected = _commit_files(git_cwd, sha)
    return expected if isinstance(expected, str) else _differs(folder, sha, expected)


def _git_link(folder: Path) -> str | None:
    """What a worktree's `.git` file says (where its git dir is); None for anything else."""
    link = folder / ".git"
    try:
        return link.read_text(encoding="utf-8") if not link.is_symlink() and link.is_file() \
            else None
    except (OSError, UnicodeDecodeError):
        return None


def _differs(folder: Path, sha: str, expected: dict[str, tuple[bytes, str]]) -> str | None:
    """verify_commit_checkout against the commit's files already read (`_commit_files`)."""
    algorithm = _object_ids(sha)[0]
    gitlinks = {path for path, (mode, _) in expected.items() if mode == b"160000"}
    seen = set()
    for top, dirs, names in os.walk(folder):
        rel_top = os.path.relpath(top, folder)
        prefix = "" if rel_top == "." else rel_top.replace(os.sep, "/") + "/"
        if not prefix and ".git" in dirs:
            dirs.remove(".git")
        if prefix.rstrip("/") in gitlinks:
            if dirs or names:
                return f"{prefix} is a submodule's folder but holds files"
            continue
        for name in [*names, *(d for d in dirs if os.path.islink(os.path.join(top, d)))]:
            rel = prefix + name
            if rel == ".git":  # the worktree's link to the repository (a file)
                continue
            entry = expected.get(rel)
            if entry is None:
                return f"{rel} is not in the commit"
            path = Path(top) / name
            st = os.lstat(path)
            mode, blob = entry
            # a regular file's mode in a tree is 100644 or 100755 (100664 in old repositories):
            # git checks out only its owner-executable bit
            same_kind = (mode == b"120000") if stat.S_ISLNK(st.st_mode) else (
                mode.startswith(b"100") and bool(int(mode, 8) & 0o100) == bool(st.st_mode & 0o100))
            if not same_kind or _blob_id(path, st, algorithm) != blob:
                return f"{rel} differs from the commit"
            seen.add(rel)
    missing = sorted(set(expected) - seen - gitlinks)
    return f"{missing[0]} is missing" if missing else None


class CheckoutCache:
    """The checkouts of one repository in one cache folder; safe across processes.

    `created` lists the folders this instance made (not reused): a second run
    over the same SHAs leaves it empty.
    """

    lock_timeout: float = 3600.0

    def __init__(self, repo_root: Path, cache_dir: Path | None = None) -> None:
        self.repo_root = _real(Path(repo_root))
        self.cache_dir = _real(Path(cache_dir) if cache_dir is not None else default_cache_dir())
        proc = run_git(self.repo_root, "rev-parse", "--git-common-dir", check=False)
        if proc.returncode != 0:
            raise InputError(f"{self.repo_root} is not a git repository "
                             f"({git_message(proc.stderr)})")
        common = Path(proc.stdout.strip())
        self.common_dir = _real(common if common.is_absolute() else self.repo_root / common)
        name = self.common_dir.parent.name if self.common_dir.name == ".git" \
            else self.common_dir.name
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).strip("._") or "repo"
        digest = hashlib.sha256(os.fsencode(str(self.common_dir))).hexdigest()[:12]
        self.key = f"{safe[:40]}-{digest}"
        self.key_dir = _checkouts_root(self.cache_dir) / self.key
        self._in_use: int | None = None  # descriptor of the in-use lock, once checked out
        self.created: list[Path] = []
        self._commit_trees: dict[str, dict[str, tuple[bytes, str]]] = {}  # sha -> _commit_files
        self._links: dict[str, str | None] = {}  # sha -> its checkout's .git, checked in full

    # ------------------------------------------------------------------ public

    def checkout(self, side: SideSpec) -> Path:
        """The folder the benchmark runs in for this side, made if not cached yet; this
        repository's checkouts stay in use (`cache clean` refuses) until this process ends."""
        if self._in_use is None:
            self._in_use = hold_in_use(_in_use_lock(self.key_dir))
        if side.sha == WORKTREE:
            return self._working_tree_copy()
        if not _SHA_RE.fullmatch(side.sha):
            raise InputError(f"{side.rev}: {side.sha!r} is not a resolved commit sha")
        with self._locked():
            self._prepare_key_dir()
            folder = self.key_dir / side.sha
            if self._untouched(folder, side.sha):
                return folder
            if self._valid_commit_checkout(folder, side.sha) \
                    and self._verify(folder, side.sha) is None:
                self._links[side.sha] = _git_link(folder)
                return folder
            self._discard(folder)
            exists = run_git(self.repo_root, "cat-file", "-e", f"{side.sha}^{{commit}}",
                             check=False)
            if exists.returncode != 0:
                raise InputError(f"{side.rev}: commit {side.sha} is not in {self.repo_root}")
            # --force: a folder whose git link was rewritten could not be deregistered
            # above; its stale registration must not block the rebuild.
            proc = run_git(self.repo_root, "worktree", "add", "--force", "--detach", str(folder),
                           side.sha, check=False)
            if proc.returncode != 0:
                self._discard(folder)
                raise InfrastructureError(f"cannot check out {side.rev} ({side.sha[:12]}) into "
                                          f"{folder}: {git_message(proc.stderr)}")
            problem = self._verify(folder, side.sha)
            if problem is not None:
                self._discard(folder)
                raise InfrastructureError(
                    f"{side.rev}: git checked out something else than commit {side.sha[:12]} "
                    f"({problem}); objects in {self.common_dir} were rewritten (`git fsck`), "
                    "or its .gitattributes convert line endings (eol=crlf)")
            write_atomic(self._marker(folder), side.sha + "\n")
            self._links[side.sha] = _git_link(folder)
            self.created.append(folder)
            return folder

    def clean(self) -> int:
        """Remove every checkout of this repository in this cache; returns how many."""
        with self._locked():
            return _clean_key_dir(self.key_dir, self.repo_root)

    # ------------------------------------------------------------------ commits

    def _untouched(self, folder: Path, sha: str) -> bool:
        """Checked in full earlier in this run (git's view too) and still exactly the
        commit's files, hashed here, with the same git link: a checkout no worker changed
        (the sandbox keeps it read-only) is used again without a git process."""
        link = self._links.get(sha)
        return link is not None and self._marker_ok(folder, sha) \
            and _git_link(folder) == link and self._verify(folder, sha) is None

    def _verify(self, folder: Path, sha: str) -> str | None:
        """verify_commit_checkout, reading the commit's trees once per run: what abdiff
        hashed itself cannot change under a sha, and a checkout is verified before every
        round."""
        files = self._commit_trees.get(sha)
        if files is None:
            found = _commit_files(self.repo_root, sha)
            if isinstance(found, str):
                return found
            files = self._commit_trees[sha] = found
        return _differs(folder, sha, files)

    def _valid_commit_checkout(self, folder: Path, sha: str) -> bool:
        """A worktree of this repository at `sha`, restored to exactly the commit.

        The marker must hold the sha, and the folder's git link must lead to this
        repository with HEAD at the sha. Then what a benchmark changed is undone:
        `reset --hard` restores edited and deleted files, `clean -ffdx` removes
        added ones (ignored ones too: a planted `.pyc` would be imported). An
        index whose entries are told to skip the check (assume-unchanged,
        skip-worktree) is thrown away first, so every file is compared again.
        Unchanged files are not rewritten. False when any step fails: the
        caller rebuilds.
        """
        if not self._marker_ok(folder, sha) or not (folder / ".git").is_file():
            return False
        where = run_git(folder, "rev-parse", "--path-format=absolute", "--git-common-dir",
                        "--git-dir", check=False)
        lines = where.stdout.splitlines()
        if where.returncode != 0 or len(lines) != 2 or _real(Path(lines[0])) != self.common_dir:
            return False
        head = run_git(folder, "rev-parse", "--verify", "HEAD", check=False)
        if head.returncode != 0 or head.stdout.strip() != sha:
            return False
        flags = run_git(folder, "ls-files", "-v", "-z", check=False)
        blind = flags.returncode != 0 or any(
            entry[:1].islower() or entry[:1] == "S" for entry in flags.stdout.split("\0"))
        if blind:
            try:
                (Path(lines[1]) / "index").unlink(missing_ok=True)
            except OSError:
                return False
        status = self._status(folder)
        if status is None:
            return False
        steps: list[tuple[str, ...]] = []
        if blind or any(not e.startswith(("??", "!!")) for e in status):
            steps.append(("reset", "-q", "--hard", sha))
        if any(e.startswith(("??", "!!")) for e in status):
            steps.append(("clean", "-ffdxq"))
        for args in steps:
            if run_git(folder, *args, check=False).returncode != 0:
                return False
        return not steps or self._status(folder) == []

    @staticmethod
    def _status(folder: Path) -> list[str] | None:
        """`git status` entries, untracked and ignored files included (None: git failed)."""
        proc = run_git(folder, "status", "--porcelain", "-z", "--ignored",
                       "--untracked-files=all", check=False)
        return [e for e in proc.stdout.split("\0") if e] if proc.returncode == 0 else None

    # ------------------------------------------------------------------ working tree

    def _working_tree_files(self) -> list[str]:
        """Tracked and untracked-not-ignored files that exist (deleted ones are skipped)."""
        if is_bare(self.repo_root):
            raise InputError(f"{self.repo_root} is a bare repository: it has no working tree")
        proc = run_git(self.repo_root, "ls-files", "--cached", "--others", "--exclude-standard",
                       "-z")
        names = dict.fromkeys(n for n in proc.stdout.split("\0") if n)
        files = []
        for rel in names:
            path = self.repo_root / rel
            # Directories here are submodules or nested repositories: not copied.
            if path.is_symlink() or path.is_file():
                files.append(rel)
        return files

    def _working_tree_copy(self) -> Path:
        """Copy the working tree (no .git) into worktree-<content hash>, or reuse that copy.

        The name comes from hashing the copy itself, so a file edited while
        copying can never leave a folder whose content differs from its name.
        """
        files = self._working_tree_files()
        digest = tree_digest(self.repo_root, files)
        with self._locked():
            self._prepare_key_dir()
            folder = self.key_dir / f"{_COPY_PREFIX}{digest}"
            if self._copy_intact(folder, digest):
                return folder
        tmp = self.key_dir / f"{_TMP_PREFIX}{_COPY_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            copied = self._copy_files(files, tmp)
            digest = tree_digest(tmp, copied)
            with self._locked():
                folder = self.key_dir / f"{_COPY_PREFIX}{digest}"
                if self._copy_intact(folder, digest):
                    return folder
                self._discard(folder)
                os.rename(tmp, folder)
                write_atomic(self._marker(folder), digest + "\n")
                self.created.append(folder)
                return folder
        except OSError as exc:
            raise InfrastructureError(f"cannot copy the working tree of {self.repo_root} "
                                      f"into {self.key_dir}: {exc}") from exc
        finally:
            _rmtree(tmp)

    def _copy_intact(self, folder: Path, digest: str) -> bool:
        """The marker names `digest` and every file in the copy, no more, still hashes to it."""
        if not self._marker_ok(folder, digest) or not folder.is_dir() or folder.is_symlink():
            return False
        present = []
        for top, dirs, names in os.walk(folder):
            rel_top = os.path.relpath(top, folder)
            for name in [*names, *(d for d in dirs if os.path.islink(os.path.join(top, d)))]:
                present.append(os.path.normpath(os.path.join(rel_top, name)))
        return tree_digest(folder, present) == digest

    def _copy_files(self, files: list[str], dest: Path) -> list[str]:
        copied = []
        dest.mkdir(parents=True)
        for rel in files:
            src, dst = self.repo_root / rel, dest / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                if src.is_symlink():
                    os.symlink(os.readlink(src), dst)
                else:
                    shutil.copy2(src, dst, follow_symlinks=False)
            except FileNotFoundError:
                continue  # deleted since it was listed
            copied.append(rel)
        return copied

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _marker(folder: Path) -> Path:
        return folder.with_name(folder.name + _MARKER_SUFFIX)

    def _marker_ok(self, folder: Path, content: str) -> bool:
        try:
            return self._marker(folder).read_text(encoding="utf-8").strip() == content
        except (OSError, UnicodeDecodeError):
            return False

    def _discard(self, folder: Path) -> None:
        """Remove a half-made or invalid checkout: marker first, then worktree and folder."""
        self._marker(folder).unlink(missing_ok=True)
        _remove_worktree(self.repo_root, folder)

    def _prepare_key_dir(self) -> None:
        self.key_dir.mkdir(parents=True, exist_ok=True)
        repo_file = self.key_dir / "REPO"
        if not repo_file.exists():
            write_atomic(repo_file, f"{self.common_dir}\n")
        readme = self.key_dir / "README.txt"
        if not readme.exists():
            write_atomic(readme, _README.format(repo=self.repo_root, common=self.common_dir))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        locks = _checkouts_root(self.cache_dir) / ".locks"
        try:
            locks.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InfrastructureError(f"cannot create the cache folder {locks}: {exc}") from exc
        path = locks / f"{self.key}.lock"
        fd = lock_exclusively(path, self.lock_timeout)
        if fd is None:
            raise InfrastructureError(f"another abdiff has held {path} for "
                                      f"{self.lock_timeout:.0f} s; is it stuck?")
        try:
            yield
        finally:
            os.close(fd)

_README = """\
This folder belongs to abdiff (differential A/B benchmarking).

It holds cached checkouts of the git repository
    {repo}
    (git dir: {common})

  <sha>/             a detached `git worktree` of that commit; `git worktree list`
                     in the repository shows it. It never touches your working tree,
                     index, HEAD or branches.
  worktree-<hash>/   a copy of the repository's working tree (uncommitted and
                     untracked files included), named by a hash of its content.
  *.done             marks a complete checkout; a folder without it is rebuilt.

abdiff reuses these folders across runs; do not edit files here.
Remove them (and their `git worktree` entries) with:
    abdiff cache clean --repo {repo}
"""


def _registered_worktrees(git_cwd: Path) -> list[Path]:
    proc = run_git(git_cwd, "worktree", "list", "--porcelain", check=False)
    if proc.returncode != 0:
        return []
    return [Path(line[len("worktree "):]) for line in proc.stdout.splitlines()
            if line.startswith("worktree ")]


def _remove_worktree(git_cwd: Path | None, folder: Path) -> None:
    """Deregister (`git worktree remove --force --force`) and delete one checkout folder.

    Only this folder's registration is removed: a plain `git worktree prune`
    would also forget the user's own worktrees whose folders are missing (an
    unmounted drive), which is not ours to decide.
    """
    if git_cwd is not None and git_cwd.exists():
        target = _real(folder)
        if any(_real(p) == target for p in _registered_worktrees(git_cwd)):
            run_git(git_cwd, "worktree", "remove", "--force", "--force", str(folder),
                    check=False)
    _rmtree(folder)


def _in_use_lock(key_dir: Path) -> Path:
    return key_dir.parent / ".locks" / f"{key_dir.name}.in-use"


def _clean_key_dir(key_dir: Path, git_cwd: Path | None) -> int:
    """Remove one repository's checkouts, their worktree registrations, and the folder,
    unless a running measurement uses them (InfrastructureError)."""
    with unless_in_use(_in_use_lock(key_dir), f"the cached checkouts in {key_dir} are"):
        return _remove_key_dir(key_dir, git_cwd)


def _remove_key_dir(key_dir: Path, git_cwd: Path | None) -> int:
    if git_cwd is not None and not git_cwd.exists():
        git_cwd = None
    count = 0
    if git_cwd is not None:
        # Registered under key_dir, folder present or not (deleted by hand).
        root = _real(key_dir)
        for path in _registered_worktrees(git_cwd):
            if _real(path).parent == root:
                run_git(git_cwd, "worktree", "remove", "--force", "--force", str(path),
                        check=False)
                count += not path.name.startswith(_TMP_PREFIX)
                _rmtree(path)
    if key_dir.is_dir():
        for entry in key_dir.iterdir():
            if entry.is_dir() and not entry.is_symlink() \
                    and not entry.name.startswith(_TMP_PREFIX):
                count += 1
            _rmtree(entry)
        _rmtree(key_dir)
    return count


def clean_cache(cache_dir: Path | None = None, repo_root: Path | None = None) -> int:
    """Remove cached checkouts: of one repository, or (repo_root None) of every repository.

    The other contents of the cache folder (measured rounds under `runs/`) stay.
    Returns the number of checkout folders removed.
    """
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if repo_root is not None:
        return CheckoutCache(repo_root, cache).clean()
    root = _checkouts_root(cache)
    if not root.is_dir():
        return 0
    count = 0
    for key_dir in sorted(root.iterdir()):
        if not key_dir.is_dir() or key_dir.name.startswith("."):
            continue
        common = None
        with contextlib.suppress(OSError, UnicodeDecodeError):
            common = Path((key_dir / "REPO").read_text(encoding="utf-8").strip() or ".")
        if common is None or not common.is_dir():
            count += _clean_key_dir(key_dir, None)  # the repository is gone
            continue
        try:
            cache_of_repo = CheckoutCache(common, cache)
        except (InputError, InfrastructureError):
            count += _clean_key_dir(key_dir, None)
            continue
        if cache_of_repo.key == key_dir.name:
            count += cache_of_repo.clean()
        else:  # moved or renamed repository: still deregister what git knows of
            count += _clean_key_dir(key_dir, common)
    return count
