"""Writes the demo repository: the embedded harness on `main`, and two versions of the fix.

The harness ships as package data under `abdiff/demo/harness/`; its
`runner.py` holds one marker line where the benchmark would announce MTP shapes
to the attention metadata. Each branch is that tree with the marker replaced by
the branch's announcement (`ANNOUNCEMENT_GUARDS`), so the branches differ in
those lines only, as the pull request's two revisions did:

- `main`: no announcement (the marker line is dropped); DSA with
  `seq_len_q > 1` aborts in the indexer;
- `pr-v1`: guarded by `hasattr(attn_metadata, "update_spec_dec_param")`,
  which every backend passes, so TRTLLM's kernel selection changes too;
- `pr`: guarded by `hasattr(attn_metadata, "kv_lens_cuda_2d")`, DSA only.

With `history=True` a branch `history` follows `main` with seven commits, so
`abdiff bisect main..history` has something real to find: unrelated edits, the
`pr` fix (DSA only, expected), the `pr-v1` guard (TRTLLM's facts and kernels
change: the first culprit) and host-side work in one config's run pack (its
latency changes, nothing else: the second culprit).

Author, committer, dates and messages are fixed and the user's git
configuration is kept out, so the SHAs are the same on every machine and
`abdiff main..pr` means the same comparison everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from abdiff.errors import InfrastructureError, InputError
from abdiff.repo.revs import GIT_HARDENING

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

RUNNER_PATH = "tinyllm/tools/layer_wise_benchmarks/runner.py"
ANNOUNCE_MARKER = "# @abdiff-demo: announcement"

# Branch -> the attribute the announcement's hasattr() guard tests (None: no announcement).
ANNOUNCEMENT_GUARDS: MappingProxyType[str, str | None] = MappingProxyType({
    "main": None,
    "pr-v1": "update_spec_dec_param",
    "pr": "kv_lens_cuda_2d",
})

_ANNOUNCEMENT = """\
if (
    run_type == "GEN"
    and seq_len_q > 1
    and hasattr(attn_metadata, "{guard}")
):
    attn_metadata.update_spec_dec_param(
        batch_size=batch_size,
        is_spec_decoding_enabled=False,
        is_spec_dec_tree=False,
        is_spec_dec_dynamic_tree=False,
        max_draft_len=seq_len_q - 1,
        max_total_draft_tokens=seq_len_q - 1,
    )
"""

_FIX_TITLE = "[None][fix] Announce MTP shapes to attention metadata in layer-wise benchmarks"

# Branch -> (commit message, author/committer date in git's raw "<unix seconds> <tz>" form).
_COMMITS: MappingProxyType[str, tuple[str, str]] = MappingProxyType({
    "main": (
        "Add layer-wise attention benchmark harness\n\n"
        "TRTLLM and DSA attention backends with a layer-wise runner and run.py.\n",
        "1762164000 +0000",  # 2025-11-03 10:00 UTC
    ),
    "pr-v1": (
        f"{_FIX_TITLE}\n\n"
        "Call update_spec_dec_param() for GEN packs with seq_len_q > 1 so DSA sizes\n"
        "kv_lens_cuda_2d for the draft tokens.\n"
        'Guard: hasattr(attn_metadata, "update_spec_dec_param").\n',
        "1762257600 +0000",  # 2025-11-04 12:00 UTC
    ),
    "pr": (
        f"{_FIX_TITLE}\n\n"
        "Call update_spec_dec_param() for GEN packs with seq_len_q > 1 so DSA sizes\n"
        "kv_lens_cuda_2d for the draft tokens.\n"
        'Guard: hasattr(attn_metadata, "kv_lens_cuda_2d"), which only DSA metadata has,\n'
        "so other backends keep max_total_draft_tokens=None.\n",
        "1762351200 +0000",  # 2025-11-05 14:00 UTC
    ),
})

_IDENTITY = MappingProxyType({"name": "abdiff demo", "email": "demo@abdiff.invalid"})

README_PATH = "README.md"
CONFIG_PATH = "examples/layer_wise_benchmarks/config_gen.yaml"
# The run pack's step, as the harness writes it; the slowing commit wraps it.
# the one-rank run pack's step, a whole line (the tensor-parallel pack has its own)
_STEP_LINE = "\n                    return attention.forward(metadata=attn_metadata, **inputs)\n"
_TRACED_STEP = """
                    out = attention.forward(metadata=attn_metadata, **inputs)
                    if traced:  # host-side tracing of one decode shape
                        time.sleep({delay})
                    return out
