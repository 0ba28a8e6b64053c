"""The target registry (abdiff/targets/__init__.py): abdiff's own targets and those other
packages register under the `abdiff.targets` entry point group, found the same way.

The third-party package here is real: a module and its installed metadata (a dist-info
folder with entry_points.txt, as pip writes it) in a folder on sys.path, found by
importlib.metadata and by the `abdiff` command in a fresh process.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from abdiff.errors import InputError
from abdiff.targets import (
    BUILTIN_TARGETS,
    ENTRY_POINT_GROUP,
    detect_target,
    registered,
    target_class,
    target_names,
    target_package,
)
from abdiff.targets.base import Target
from tests.conftest import git_env, run_abdiff

ROOT = Path(__file__).resolve().parents[1]

PLUGIN_PY = '''\
"""A target of another package: runs its benchmark as a command target does."""
from pathlib import Path
from typing import ClassVar

from abdiff.targets.command.target import CommandTarget


class ToyTarget(CommandTarget):
    name: ClassVar[str] = "toy"

    @classmethod
    def detect(cls, root: Path) -> bool:
        return (Path(root) / "toy.marker").is_file()


class NotATarget:
    name = "nope"
'''


def install_plugin(folder: Path, entry_points: str, module: str = PLUGIN_PY) -> Path:
    """`toy_plugin` 1.2.3 as pip would install it into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "toy_plugin.py").write_text(module)
    info = folder / "toy_plugin-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry_points}")
    return folder


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = install_plugin(tmp_path / "site", "toy = toy_plugin:ToyTarget\n")
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    sys.modules.pop("toy_plugin", None)


def test_pyproject_registers_the_builtin_targets() -> None:
    """BUILTIN_TARGETS (a source tree without installed metadata) is pyproject's list."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][ENTRY_POINT_GROUP] == BUILTIN_TARGETS
    assert list(registered())[:3] == ["trtllm", "reference", "command"]  # detection order
    for name in BUILTIN_TARGETS:
        assert issubclass(target_class(name), Target) and target_class(name).name == name


def test_a_third_party_target_is_found_through_its_entry_point(plugin: Path,
                                                                tmp_path: Path) -> None:
    assert "toy" in target_names()
    toy = target_class("toy")
    assert toy.__module__ == "toy_plugin" and issubclass(toy, Target)
    assert target_package("toy") == "toy-plugin 1.2.3"  # recorded in the run's env
    assert target_package("reference").startswith("abdiff ")
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "toy.marker").write_text("")
    assert detect_target(tmp_path / "repo") is toy  # detected like the built-ins


@pytest.mark.slow  # doctor's machine checks import torch: 3-6 s on 2 cores
def test_the_abdiff_command_lists_a_plugin_target(plugin: Path) -> None:
    env = {**git_env(), "PYTHONPATH": f"{plugin}:{ROOT}"}
    done = run_abdiff("doctor", "--target", "toy", env=env)
    assert "target toy (chosen): can run here" in done.stdout, done.stdout + done.stderr
    assert "target toy has no hooks: nothing to check in the code" in done.stdout
    with pytest.raises(InputError, match="--target 'toi' is unknown; choose one of command, "
                                         "reference, toy, trtllm"):
        target_class("toi")


@pytest.mark.parametrize(("entry", "module", "message"), [
    ("toy = toy_plugin:NotATarget\n", PLUGIN_PY,
     r"target 'toy' \(entry point toy_plugin:NotATarget of package toy-plugin\) is not a "
     r"subclass of abdiff.targets.base.Target"),
    ("toy = toy_plugin:Missing\n", PLUGIN_PY,
     r"of package toy-plugin\) cannot be loaded: AttributeError"),
    ("toy = toy_plugin:ToyTarget\n", "import no_such_dependency\n",
     r"of package toy-plugin\) cannot be loaded: ModuleNotFoundError: No module named "
     r"'no_such_dependency'"),
    ("other = toy_plugin:ToyTarget\n", PLUGIN_PY, r"its class's name is 'toy', not 'other'"),
])
def test_a_broken_plugin_names_its_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           entry: str, module: str, message: str) -> None:
    monkeypatch.syspath_prepend(str(install_plugin(tmp_path / "site", entry, module)))
    monkeypatch.delitem(sys.modules, "toy_plugin", raising=False)
    with pytest.raises(InputError, match=message) as caught:
        target_class(entry.split(" ")[0])
    assert "\n" not in str(caught.value)
    sys.modules.pop("toy_plugin", None)


def test_a_name_taken_twice_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(install_plugin(tmp_path / "site",
                                                   "reference = toy_plugin:ToyTarget\n")))
    with pytest.raises(InputError, match="target 'reference' is registered by both abdiff "
                                         "and toy-plugin; uninstall one"):
        registered()


def imports_of(path: Path) -> set[str]:
    """The abdiff modules a file imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("abdiff"):
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("abdiff")}
    return found


def test_no_import_circle_through_the_targets() -> None:
    """Every import under abdiff/targets and abdiff/suites, lazy ones included, points one
    way: no module reaches itself again."""
    modules = {}
    for path in [*(ROOT / "abdiff/targets").rglob("*.py"), *(ROOT / "abdiff/suites").rglob("*.py")]:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph = {name: imports_of(path) & modules.keys() for name, path in modules.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(m == goal or (m not in seen and reaches(m, goal, seen | {m}))
                   for m in graph[start])

    circles = [name for name in graph if reaches(name, name, {name})]
    assert circles == []


def test_the_trtllm_preflight_does_not_import_its_target() -> None:
    """One-way: target.py imports preflight.py (its GPU and model checks), never back."""
    tree = ast.parse((ROOT / "abdiff/targets/trtllm/preflight.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "abdiff.targets.trtllm.target" not in imported
    assert "abdiff.targets.trtllm.preflight" in {
        node.module for node in ast.walk(ast.parse(
            (ROOT / "abdiff/targets/trtllm/target.py").read_text()))
        if isinstance(node, ast.ImportFrom)}
