"""Shell completion with argcomplete (optional: `pip install 'abdiff[completion]'`).

Completes commands and options from the parser itself, and the values abdiff
knows: suite names for `--configs`, branch and tag names for a range (`main..p`
-> `main..pr`, also `A...B` and `baseline:NAME..`), config ids for `history` and
`bisect --config`, `KEY=VALUE` for `--expect`, baseline names for `baseline
show`. The shell calls `abdiff` with `_ARGCOMPLETE` set; `complete` answers and
exits before anything else runs. docs/completion.md says how to turn it on.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from abdiff.commands import NAMES

RANGE_SPLIT = re.compile(r"^(.*?\.\.\.?)([^.]*)$")  # "main..p" -> ("main..", "p")


def _repo(parsed: argparse.Namespace) -> Path:
    return Path(getattr(parsed, "repo", None) or Path.cwd())


def _suites(parsed: argparse.Namespace) -> list[Any]:
    """The suite named by --configs, else every built-in suite (quietly none on an error)."""
    from abdiff.errors import InputError
    from abdiff.suites import load_suite
    from abdiff.suites.loader import builtin_suites

    names = [parsed.configs] if getattr(parsed, "configs", None) else sorted(builtin_suites())
    suites = []
    for name in names:
        try:
            suites.append(load_suite(name, allow_large=True))
        except InputError:
            continue
    return suites


def suite_names(prefix: str, **_: Any) -> list[str]:
    from abdiff.suites.loader import builtin_suites

    return [name for name in sorted(builtin_suites()) if name.startswith(prefix)]


def ranges(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """Branch and tag names for side A, then for side B after `..` or `...`."""
    from abdiff.repo.revs import ref_names

    names = ref_names(_repo(parsed_args))
    match = RANGE_SPLIT.match(prefix)
    if match and ".." in prefix:
        left, typed = match.groups()
        return [left + name for name in names if name.startswith(typed)]
    return [name + ".." for name in names if name.startswith(prefix)]


def config_ids(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    ids = {c.id for suite in _suites(parsed_args) for c in suite.configs}
    return sorted(i for i in ids if i.startswith(prefix))


def expect_pairs(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    pairs = {f"{key}={value}" for suite in _suites(parsed_args) for c in suite.configs
             for key, value in c.params.items()}
    return sorted(p for p in pairs if p.startswith(prefix))


def baseline_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    from abdiff.store.baselines import baselines_dir

    folder = baselines_dir(_repo(parsed_args), getattr(parsed_args, "baselines_dir", None))
    return sorted(p.stem for p in folder.glob("*.json") if p.stem.startswith(prefix))


# argparse dest -> completer, in every (sub)parser
COMPLETERS: MappingProxyType[str, Callable[..., Iterable[str]]] = MappingProxyType({
    "configs": suite_names, "range": ranges, "config": config_ids, "expect": expect_pairs,
})


def _attach(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                _attach(sub)
                if name == "show":
                    for inner in sub._actions:
                        if inner.dest == "name":
                            inner.completer = baseline_names
        elif action.dest in COMPLETERS:
            action.completer = COMPLETERS[action.dest]  # type: ignore[attr-defined]


def _implicit_diff() -> None:
    """`abdiff main..p<TAB>`: the range is the command (cli.main reads it as `diff`), so
    the line is completed as `abdiff diff main..p`; so is a first word no command starts
    with (`abdiff ma<TAB>` -> `main..`)."""
    line, point = os.environ.get("COMP_LINE", ""), int(os.environ.get("COMP_POINT", "0"))
    words = line.split(" ")
    if len(words) < 2 or words[1].startswith("-"):
        return
    typing_first = len(words) == 2 and not any(n.startswith(words[1]) for n in NAMES)
    if typing_first or (".." in words[1] and words[1] not in NAMES):
        os.environ["COMP_LINE"] = " ".join([words[0], "diff", *words[1:]])
        os.environ["COMP_POINT"] = str(point + len("diff "))


def complete(build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """Answer the shell's completion request and exit, when there is one."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete  # type: ignore[import-not-found,unused-ignore]  # optional extra
    except ImportError:  # the shell was set up, the package is gone: complete nothing
        os._exit(1)
    _implicit_diff()
    parser = build_parser()
    _attach(parser)
    argcomplete.autocomplete(parser)
