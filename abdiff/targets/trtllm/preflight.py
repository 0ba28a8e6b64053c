"""Can this machine's GPUs and Hugging Face cache run a suite's models? (no torch, no hub)

Two questions `abdiff doctor --configs SUITE` (and a run's preflight) asks
before any rank starts (TrtllmTarget.preflight and .suite_findings; this module
imports nothing of the target, the target imports it):

- the compute capability: upstream's checkpoints are built for one GPU
  generation (NVFP4 checkpoints and the DeepGEMM MoE path need SM100+, the
  FP8 block-scale ones also run on SM90). A suite says which with its
  `target.sm` list; `nvidia-smi` says what the GPUs are;
- the model configs: run.py with `--load-format DUMMY` still reads each
  model's `config.json` (transformers' AutoConfig), from a local folder or
  the Hugging Face cache. Ranks on compute nodes often have no network, so
  the config must be in the cache the ranks see (HF_HOME / HF_HUB_CACHE).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from abdiff.suites import Suite, builtin_suites, load_suite
from abdiff.targets.base import Finding

SM_NAMES = MappingProxyType({90: "Hopper (H100, H200)", 100: "Blackwell (B200, GB200)",
                             103: "Blackwell Ultra (B300, GB300)", 120: "Blackwell (RTX PRO 6000)"})
# the non-secret Hugging Face locations every rank gets (tokens stay behind --pass-env)
HF_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@dataclass
class Gpu:
    index: int
    name: str
    sm: int  # compute capability as major * 10 + minor: 90, 100, 103


def local_gpus(nvidia_smi: str | None = None) -> list[Gpu]:
    """The GPUs of this machine with their compute capability, from nvidia-smi (no CUDA
    context, so a login node or a busy GPU answers too). Empty without nvidia-smi."""
    smi = nvidia_smi or shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run([smi, "--query-gpu=index,name,compute_cap",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in done.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            major, _, minor = parts[2].partition(".")
            gpus.append(Gpu(int(parts[0]), parts[1], int(major) * 10 + int(minor or 0)))
        except ValueError:
            continue
    return gpus


def suite_sm(suite: Suite) -> list[int]:
    """The compute capabilities the suite's models are for (`target.sm`; empty: any)."""
    block = suite.target_options or {}
    block = {**block, **block.get("trtllm", {})} if isinstance(block.get("trtllm"), dict) \
        else block
    value = block.get("sm") or []
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def sm_text(sms: list[int]) -> str:
    """[100, 103] -> 'SM100/SM103'."""
    return "/".join(f"SM{sm}" for sm in sms)


def suites_for(sm: int) -> list[str]:
    """Built-in suites whose models run on this compute capability."""
    return sorted(name for name in builtin_suites() if sm in suite_sm(load_suite(name)))


def gpu_problem(suite: Suite, gpus: list[Gpu]) -> str | None:
    """Why this suite's models cannot run on these GPUs (None: they can, or nothing to say).

    The function a run's preflight calls before anything starts: on a GPU of the wrong
    generation every config would fail on both sides, measuring nothing.
    """
    wanted = suite_sm(suite)
    if not wanted or not gpus:
        return None
    wrong = [g for g in gpus if g.sm not in wanted]
    if not wrong:
        return None
    gpu = wrong[0]
    names = ", ".join(SM_NAMES.get(sm, f"SM{sm}") for sm in wanted)
    others = [s for s in suites_for(gpu.sm) if s != suite.name]
    fix = (f"use --configs {' or '.join(others)}" if others else
           f"give the suite target.sm: [{gpu.sm}] and target.models that run there")
    return (f"suite {suite.name} names models for {sm_text(wanted)} ({names}); GPU "
            f"{gpu.index} is {gpu.name} (SM{gpu.sm}): {fix}")


def hub_cache(environ: Mapping[str, str]) -> Path:
    """The Hugging Face hub cache the ranks read (huggingface_hub's own precedence)."""
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"]).expanduser()
    home = environ.get("HF_HOME") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def config_problem(model: str, environ: Mapping[str, str]) -> str | None:
    """Why `model`'s config.json cannot be read without network (None: it can)."""
    folder = Path(model).expanduser()
    if folder.is_absolute() or model.startswith(".") or folder.is_dir():
        candidates = [folder / "config.json"]
        fix = f"{folder} must be a model folder with config.json"
    else:
        cache = hub_cache(environ)
        snapshots = cache / f"models--{model.replace('/', '--')}" / "snapshots"
        candidates = sorted(snapshots.glob("*/config.json")) if snapshots.is_dir() else []
        fix = (f"not in the hub cache {cache}: run `huggingface-cli download {model} "
               "config.json` where the hub is reachable (with the same HF_HOME / "
               "HF_HUB_CACHE the ranks get), or name a local folder in target.models")
    for path in candidates:
        try:
            json.loads(path.read_text(encoding="utf-8"))
            return None
        except (OSError, ValueError):
            continue
    return fix


def suite_findings(suite: Suite, gpus: list[Gpu], models: dict[str, str],
                   environ: Mapping[str, str] | None = None) -> list[Finding]:
    """What `abdiff doctor --configs SUITE` prints: the GPU check, then each model's config
    (`models`: backend -> model, as the target chooses them)."""
    env = os.environ if environ is None else environ
    findings = []
    wanted = suite_sm(suite)
    problem = gpu_problem(suite, gpus)
    if problem:
        findings.append(Finding(False, problem))
    elif wanted and gpus:
        findings.append(Finding(True, f"suite {suite.name}: models for {sm_text(wanted)}; "
                                      f"GPUs: {', '.join(f'{g.name} (SM{g.sm})' for g in gpus)}"))
    elif wanted:
        findings.append(Finding(True, f"suite {suite.name}: models for {sm_text(wanted)}; no "
                                      "GPU here to check (the ranks' nodes must have one)"))
    for backend, model in models.items():
        why = config_problem(model, env)
        findings.append(Finding(why is None, f"{backend} model {model}: config readable offline"
                                if why is None else f"{backend} model {model}: {why}"))
    passed = [f"{name}={env[name]}" for name in HF_VARIABLES if env.get(name)]
    findings.append(Finding(True, "passed to the ranks: " + (", ".join(passed) or
                                                             "no HF_* location set")))
    return findings
