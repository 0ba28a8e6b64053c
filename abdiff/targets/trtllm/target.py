"""The `trtllm` target: upstream's layer-wise benchmark in a TensorRT-LLM checkout.

A worker process is one rank of upstream's own command,

    python -u examples/layer_wise_benchmarks/run.py CONFIG.yaml --run-type GEN \\
        --batch-size 8,32 --seq-len-q 1,2,4 --seq-len-kv-cache 2049 --model ... \\
        --load-format DUMMY ... --warmup-times W --run-times R

run unmodified in the checkout; the launcher (mpirun, srun) wraps it for N
ranks. The probe (abdiff/targets/trtllm/probe) enters each rank through a
sitecustomize.py first on PYTHONPATH and wraps `Runner.create_run_pack`.

How a round with many configs runs. run.py runs one config *set* per
invocation: one model and run type, and the product of its batch-size,
seq-len-q and seq-len-kv-cache lists, all in one process (model build,
autotuning and KV-cache prefill are paid once). So a worker process runs one
*block* of the job: the configs that share everything but those three shapes
(same backend, hence model, and run type), and of those the largest product
of shape values that contains the job's first config. The configs outside the
block are left without records and the round runner starts the next worker
for them, exactly as it does after a crash. An untouched suite matrix is one
block per backend; after an abort (which happens in the autotune pass, at the
block's largest shape) the remaining configs split into smaller blocks, so an
aborting shape never takes the others' data with it.

Which code runs. Each side must execute its own checkout's Python code on top
of the compiled parts of the installed tensorrt_llm (upstream's precompiled
install, `TRTLLM_USE_PRECOMPILED=1 pip install -e .`, extracts libs/, the
bindings and the other binaries into the source tree; a git worktree has
none). The target builds an overlay package outside the checkout: the
checkout's files as symbolic links, plus links to the compiled entries of the
installed package that the checkout lacks. PYTHONPATH is: probe site folder,
overlay (or the checkout itself when nothing is installed), abdiff's own
folder. The probe verifies at run time that `tensorrt_llm` resolves into the
checkout and fails every config with both paths named otherwise.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal

import yaml

from abdiff.errors import InfrastructureError, InputError
from abdiff.launchers.spec import ABDIFF_ROOT, LaunchSpec
from abdiff.repo.revs import run_git
from abdiff.store.files import path_under_root
from abdiff.suites import Suite
from abdiff.targets.base import Finding, RoundJob, Target
from abdiff.targets.hooks import Hook, HookChecker, missing_hooks, run_pack_hooks
from abdiff.targets.layerwise import BACKENDS
from abdiff.targets.layerwise import SHAPE_KEYS as SHAPES
from abdiff.targets.trtllm.meanings import fact_meanings
from abdiff.targets.trtllm.preflight import HF_VARIABLES, gpu_problem, local_gpus, suite_findings
from abdiff.targets.trtllm.seed import seed_story_line

PACKAGE = "tensorrt_llm"
BENCH_DIR = "examples/layer_wise_benchmarks"
RUN_PY = f"{BENCH_DIR}/run.py"
TOOLS_DIR = "tensorrt_llm/tools/layer_wise_benchmarks"
RUNNER_PY = f"{TOOLS_DIR}/runner.py"
ATTENTION = "tensorrt_llm/_torch/attention_backend"
DSA_FILES = (f"{ATTENTION}/sparse/dsa.py", f"{ATTENTION}/sparse/dsa/metadata.py")
AUTOTUNER_PY = "tensorrt_llm/_torch/autotuner.py"

# What the probe relies on in a checkout (checked by `abdiff doctor` with the ast module).
TRTLLM_HOOKS: tuple[Hook, ...] = (
    Hook((f"{PACKAGE}/__init__.py",), why="the package whose origin the probe verifies"),
    Hook((RUN_PY,), calls="create_run_pack",
         why="upstream's benchmark script; the probe times the run packs it creates"),
    *run_pack_hooks(RUNNER_PY, (f"{ATTENTION}/trtllm.py",), DSA_FILES),
)

# Used only where the checkout's run.py cannot be read (the checkout's own wins).
FALLBACK_CONFIG: MappingProxyType[str, Any] = MappingProxyType({
    "model": "nvidia/DeepSeek-R1-0528-FP4-v2",
    "layer_indices": [5],
    "tokens_per_block": 32,
    "enable_attention_dp": True,
    "moe_backend": "CUTLASS",
    "balance_method": "Balanced",
})
DEFAULTS: MappingProxyType[str, Any] = MappingProxyType({"load_format": "DUMMY"})
BACKEND_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    # upstream's README: DeepSeek-V3.2 needs 64-token blocks and DeepGEMM MoE
    "DSA": MappingProxyType({"model": "deepseek-ai/DeepSeek-V3.2-Exp", "tokens_per_block": 64,
                             "moe_backend": "DEEPGEMM", "moe_backend_for_prefill": "DEEPGEMM"}),
    "TRTLLM": MappingProxyType({}),
})
# options abdiff itself sets per worker; --target-arg must not fight them
RESERVED_ARGS = ("--run-type", "--batch-size", "--seq-len-q", "--seq-len-kv-cache",
                 "--batch-size-list", "--seq-len-q-list", "--seq-len-kv-cache-list",
                 "--warmup-times", "--run-times")
OPTION_KEYS = MappingProxyType({
    "model": "model for every backend (overrides `models`)",
    "models": "backend -> model, e.g. {DSA: deepseek-ai/DeepSeek-V3.2-Exp, TRTLLM: ...}",
    "options": "run.py options for every config, e.g. {moe_backend: DEEPGEMM}",
    "backend_options": "backend -> run.py options for that backend only",
    "compiled": "folder of the installed tensorrt_llm package whose compiled parts to use",
    "nsys": "true: run every rank under `nsys profile` and take kernels from its report",
    "python": "the ranks' Python interpreter (default: $ABDIFF_TRTLLM_PYTHON, else abdiff's)",
    "sm": "compute capabilities the models run on, e.g. [90] (Hopper) or [100, 103] (Blackwell)",
})
PYTHON_ENV = "ABDIFF_TRTLLM_PYTHON"  # e.g. `python3` when ranks run in a Slurm container


# -- upstream's run.py options ---------------------------------------------------------
@dataclass
class RunPyOption:
    """How one config key is spelled on run.py's command line."""

    key: str
    flag: str | None = None  # takes a value
    list_flag: str | None = None  # takes a comma-separated list (older run.py: --x-list)
    comma_list: bool = False  # `flag` itself parses a comma-separated list
    true_flag: str | None = None
    false_flag: str | None = None


