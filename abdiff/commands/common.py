"""Options shared by the commands that measure (diff, bisect, run, baseline) or compare:
each group is added to the parser here and read back here, once, into the typed objects
of abdiff/options.py that the pipeline receives."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

from abdiff.errors import InputError, did_you_mean
from abdiff.host.exposure import refuse_secrets
from abdiff.launchers import LAUNCHERS
from abdiff.launchers.sandbox import MODES as SANDBOX_MODES
from abdiff.options import Execution, Output, Selection, Statistics
from abdiff.reports import FORMATS, markdown, table
from abdiff.reports.common import clip
from abdiff.reports.printable import no_ci_commands
from abdiff.run.devices import parse_devices
from abdiff.run.schedule import Plan
from abdiff.store.files import write_output, written_in_place
from abdiff.store.records import Result
from abdiff.verdict import stats
from abdiff.verdict.policy import NOTHING_MEASURED_EXIT, SMALL_CHANGES, parse_gates

MEMORY_UNITS = MappingProxyType({"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40})


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def share(option: str, low: float, high: float) -> Callable[[str], float]:
    """The one unit convention of every option that is a share (--min-effect, --alpha): a
    percentage with its sign (`2%`) or a fraction (`0.02`), the same value; a value outside
    [low, high] is refused in one line that names both spellings (a bare `2` is 200%)."""
    example = f"{high / 25:.0%} or {high / 25:g}"

    def parse(text: str) -> float:
        spelled = text.strip()
        percent = spelled.endswith("%")
        try:
            number = float(spelled.removesuffix("%"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a share: give a percentage with "
                                             f"its sign or a fraction, e.g. {example}") from None
        value = number / 100.0 if percent else number
        if low <= value <= high:  # NaN fails both
            return value
        meant = (f"; a bare number is a fraction: for {number:g} percent write {number:g}% or "
                 f"{number / 100:g}" if not percent and high < value <= 100 else
                 f"; e.g. {example}")
        raise argparse.ArgumentTypeError(f"{text!r} is {value * 100:.6g}%, outside "
                                         f"{low * 100:g}% to {high * 100:g}%{meant}")
    parse.__name__ = option  # argparse names the type in its messages
    return parse


MIN_EFFECT = share("--min-effect", 0.001, 0.5)
ALPHA = share("--alpha", 1e-6, 0.25)


def memory_size(text: str) -> int:
    """`4G`, `512M`, `1073741824` -> bytes."""
    match = re.fullmatch(r"(\d+)([KMGT]?)i?B?", text.strip(), re.IGNORECASE)
    if not match or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 4G or 512M")
    return int(match.group(1)) * MEMORY_UNITS[match.group(2).upper()]


def add_suite_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configs", required=True, metavar="SUITE",
                        help="built-in suite name (see `abdiff suites`) or a YAML file")
    parser.add_argument("--yes", action="store_true",
                        help="run a suite whose matrix is larger than the safety limit")


def add_worker_options(parser: argparse.ArgumentParser) -> None:
    """How the benchmark's processes start and what they run on and in."""
    parser.add_argument("--launcher", choices=list(LAUNCHERS),
                        default=None, help="how workers start (default: local; mpirun for trtllm)")
    parser.add_argument("--np", type=positive_int, default=None,
                        help="ranks for mpirun/srun/torchrun")
    parser.add_argument("--nodes", type=positive_int, default=None, help="nodes for srun")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--eager", action="store_true",
                        help="on CUDA, time eager calls instead of CUDA graph replays (the "
                             "default); the CPU has no graphs and always times eager calls")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="accepted and ignored: graph replays are the default on CUDA")
    parser.add_argument("--cpu-threads", type=positive_int, default=1,
                        help="torch threads per worker on the CPU (default 1)")
    parser.add_argument("--devices", metavar="LIST",
                        help="run rounds on several devices at once, pairs within a device: "
                             "devices separated by ':', each a comma list of numbers or "
                             "ranges: GPU indices on a GPU host (0:1:2:3, each worker sees its "
                             "own), CPU sets on a CPU host (0-3:4-7, each worker pinned to "
                             "its set) (docs/commands.md)")
    parser.add_argument("--prestart", choices=["auto", "fork", "on", "off"], default="auto",
                        help="how local workers skip Python's start and the torch import: "
                             "fork (each a fork of one process that imported torch once), on "
                             "(standby: the next one starts while the current one measures), off "
                             "(every one cold); auto: fork (default auto)")
    parser.add_argument("--sandbox", choices=SANDBOX_MODES, default="auto",
                        help="run benchmark code in user, mount, pid and network namespaces "
                             "of its own (abdiff's key and the user's credentials and sockets "
                             "hidden; the repository, checkouts and Python environment "
                             "read-only; no network): auto uses them where they work and says "
                             "why not elsewhere, on refuses to measure without them (default "
                             "auto; docs/ci.md)")


