"""A state folder's state.json: what abdiff stored there and can prove it wrote.

The MAC (under the key the benchmark never gets) covers the seed, whether the
measurement is complete and the SHA-256 of each run file as abdiff wrote it; every
reader of stored rounds (`--resume`, `history`, `compare` on the cache) goes through
`stored_state`, which reads each file once, so what is parsed is what was hashed.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from abdiff.host.exposure import authentic, authenticate
from abdiff.store.files import read_worker_file, worker_json, write_atomic


def write_state(state_dir: Path, seed: int, complete: bool, files: dict[str, str | None]
                ) -> None:
    """state.json: the seed, whether the measurement is complete, the SHA-256 of each run
    file as abdiff wrote it, and their MAC under the key the benchmark never gets."""
    state: dict = {"seed": seed, "complete": complete, "files": files}
    state["mac"] = authenticate(_signed(state_dir, state))
    write_atomic(state_dir / "state.json", json.dumps(state) + "\n")


def _signed(state_dir: Path, state: dict) -> bytes:
    """What state.json's MAC covers: its fields, and the state folder's name (the key of
    what was measured), so a valid state cannot be copied to another measurement."""
    fields = {k: state.get(k) for k in ("seed", "complete", "files")}
    return json.dumps([state_dir.name, fields], sort_keys=True).encode()


@dataclass(frozen=True)
class StoredState:
    """A state folder's state.json whose MAC holds, and its run files read once: `files`
    the text of each whose SHA-256 is the one recorded (as abdiff wrote it), `changed` the
    names of those that are not."""

    seed: int
    complete: bool
    files: dict[str, str]
    changed: tuple[str, ...]


def stored_state(state_dir: Path) -> StoredState | str:
    """What abdiff stored in a state folder and can prove it wrote (the MAC of state.json
    under the key the benchmark never gets, the hash of each run file), else why not. Each
    file is read once, without following links: what is parsed is what was hashed."""
    text = read_worker_file(state_dir / "state.json", limit=None)
    try:
        state = worker_json(text)
    except ValueError:
        state = None
    if not isinstance(state, dict):
        return "no readable state.json" if text else "no state.json"
    files, seed = state.get("files"), state.get("seed")
    if not authentic(_signed(state_dir, state), state.get("mac")) or not isinstance(files, dict) \
            or not isinstance(seed, int):
        return "its state.json fails authentication (not written by this abdiff, or changed)"
    found: dict[str, str] = {}
    changed = []
    for name in ("a.json", "b.json"):
        data = read_worker_file(state_dir / name, limit=None)  # abdiff's own: whole
        if files.get(name) is None and not data:
            continue
        if files.get(name) == hashlib.sha256(data.encode()).hexdigest():
            found[name] = data
        else:
            changed.append(name)
    return StoredState(seed, bool(state.get("complete")), found, tuple(changed))


def authenticated_run_files(state_dir: Path) -> dict[Path, str] | str:
    """The run files (a.json, b.json) of a state folder that abdiff wrote, each path with
    the text that was authenticated (`stored_state`), else why not: what `history` and
    `compare` read from the cache, as `--resume` does (RunState.open)."""
    state = stored_state(state_dir)
    if isinstance(state, str):
        return state
    if state.changed:
        return f"{state.changed[0]} is not the file abdiff wrote (changed since)"
    return {state_dir / name: text for name, text in state.files.items()}


def set_aside(state_dir: Path) -> Path | None:
    """A finished measurement in `state_dir` moved beside it (`<name>.<n>`, signed again for
    that name), so that measuring the same command again keeps it: `history` shows it and
    later runs borrow its noise. None, and nothing moved, where `state_dir` holds nothing
    finished that abdiff can prove it wrote."""
    state = stored_state(state_dir)
    if isinstance(state, str) or not state.complete or state.changed:
        return None
    number = 1
    while os.path.lexists(kept := state_dir.with_name(f"{state_dir.name}.{number}")):
        number += 1
    # when it was last written stays its age (earlier runs are taken newest first, and
    # `abdiff cache --runs --older-than` reads it)
    written = os.stat(state_dir / "state.json")
    os.rename(state_dir, kept)
    write_state(kept, state.seed, True, {name: hashlib.sha256(text.encode()).hexdigest()
                                         for name, text in state.files.items()})
    for path in (kept / "state.json", kept):
        os.utime(path, ns=(written.st_atime_ns, written.st_mtime_ns))
    return kept