def run_py_options(run_py: Path) -> dict[str, RunPyOption]:
    """run.py's options by config key, read with ast from its `add_argument` calls.

    run.py only accepts YAML keys that are options (it raises on others), and
    a list option's key is its dest without `_list`. Empty when the file
    cannot be read; callers then trust the keys they are given.
    """
    try:
        tree = ast.parse(Path(run_py).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError):
        return {}
    options: dict[str, RunPyOption] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant)
                 and isinstance(a.value, str)]
        long = next((f for f in flags if f.startswith("--")), None)
        if long is None:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        dest_node = kw.get("dest")
        dest = (dest_node.value if isinstance(dest_node, ast.Constant)
                and isinstance(dest_node.value, str) else long[2:].replace("-", "_"))
        action_node = kw.get("action")
        action = action_node.value if isinstance(action_node, ast.Constant) else None
        type_node = kw.get("type")
        type_name = type_node.id if isinstance(type_node, ast.Name) else ""
        is_list = dest.endswith("_list")
        key = dest[: -len("_list")] if is_list else dest
        option = options.setdefault(key, RunPyOption(key))
        if action == "store_true":
            option.true_flag = long
        elif action == "store_false":
            option.false_flag = long
        elif long == f"--{key.replace('_', '-')}-list":
            option.list_flag = long
        else:
            option.flag = long
            option.comma_list = is_list or type_name.startswith("comma_separated")
    return options


# -- what the probe relies on in run.py (doctor's "behaviours") --------------------------
@dataclass
class Behaviour:
    """One thing upstream's run.py does that the probe counts on (or explicitly does not)."""

    what: str
    needed_for: str  # "every run", "nsys: true", ... or "not relied on"
    present: bool | None  # None: not checked (not relied on)
    # when missing: one line per hook that failed, naming the file that was looked at
    problems: list[str] = field(default_factory=list)

    @property
    def required(self) -> bool:
        return self.needed_for == "every run"