def add_measure_options(parser: argparse.ArgumentParser) -> None:
    """Options of every command that starts benchmark processes."""
    add_suite_options(parser)
    parser.add_argument("--repo", type=Path, help="the benchmark repository (default: cwd)")
    parser.add_argument("--rounds", type=positive_int, default=Plan.rounds,
                        help=f"first rounds per side (default {Plan.rounds})")
    parser.add_argument("--timeout", type=positive_float, default=600.0, metavar="SECONDS",
                        help="kill a worker that makes no progress for this long (default 600)")
    parser.add_argument("--target", help="reference, trtllm, command, or one an installed "
                        "package registers (docs/targets.md; default: detected)")
    parser.add_argument("--target-arg", action="append", default=[], metavar="ARG",
                        help="extra argument passed to the target's benchmark (repeatable)")
    parser.add_argument("--metric", action="append", default=[], metavar="NAME",
                        help="the command target's Google Benchmark metric: real_time, "
                        "cpu_time or a counter (repeatable; replaces the suite's "
                        "target.metrics)")
    add_worker_options(parser)
    parser.add_argument("--cache-dir", type=Path, help="checkout and state cache folder")
    parser.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                        help="pass this credential-like variable to benchmark processes")
    parser.add_argument("--unsafe-allow-secret-env", action="store_true",
                        help="UNSAFE: measure although a token-like variable is in abdiff's "
                             "environment or a parent's, where the benchmark can read it")
    parser.add_argument("--max-memory", type=memory_size, metavar="SIZE",
                        help="address-space limit per worker process (e.g. 8G)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the rounds of a finished identical run instead of measuring")
    parser.add_argument("--seed", type=int, help="seed of the round order (default: random)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--skip-preflight", action="store_true",
                        help="measure without first checking that this machine can run the "
                        "target (the checks of `abdiff doctor`)")


def add_compare_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--expect", action="append", default=[], metavar="KEY=VALUE",
                        help="configs allowed to change (repeatable; default: the suite's)")
    parser.add_argument("--min-effect", type=MIN_EFFECT, default=stats.DEFAULT_MIN_EFFECT,
                        metavar="SHARE", help="smallest latency change that matters: 2%% or "
                        f"0.02, the same (default {stats.DEFAULT_MIN_EFFECT * 100:g}%%)")
    parser.add_argument("--alpha", type=ALPHA, default=stats.DEFAULT_ALPHA, metavar="SHARE",
                        help="family false-alarm rate of the latency verdicts over all configs "
                             "and looks: 1%% or 0.01, the same (default "
                             f"{stats.DEFAULT_ALPHA * 100:g}%%)")
    parser.add_argument("--small-changes", choices=SMALL_CHANGES, default="report",
                        help="a latency change that is real but below --min-effect: report it "
                             "(exit 0, the default) or gate on it like any change")
    parser.add_argument("--format", choices=sorted(FORMATS), default="table",
                        help="report format on stdout (or --output)")
    parser.add_argument("--output", type=Path, metavar="FILE", help="write the report here")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the JSON result")
    parser.add_argument("--html", type=Path, metavar="FILE", help="also write the HTML report")
    parser.add_argument("--require-all", action="store_true",
                        help="exit 1 unless every config was measured on both sides")
    parser.add_argument("--gate", metavar="CLASS=soft|hard,...",
                        help="soft classes (status, facts, kernels, latency) are reported but "
                        "do not fail the run, e.g. latency=soft,kernels=hard (or a YAML file)")
    parser.add_argument("--details-url", metavar="URL", type=markdown.check_url,
                        help="link the Markdown report to this page (HTML report, CI artifacts)")


