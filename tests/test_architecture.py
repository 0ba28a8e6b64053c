"""docs/architecture.md's layout is the tree: every module of abdiff/ is named there, in
its package, and nothing it names is missing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "abdiff"


def _layout_paths() -> set[str]:
    """The .py files the Layout block names, as paths relative to the repository."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## Layout\n\n```\n", 1)[1].split("```\n", 1)[0]
    folders: list[tuple[int, str]] = []
    named = set()
    for line in block.splitlines():
        entry = re.match(r"^( *)(\S+)", line)
        if not entry or (folders and len(entry.group(1)) > folders[-1][0] + 2
                         and not entry.group(2).endswith((".py", "/"))):
            continue  # a description's continuation line
        indent, name = len(entry.group(1)), entry.group(2)
        while folders and folders[-1][0] >= indent:
            folders.pop()
        if name.endswith("/"):
            folders.append((indent, name))
        elif name.endswith(".py"):
            named.add("".join(folder for _, folder in folders) + name)
    return named


def _modules() -> set[str]:
    return {str(path.relative_to(ROOT)) for path in PACKAGE.rglob("*.py")
            if path.name != "__init__.py" and "harness" not in path.relative_to(PACKAGE).parts}


def test_every_module_is_in_the_layout_and_every_entry_exists() -> None:
    named, modules = _layout_paths(), _modules()
    assert modules - named == set(), "modules missing from docs/architecture.md's Layout"
    assert named - modules == set(), "docs/architecture.md names modules that do not exist"


_MUTABLE_VALUES = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


def _mutable_state(source: str, where: str) -> list[str]:
    """`where:line name` for each module-level dict/list/set built at import (other than
    `__all__`), and `where:line global name` for each `global` statement anywhere."""
    tree = ast.parse(source)
    found = [f"{where}:{node.lineno} global {', '.join(node.names)}"
             for node in ast.walk(tree) if isinstance(node, ast.Global)]
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        built = isinstance(value, _MUTABLE_VALUES) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in ("dict", "list", "set"))
        if built and names != ["__all__"]:
            found.append(f"{where}:{node.lineno} {', '.join(names) or 'assignment'}")
    return found


def test_library_code_keeps_no_module_level_mutable_state() -> None:
    """Module-level tables are read-only (MappingProxyType, tuple, frozenset) and no function
    rebinds a module global. The demo harness is package data mirroring upstream, not
    abdiff's code."""
    offenders = [entry for path in sorted(PACKAGE.rglob("*.py"))
                 if "harness" not in path.relative_to(PACKAGE).parts
                 for entry in _mutable_state(path.read_text(encoding="utf-8"),
                                             str(path.relative_to(ROOT)))]
    assert offenders == []


_SAMPLE = """\
from types import MappingProxyType
__all__ = ["bump"]
TABLE = {"a": 1}
NAMES: list[str] = ["a"]
KINDS = {"x"}
SQUARES = [n * n for n in range(3)]
BY_NAME = {n: n for n in "ab"}
SEEN = set()
READ_ONLY = MappingProxyType({"a": 1})
ORDER = ("a", "b")
CHOICES = frozenset({"x"})
counter = 0


def bump() -> None:
    global counter
    counter += 1
"""


def test_the_mutable_state_check_flags_each_kind_it_forbids() -> None:
    """The control: each forbidden form in a sample module is found; read-only tables and
    `__all__` pass."""
    assert _mutable_state(_SAMPLE, "sample.py") == [
        "sample.py:16 global counter", "sample.py:3 TABLE", "sample.py:4 NAMES",
        "sample.py:5 KINDS", "sample.py:6 SQUARES", "sample.py:7 BY_NAME", "sample.py:8 SEEN"]