def run_py_behaviours(checkout: Path) -> list[Behaviour]:
    """Which run.py behaviours this checkout has, read with ast (no import, no GPU)."""
    checkout = Path(checkout)
    options = run_py_options(checkout / RUN_PY)
    checker = HookChecker(checkout)

    def hooks_hold(what: str, needed_for: str, *hooks: Hook) -> Behaviour:
        problems = checker.problems(hooks)
        return Behaviour(what, needed_for, not problems, problems)

    lists = bool(options) and all(
        options.get(k) and (options[k].list_flag or options[k].comma_list) for k in SHAPES)
    counts = "warmup_times" in options and "run_times" in options
    return [
        Behaviour("times each shape's run pack warmup_times + run_times times "
                  "(--warmup-times, --run-times)", "every run", counts,
                  [] if counts else [f"{RUN_PY}: no --warmup-times / --run-times option"]),
        Behaviour("runs the product of shape lists in one process (--batch-size 8,32 or "
                  "--batch-size-list)", "one process per block (else one per config)", lists),
        hooks_hold("autotunes inside `with autotune():` (AutoTuner.is_tuning_mode), so "
                   "tuning calls are neither timed nor profiled", "every run",
                   Hook((RUN_PY,), calls="autotune"),
                   Hook((AUTOTUNER_PY,), cls="AutoTuner", attribute="is_tuning_mode")),
        hooks_hold("marks timed calls with NVTX ranges and starts the profiler "
                   "(cudaProfilerStart)", "nsys: true",
                   Hook((RUN_PY,), calls="annotate"), Hook((RUN_PY,), calls="cudaProfilerStart")),
        Behaviour("one untimed call before each shape's timed calls (newer run.py)",
                  "not relied on: the probe keeps the last run_times calls", None),
    ]


def behaviours_table(checkouts: list[tuple[str, Path]]) -> str:
    """One line per behaviour and checkout: yes / MISSING / not checked."""
    lines = []
    for label, path in checkouts:
        lines.append(f"{label}:")
        for item in run_py_behaviours(path):
            state = {True: "yes", False: "MISSING", None: "-"}[item.present]
            lines.append(f"  {state:7s} {item.what} [{item.needed_for}]")
    return "\n".join(lines)


# -- the suite's target block ----------------------------------------------------------
@dataclass
class TrtllmOptions:
    """The suite's `target:` block for this target (flat, or under a `trtllm:` key)."""

    model: str | None = None
    models: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    compiled: str | None = None
    nsys: bool = False
    python: str | None = None
    sm: list[int] = field(default_factory=list)

    @classmethod
    def parse(cls, block: dict[str, Any] | None, known: dict[str, RunPyOption]) -> TrtllmOptions:
        data = dict(block or {})
        if isinstance(data.get("trtllm"), dict):
            data = {**{k: v for k, v in data.items() if k != "trtllm"}, **data["trtllm"]}
        found = cls()
        for key, value in data.items():
            if key in ("model", "compiled", "python"):
                if not isinstance(value, str):
                    raise InputError(f"suite target.{key} must be a string, got {value!r}")
                setattr(found, key, value)
            elif key == "nsys":
                if not isinstance(value, bool):
                    raise InputError(f"suite target.nsys must be true or false, got {value!r}")
                found.nsys = value
            elif key in ("models", "backend_options"):
                if not isinstance(value, dict) or any(b not in BACKENDS for b in value):
                    raise InputError(f"suite target.{key} must map backends "
                                     f"({', '.join(BACKENDS)}) to values, got {value!r}")
                setattr(found, key, dict(value))
            elif key == "sm":
                values = value if isinstance(value, list) else [value]
                if not values or not all(isinstance(v, int) and not isinstance(v, bool)
                                         for v in values):
                    raise InputError(f"suite target.sm must list compute capabilities such as "
                                     f"[90] or [100, 103], got {value!r}")
                found.sm = list(values)
            elif key == "options":
                if not isinstance(value, dict):
                    raise InputError(f"suite target.options must be a mapping, got {value!r}")
                found.options.update(value)
            elif key in known or not known:
                found.options[key] = value  # a run.py option given directly
            else:
                raise InputError(
                    f"suite target.{key} is neither a trtllm target option "
                    f"({', '.join(OPTION_KEYS)}) nor an option of this checkout's run.py")
        return found


# -- config translation ----------------------------------------------------------------
def _group_key(params: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in params.items() if k not in SHAPES}, sort_keys=True,
                      default=str)


