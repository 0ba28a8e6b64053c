"""`--configs upstream-tests`: the configs upstream's own test of the layer-wise benchmark
guards, read from the repository's tests/unittest/tools/test_layer_wise_benchmarks.py.

Each upstream test runs `./mpi_launch.sh ./run.sh config_ctx.yaml|config_gen.yaml --model
MODEL_ROOT/... [run.py options]` (then parse.py). This module reads those calls with the
ast module (nothing of upstream is imported) and makes one abdiff config per test and
shape: the run type and shapes from the named YAML of the checkout unless the test
overrides them, the model under `LLM_MODELS_ROOT` (upstream's llm_models_root()), and
every other option as a run.py option of that config, so each test is its own run.py
invocation (targets/trtllm/target.py: a block shares every non-shape parameter).

What upstream skips is left out and named: a test under `pytest.mark.skip`, a world
size whose `pytest.param` carries a mark, and tests that run a script rather than
run.py. Where a test picks options by world size (`if world_size == 1:`), the branch of
`WORLD_SIZE` is taken: upstream's multi-GPU CI runs them with 4 ranks (give `--np 4`).
"""

from __future__ import annotations

import ast
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from abdiff.errors import InputError
from abdiff.suites.model import Config, Suite
from abdiff.targets.layerwise import SHAPE_KEYS, config_id

NAME = "upstream-tests"
TEST_FILE = "tests/unittest/tools/test_layer_wise_benchmarks.py"
BENCH_DIR = "examples/layer_wise_benchmarks"
MODELS_ROOT_ENV = "LLM_MODELS_ROOT"
WORLD_SIZE = 4
BLACKWELL = (100, 103)
RUN_TYPES = frozenset({"CTX", "GEN"})


@dataclass(frozen=True)
class UpstreamCase:
    """One upstream test that runs run.py: its YAML and its command-line arguments."""

    test: str
    yaml_name: str
    args: tuple[str, ...]
    blackwell_only: bool


@dataclass(frozen=True)
class UpstreamTests:
    cases: tuple[UpstreamCase, ...]
    left_out: tuple[str, ...]  # "test_x (why)"


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target)


def _world_sizes(decorators: list[ast.expr]) -> tuple[list[int], list[int]]:
    """(world sizes upstream runs, world sizes it skips) of a parametrized test."""
    run: list[int] = []
    skipped: list[int] = []
    for node in decorators:
        if not (isinstance(node, ast.Call) and _decorator_name(node).endswith("parametrize")
                and node.args and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "world_size" and len(node.args) > 1
                and isinstance(node.args[1], ast.List)):
            continue
        for item in node.args[1].elts:
            if isinstance(item, ast.Constant) and isinstance(item.value, int):
                run.append(item.value)
            elif (isinstance(item, ast.Call) and _decorator_name(item).endswith("param")
                  and item.args and isinstance(item.args[0], ast.Constant)
                  and isinstance(item.args[0].value, int)):
                marked = any(k.arg == "marks" for k in item.keywords)
                (skipped if marked else run).append(item.args[0].value)
    return run, skipped


def _models_path(node: ast.expr, root: str) -> str | None:
    """`model_root / "A" / "B"` -> ROOT/A/B."""
    parts: list[str] = []
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        if not (isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)):
            return None
        parts.insert(0, node.right.value)
        node = node.left
    return os.path.join(root, *parts) if isinstance(node, ast.Name) and parts else None


def _condition_holds(test: ast.expr, world_size: int) -> bool | None:
    if (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "world_size" and len(test.ops) == 1
            and isinstance(test.comparators[0], ast.Constant)):
        value, op = test.comparators[0].value, test.ops[0]
        if isinstance(op, ast.Eq):
            return world_size == value
        if isinstance(op, ast.NotEq):
            return world_size != value
    return None


def _assigned_list(body: list[ast.stmt], name: str, world_size: int) -> ast.List | None:
    """The list assigned to `name` on the path `world_size` takes through `body`."""
    found = None
    for stmt in body:
        if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.List)
                and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)):
            found = stmt.value
        elif isinstance(stmt, ast.If):
            holds = _condition_holds(stmt.test, world_size)
            branch = stmt.body if holds else stmt.orelse if holds is False else []
            found = _assigned_list(branch, name, world_size) or found
    return found


def _run_py_call(function: ast.FunctionDef) -> ast.List | None:
    """The `[./mpi_launch.sh, ./run.sh, YAML, ...]` list the test passes to check_call."""
    for node in ast.walk(function):
        if (isinstance(node, ast.Call) and _decorator_name(node).endswith("check_call")
                and node.args and isinstance(node.args[0], ast.List)):
            head = [e.value for e in node.args[0].elts[:3] if isinstance(e, ast.Constant)]
            if head[:2] == ["./mpi_launch.sh", "./run.sh"] and len(head) == 3:
                return node.args[0]
    return None


