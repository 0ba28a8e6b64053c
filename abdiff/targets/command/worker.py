"""One round of the command target: `python -m abdiff.targets.command.worker JOB.json
[BUILD_DIR [WHY_NOT]]`.

Runs the suite's command once in the checkout (the working folder) for the job's configs,
`{build}` and $ABDIFF_BUILD_DIR naming the side's build folder, reads the JSON it wrote and
records each config (protocol.py's events). The benchmark process is the measured one;
this process only starts it and reads its report. With WHY_NOT (the side's build failed)
nothing runs: every config fails with that line.

A benchmark that dies (a signal, or a non-zero exit before reporting everything) keeps
what it reported before (a cut Google Benchmark JSON is read to its cut), and is
reported as abdiff's own workers' deaths are: the first config it did not report is
started in the record log, its reason (the benchmark's last stderr line that can say
why) follows the start mark, and this process ends the same way, so the round runner
records that config's status and starts a new worker for the rest (gbench: only those,
by --benchmark_filter).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from abdiff.run.protocol import RecordWriter, RoundJob
from abdiff.store.records import RoundRecord
from abdiff.targets.command.formats import (
    BenchmarkReport,
    benchmark_arguments,
    death_line,
    gbench_filter,
    read_report,
)
from abdiff.targets.command.target import CommandOptions, build_environment


def run_benchmark(job: RoundJob, options: CommandOptions, work: Path, build: Path | None
                  ) -> tuple[int | None, BenchmarkReport | None, str]:
    """(exit status, or None where it could not start; what it reported, or None; why
    nothing) of one benchmark process."""
    out = work / "benchmark.json"
    names = [str(c["params"].get("benchmark", c["id"])) for c in job.configs]
    argv = [*options.argv(build), *benchmark_arguments(options.format, out, job.run_times, names),
            *job.target_args]
    with open(work / "benchmark.stderr.txt", "wb") as stderr:
        try:
            returncode = subprocess.run(argv, stderr=stderr,  # stdout: the worker's own
                                        env=build_environment(build), check=False).returncode
        except OSError as exc:
            return None, None, f"cannot run {argv[0]}: {exc}"
    try:
        text = out.read_text(encoding="utf-8")
    except OSError:
        return returncode, None, f"{argv[0]} wrote no {out.name}"
    try:
        report, _ = read_report(options.format, text, job.facts, options.metrics, work)
        return returncode, report, ""
    except ValueError as exc:  # json's errors, FormatError
        return returncode, None, f"{out.name} is not {options.format} JSON: {exc}"


def run_order(job: RoundJob, options: CommandOptions, build: Path | None) -> list[dict[str, Any]]:
    """The job's configs in the order the benchmark runs them (Google Benchmark: as it lists
    them under the round's filter, its registration order; the job's order where it cannot
    say), so that the first one a dead process left unreported is the one it died in."""
    if options.format != "gbench":
        return job.configs
    names = [str(c["params"].get("benchmark", c["id"])) for c in job.configs]
    argv = [*options.argv(build), gbench_filter(names), *job.target_args,
            "--benchmark_list_tests=true"]
    try:
        listed = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60,
                                env=build_environment(build), stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return job.configs
    position = {name.strip(): index for index, name in enumerate(listed.splitlines())}
    return sorted(job.configs, key=lambda c: position.get(
        str(c["params"].get("benchmark", c["id"])), len(position)))


def record(writer: RecordWriter, job: RoundJob, configs: list[dict[str, Any]],
           report: BenchmarkReport | None, complete: bool, why: str) -> str | None:
    """Write a record per config the benchmark reported (and, when it ran to the end,
    one per config it did not); the first of `configs` left unreported, if any."""
    reported = report.results if report is not None else {}
    for config in configs:
        cid = config["id"]
        result = reported.get(cid)
        if result is None:
            if not complete:
                return cid
            reason = why or "the benchmark reported no result for it (is it still registered?)"
            writer.done(cid, RoundRecord("failed", reason, round=job.round))
        elif result.error is not None:
            writer.done(cid, RoundRecord("failed", result.error, facts=result.facts,
                                         round=job.round))
        else:
            writer.done(cid, RoundRecord("ok", latency_us=result.latency_us,
                                         facts=result.facts, round=job.round))
    return None


def main(argv: list[str]) -> int:
    job = RoundJob.read(Path(argv[1]))
    build = Path(argv[2]) if len(argv) > 2 and argv[2] else None
    options = CommandOptions.parse(job.target_options, "the round's job")
    work = Path(job.record_path).parent
    writer = RecordWriter(Path(job.record_path))
    built = argv[3] if len(argv) > 3 else None  # why this side cannot run (its build failed)
    if built is not None:  # this side did not build: nothing of it can run
        writer.env({})
        for config in job.configs:
            writer.done(config["id"], RoundRecord("failed", built, round=job.round))
        writer.close()
        return 0
    writer.phase("benchmark")  # restarts the inactivity timeout; names what hung
    returncode, report, why = run_benchmark(job, options, work, build)
    writer.env(report.env if report is not None else {})
    if returncode is None:  # nothing ran: every config fails with this line (rounds.py)
        print(f"abdiff command worker: {why}", file=sys.stderr)
        return 1
    complete = returncode == 0
    configs = job.configs if complete else run_order(job, options, build)
    culprit = record(writer, job, configs, report, complete, why)
    stderr = (work / "benchmark.stderr.txt").read_text(encoding="utf-8", errors="replace")
    sys.stderr.write(stderr)  # the benchmark's own lines, whole, before any start mark
    sys.stderr.flush()
    if culprit is not None:
        writer.start(culprit)  # the death below is this config's status
        # after the mark, the reason only: a death's reason is the last line (rounds.py)
        reason = [why, death_line(stderr) if options.format == "gbench" else
                  next(reversed([ln for ln in stderr.splitlines() if ln.strip()]), None)]
        sys.stderr.write("".join(f"{line}\n" for line in reason if line))
        sys.stderr.flush()
    writer.close()
    if culprit is None:
        return 0
    if returncode < 0:  # died of a signal: end the same way (no core dump of this process)
        signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    return returncode if returncode > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