def plan_block(configs: list[dict[str, Any]], lists: bool = True) -> list[dict[str, Any]]:
    """The configs one run.py invocation covers: see the module docstring.

    The block holds the job's first config, shares its non-shape parameters,
    and is a full product of shape values (run.py runs the product of its
    lists, and must run no shape that is not a config of the job).
    """
    if not configs:
        return []
    first = configs[0]
    group = [c for c in configs if _group_key(c["params"]) == _group_key(first["params"])]
    shapes: dict[tuple, dict[str, Any]] = {}
    for config in group:
        shapes.setdefault(tuple(config["params"][k] for k in SHAPES), config)
    chosen = [[first["params"][k]] for k in SHAPES]
    if lists:
        values = [list(dict.fromkeys(s[i] for s in shapes)) for i in range(len(SHAPES))]
        grown = True
        while grown:
            grown = False
            for i, candidates in enumerate(values):
                for value in candidates:
                    if value in chosen[i]:
                        continue
                    trial = [*chosen[:i], [*chosen[i], value], *chosen[i + 1:]]
                    if all(s in shapes for s in _product(trial)):
                        chosen, grown = trial, True
    return [shapes[s] for s in _product(chosen)]


def _product(axes: list[list[Any]]) -> list[tuple]:
    out: list[tuple] = [()]
    for axis in axes:
        out = [(*prefix, v) for prefix in out for v in axis]
    return out


def _as_arg(option: RunPyOption, value: Any, where: str) -> list[str] | None:
    """One setting as run.py arguments; None when run.py cannot express it."""
    if value is None:
        return []
    if isinstance(value, bool):
        flag = option.true_flag if value else option.false_flag
        return [flag] if flag else None
    if isinstance(value, list | tuple):
        flag = option.list_flag or (option.flag if option.comma_list else None)
        if flag is None and len(value) == 1 and option.flag:
            return [option.flag, str(value[0])]
        return [flag, ",".join(str(v) for v in value)] if flag else None
    return [option.flag, str(value)] if option.flag else None


def _guess(key: str) -> RunPyOption:
    dashed = key.replace("_", "-")
    return RunPyOption(key, flag=f"--{dashed}", comma_list=True, true_flag=f"--{dashed}",
                       false_flag=f"--no-{dashed}")


def spec_max_draft_len(value: Any, run_type: str, max_seq_len_q: int) -> int | None:
    """The block's `--spec-max-draft-len`: `auto` is the block's largest seq_len_q - 1
    (none for CTX or seq_len_q 1); a number must cover the block's draft tokens, since
    upstream's runner refuses a GEN pack with more (hybrid models, e.g. Kimi K3)."""
    needed = max_seq_len_q - 1 if run_type == "GEN" else 0
    if value == "auto":
        return needed or None
    if isinstance(value, str) and value.isdigit():  # from a command line (upstream-tests)
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError(f"target option spec_max_draft_len={value!r}: give a number of draft "
                         "tokens or `auto` (the block's largest seq_len_q - 1)")
    if value < needed:
        raise InputError(f"target option spec_max_draft_len={value}: seq_len_q "
                         f"{max_seq_len_q} needs at least {needed} draft tokens; use `auto`")
    return value


def translate_configs(
    configs: list[dict[str, Any]],
    options: TrtllmOptions,
    target_args: list[str],
    *,
    warmup_times: int,
    run_times: int,
    cuda_graph: bool,
    known: dict[str, RunPyOption],
    base: dict[str, Any],
) -> list[str]:
    """Suite configs of one block + target options + --target-arg -> run.py's options.

    They follow upstream's own config_gen.yaml / config_ctx.yaml of the
    checkout (`base`, passed to run.py as its YAML, see `base_config`). What
    the suite decides goes on the command line, which run.py lets override
    the YAML: the run type and the shape lists, the model of the config's backend
    (DSA needs a DSA model, TRTLLM a model without it), `--load-format DUMMY`
    unless set, the options of the target block, then `--target-arg`
    verbatim (last, so it wins). Defaults run.py does not know are dropped;
    an explicit option it does not know is an InputError.
    """
    for arg in target_args:
        name = arg.split("=", 1)[0]
        if name in RESERVED_ARGS:
            raise InputError(f"--target-arg {arg}: abdiff sets {name} itself from the suite "
                             "and its warm-up/run counts")
    params = configs[0]["params"]
    backend = params.get("backend")
    if backend is not None and backend not in BACKENDS:
        raise InputError(f"backend {backend!r} is unknown to the trtllm target; "
                         f"choose {' or '.join(BACKENDS)}")
    lists = {k: list(dict.fromkeys(c["params"][k] for c in configs)) for k in SHAPES}
    settings = _block_settings(params, lists, options, cuda_graph, base)
    argv: list[str] = []
    fixed = [("run_type", params["run_type"]), *((k, lists[k]) for k in SHAPES)]
    for key, value in fixed:
        option = known.get(key) or _guess(key)
        args = _as_arg(option, value, key)
        if args is None:
            raise InputError(f"run.py of this checkout cannot take {key} {value!r} on its "
                             "command line")
        argv += args
    for key, (value, explicit) in settings.items():
        setting = known.get(key) or (None if known else _guess(key))
        args = _as_arg(setting, value, key) if setting else None
        if args is None:
            if explicit:
                raise InputError(f"target option {key}={value!r}: run.py of this checkout has "
                                 "no option that takes it")
            continue
        argv += args
    argv += ["--warmup-times", str(warmup_times), "--run-times", str(run_times), *target_args]
    return argv