def selection_of(args: argparse.Namespace) -> Selection:
    """--configs, --repo, --target... as one Selection (commands without an option get its
    default)."""
    return Selection(
        suite=args.configs, repo=args.repo, allow_large=args.yes, target=args.target,
        target_args=tuple(args.target_arg), expect=tuple(getattr(args, "expect", ())),
        metrics=tuple(getattr(args, "metric", ())),
        baselines_dir=getattr(args, "baselines_dir", None),
        allow_env_mismatch=getattr(args, "allow_env_mismatch", False))


def execution_of(args: argparse.Namespace) -> Execution:
    """How the rounds run; --max-rounds below --rounds is refused (the first look is at --rounds:
    no ceiling can be lower), and without it the ceiling is Plan's, or --rounds if higher."""
    ceiling = getattr(args, "max_rounds", args.rounds)
    if ceiling is None:
        ceiling = max(args.rounds, Plan.max_rounds)
    elif ceiling < args.rounds:
        raise InputError(f"--max-rounds {ceiling} is below --rounds {args.rounds}: the first "
                         f"look is after --rounds; give --max-rounds {args.rounds} or more")
    if args.devices:
        parse_devices(args.devices, gpu=True)  # the syntax, before any git (the CPUs later)
    return Execution(
        rounds=args.rounds, max_rounds=ceiling,
        timeout_s=args.timeout, launcher=args.launcher, ranks=args.np, nodes=args.nodes,
        device=args.device, eager=args.eager, cpu_threads=args.cpu_threads,
        devices=args.devices, prestart=args.prestart, sandbox=args.sandbox,
        cache_dir=args.cache_dir and writable_folder(args.cache_dir,
                                                     f"--cache-dir {args.cache_dir}"),
        pass_env=tuple(args.pass_env),
        unsafe_allow_secret_env=args.unsafe_allow_secret_env, max_memory_bytes=args.max_memory,
        resume=args.resume, seed=args.seed, skip_preflight=args.skip_preflight,
        quiet=args.quiet, started=args.started)


def measuring(args: argparse.Namespace) -> tuple[Selection, Execution]:
    """The selection and execution of a command that runs the benchmark, after refusing a
    secret in reach of it: first of all, before abdiff's first git command, which a
    .git/config written by an earlier benchmark could make run a program of its own."""
    execution = execution_of(args)
    refuse_secrets(list(execution.pass_env), execution.unsafe_allow_secret_env)
    return selection_of(args), execution


def statistics_of(args: argparse.Namespace) -> Statistics:
    """The verdict options (--min-effect and --alpha already fractions, `share`); a typo in
    --gate is refused here, before anything is measured."""
    return Statistics(min_effect=args.min_effect, alpha=args.alpha,
                      small_changes=args.small_changes, require_all=args.require_all,
                      gates=parse_gates(args.gate))


def writable_folder(folder: Path, what: str) -> Path:
    """`folder`, checked before anything is measured or made: its nearest existing folder
    is written once (a file made and removed; missing folders are made when written, as
    CI steps expect of `--json out/result.json`): root passes every permission check, and
    /proc or a read-only mount refuse only a real write."""
    try:
        existing = next(p for p in (folder.absolute(), *folder.absolute().parents)
                        if p.exists())
    except OSError as exc:  # a folder on the way the user may not enter
        raise InputError(f"{what}: cannot reach {folder} ({exc.strerror or exc}); pick "
                         "another path") from None
    if not existing.is_dir():
        raise InputError(f"{what}: {existing} is not a folder; pick another path")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise InputError(f"{what}: cannot write in {existing} ({exc.strerror or exc}); pick "
                         "another path") from None
    return folder


