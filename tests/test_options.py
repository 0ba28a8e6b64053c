"""The command line is read once into the typed, frozen option objects (abdiff/options.py),
and only the command layer (cli.py, commands/, completion.py) knows argparse."""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path

import pytest

from abdiff.cli import build_parser
from abdiff.commands.common import output_of, schedule_of, selection_of, statistics_of
from abdiff.errors import InputError
from abdiff.options import Output, Schedule, Selection, Statistics

ROOT = Path(__file__).resolve().parents[1]
COMMAND_LAYER = ("abdiff/cli.py", "abdiff/completion.py", "abdiff/commands/")
# the demo's benchmark harness is the benchmark (its own process, its own argv)
BENCHMARK_CODE = "abdiff/demo/harness/"


def parse(*argv: str):
    return build_parser("diff").parse_args(["diff", "main..pr", "--configs", "mtp", *argv])


def test_only_the_command_layer_imports_argparse() -> None:
    knowing = []
    for path in sorted((ROOT / "abdiff").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where.startswith(COMMAND_LAYER) or where.startswith(BENCHMARK_CODE):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if "argparse" in names:
                knowing.append(where)
    assert knowing == []


def test_defaults_of_the_parser_are_the_defaults_of_the_objects() -> None:
    args = parse()
    assert selection_of(args) == Selection(suite="mtp")
    assert schedule_of(args) == Schedule()
    assert statistics_of(args) == Statistics()
    assert output_of(args) == Output()


def test_each_option_lands_in_its_concern() -> None:
    args = parse("--repo", "/r", "--target", "command", "--target-arg=--x", "--expect",
                 "backend=dsa", "--rounds", "4", "--max-rounds", "20", "--np", "2",
                 "--launcher", "mpirun", "--pass-env", "HF_HOME", "--max-memory", "2G",
                 "--min-effect", "3", "--alpha", "0.05", "--small-changes", "gate",
                 "--gate", "latency=soft", "--format", "markdown", "--json", "r.json",
                 "--quiet")
    selection, schedule = selection_of(args), schedule_of(args)
    statistics, output = statistics_of(args), output_of(args)
    assert (selection.repo, selection.target, selection.target_args, selection.expect) == \
        (Path("/r"), "command", ("--x",), ("backend=dsa",))
    assert (schedule.rounds, schedule.max_rounds, schedule.ranks, schedule.launcher,
            schedule.pass_env, schedule.max_memory_bytes, schedule.quiet) == \
        (4, 20, 2, "mpirun", ("HF_HOME",), 2 * 2**30, True)
    assert statistics == Statistics(min_effect=0.03, alpha=0.05, small_changes="gate",
                                    gates={"latency": "soft"})
    assert (output.format, output.json) == ("markdown", Path("r.json"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.rounds = 5  # type: ignore[misc]


def test_a_bad_statistics_option_is_refused_when_read() -> None:
    with pytest.raises(InputError, match="--min-effect 100.0: a percentage below 100"):
        statistics_of(parse("--min-effect", "100"))
    with pytest.raises(InputError, match="--gate"):
        statistics_of(parse("--gate", "latency=loud"))


def test_bad_output_paths_and_rounds_are_refused_before_measuring(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="/dev/null is not a folder"):
        output_of(parse("--json", "/dev/null/x.json"))
    with pytest.raises(InputError, match="that is a folder"):
        output_of(parse("--html", str(tmp_path)))
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if not os.access(locked, os.W_OK):  # root writes anywhere: nothing to refuse then
        with pytest.raises(InputError, match="is not writable"):
            output_of(parse("--json", str(locked / "r.json")))
    # missing folders are made when the report is written (CI steps rely on it)
    assert output_of(parse("--json", str(tmp_path / "out" / "r.json"))).json == \
        tmp_path / "out" / "r.json"
    with pytest.raises(InputError, match="--max-rounds 2 is below --rounds 5"):
        schedule_of(parse("--rounds", "5", "--max-rounds", "2"))
    # without --max-rounds the ceiling is the plan's, or --rounds when that is higher
    assert schedule_of(parse("--rounds", "20")).max_rounds == 20
