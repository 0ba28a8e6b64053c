"""The command line is read once into the typed, frozen option objects (abdiff/options.py),
and only the command layer (cli.py, commands/, completion.py) knows argparse."""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import time
from pathlib import Path

import pytest

from abdiff.cli import build_parser
from abdiff.commands.common import execution_of, output_of, selection_of, statistics_of
from abdiff.errors import InputError
from abdiff.options import Execution, Output, Selection, Statistics

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
    assert execution_of(args) == Execution()
    assert statistics_of(args) == Statistics()
    assert output_of(args) == Output()


def test_each_option_lands_in_its_concern() -> None:
    args = parse("--repo", "/r", "--target", "command", "--target-arg=--x", "--expect",
                 "backend=dsa", "--rounds", "4", "--max-rounds", "20", "--np", "2",
                 "--launcher", "mpirun", "--pass-env", "HF_HOME", "--max-memory", "2G",
                 "--min-effect", "3%", "--alpha", "0.05", "--small-changes", "gate",
                 "--gate", "latency=soft", "--format", "markdown", "--json", "r.json",
                 "--quiet")
    selection, execution = selection_of(args), execution_of(args)
    statistics, output = statistics_of(args), output_of(args)
    assert (selection.repo, selection.target, selection.target_args, selection.expect) == \
        (Path("/r"), "command", ("--x",), ("backend=dsa",))
    assert (execution.rounds, execution.max_rounds, execution.ranks, execution.launcher,
            execution.pass_env, execution.max_memory_bytes, execution.quiet) == \
        (4, 20, 2, "mpirun", ("HF_HOME",), 2 * 2**30, True)
    assert statistics == Statistics(min_effect=0.03, alpha=0.05, small_changes="gate",
                                    gates={"latency": "soft"})
    assert (output.format, output.json) == ("markdown", Path("r.json"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        execution.rounds = 5  # type: ignore[misc]


@pytest.mark.parametrize(("option", "spellings", "value"), [
    ("--min-effect", ("2%", "0.02", " 2% ", "2.0%"), 0.02),
    ("--min-effect", ("0.5%", "0.005"), 0.005),
    ("--alpha", ("1%", "0.01"), 0.01),
    ("--alpha", ("5%", "0.05"), 0.05)])
def test_a_share_means_the_same_as_a_percentage_or_a_fraction(
        option: str, spellings: tuple[str, ...], value: float) -> None:
    """One unit convention for every share: `2%` and `0.02` are the same value."""
    for text in spellings:
        statistics = statistics_of(parse(option, text))
        got = statistics.min_effect if option == "--min-effect" else statistics.alpha
        assert got == pytest.approx(value), text


@pytest.mark.parametrize(("option", "text", "says"), [
    ("--min-effect", "2", "'2' is 200%, outside 0.1% to 50%; a bare number is a fraction: for "
                          "2 percent write 2% or 0.02"),
    ("--min-effect", "0.0002", "'0.0002' is 0.02%, outside 0.1% to 50%"),
    ("--min-effect", "100%", "'100%' is 100%, outside"),
    ("--min-effect", "two", "'two' is not a share"),
    ("--min-effect", "nan", "'nan' is nan%"),
    ("--alpha", "1", "'1' is 100%, outside 0.0001% to 25%; a bare number is a fraction: for 1 "
                     "percent write 1% or 0.01"),
    ("--alpha", "0%", "'0%' is 0%, outside")])
def test_a_share_outside_its_range_is_refused_in_one_line(option: str, text: str,
                                                          says: str) -> None:
    """A bare value that would be nonsense as a fraction (`--min-effect 2`, which older
    versions read as 2%, would be 200%) is refused, naming both spellings."""
    with pytest.raises(InputError, match=re.escape(says)) as refused:
        parse(option, text)
    assert "\n" not in str(refused.value)


def test_a_bad_statistics_option_is_refused_when_read() -> None:
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
        with pytest.raises(InputError, match="cannot write in .*locked"):
            output_of(parse("--json", str(locked / "r.json")))
    # nor anything /proc holds, root or not: refused before measuring, not after (exit 3)
    with pytest.raises(InputError, match=r"^--json /proc/nope/r.json: cannot write in "
                                         r"/proc \("):
        output_of(parse("--json", "/proc/nope/r.json"))
    with pytest.raises(InputError, match=r"^--cache-dir /proc/nope: cannot write in"):
        execution_of(parse("--cache-dir", "/proc/nope"))
    assert output_of(parse("--json", "/dev/stdout")).json == Path("/dev/stdout")
    # missing folders are made when the report is written (CI steps rely on it)
    assert output_of(parse("--json", str(tmp_path / "out" / "r.json"))).json == \
        tmp_path / "out" / "r.json"
    with pytest.raises(InputError, match="--max-rounds 2 is below --rounds 5"):
        execution_of(parse("--rounds", "5", "--max-rounds", "2"))
    # without --max-rounds the ceiling is the plan's, or --rounds when that is higher
    assert execution_of(parse("--rounds", "20")).max_rounds == 20


def test_a_runs_wall_time_starts_when_its_command_began() -> None:
    """cli.main hands build_parser its start, before the subcommand's imports (scipy, numpy:
    abdiff's own time, which the time: line shows); a second command in one process (the
    demo's second story) starts its own."""
    began = time.monotonic() - 5.0
    args = build_parser("diff", started=began).parse_args(["diff", "main..pr", "--configs",
                                                           "mtp"])
    assert execution_of(args).started == began
    now = time.monotonic()
    assert now <= execution_of(parse()).started <= time.monotonic()
