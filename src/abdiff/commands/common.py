"""Options and wiring shared by the commands that measure (diff, run, baseline, demo)."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from abdiff import __version__, stats
from abdiff.checkouts import CheckoutCache, default_cache_dir
from abdiff.errors import InputError
from abdiff.launchers import make_launcher
from abdiff.launchers.base import Launcher
from abdiff.probe import resolve_device
from abdiff.records import Result, RunFile, write_atomic
from abdiff.reports import FORMATS
from abdiff.revs import SideSpec, open_repo, resolve_rev
from abdiff.rounds import RoundSettings
from abdiff.schedule import (
    Measurement,
    Plan,
    SideRun,
    empty_run,
    exclusive,
    measure,
    settings_fingerprint,
    state_key,
)
from abdiff.suites import Suite, load_suite
from abdiff.targets import detect_target
from abdiff.targets.base import Target

MEMORY_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


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


def add_measure_options(parser: argparse.ArgumentParser) -> None:
    """Options of every command that starts benchmark processes."""
    add_suite_options(parser)
    parser.add_argument("--repo", type=Path, help="the benchmark repository (default: cwd)")
    parser.add_argument("--rounds", type=positive_int, default=Plan.rounds,
                        help=f"first rounds per side (default {Plan.rounds})")
    parser.add_argument("--timeout", type=positive_float, default=600.0, metavar="SECONDS",
                        help="kill a worker that makes no progress for this long (default 600)")
    parser.add_argument("--target", help="reference or trtllm (default: detected)")
    parser.add_argument("--target-arg", action="append", default=[], metavar="ARG",
                        help="extra argument passed to the target's benchmark (repeatable)")
    parser.add_argument("--launcher", choices=["local", "mpirun", "srun"], default=None,
                        help="how workers start (default: local; mpirun for trtllm)")
    parser.add_argument("--np", type=positive_int, default=None, help="ranks for mpirun/srun")
    parser.add_argument("--nodes", type=positive_int, default=None, help="nodes for srun")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="capture each run pack in a CUDA graph and time its replays")
    parser.add_argument("--cpu-threads", type=positive_int, default=1,
                        help="torch threads per worker on the CPU (default 1)")
    parser.add_argument("--cache-dir", type=Path, help="checkout and state cache folder")
    parser.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                        help="pass this credential-like variable to benchmark processes")
    parser.add_argument("--max-memory", type=memory_size, metavar="SIZE",
                        help="address-space limit per worker process (e.g. 8G)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the rounds of a finished identical run instead of measuring")
    parser.add_argument("--seed", type=int, help="seed of the round order (default: random)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def add_compare_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--expect", action="append", default=[], metavar="KEY=VALUE",
                        help="configs allowed to change (repeatable; default: the suite's)")
    parser.add_argument("--min-effect", type=positive_float, default=stats.DEFAULT_MIN_EFFECT * 100,
                        metavar="PCT", help="smallest latency change that matters, in percent")
    parser.add_argument("--format", choices=sorted(FORMATS), default="table",
                        help="report format on stdout (or --output)")
    parser.add_argument("--output", type=Path, metavar="FILE", help="write the report here")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the JSON result")
    parser.add_argument("--html", type=Path, metavar="FILE", help="also write the HTML report")


def emit_reports(result: Result, args: argparse.Namespace) -> None:
    """The chosen format to stdout or --output, plus the --json and --html files."""
    text = FORMATS[args.format].render(result)
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if args.json:
        write_atomic(args.json, FORMATS["json"].render(result))
    if args.html:
        write_atomic(args.html, FORMATS["html"].render(result))


@dataclass
class Bench:
    """Everything needed to measure one or two sides of a repository."""

    suite: Suite
    target: Target
    launcher: Launcher
    settings: RoundSettings
    cache: CheckoutCache
    cache_dir: Path


def prepare_bench(args: argparse.Namespace, repo_root: Path) -> Bench:
    if args.cuda_graph and (args.device == "cpu" or resolve_device("auto") != "cuda"):
        raise InputError("--cuda-graph needs a CUDA device and torch sees none here (or --device "
                         "cpu was given); drop --cuda-graph to time eager calls")
    suite = load_suite(args.configs, allow_large=args.yes)
    target = detect_target(repo_root, args.target)()
    launcher = make_launcher(args.launcher or getattr(target, "default_launcher", "local"),
                             args.np, args.nodes)
    settings = RoundSettings(
        facts=suite.facts,
        warmup_times=suite.warmup_times,
        run_times=suite.run_times,
        timeout_s=args.timeout,
        device=args.device,
        cuda_graph=args.cuda_graph,
        cpu_threads=args.cpu_threads,
        target_options=suite.target_options,
        target_args=args.target_arg,
        pass_env=args.pass_env,
        max_memory_bytes=args.max_memory,
    )
    cache_dir = (args.cache_dir or default_cache_dir()).resolve()
    return Bench(suite, target, launcher, settings, CheckoutCache(repo_root, cache_dir), cache_dir)


def side_run(bench: Bench, side: SideSpec) -> SideRun:
    checkout = bench.cache.checkout(side)
    env = {"abdiff": __version__, **bench.target.env_info(checkout)}
    run = empty_run(side.rev, side.sha, bench.target.name, bench.suite.name,
                    bench.suite.configs, env)
    return SideRun(checkout, run)


def state_dir(bench: Bench, sides: dict[str, SideRun], kind: str) -> Path:
    """Where a measurement's rounds are kept, keyed by everything that shapes them."""
    parts = {
        "kind": kind,
        "sides": {n: [s.run.sha, str(s.checkout)] for n, s in sides.items()},
        "target": bench.target.name,
        "suite": bench.suite.source,
        "configs": [c.id for c in bench.suite.configs],
        "settings": settings_fingerprint(bench.settings),
        "launcher": bench.launcher.name,
    }
    return bench.cache_dir / "runs" / state_key(parts)


def measure_one_side(args: argparse.Namespace, rev: str, kind: str) -> RunFile:
    """The rounds of one side (no interleaving partner), kept like a diff's."""
    repo_root = open_repo(args.repo)
    bench = prepare_bench(args, repo_root)
    sides = {"A": side_run(bench, resolve_rev(repo_root, rev))}
    where = state_dir(bench, sides, kind)
    with exclusive(where):
        measurement = Measurement.open(where, sides, args.resume, args.seed)
        measure(measurement, bench.suite.configs, bench.target, bench.launcher, bench.settings,
                Plan(args.rounds, args.rounds), None, args.quiet)
    return sides["A"].run


def expect_scope(args: argparse.Namespace, suite_expect: dict[str, list[str]],
                 keys: list[str]) -> dict[str, list[str]]:
    from abdiff.policy import parse_expect

    return parse_expect(args.expect, keys) if args.expect else suite_expect


def check_min_effect(pct: float) -> float:
    if pct >= 100:
        raise InputError(f"--min-effect {pct}: a percentage below 100 is expected, e.g. 2")
    return pct / 100.0