def _block_settings(params: dict[str, Any], lists: dict[str, list[Any]], options: TrtllmOptions,
                    cuda_graph: bool, base: dict[str, Any]) -> dict[str, tuple[Any, bool]]:
    """run.py's settings for one block: key -> (value, explicit). Explicit settings must be
    expressible on run.py's command line; defaults may be dropped."""
    backend = params.get("backend")
    settings: dict[str, tuple[Any, bool]] = {}
    for key, value in {**DEFAULTS, **BACKEND_DEFAULTS.get(backend or "", {})}.items():
        settings[key] = (value, False)
    if "model" not in BACKEND_DEFAULTS.get(backend or "", {}) and "model" not in base:
        settings["model"] = (FALLBACK_CONFIG["model"], False)
    for key, value in {**options.options, **options.backend_options.get(backend or "", {})}.items():
        settings[key] = (value, True)
    model = options.model or options.models.get(backend or "")
    if model:
        settings["model"] = (model, True)
    for key, value in params.items():
        if key not in ("backend", "run_type", *SHAPES):
            settings[key] = (value, True)
    if not cuda_graph:  # --eager
        settings["use_cuda_graph"] = (False, True)
    # otherwise nothing unless the suite says: run.py takes use_cuda_graph from upstream's
    # YAML of the run type (config_gen.yaml: true, config_ctx.yaml: false), as upstream runs
    if "spec_max_draft_len" in settings:
        settings["spec_max_draft_len"] = (
            spec_max_draft_len(settings["spec_max_draft_len"][0], params["run_type"],
                               max(lists["seq_len_q"])), True)
    need = {"max_batch_size": max(lists["batch_size"]),
            "max_seq_len": max(lists["seq_len_q"]) + max(lists["seq_len_kv_cache"]),
            "max_num_tokens": max(lists["batch_size"]) * max(lists["seq_len_q"])}
    for key, value in need.items():
        current = settings.get(key, (base.get(key), False))[0]
        if isinstance(current, int) and current < value:
            settings[key] = (value, False)  # upstream's YAML value is too small for this block
    return settings


def _check_job(job: RoundJob) -> None:
    """Refuse a round upstream's run.py cannot time as asked."""
    if job.device == "cpu":
        raise InputError("the trtllm target runs upstream's benchmark on CUDA; --device cpu "
                         "is for the reference target")
    if job.warmup_times + job.run_times < 2:
        raise InputError("the trtllm target needs warmup_times + run_times >= 2 to tell "
                         "run.py's timed run pack from its warm-up ones")


def uses_cuda_graph(argv: list[str], base: dict[str, Any]) -> bool:
    """Will run.py replay CUDA graphs? The last flag on its command line, else its YAML's
    `use_cuda_graph`, else run.py's default (off)."""
    flags = [a for a in argv if a in ("--use-cuda-graph", "--no-use-cuda-graph")]
    if flags:
        return flags[-1] == "--use-cuda-graph"
    return bool(base.get("use_cuda_graph"))


def base_config(checkout: Path, run_type: str) -> tuple[str, dict[str, Any]]:
    """upstream's example config of the checkout for this run type, as text and as data.

    config_gen.yaml for GEN, config_ctx.yaml for CTX, copied verbatim: the
    command line overrides what it sets per block, and run.py rejects YAML
    keys it does not know, so upstream's own file is the one always valid at
    that commit. A checkout without it gets FALLBACK_CONFIG.
    """
    name = "config_ctx.yaml" if run_type == "CTX" else "config_gen.yaml"
    path = Path(checkout) / BENCH_DIR / name
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except (OSError, yaml.YAMLError):
        data = None
    if not isinstance(data, dict):
        data = {**FALLBACK_CONFIG, "balance_ratio": None}
        text = yaml.safe_dump(data, sort_keys=False)
    return text, data