"""
_TRACE_SETUP = """\
            traced = self.backend == "TRTLLM" and batch_size == 8 and seq_len_q == 1
"""
TRACED_CONFIG = "GEN-TRTLLM-bs8-q1-kv2049"  # the config whose latency the history changes
TRACE_DELAY_S = 0.002  # about 2x the config's step on the CPU: decidable despite CPU noise


def slowed_runner(source: str) -> str:
    """runner.py with host-side work in the TRACED_CONFIG run pack only."""
    if source.count(_STEP_LINE) != 1 or "            def run_pack()" not in source:
        raise InfrastructureError(f"{RUNNER_PATH} in abdiff's package data changed shape: the "
                                  "demo history's slowing commit cannot be applied")
    source = source.replace(_STEP_LINE, _TRACED_STEP.format(delay=TRACE_DELAY_S))
    pack = "            def run_pack()"
    source = source.replace(pack, _TRACE_SETUP + "\n" + pack, 1)
    return source.replace("import torch\n", "import time\n\nimport torch\n", 1)


def _history_commits(template: str) -> list[tuple[str, dict[str, str | None]]]:
    """(message, {path: new text, or None to append a line}) for the `history` branch."""
    fixed = runner_source(template, ANNOUNCEMENT_GUARDS["pr"])
    every_backend = runner_source(template, ANNOUNCEMENT_GUARDS["pr-v1"])
    return [
        ("docs: say where the run pack comes from", {README_PATH: None}),
        (_COMMITS["pr"][0], {RUNNER_PATH: fixed}),
        ("examples: note the kv-cache length of the GEN config", {CONFIG_PATH: None}),
        ("runner: announce MTP shapes to every backend that has update_spec_dec_param",
         {RUNNER_PATH: every_backend}),
        ("docs: mention the DSA indexer", {README_PATH: None}),
        ("runner: trace TRTLLM bs8 decode steps on the host", {RUNNER_PATH:
                                                             slowed_runner(every_backend)}),
        ("docs: changelog", {README_PATH: None}),
    ]

# Written by the builder (hidden files are not reliably shipped as package data).
_GITIGNORE = "__pycache__/\n*.pyc\n"


def harness_files() -> dict[str, bytes]:
    """The harness tree from package data: relative POSIX path -> bytes (main's content)."""
    root = resources.files("abdiff.demo").joinpath("harness")
    files: dict[str, bytes] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for child in node.iterdir():
            name = child.name
            if name == "__pycache__" or name.endswith(".pyc") or name.startswith("."):
                continue
            rel = f"{prefix}{name}"
            if child.is_dir():
                walk(child, rel + "/")
            elif child.is_file():
                files[rel] = child.read_bytes()

    walk(root, "")
    if RUNNER_PATH not in files:
        raise InfrastructureError(f"abdiff package data is incomplete: {RUNNER_PATH} missing")
    return files


def runner_source(template: str, guard: str | None) -> str:
    """runner.py for one branch: the marker line replaced by that branch's announcement.

    The announcement is indented like the marker; with no guard (main) the
    marker line is removed and nothing is added.
    """
    lines = template.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip().startswith(ANNOUNCE_MARKER)]
    if len(hits) != 1:
        raise InfrastructureError(
            f"{RUNNER_PATH} in abdiff's package data must hold exactly one announcement marker"
        )
    i = hits[0]
    replacement: list[str] = []
    if guard is not None:
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        replacement = [
            indent + line if line.strip() else line
            for line in _ANNOUNCEMENT.format(guard=guard).splitlines(keepends=True)
        ]
    return "".join(lines[:i] + replacement + lines[i + 1 :])