def output_path(path: Path | None, option: str) -> Path | None:
    """A file the user asked abdiff to write, checked before anything is measured: not a
    folder, and in a folder abdiff can write (`writable_folder`); a device or pipe
    (`--json /dev/stdout`) is written into as it is."""
    if path is None or (written_in_place(path) and os.path.lexists(path)):
        return path
    if path.is_dir():
        raise InputError(f"{option} {path}: that is a folder; give a file name in it")
    writable_folder(path.absolute().parent, f"{option} {path}")
    return path


def output_of(args: argparse.Namespace) -> Output:
    return Output(format=args.format, output=output_path(args.output, "--output"),
                  json=output_path(args.json, "--json"), html=output_path(args.html, "--html"),
                  details_url=args.details_url)


def emit_reports(result: Result, output: Output) -> None:
    """The chosen format to stdout or --output, the --json and --html files, then the verdict.

    Whatever went to files, the run ends with one line saying what was written
    (stderr) and the verdict (`reports.common.final_line`): last on stdout when
    the table went there (it ends with it) or the report went to a file, on
    stderr when stdout carries another format (so a piped report stays clean).
    """
    if output.format == "markdown":
        text = markdown.render(result, details_url=output.details_url)
    elif output.format == "table":
        text = table.render(result, colour=False if output.output else None)
    else:
        text = FORMATS[output.format].render(result)
    if output.format in ("table", "markdown", "csv"):  # a line a CI runner would obey
        text = no_ci_commands(text)
    written = []
    for path, fmt in ((output.output, output.format), (output.json, "json"), (output.html, "html")):
        if path:
            write_output(path, text if path is output.output else FORMATS[fmt].render(result))
            written.append(f"{path} ({fmt})")
    if written:
        table.say(f"abdiff: wrote {', '.join(written)}")
    if not output.output:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    # a run that measured nothing ends with finish()'s error line instead: one line on stderr
    nothing = int(result.summary.get("exit_code", 0)) == NOTHING_MEASURED_EXIT
    if (output.output or output.format != "table") and not (nothing and not output.output):
        stream = sys.stdout if output.output else sys.stderr
        sys.stdout.flush()
        print("\n".join(table.ending(result, table.terminal_width())), file=stream, flush=True)


def finish(result: Result, output: Output) -> int:
    """Write the reports and return the exit code; a run that measured nothing (exit 3)
    also says so in one line on stderr, naming the first failure."""
    emit_reports(result, output)
    code = int(result.summary["exit_code"])
    if code == NOTHING_MEASURED_EXIT:
        first = next((c for c in result.configs if c.error_a or c.error_b), None)
        cause = (f"; first failure: {first.id}: {clip(first.error_a or first.error_b)}"
                 if first else "")
        print(f"abdiff: error: nothing measured: no config ran on either side{cause}; fix "
              "it and re-run (`abdiff doctor A..B` checks the hooks) (exit 3)", file=sys.stderr)
    return code


def expect_scope(given: tuple[str, ...], suite_expect: dict[str, list[str]],
                 keys: list[str], params: list[dict]) -> dict[str, list[str]]:
    """--expect (checked against the configs' own values), else the suite's scope."""
    from abdiff.verdict.policy import parse_expect

    if not given:
        return suite_expect
    expect = parse_expect(list(given), keys)
    check_expect_values(expect, params)
    return expect


def check_expect_values(expect: dict[str, list[str]], params: list[dict]) -> None:
    """Every --expect value must name a value some config has, compared exactly.

    `--expect backend=dsa` would otherwise match nothing, and every intended
    DSA change would be reported as unintended. A value that differs only in
    case is offered as the likely meaning, not silently taken.
    """
    for key, values in expect.items():
        known = sorted({str(p[key]) for p in params if key in p})
        for value in values:
            if value in known:
                continue
            hint = did_you_mean(value, known, prefix=f"{key}=")
            raise InputError(f"--expect {key}={value}: no config has {key} {value!r} (values "
                             f"are case-sensitive: {', '.join(known) or 'none'}){hint}")
