"""`abdiff suites`: the built-in suites with their config counts."""

from __future__ import annotations

import argparse

from abdiff.reports.table import grid, terminal_width
from abdiff.suites import builtin_suites, load_suite
from abdiff.targets.trtllm.preflight import sm_text, suite_sm


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("suites", help="list the built-in config suites")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    rows = []
    for name in sorted(builtin_suites()):
        suite = load_suite(name)
        expect = "; ".join(f"{k}={','.join(v)}" for k, v in suite.expect.items()) or "nothing"
        rows.append([name, str(len(suite.configs)), expect, sm_text(suite_sm(suite)) or "any",
                     suite.description])
    print(grid(["suite", "configs", "may change", "trtllm GPUs", "description"], rows,
               terminal_width()))
    return 0