def _git_env(date: str) -> dict[str, str]:
    """An environment in which git's output depends on nothing but our inputs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=_IDENTITY["name"],
        GIT_AUTHOR_EMAIL=_IDENTITY["email"],
        GIT_AUTHOR_DATE=date,
        GIT_COMMITTER_NAME=_IDENTITY["name"],
        GIT_COMMITTER_EMAIL=_IDENTITY["email"],
        GIT_COMMITTER_DATE=date,
        LC_ALL="C",
    )
    return env


def _git(repo: Path, *args: str, date: str = _COMMITS["main"][1]) -> str:
    argv = ["git", *GIT_HARDENING, "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false", *args]
    try:
        proc = subprocess.run(
            argv, cwd=repo, env=_git_env(date), capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise InfrastructureError("git is not installed or not on PATH") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        raise InfrastructureError(f"git {args[0]} failed in {repo}: {last}")
    return proc.stdout.strip()


def _write_tree(repo: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o644)


def _check_target(path: Path) -> None:
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise InputError(f"demo path {path} exists and is not a directory")
        if any(path.iterdir()):
            raise InputError(f"demo path {path} exists and is not empty; give another PATH "
                             "(`abdiff demo PATH`) or remove it")


def _build_history(path: Path, files: dict[str, bytes], template: str) -> str:
    """The `history` branch on top of `main`; returns its head SHA."""
    start = int(_COMMITS["pr"][1].split()[0]) + 86400
    _git(path, "checkout", "-q", "-b", "history", "main")
    tree = {rel: data.decode("utf-8") for rel, data in files.items()
            if rel in (README_PATH, CONFIG_PATH)}
    tree[RUNNER_PATH] = runner_source(template, None)
    for number, (message, changes) in enumerate(_history_commits(template), 1):
        date = f"{start + 3600 * number} +0000"
        for rel, text in changes.items():
            if text is None:  # an unrelated edit: one more line
                comment = "# " if rel.endswith(".yaml") else ""
                text = tree[rel] + f"\n{comment}History edit {number}: {message}.\n"
            tree[rel] = text
            _write_tree(path, {rel: text.encode("utf-8")})
        _git(path, "add", "-A", date=date)
        _git(path, "commit", "-q", "--no-verify", "-m", message, date=date)
    return _git(path, "rev-parse", "HEAD")


def build_demo_repo(path: Path, history: bool = False) -> dict[str, str]:
    """Create the demo repository at `path`; return {branch: commit SHA}.

    `path` must not exist or be an empty directory (InputError otherwise).
    `main` is one commit; `pr-v1` and `pr` are each one commit on top of it;
    with `history`, the branch `history` too (module docstring). The working
    tree is left on `main`.
    """
    path = Path(path)
    _check_target(path)
    path.mkdir(parents=True, exist_ok=True)
    files = harness_files()
    template = files[RUNNER_PATH].decode("utf-8")
    files[".gitignore"] = _GITIGNORE.encode()

    _git(path, "init", "-q", "--template=")
    _git(path, "symbolic-ref", "HEAD", "refs/heads/main")
    _git(path, "config", "commit.gpgsign", "false")
    _git(path, "config", "core.autocrlf", "false")

    shas: dict[str, str] = {}
    for branch, guard in ANNOUNCEMENT_GUARDS.items():
        message, date = _COMMITS[branch]
        if branch != "main":
            _git(path, "checkout", "-q", "-b", branch, "main", date=date)
        tree = dict(files)
        tree[RUNNER_PATH] = runner_source(template, guard).encode("utf-8")
        _write_tree(path, tree)
        _git(path, "add", "-A", date=date)
        _git(path, "commit", "-q", "--no-verify", "-m", message, date=date)
        shas[branch] = _git(path, "rev-parse", "HEAD", date=date)
    if history:
        shas["history"] = _build_history(path, files, template)
    _git(path, "checkout", "-q", "main")
    return shas