def parse_upstream_tests(text: str, where: str, models_root: str,
                         world_size: int = WORLD_SIZE) -> UpstreamTests:
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise InputError(f"{where}: not Python upstream's test reads as ({exc.msg}, line "
                         f"{exc.lineno})") from None
    cases: list[UpstreamCase] = []
    left_out: list[str] = []
    for function in tree.body:
        if not (isinstance(function, ast.FunctionDef) and function.name.startswith("test_")):
            continue
        names = [_decorator_name(d) for d in function.decorator_list]
        if any(n.endswith("mark.skip") for n in names):
            left_out.append(f"{function.name} (pytest.mark.skip upstream)")
            continue
        command = _run_py_call(function)
        if command is None:
            continue  # not a run.py test (a script, or the GPU-free calibrator checks)
        run, skipped = _world_sizes(function.decorator_list)
        if run and world_size not in run:
            left_out.append(f"{function.name} (upstream runs world sizes {run}, not "
                            f"{world_size})")
            continue
        args: list[str] = []
        for element in command.elts[3:]:
            if isinstance(element, ast.Constant) and isinstance(element.value, str):
                args.append(element.value)
            elif isinstance(element, ast.Starred) and isinstance(element.value, ast.Name):
                chosen = _assigned_list(function.body, element.value.id, world_size)
                if chosen is None:
                    raise InputError(f"{where}: {function.name} passes *{element.value.id}, "
                                     "which abdiff cannot resolve")
                args += [e.value for e in chosen.elts
                         if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            else:
                path = _models_path(element, models_root)
                if path is None:
                    raise InputError(f"{where}: {function.name}: argument "
                                     f"{ast.unparse(element)!r} is not a string or a model path")
                args.append(path)
        yaml_node = command.elts[2]
        assert isinstance(yaml_node, ast.Constant)
        cases.append(UpstreamCase(function.name, str(yaml_node.value), tuple(args),
                                  "skip_pre_blackwell" in names))
    return UpstreamTests(tuple(cases), tuple(left_out))


def _as_options(args: tuple[str, ...], where: str) -> dict[str, Any]:
    """run.py's command line as option key -> value (`--no-x` -> x: False, `--x` -> True)."""
    options: dict[str, Any] = {}
    items = list(args)
    while items:
        arg = items.pop(0)
        if not arg.startswith("--"):
            raise InputError(f"{where}: run.py argument {arg!r} follows no option")
        name, sep, value = arg[2:].partition("=")
        if not sep and items and not items[0].startswith("--"):
            value, sep = items.pop(0), "="
        if sep:
            options[name.replace("-", "_")] = value
        elif name.startswith("no-"):
            options[name[3:].replace("-", "_")] = False
        else:
            options[name.replace("-", "_")] = True
    return options


def _shape_values(value: Any) -> list[int]:
    items = value if isinstance(value, list) else str(value).split(",")
    return [int(v) for v in items]


def load_upstream_tests(repo_root: Path | None) -> tuple[Suite, str]:
    """The suite of upstream's guarded configs and a one-line note of what was left out."""
    root = Path(repo_root or Path.cwd())
    path = root / TEST_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        raise InputError(f"--configs {NAME}: {path} not found; run in a TensorRT-LLM checkout "
                         "(or give --repo)") from None
    models_root = os.environ.get(MODELS_ROOT_ENV)
    if not models_root:
        raise InputError(f"--configs {NAME}: set {MODELS_ROOT_ENV} to the models folder "
                         "upstream's tests use (llm_models_root())")
    from abdiff.targets.trtllm.upstream_config import DSA_MODEL, FACTS

    found = parse_upstream_tests(text, str(path), models_root)
    configs: list[Config] = []
    for case in found.cases:
        where = f"{path}: {case.test}"
        try:
            base = yaml.safe_load((root / BENCH_DIR / case.yaml_name).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            raise InputError(f"{where}: cannot read {BENCH_DIR}/{case.yaml_name} of the "
                             "checkout") from None
        options = _as_options(case.args, where)
        run_type = base.get("run_type") if isinstance(base, dict) else None
        if run_type not in RUN_TYPES:
            raise InputError(f"{where}: {case.yaml_name} names no run_type CTX or GEN")
        shapes = {k: _shape_values(options.pop(k, base.get(k))) for k in SHAPE_KEYS}
        model = str(options.pop("model", base.get("model") or ""))
        backend = "DSA" if DSA_MODEL.search(model) else "TRTLLM"
        for values in itertools.product(*(shapes[k] for k in SHAPE_KEYS)):
            params: dict[str, Any] = {"run_type": run_type, "backend": backend,
                                      **dict(zip(SHAPE_KEYS, values, strict=True))}
            configs.append(Config(f"{case.test[len('test_'):]}-{config_id(params)}",
                                  {**params, "model": model, **options}))
    if not configs:
        raise InputError(f"{path}: no test runs run.py; nothing to guard")
    blackwell = all(c.blackwell_only for c in found.cases)
    suite = Suite(name=NAME, source=str(path),
                  description="the configs upstream's test_layer_wise_benchmarks.py guards",
                  configs=configs, expect={}, facts=list(FACTS), warmup_times=3, run_times=20,
                  target_options={"sm": list(BLACKWELL)} if blackwell else {}, tp=1)
    note = (f"{path}: {len(found.cases)} upstream tests as {len(configs)} configs (world size "
            f"{WORLD_SIZE}); left out: {', '.join(found.left_out) or 'nothing'}")
    return suite, note

