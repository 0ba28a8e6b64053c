"""One module per subcommand; each has `register(subparsers)` setting `run=` as default."""

from __future__ import annotations

import importlib
from types import ModuleType

NAMES = ["diff", "run", "compare", "baseline", "demo", "suites", "comment", "cache", "doctor"]

COMMANDS: list[ModuleType] = [importlib.import_module(f"abdiff.commands.{n}") for n in NAMES]