# -- the compiled parts ----------------------------------------------------------------
COMPILED_SUFFIXES = (".so", ".pyd", ".dll", ".dylib")


def _is_compiled(name: str) -> bool:
    return name.endswith(COMPILED_SUFFIXES) or ".so." in name


@functools.cache
def installed_package() -> Path | None:
    """Folder of the tensorrt_llm package this Python would import (no import is done)."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def _compiled_dirs(package: Path) -> frozenset[str]:
    """Relative folders of `package` that hold a compiled file somewhere below them."""
    found: set[str] = set()
    for folder, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        if any(_is_compiled(f) for f in files):
            rel = Path(folder).relative_to(package)
            while True:
                found.add(rel.as_posix())
                if rel == rel.parent:
                    break
                rel = rel.parent
    return frozenset(found)


def build_overlay(checkout: Path, compiled: Path, dest: Path) -> Path:
    """A `tensorrt_llm` package under `dest`: the checkout's files, plus the compiled parts.

    Every entry of the checkout's package is a symbolic link to it; folders
    that also hold compiled files in the installed package are real folders
    merged one level further down; installed entries missing from the checkout
    are linked when they are compiled files or folders (libs/, bindings, the
    DeepGEMM package). Installed-only `.py` files are not: they are Python
    code the checkout deleted. Returns `dest` (the folder to put on PYTHONPATH).
    """
    source = Path(checkout) / PACKAGE
    compiled = Path(compiled)
    dirs = _compiled_dirs(compiled)
    target = Path(dest) / PACKAGE
    if target.exists() or target.is_symlink():
        shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()

    def merge(src: Path, comp: Path, out: Path, rel: str) -> None:
        out.mkdir(parents=True, exist_ok=True)
        names = {n for n in os.listdir(src) if n != "__pycache__"}
        for name in sorted(names):
            child = f"{rel}/{name}" if rel else name
            if (src / name).is_dir() and (comp / name).is_dir() and child in dirs:
                merge(src / name, comp / name, out / name, child)
            else:
                (out / name).symlink_to(src / name)
        for name in sorted(set(os.listdir(comp)) - names - {"__pycache__"}):
            entry = comp / name
            if entry.is_dir() or _is_compiled(name) or not name.endswith((".py", ".pyc")):
                (out / name).symlink_to(entry)

    merge(source, compiled, target, "")
    return Path(dest)


def _git_sha(folder: Path) -> str | None:
    try:
        done = run_git(folder, "rev-parse", "HEAD", check=False)
    except InfrastructureError:  # no git here: the sha is only informative
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and sha else None


def checkout_version(checkout: Path) -> str | None:
    """`__version__` of the checkout's tensorrt_llm/version.py, read without importing it."""
    try:
        tree = ast.parse((Path(checkout) / PACKAGE / "version.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__"
                                                  for t in node.targets)
                and isinstance(node.value, ast.Constant)):
            return str(node.value.value)
    return None


def installed_info(package: Path | None) -> dict[str, Any]:
    """Version, place and (when known) source commit of the installed compiled parts."""
    info: dict[str, Any] = {"tensorrt_llm.compiled_location": str(package) if package else None}
    for name in ("tensorrt_llm", "tensorrt-llm"):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        info["tensorrt_llm.compiled_version"] = dist.version
        direct = dist.read_text("direct_url.json")
        if direct:
            try:
                url = json.loads(direct)
            except json.JSONDecodeError:
                url = {}
            commit = (url.get("vcs_info") or {}).get("commit_id")
            if not commit and str(url.get("url", "")).startswith("file://"):
                commit = _git_sha(Path(url["url"][len("file://"):]))
            info["tensorrt_llm.compiled_sha"] = commit
        break
    return info


def suite_models(suite: Suite) -> dict[str, str]:
    """backend -> the model its configs run, as the target chooses it (see translate_configs).

    Without a checkout, the TRTLLM model is the one upstream's config_gen.yaml names.
    """
    options = TrtllmOptions.parse(suite.target_options, {})
    backends = sorted({str(c.params["backend"]) for c in suite.configs
                       if c.params.get("backend") is not None})
    return {backend: str(options.model or options.models.get(backend)
                         or BACKEND_DEFAULTS.get(backend, {}).get("model")
                         or FALLBACK_CONFIG["model"])
            for backend in backends}


