"""History of configs: their latency, facts and kernels across release baselines and
recorded runs (`abdiff history CONFIG...`, reports/history.py renders it).

Sources, each a run file (`abdiff.run/1`): the baselines (`baselines/NAME.json`)
and the sides of the runs kept in the cache's state folders (`runs/*/a.json`,
`b.json`), of this repository only (the cache is shared between repositories: a run
file names the repository it measured; one from before that counts as this one's
when its commit is one of this repository's), optionally of one target. A point is one
config in one source; points are grouped by commit, the commits in the order they were
first measured, and within a commit by when. `Snapshot` is also what `abdiff baseline
show` prints per config.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from abdiff.errors import InputError, did_you_mean
from abdiff.repo.revs import first_parent_chain
from abdiff.store.baselines import interleaved
from abdiff.store.records import (
    ConfigRuns,
    RunFile,
    load_run_file,
    run_file_of,
)
from abdiff.store.state import authenticated_run_files
from abdiff.verdict.compare import latency_samples, side_facts, side_kernels, side_status
from abdiff.verdict.stats import robust_spread


@dataclass(frozen=True)
class Snapshot:
    """One config as one run file measured it."""

    status: str
    error: str | None
    rounds: int
    median_us: float | None  # median of the round medians
    spread_us: float | None  # their normal-consistent MAD (stats.robust_spread)
    facts: dict[str, Any]
    kernels: dict[str, int]


def snapshot(config: ConfigRuns) -> Snapshot:
    import numpy as np

    status, error = side_status(config.rounds)
    medians = [statistics.median(s) for s in latency_samples(config) if s]
    return Snapshot(
        status=status, error=error, rounds=len(config.rounds),
        median_us=statistics.median(medians) if medians else None,
        spread_us=robust_spread(np.array(medians)) if len(medians) > 1 else None,
        facts=side_facts(config.rounds) or {}, kernels=side_kernels(config.rounds) or {})


@dataclass(frozen=True)
class Point:
    """One source (a baseline, or one side of a recorded run) and its snapshots."""

    kind: Literal["baseline", "run"]
    source: str  # "baseline release-1", "run 56468474 A"
    rev: str
    sha: str
    when: str  # ISO 8601, UTC; "" when the file does not say
    machine: str
    configs: dict[str, Snapshot]
    setup: str = ""  # how it was measured: "local, cpu, eager" (`setup_of`)

    @property
    def run(self) -> str | None:
        """The run a side belongs to, as `source` names it ("56468474", "56468474.1");
        None for a baseline."""
        return self.source.split()[1] if self.kind == "run" else None


@dataclass(frozen=True)
class History:
    config_ids: tuple[str, ...]
    points: tuple[Point, ...]  # oldest first
    searched: str  # where the sources were looked for, as a user reads it
    # run folders left out, each "FOLDER: why" (their run files fail authentication)
    skipped: tuple[str, ...] = ()


def measured_at(run: RunFile) -> str:
    """When a run file's rounds were measured: its latest session's start, else the
    baseline's recorded_at, else ""."""
    started = [str(s.get("started", "")) for s in run.sessions.values() if s.get("started")]
    return max(started) if started else str(run.env.get("recorded_at", ""))


def machine_of(run: RunFile) -> str:
    env = run.env
    device = env.get("device_name") or env.get("cpu_model") or env.get("device") or "?"
    host = env.get("host") or next((s.get("host") for s in run.sessions.values()
                                    if s.get("host")), None)
    return f"{device} on {host}" if host else str(device)


def setup_of(run: RunFile) -> str:
    """What shapes the kernels a run saw besides the commit: the launcher (where the run file
    says), the device, the timing: "local, cpu, eager". Points of one commit measured
    another way differ in kernels without any change to find."""
    env = run.env
    parts = [env.get("launcher"), env.get("device"), env.get("timing")]
    return ", ".join(str(p) for p in parts if p)


def _run_folders(runs: Path) -> list[Path]:
    """The run folders of the cache's `runs/` (a link there, which a benchmark could have
    planted, is none); none where `runs/` is missing or a link."""
    if not runs.is_dir() or runs.is_symlink():
        return []
    return [path for path in runs.iterdir() if path.is_dir() and not path.is_symlink()]


def _sources(baselines: Path, runs: Path, skipped: list[str]
             ) -> list[tuple[Literal["baseline", "run"], str, Path, str | None]]:
    """The baselines, and the run files of the run folders whose MAC holds, each with the
    text that was authenticated (the others, which a benchmark could have written, go to
    `skipped` with why)."""
    found: list[tuple[Literal["baseline", "run"], str, Path, str | None]] = [
        ("baseline", f"baseline {p.stem}", p, None) for p in sorted(baselines.glob("*.json"))]
    for folder in sorted(_run_folders(runs)):
        files = authenticated_run_files(folder)
        if isinstance(files, str):
            skipped.append(f"{folder.name}: {files}")
            continue
        # the key's first 8 digits, and the number of a run kept beside it (`KEY.1`)
        key, dot, kept = folder.name.partition(".")
        for path, text in files.items():
            found.append(("run", f"run {key[:8]}{dot}{kept} {path.stem.upper()}", path, text))
    return found


