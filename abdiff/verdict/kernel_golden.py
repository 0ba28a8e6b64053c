"""Per-architecture kernel tripwires: golden kernel sets and launch counts, no A side.

A golden file (`baselines/kernels/<arch>/<suite>.json`, written by `abdiff check-kernels
RUNFILE --arch sm100 --update`) holds, per config, the kernels every measured round ran
(with their launch counts per call) and the launch count's mean and standard deviation
over the rounds. `check` compares a run file with it, config by config:

- the kernel set: the kernels present in every ok round of the run must be the golden
  set (a kernel added, removed or replaced is a dispatch change);
- the launch count (all launches of one call): the run's median over rounds must lie
  within `max(MIN_LAUNCHES, SIGMAS * sqrt(sd_golden^2 + sd_run^2))` of the golden mean,
  so a config whose launches vary (dynamic dispatch, autotuned splits) gets a wider band
  and a deterministic one trips on a single extra launch.

Architectures are separate files because each GPU generation dispatches other kernels
(sm90 Hopper, sm100 Blackwell): a golden file is only compared with runs on its arch.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from abdiff.errors import InputError
from abdiff.store.files import write_atomic
from abdiff.store.records import RoundRecord, RunFile
from abdiff.store.validate import from_json

SCHEMA = "abdiff.kernels/1"
ARCH = re.compile(r"sm\d{2,3}[a-z]?")
SIGMAS = 4.0
MIN_LAUNCHES = 0.5  # a deterministic config (sd 0) trips on one launch more or less


@dataclass
class GoldenConfig:
    kernels: dict[str, int]  # kernel -> launches per call, in every ok round
    launches_mean: float
    launches_sd: float
    rounds: int


@dataclass
class Golden:
    arch: str
    suite: str
    target: str
    rev: str
    sha: str
    configs: dict[str, GoldenConfig] = field(default_factory=dict)
    schema: str = SCHEMA


@dataclass(frozen=True)
class Finding:
    config: str
    ok: bool
    text: str


def check_arch(arch: str) -> str:
    if not ARCH.fullmatch(arch):
        raise InputError(f"--arch {arch!r}: give the GPU architecture as smNN, e.g. sm90 "
                         "(Hopper) or sm100 (Blackwell)")
    return arch


def golden_path(folder: Path, arch: str, suite: str) -> Path:
    return Path(folder) / "kernels" / check_arch(arch) / f"{suite or 'suite'}.json"


def _ok_rounds(rounds: list[RoundRecord]) -> list[RoundRecord]:
    return [r for r in rounds if r.status == "ok" and r.kernels and not r.companion]


def _stable_kernels(rounds: list[RoundRecord]) -> dict[str, int]:
    """Kernels every round ran, with their median launches per call."""
    names = set.intersection(*(set(r.kernels) for r in rounds)) if rounds else set()
    return {n: int(statistics.median(r.kernels[n] for r in rounds)) for n in sorted(names)}


def _launches(rounds: list[RoundRecord]) -> list[int]:
    return [sum(r.kernels.values()) for r in rounds]


def make_golden(run: RunFile, arch: str) -> Golden:
    golden = Golden(check_arch(arch), run.suite, run.target, run.rev, run.sha)
    for config in run.configs:
        rounds = _ok_rounds(config.rounds)
        if not rounds:
            continue
        launches = _launches(rounds)
        golden.configs[config.id] = GoldenConfig(
            _stable_kernels(rounds), statistics.fmean(launches),
            statistics.stdev(launches) if len(launches) > 1 else 0.0, len(rounds))
    if not golden.configs:
        raise InputError(f"run file of {run.rev}: no config ran with kernels recorded; "
                         "nothing to make a golden kernel baseline of")
    return golden


def write_golden(path: Path, golden: Golden) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(asdict(golden), indent=1, sort_keys=True) + "\n")


def load_golden(path: Path) -> Golden:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no golden kernel baseline; write one with `abdiff "
                         "check-kernels RUNFILE --arch ARCH --update`") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable golden kernel baseline ({exc})") from None
    return from_json(Golden, data, str(path))


def check(run: RunFile, golden: Golden) -> list[Finding]:
    """One finding per golden config: its kernel set and launch count against the run's."""
    findings = []
    for cid, want in sorted(golden.configs.items()):
        config = run.config(cid)
        rounds = _ok_rounds(config.rounds) if config else []
        if not rounds:
            findings.append(Finding(cid, False, "not measured in this run (no ok round with "
                                                "kernels)"))
            continue
        have = _stable_kernels(rounds)
        added = sorted(set(have) - set(want.kernels))
        removed = sorted(set(want.kernels) - set(have))
        launches = _launches(rounds)
        median = statistics.median(launches)
        sd = statistics.stdev(launches) if len(launches) > 1 else 0.0
        band = max(MIN_LAUNCHES, SIGMAS * math.sqrt(want.launches_sd ** 2 + sd ** 2))
        problems = []
        if added or removed:
            problems.append("kernel set changed: " + ", ".join(
                [f"+{k}" for k in added] + [f"-{k}" for k in removed]))
        if abs(median - want.launches_mean) > band:
            problems.append(f"launches {median:g} per call, golden {want.launches_mean:g} "
                            f"± {band:.3g}")
        text = "; ".join(problems) or (f"{len(have)} kernels, launches {median:g} (golden "
                                       f"{want.launches_mean:g} ± {band:.3g})")
        findings.append(Finding(cid, not problems, text))
    return findings