# -- the target ------------------------------------------------------------------------
class TrtllmTarget(Target):
    """Runs upstream's run.py at each checkout, with the probe in every rank."""

    name: ClassVar[str] = "trtllm"
    layout: ClassVar[str] = TOOLS_DIR
    # run.py takes one --run-times for all the shapes of a process
    iteration_counts: ClassVar[Literal["config", "job", "fixed"]] = "job"
    hooks = TRTLLM_HOOKS
    needs: ClassVar[dict[str, str]] = {
        "GPU": "everything: upstream's benchmark runs on CUDA only",
        "GPU clocks": "clocks and throttling per round (NVML, nvidia-ml-py)",
        "torch": "everything",
        "torch with CUDA": "everything: the probe times with CUDA events",
        "tensorrt_llm": "everything: each checkout's Python code needs the installed "
                        "compiled parts",
        "deep_gemm": "DSA configs (the DSA indexer calls DeepGEMM); TRTLLM configs still run",
        "nsys": "nsys kernel records (target option nsys); torch.profiler still names kernels",
        "mpirun": "--launcher mpirun: more than one GPU on a node (one rank still runs)",
        "srun": "--launcher srun: runs across nodes under Slurm",
    }
    requires = ("GPU", "torch", "torch with CUDA", "tensorrt_llm")
    behaviours_table = staticmethod(behaviours_table)
    seed_story_line = staticmethod(seed_story_line)
    # CUDA is the ranks' business (they may run on other nodes than abdiff, under srun):
    # abdiff's own process needs none to ask for CUDA graphs.
    cuda_on_ranks: ClassVar[bool] = True
    # upstream's slurm_launch.sh: CONTAINER_NAME=${CONTAINER_NAME:-layer_wise_benchmarks}
    srun_container: ClassVar[str] = "layer_wise_benchmarks"
    # what a fork server may import ahead from each checkout (tensorrt_llm imports its
    # CUDA and MPI parts lazily); it applies where a worker is a fork server's `python -m`
    # job, which upstream's run.py under mpirun/srun is not: those ranks still import it
    # themselves (docs/trtllm.md)
    preimport: ClassVar[tuple[str, ...]] = ("tensorrt_llm",)

    def __init__(self, python: str | None = None) -> None:
        self.python = python

    @property
    def default_launcher(self) -> str:
        """mpirun like upstream's mpi_launch.sh when it is installed, else one local rank."""
        return "mpirun" if shutil.which("mpirun") else "local"

    @classmethod
    def detect(cls, root: Path) -> bool:
        return (Path(root) / TOOLS_DIR).is_dir()

    def hook_problems(self, checkout: Path) -> list[str]:
        # each line names the file that was looked at (a library file, not always run.py)
        missing = [f"{problem} (so the benchmark no longer {b.what})"
                   for b in run_py_behaviours(checkout) if b.required and b.present is False
                   for problem in b.problems]
        return missing_hooks(Path(checkout), TRTLLM_HOOKS) + missing

    def env_info(self, checkout: Path) -> dict[str, Any]:
        checkout = Path(checkout)
        return {
            "tensorrt_llm.version": checkout_version(checkout),
            "tensorrt_llm.sha": _git_sha(checkout),
            # what facts recorded under one name mean at this commit (meanings.py)
            "fact_meanings": fact_meanings(checkout),
            **installed_info(installed_package()),
        }

    def preflight(self, suite: Suite, launcher: str) -> str | None:
        # the suite's models built for another GPU generation (`target.sm`) would fail on
        # both sides: nothing measured (under srun the ranks' GPUs are not this machine's)
        return None if launcher == "srun" else gpu_problem(suite, local_gpus())

    def suite_findings(self, suite: Suite) -> list[Finding]:
        return suite_findings(suite, local_gpus(), suite_models(suite))

    def compiled_package(self, options: TrtllmOptions) -> Path | None:
        if options.compiled:
            path = Path(options.compiled).expanduser()
            if (path / PACKAGE / "__init__.py").is_file():
                path = path / PACKAGE
            if not (path / "__init__.py").is_file():
                raise InputError(f"suite target.compiled: {path} is not a tensorrt_llm package "
                                 "folder")
            return path
        return installed_package()

    def _python_path(self, checkout: Path, options: TrtllmOptions,
                     work: Path) -> tuple[list[str], list[str]]:
        """(the ranks' PYTHONPATH entries, the folders their code may come from): the probe's
        site folder, the checkout (or its overlay on a compiled package), abdiff, then the
        user's own PYTHONPATH."""
        from abdiff.targets.trtllm.probe import SITE_DIR

        path_entries = [str(SITE_DIR)]
        compiled = self.compiled_package(options)
        if compiled is not None and not path_under_root(compiled, checkout):
            path_entries.append(str(build_overlay(checkout, compiled, work / "trtllm-overlay")))
        else:
            path_entries.append(str(checkout))
        path_entries.append(str(ABDIFF_ROOT))
        rank_paths = [str(checkout), str(work), *path_entries,
                      *([str(compiled.parent)] if compiled is not None else [])]
        if os.environ.get("PYTHONPATH"):
            path_entries.append(os.environ["PYTHONPATH"])
        return path_entries, rank_paths

    def round_command(self, checkout: Path, job_path: Path, job: RoundJob) -> LaunchSpec:
        from abdiff.launchers.process import kernel_selecting_environment
        from abdiff.targets.trtllm.probe import PLAN_ENV
        from abdiff.targets.trtllm.probe.runtime import ProbePlan

        checkout = Path(checkout).resolve()
        work = Path(job_path).resolve().parent
        known = run_py_options(checkout / RUN_PY)
        options = TrtllmOptions.parse(job.target_options, known)
        _check_job(job)
        lists_ok = not known or all(
            known.get(k) and (known[k].list_flag or known[k].comma_list) for k in SHAPES)
        block = plan_block(job.configs, lists=lists_ok)
        params = block[0]["params"]
        text, base = base_config(checkout, params["run_type"])
        args = translate_configs(
            block, options, list(job.target_args), warmup_times=job.warmup_times,
            run_times=job.run_times, cuda_graph=job.cuda_graph, known=known, base=base)
        config_path = work / "trtllm-config.yaml"
        config_path.write_text(text, encoding="utf-8")

        path_entries, rank_paths = self._python_path(checkout, options, work)
        nsys_pending = nsys_report = None
        if options.nsys:
            if shutil.which("nsys") is None:
                raise InfrastructureError("suite target.nsys is true but nsys is not on PATH")
            nsys_pending = str(work / "records.nsys-pending.jsonl")
            nsys_report = str(work / "nsys" / "report")
        plan = ProbePlan(
            record_path=str(job.record_path), round=job.round, facts=list(job.facts),
            warmup_times=job.warmup_times, run_times=job.run_times, checkout=str(checkout),
            run_type=params["run_type"], backend=params.get("backend"),
            configs=[{"id": c["id"], **{k: c["params"][k] for k in SHAPES}} for c in block],
            profile_kernels=job.profile_kernels, device=job.device,
            cuda_graph=uses_cuda_graph(args, base),
            nsys_pending=nsys_pending, nsys_report=nsys_report, world_size=job.ranks,
            env={"trtllm.args": args, "trtllm.block": [c["id"] for c in block]},
        )
        plan_path = work / "trtllm-plan.json"
        plan.write(plan_path)

        python = self.python or options.python or os.environ.get(PYTHON_ENV) or sys.executable
        argv = [python, "-u", str(checkout / RUN_PY), str(config_path), *args]
        if options.nsys:
            argv = [python, "-m", "abdiff.targets.trtllm.probe.nsys_rank", "--", *argv]
        bench = checkout / BENCH_DIR
        env = {
            "PYTHONPATH": os.pathsep.join(path_entries),
            PLAN_ENV: str(plan_path),
            "ABDIFF_RANK_PATHS": os.pathsep.join(dict.fromkeys(rank_paths)),
            # where the ranks find model configs without network; in the spec's env so
            # that mpirun/srun forward them to every rank (tokens stay behind --pass-env)
            **{name: os.environ[name] for name in HF_VARIABLES if os.environ.get(name)},
            # TLLM_FMHA_LIBS, TRTLLM_ENABLE_PDL, NCCL_ALGO...: every rank on every host runs
            # the kernel path abdiff records (mpirun forwards the spec's env with -x)
            **kernel_selecting_environment(os.environ),
        }
        return LaunchSpec(argv, bench if bench.is_dir() else checkout, env)
