"""docs/architecture.md's layout is the tree: every module of abdiff/ is named there, in
its package, and nothing it names is missing."""

from __future__ import annotations

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
