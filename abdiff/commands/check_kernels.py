"""`abdiff check-kernels RUNFILE --arch sm100 [--update]`: per-architecture kernel tripwires.

Compares one measured side (a run file of `abdiff run`, or a baseline) with the golden
kernel baseline of its suite and GPU architecture (abdiff/verdict/kernel_golden.py); no A side
is measured. Exit 0 when every golden config ran the same kernels with a launch count
inside its band, 1 when one changed, 2 for bad input (no golden file: --update writes it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from abdiff.errors import InputError
from abdiff.store.records import load_run_file
from abdiff.verdict.kernel_golden import (
    check,
    golden_path,
    load_golden,
    make_golden,
    write_golden,
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("check-kernels",
                            help="check a run's kernels against the golden set of its GPU "
                            "architecture (no A side)")
    parser.add_argument("run_file", type=Path, metavar="RUNFILE")
    parser.add_argument("--arch", required=True, help="GPU architecture, e.g. sm90 or sm100")
    parser.add_argument("--baselines-dir", type=Path, default=Path("baselines"),
                        help="folder holding kernels/<arch>/<suite>.json (default: baselines)")
    parser.add_argument("--update", action="store_true",
                        help="write the golden file from RUNFILE instead of checking")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    measured = load_run_file(args.run_file)
    device = measured.env.get("device")
    if device is not None and device != "cuda":  # upstream's imported runs name none
        raise InputError(f"{args.run_file} was measured on {device}, not a GPU: the kernels "
                         f"of {args.arch} come from a run with --device cuda on such a GPU")
    path = golden_path(args.baselines_dir, args.arch, measured.suite)
    if args.update:
        golden = make_golden(measured, args.arch)
        write_golden(path, golden)
        print(f"abdiff: wrote {path}: {len(golden.configs)} configs of {measured.rev} "
              f"({measured.sha[:12]}) on {args.arch}")
        return 0
    golden = load_golden(path)
    findings = check(measured, golden)
    for finding in findings:
        print(f"{'ok     ' if finding.ok else 'CHANGED'} {finding.config}: {finding.text}")
    changed = sum(not f.ok for f in findings)
    print(f"abdiff: {changed} of {len(findings)} configs changed against {path} "
          f"({golden.rev} {golden.sha[:12]}, {args.arch})")
    return 1 if changed else 0
