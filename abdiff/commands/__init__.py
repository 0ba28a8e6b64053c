"""One module per subcommand; each has `register(subparsers)` setting `run=` as default."""

from __future__ import annotations

import importlib
from types import ModuleType

_NAMES = ["diff", "run", "compare", "baseline", "bisect", "demo", "suites", "comment", "cache",
          "doctor"]

COMMANDS: list[ModuleType] = [importlib.import_module(f"abdiff.commands.{n}") for n in _NAMES]