EARLIER_RUNS = 10
"""The most earlier runs a plan of few rounds borrows noise from (the newest): each holds
a config's rounds of one session, and the family's factor in stats.borrow follows how
noisy the machine is now."""


def earlier_paired_runs(runs: Path, current: Path, like: RunFile, repo_root: Path
                        ) -> list[tuple[RunFile, RunFile]]:
    """The (A, B) run files of the newest EARLIER_RUNS run folders in `runs` (not
    `current`) whose MAC holds, that measured A and B interleaved with `like`'s target, in
    its repository, on its machine and set-up (`machine_of`, `setup_of`; `like` is the
    new run's A and the key is read from each run's A: a pull request's worker reports
    B's environment and could name another machine's runs), both sides
    commits of `like`'s first-parent chain in `repo_root`. A pull request's own rounds
    (its benchmark reports them) lend no noise to a later run, where one config's noise
    made wide would hide its next change; nor, once merged, do those of its commits
    (a merge brings them in off the first-parent chain)."""
    folders: list[tuple[float, Path]] = []
    for path in _run_folders(runs):
        try:
            if path.resolve() != current.resolve():
                folders.append((path.stat().st_mtime, path))
        except OSError:
            continue  # removed meanwhile (`abdiff cache clean`)
    chain = first_parent_chain(repo_root, like.sha)
    key = (like.target, like.env.get("repository"), machine_of(like), setup_of(like))
    found: list[tuple[RunFile, RunFile]] = []
    for _, folder in sorted(folders, key=lambda f: f[0], reverse=True):
        files = authenticated_run_files(folder)
        if isinstance(files, str):
            continue
        texts = {path.name: text for path, text in files.items()}
        if "a.json" not in texts or "b.json" not in texts:
            continue
        try:
            run_a, run_b = (run_file_of(texts[name], folder / name)
                            for name in ("a.json", "b.json"))
        except InputError:
            continue  # a damaged or foreign file has no noise to lend
        if (run_a.sha in chain and run_b.sha in chain and interleaved(run_a, run_b)
                and (run_a.target, run_a.env.get("repository"), machine_of(run_a),
                     setup_of(run_a)) == key):
            found.append((run_a, run_b))
            if len(found) == EARLIER_RUNS:
                break
    return found


def commits_in(repo_root: Path, shas: set[str]) -> set[str]:
    """The shas that are commits of this repository (one git call)."""
    from abdiff.repo.revs import run_git

    if not shas:
        return set()
    proc = run_git(repo_root, "rev-list", "--no-walk", "--ignore-missing", *sorted(shas),
                   check=False)
    return set(proc.stdout.split()) & shas


def collect(repo_root: Path, baselines: Path, runs: Path, config_ids: list[str],
            target: str | None = None) -> History:
    """The history of `config_ids` in this repository (of `target` only, when given);
    InputError naming what exists when a config is in no source (with the closest id), or
    when there is no source at all."""
    searched = f"{baselines}/*.json and the runs in {runs}"
    loaded = []
    skipped: list[str] = []
    for kind, source, path, text in _sources(baselines, runs, skipped):
        try:  # a run folder's file as it was authenticated: not read a second time
            loaded.append((kind, source, load_run_file(path) if text is None
                           else run_file_of(text, path)))
        except InputError:
            continue  # a damaged or foreign file is not this history's concern
    ours = commits_in(repo_root, {run.sha for _, _, run in loaded if run.sha != "WORKTREE"})
    here = str(repo_root.resolve())
    # a baseline refresh measures in a state folder too: its rounds are the baseline's
    in_baselines = {sid for k, _, r in loaded if k == "baseline" for sid in r.sessions}
    loaded = [(k, s, r) for k, s, r in loaded if k == "baseline" or (
        r.sha in ours and r.env.get("repository", here) == here
        and not (r.sessions and set(r.sessions) <= in_baselines))]
    if target is not None:
        loaded = [(k, s, r) for k, s, r in loaded if r.target == target]
        searched += f" (target {target})"
    if not loaded:
        raise InputError(f"no baselines or recorded runs in {searched}; record one with "
                         "`abdiff baseline refresh NAME --rev REV --configs SUITE` or run "
                         "`abdiff A..B --configs SUITE`")
    known = {c.id for _, _, run in loaded for c in run.configs}
    for wanted in config_ids:
        if wanted not in known:
            raise InputError(f"config {wanted!r} is in none of {len(loaded)} baselines and "
                             f"recorded runs ({searched}); `abdiff baseline show NAME` lists "
                             "a baseline's configs" + did_you_mean(wanted, known))
    points = []
    for kind, source, run in loaded:
        shots = {c.id: snapshot(c) for c in run.configs if c.id in config_ids and c.rounds}
        if shots:
            points.append(Point(kind, source, run.rev, run.sha, measured_at(run),
                                machine_of(run), shots, setup_of(run)))
    # by commit (the A and B sides of runs alternate between two commits: in time order a
    # fact would flip back and forth on every line), commits in the order first measured
    first: dict[str, str] = {}
    for point in sorted(points, key=lambda p: (p.when, p.source)):
        first.setdefault(point.sha, point.when)
    points.sort(key=lambda p: (first[p.sha], p.sha, p.when, p.source))
    return History(tuple(config_ids), tuple(points), searched, tuple(skipped))
