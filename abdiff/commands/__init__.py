"""One module per subcommand; each has `register(subparsers)` setting `run=` as default.

Modules are imported on demand: `abdiff comment` runs in a job that installs
abdiff without its dependencies (docs/ci.md), so it must not import the
measuring commands (numpy, scipy, yaml) just to build the parser.
"""

from __future__ import annotations

import importlib
from types import ModuleType

NAMES = ("diff", "run", "compare", "baseline", "bisect", "demo", "suites", "comment", "cache",
         "doctor", "check-kernels", "history")


def commands(first_word: str | None = None) -> list[ModuleType]:
    """The module of the subcommand `first_word` names, or all of them (help, errors)."""
    names = [first_word] if first_word in NAMES else NAMES
    return [importlib.import_module(f"abdiff.commands.{n.replace('-', '_')}") for n in names]
