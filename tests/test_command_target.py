"""The command target: benchmark executables that write Google Benchmark or nvbench JSON.

The two benchmarks below are real programs (Python stand-ins for a C++ binary): they
parse the flags abdiff gives them, time real work with perf_counter and write their
format's JSON exactly as google/benchmark's json_reporter.cc and NVIDIA/nvbench's
json_printer.cu shape it (nvbench: values as strings, --jsonbin sample files). The end
to end tests commit them into a git repository with a second commit whose spin loop is
longer, and run `abdiff A..B --configs suite.yaml --target command` on it.
"""

from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path

import pytest

from abdiff.errors import InputError
from abdiff.run.protocol import RoundJob, read_round_log
from abdiff.suites.loader import parse_suite
from abdiff.targets import target_class
from abdiff.targets.command.formats import (
    benchmark_arguments,
    config_params,
    gbench_report,
    nvbench_report,
)
from abdiff.targets.command.target import CommandTarget
from abdiff.targets.command.worker import main as worker_main
from tests.conftest import git, git_env, run_abdiff, unwrapped

# A Google Benchmark binary's command line and JSON (--benchmark_out_format=json).
GBENCH_PY = '''\
"""A Google Benchmark-shaped benchmark: flags and JSON as the library has them."""
import json
import os
import re
import socket
import statistics
import sys
import time

SPIN = {spin}  # loop turns per item: the second commit makes it longer
ITERATIONS = 30


def spin(items):
    total = 0
    for i in range(items * SPIN):
        total += i
    return total


def sleep_briefly(_items):
    time.sleep(0.0005)


BENCHMARKS = [("BM_spin/8", spin, 8), ("BM_spin/32", spin, 32),
              ("BM_sleep", sleep_briefly, 0), ("BM_broken", None, 0)]


def row(name, index, repetitions, real_ns, cpu_ns, error=None):
    data = {{"name": name, "family_index": index, "per_family_instance_index": 0,
            "run_name": name, "run_type": "iteration", "repetitions": repetitions,
            "repetition_index": 0, "threads": 1, "iterations": ITERATIONS,
            "real_time": real_ns, "cpu_time": cpu_ns, "time_unit": "ns"}}
    if error:
        data.update(error_occurred=True, error_message=error)
    return data


def main():
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    if flags.get("benchmark_list_tests") == "true":  # the names, one a line; nothing timed
        print("\\n".join(name for name, _, _ in BENCHMARKS))
        return
    assert flags.get("benchmark_out_format", "json") == "json"
    repetitions = int(flags.get("benchmark_repetitions", "1"))
    pattern = re.compile(flags.get("benchmark_filter", "."))
    rows = []
    for index, (name, work, items) in enumerate(BENCHMARKS):
        if not pattern.search(name):
            continue
        if work is None:
            rows.append(row(name, index, repetitions, 0, 0, "input data is missing"))
            continue
        times = []
        for repetition in range(repetitions):
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(ITERATIONS):
                work(items)
            real = (time.perf_counter() - start) / ITERATIONS * 1e9
            times.append(real)
            one = row(name, index, repetitions, real,
                      (time.process_time() - cpu) / ITERATIONS * 1e9)
            one["repetition_index"] = repetition
            rows.append(one)
        for aggregate, value in (("mean", statistics.mean(times)),
                                 ("median", statistics.median(times))):
            rows.append({{"name": f"{{name}}_{{aggregate}}", "run_name": name,
                         "run_type": "aggregate", "repetitions": repetitions, "threads": 1,
                         "aggregate_name": aggregate, "aggregate_unit": "time",
                         "iterations": repetitions, "real_time": value, "cpu_time": value,
                         "time_unit": "ns"}})
    context = {{"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "host_name": socket.gethostname(),
               "executable": sys.argv[0], "num_cpus": os.cpu_count(), "mhz_per_cpu": 2000,
               "cpu_scaling_enabled": False, "caches": [], "load_avg": [0.5],
               "library_version": "v1.9.1", "library_build_type": "release"}}
    with open(flags["benchmark_out"], "w") as out:
        json.dump({{"context": context, "benchmarks": rows}}, out, indent=2)


main()
'''

# An nvbench binary's command line and JSON (--jsonbin: the JSON plus sample files).
NVBENCH_PY = '''\
"""An nvbench-shaped benchmark: --jsonbin FILE writes FILE and FILE-bin/N.bin."""
import json
import os
import struct
import sys
import time

SPIN = {spin}
SAMPLES = 25


def value(name, kind, text):
    return {{"name": name, "type": kind, "value": str(text)}}


def main():
    args = sys.argv[1:]
    out = args[args.index("--jsonbin") + 1]
    chosen = [args[i + 1] for i, a in enumerate(args) if a == "--benchmark"]
    os.makedirs(out + "-bin", exist_ok=True)
    states, files = [], 0
    for elements in (256, 1024):
        samples = []
        for _ in range(SAMPLES):
            start = time.perf_counter()
            total = sum(range(elements * SPIN))
            samples.append(time.perf_counter() - start)
        path = f"{{out}}-bin/{{files}}.bin"
        files += 1
        with open(path, "wb") as handle:
            handle.write(struct.pack(f"<{{len(samples)}}f", *samples))
        mean = sum(samples) / len(samples)
        states.append({{
            "name": f"Device=0 Elements={{elements}}", "min_samples": 10, "device": 0,
            "type_config_index": 0,
            "axis_values": [value("Elements", "int64", elements)],
            "summaries": [
                {{"tag": "nv/cold/time/gpu/mean", "name": "GPU Time", "hint": "duration",
                 "data": [value("value", "float64", mean)]}},
                {{"tag": "nv/json/bin:nv/cold/sample_times", "name": "Samples Times File",
                 "hint": "file/sample_times",
                 "data": [value("filename", "string", path),
                          value("size", "int64", len(samples))]}}],
            "is_skipped": False}})
    states.append({{"name": "Device=0 Elements=1048576", "axis_values": [],
                   "summaries": [], "is_skipped": True,
                   "skip_reason": "not enough device memory"}})
    benchmarks = [{{"name": "reduce", "index": 0, "axes": [], "states": states}}]
    document = {{"meta": {{"version": {{"nvbench": {{"string": "0.1.0"}}}}}},
                "devices": [{{"id": 0, "name": "Stand-in GPU", "sm_version": 900}}],
                "benchmarks": [b for b in benchmarks if not chosen or b["name"] in chosen]}}
    with open(out, "w") as handle:
        json.dump(document, handle, indent=2)


main()
'''


def bench_repo(root: Path, script: str, fast: int, slow: int, suite: str) -> Path:
    """A git repository whose `bench.py` spins `fast` turns per item on main and `slow` on
    the branch `pr`, with the suite beside it."""
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "bench.py").write_text(script.format(spin=fast))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "benchmark")
    git(root, "checkout", "-q", "-b", "pr")
    (root / "bench.py").write_text(script.format(spin=slow))
    git(root, "commit", "-q", "-am", "a longer loop")
    git(root, "checkout", "-q", "main")
    (root.parent / "suite.yaml").write_text(suite)
    return root


def gbench_suite(extra: str = "") -> str:
    return (f"description: the stand-in gbench binary\nrun_times: 5\n"
            f"target:\n  command: [{sys.executable}, bench.py]\n  format: gbench\n{extra}")


# ---------------------------------------------------------------- the formats

def run_script(tmp_path: Path, script: str, *args: str) -> Path:
    path = tmp_path / "bench.py"
    path.write_text(script.format(spin=20))
    import subprocess

    subprocess.run([sys.executable, str(path), *args], check=True, cwd=tmp_path, timeout=60)
    return path


def test_gbench_iteration_rows_are_the_latencies(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    run_script(tmp_path, GBENCH_PY, *benchmark_arguments("gbench", out, 4, None))
    report = gbench_report(json.loads(out.read_text()), ["threads", "label"])
    assert list(report.results) == ["BM_spin/8", "BM_spin/32", "BM_sleep", "BM_broken"]
    spin8, spin32, sleep = (report.results[n] for n in ("BM_spin/8", "BM_spin/32", "BM_sleep"))
    assert len(spin8.latency_us) == 4 and spin8.error is None  # aggregates dropped
    rows = json.loads(out.read_text())["benchmarks"]
    assert spin32.latency_us == pytest.approx([  # each repetition's real_time, ns -> us
        r["real_time"] / 1e3 for r in rows
        if r["name"] == "BM_spin/32" and r["run_type"] == "iteration"])
    assert all(v >= 500 for v in sleep.latency_us)  # sleep(0.5 ms) lasts at least that, in us
    assert spin8.facts == {"threads": 1, "label": None}
    assert report.results["BM_broken"].error == "input data is missing"
    assert report.results["BM_broken"].latency_us == []
    assert report.env["device"] == "cpu" and report.env["timing"] == "Google Benchmark real time"
    assert "date" not in report.env["benchmark_context"]  # changes every process
    assert report.env["benchmark_context"]["library_build_type"] == "release"


def test_gbench_units_skips_and_bad_rows() -> None:
    rows = [{"name": "a", "run_type": "iteration", "real_time": 2.5, "time_unit": "ms"},
            {"name": "b", "run_type": "iteration", "skipped": True, "skip_message": "no GPU",
             "real_time": 0, "time_unit": "ns"},
            {"name": "c", "run_name": "c", "run_type": "aggregate", "aggregate_name": "mean",
             "real_time": 1.0, "time_unit": "s"},
            {"name": "d", "real_time": 3, "time_unit": "s"}]  # older versions: no run_type
    report = gbench_report({"context": {}, "benchmarks": rows})
    assert report.results["a"].latency_us == [2500.0]
    assert report.results["b"].error == "skipped: no GPU"
    assert report.results["c"].latency_us == [1e6]  # aggregates only: its mean, one value
    assert report.results["d"].latency_us == [3e6]
    with pytest.raises(ValueError, match="benchmarks must be a list"):
        gbench_report({"context": {}})
    with pytest.raises(ValueError, match=r"benchmarks \(a\): real_time 'x'"):
        gbench_report({"benchmarks": [{"name": "a", "real_time": "x", "time_unit": "ns"}]})


def test_nvbench_states_samples_and_skips(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    run_script(tmp_path, NVBENCH_PY, *benchmark_arguments("nvbench", out, 5, None))
    report = nvbench_report(json.loads(out.read_text()), ["Elements"], tmp_path)
    small, large, skipped = report.results.values()
    assert list(report.results) == ["reduce[Device=0 Elements=256]",
                                    "reduce[Device=0 Elements=1024]",
                                    "reduce[Device=0 Elements=1048576]"]
    assert len(small.latency_us) == 25 and small.facts == {"Elements": "256"}
    assert sorted(large.latency_us)[12] > sorted(small.latency_us)[12]
    assert skipped.error == "skipped: not enough device memory"
    assert report.env["device_name"] == "Stand-in GPU" and report.env["nvbench"] == "0.1.0"


def test_nvbench_mean_without_samples_and_string_values() -> None:
    state = {"name": "N=1", "summaries": [{"tag": "nv/cold/time/gpu/mean",
                                           "data": [{"name": "value", "type": "float64",
                                                     "value": "1.5e-05"}]}]}
    document = {"devices": [], "benchmarks": [{"name": "k", "states": [state]}]}
    assert nvbench_report(document).results["k[N=1]"].latency_us == pytest.approx([15.0])
    state["summaries"] = []
    assert "no GPU time" in str(nvbench_report(document).results["k[N=1]"].error)
    sample = Path("/nonexistent/0.bin")
    state["summaries"] = [{"tag": "nv/json/bin:nv/cold/sample_times",
                           "data": [{"name": "filename", "value": str(sample)}]}]
    with pytest.raises(ValueError, match="cannot read its sample times"):
        nvbench_report(document)


def test_the_filter_selects_whole_names_only() -> None:
    arguments = benchmark_arguments("gbench", Path("/o.json"), 3, ["BM_a/8", "BM_b.c"])
    assert arguments[-1] == r"--benchmark_filter=^(BM_a/8|BM_b\.c)$"
    assert "--benchmark_repetitions=3" in arguments
    assert benchmark_arguments("nvbench", Path("/o.json"), 3, ["k", "k", "m"]) == [
        "--jsonbin", "/o.json", "--benchmark", "k", "--benchmark", "m"]
    assert config_params("nvbench", "k[N=1 M=2]") == {"benchmark": "k", "state": "N=1 M=2"}
    assert config_params("gbench", "BM_a/8/real_time") == {"benchmark": "BM_a/8/real_time",
                                                           "family": "BM_a",
                                                           "metric": "real_time"}


# ---------------------------------------------------------------- the target and its worker

def test_configs_come_from_the_benchmark_or_the_suite(tmp_path: Path) -> None:
    (tmp_path / "bench.py").write_text(GBENCH_PY.format(spin=5))
    target = target_class("command")()
    suite = parse_suite({"target": {"command": [sys.executable, "bench.py"]}}, "s", "s.yaml")
    assert target.configs(suite, tmp_path) == []  # each side lists its own, once prepared
    configs = target.prepare(suite, tmp_path, tmp_path / "build", None).configs
    assert configs is not None
    assert [c.id for c in configs] == ["BM_spin/8", "BM_spin/32", "BM_sleep", "BM_broken"]
    assert configs[0].params == {"benchmark": "BM_spin/8", "family": "BM_spin",
                                 "metric": "real_time"}
    listed = parse_suite({"target": {"command": ["./bench"], "benchmarks": ["BM_x"]}}, "s",
                         "s.yaml")
    assert [c.id for c in target.configs(listed, tmp_path)] == ["BM_x"]  # nothing run


@pytest.mark.parametrize(("block", "message"), [
    (None, r"s.yaml: the command target needs `target: \{command"),
    ({"command": []}, r"s.yaml: target: command must have at least 1 item"),
    ({"command": ["x"], "format": "csv"}, r"format must be one of 'gbench', 'nvbench'"),
    ({"command": ["x"], "colour": 1}, r"unknown key 'colour'"),
    ({"command": ["x"], "metrics": ["cpu_time", "cpu_time"]}, r"lists a metric twice"),
    ({"command": ["x"], "format": "nvbench", "metrics": ["cpu_time"]},
     r"target.metrics is Google Benchmark's"),
])
def test_bad_command_blocks_are_one_clear_line(tmp_path: Path, block: object,
                                               message: str) -> None:
    suite = parse_suite({"target": block} if block else {}, "s", "s.yaml")
    with pytest.raises(InputError, match=message) as caught:
        CommandTarget().configs(suite, tmp_path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("block", "message"), [
    ({"command": ["./no-such-bench"]}, r"target.command ./no-such-bench cannot run in .*; "
                                       r"build it there \(target.build\), or list the configs"),
    ({"command": [sys.executable, "-c", "pass"]},
     r"listed no benchmarks in .* \(--benchmark_list_tests: exit code 0\)"),
    ({"command": [sys.executable, "-c", "pass"], "format": "nvbench"},
     r"wrote no nvbench JSON .*exit code 0"),
    ({"command": ["./bench"], "build": [sys.executable, "-c", "import sys; sys.exit('no cc')"]},
     r"target.build failed \(exit code 1: no cc; full output in .*abdiff-build.log\)"),
])
def test_a_side_that_cannot_list_or_build_says_why(tmp_path: Path, block: object,
                                                   message: str) -> None:
    suite = parse_suite({"target": block}, "s", "s.yaml")
    prepared = CommandTarget().prepare(suite, tmp_path, tmp_path / "build", None)
    assert prepared.configs is None and re.search(message, str(prepared.failure))
    assert "\n" not in str(prepared.failure)


def test_expect_names_the_benchmarks_params() -> None:
    from abdiff.suites.loader import with_configs

    block = {"command": ["./bench"], "benchmarks": ["BM_a/8", "BM_b"]}
    suite = parse_suite({"target": block, "expect": {"family": "BM_a"}}, "s", "s.yaml")
    chosen = with_configs(suite, CommandTarget().configs(suite, Path(".")))
    assert chosen.param_keys() == ["benchmark", "family", "metric"]
    assert chosen.expect == {"family": ["BM_a"]}
    wrong = parse_suite({"target": block, "expect": {"backend": "DSA"}}, "s", "s.yaml")
    with pytest.raises(InputError, match="s.yaml: expect has unknown key 'backend'; allowed: "
                                         "benchmark, family, metric"):
        with_configs(wrong, CommandTarget().configs(wrong, Path(".")))


def test_a_matrix_is_refused() -> None:
    matrix = {"run_type": "GEN", "backend": "DSA", "batch_size": 1, "seq_len_q": 1,
              "seq_len_kv_cache": 1}
    suite = parse_suite({"matrix": matrix, "target": {"command": ["x"]}}, "s", "s.yaml")
    with pytest.raises(InputError, match="not from a 'matrix'"):
        CommandTarget().configs(suite, Path("."))


def worker_round(tmp_path: Path, script: str, ids: list[str], **job: object) -> Path:
    (tmp_path / "bench.py").write_text(script)
    record = tmp_path / "records.jsonl"
    RoundJob(configs=[{"id": i, "params": {}} for i in ids], facts=[],
             record_path=str(record), round=0, run_times=3,
             target_options={"command": [sys.executable, "bench.py"]}, **job).write(
        tmp_path / "job.json")
    return record


def test_the_worker_records_each_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    record = worker_round(tmp_path, GBENCH_PY.format(spin=5),
                          ["BM_spin/8", "BM_broken", "BM_gone"])
    monkeypatch.chdir(tmp_path)
    assert worker_main(["worker", str(tmp_path / "job.json")]) == 0
    log = read_round_log(record)
    assert len(log.done["BM_spin/8"].latency_us) == 3
    assert log.done["BM_broken"].status == "failed"
    assert log.done["BM_broken"].error == "input data is missing"
    assert "reported no result" in str(log.done["BM_gone"].error)
    assert log.env["device"] == "cpu" and not log.started


CRASHING_PY = '''\
import json, os, sys
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if "=" in a)
wanted = flags["benchmark_filter"]
if "BM_first" in wanted:  # writes nothing before its abort, as a buffered ofstream would
    print("bench.cc:12: Check failed: n > 0", file=sys.stderr, flush=True)
    os.abort()
rows = [{"name": "BM_second", "run_type": "iteration", "real_time": 1000, "time_unit": "ns"}]
json.dump({"context": {}, "benchmarks": rows}, open(flags["benchmark_out"], "w"))
'''


def test_a_dying_benchmark_fails_its_first_unreported_config(tmp_path: Path) -> None:
    """The worker ends as the benchmark did, after starting the config it was in: the round
    runner records that config's death and starts a new worker for the others."""
    import subprocess

    record = worker_round(tmp_path, CRASHING_PY, ["BM_first", "BM_second"])
    done = subprocess.run([sys.executable, "-m", "abdiff.targets.command.worker",
                           str(tmp_path / "job.json")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == -6  # SIGABRT, as the benchmark
    log = read_round_log(record)
    assert log.in_progress == "BM_first" and not log.done
    after_mark = done.stderr.split("abdiff-worker: config BM_first")[-1]
    assert "Check failed: n > 0" in after_mark  # the death's reason follows the mark


def test_a_round_isolates_the_dying_benchmark(tmp_path: Path) -> None:
    """Through the real round runner and local launcher: the aborting benchmark's config is
    `aborted` with its check's line, and a second process measures the other."""
    from abdiff.launchers.local import LocalLauncher
    from abdiff.run.rounds import RoundSettings, run_round
    from abdiff.suites import Config

    (tmp_path / "bench.py").write_text(CRASHING_PY)
    configs = [Config(i, config_params("gbench", i)) for i in ("BM_first", "BM_second")]
    settings = RoundSettings(facts=[], warmup_times=0, run_times=3, timeout_s=60,
                             target_options={"command": [sys.executable, "bench.py"]})
    records: dict = {}
    output = run_round(CommandTarget(), LocalLauncher(), tmp_path, configs, settings, 0,
                       tmp_path / "round", records.__setitem__)
    assert output.processes == 2
    assert records["BM_first"].status == "aborted"
    assert records["BM_first"].error == "SIGABRT: bench.cc:12: Check failed: n > 0"
    assert records["BM_second"].status == "ok" and records["BM_second"].latency_us == [1.0]


# ---------------------------------------------------------------- end to end

@pytest.mark.slow
def test_gbench_end_to_end(tmp_path: Path) -> None:
    """`abdiff main..pr --configs suite.yaml --target command`: the longer spin loop is
    slower on both of its configs, the sleep is not, the broken benchmark still fails.
    8 rounds: 6 pairs have 64 sign patterns, too few for the 1% family level."""
    repo = bench_repo(tmp_path / "repo", GBENCH_PY, 20, 40, gbench_suite())
    out = tmp_path / "result.json"
    done = run_abdiff("main..pr", "--configs", tmp_path / "suite.yaml", "--target", "command",
                      "--repo", repo, "--cache-dir", tmp_path / "cache", "--rounds", "8",
                      "--max-rounds", "8", "--json", out, "--quiet", env=git_env())
    assert done.returncode == 1, done.stdout + done.stderr  # an unintended slowdown
    result = json.loads(out.read_text())
    configs = {c["id"]: c for c in result["configs"]}
    assert configs["BM_spin/8"]["latency"]["verdict"] == "slower"
    assert configs["BM_spin/32"]["latency"]["verdict"] == "slower"
    assert configs["BM_spin/32"]["latency"]["ratio"] > 1.4
    assert configs["BM_sleep"]["latency"]["verdict"] != "slower"
    assert configs["BM_broken"]["status_a"] == "failed"
    assert configs["BM_broken"]["error_b"] == "input data is missing"
    run_a = json.loads(next((tmp_path / "cache" / "runs").glob("*/a.json")).read_text())
    assert run_a["target"] == "command" and run_a["env"]["target_package"] == "abdiff 0.1.0"
    assert run_a["env"]["benchmark_context"]["library_version"] == "v1.9.1"
    assert len(run_a["configs"][0]["rounds"]) == 8  # one benchmark process per round
    assert len(run_a["configs"][0]["rounds"][0]["latency_us"]) == 5  # run_times repetitions


@pytest.mark.slow
def test_nvbench_end_to_end_with_expect(tmp_path: Path) -> None:
    """nvbench states as configs, the jsonbin samples as latencies; the slowdown of the
    larger state is expected by the policy (--expect state=...), so the exit is 0."""
    suite = (f"run_times: 5\ntarget:\n  command: [{sys.executable}, bench.py]\n"
             "  format: nvbench\n")
    repo = bench_repo(tmp_path / "repo", NVBENCH_PY, 20, 60, suite)
    out = tmp_path / "result.json"
    done = run_abdiff("main..pr", "--configs", tmp_path / "suite.yaml", "--target", "command",
                      "--repo", repo, "--cache-dir", tmp_path / "cache", "--rounds", "8",
                      "--max-rounds", "8", "--json", out, "--quiet", "--expect",
                      "benchmark=reduce", env=git_env())
    assert done.returncode == 0, done.stdout + done.stderr
    configs = {c["id"]: c for c in json.loads(out.read_text())["configs"]}
    assert configs["reduce[Device=0 Elements=1024]"]["latency"]["verdict"] == "slower"
    assert configs["reduce[Device=0 Elements=1048576]"]["status_b"] == "failed"


def test_sample_files_are_little_endian_float32(tmp_path: Path) -> None:
    from abdiff.targets.command.formats import read_sample_times

    path = tmp_path / "0.bin"
    path.write_bytes(struct.pack("<3f", 1e-6, 2e-6, 4e-6))
    assert read_sample_times(path, 3) == pytest.approx([1.0, 2.0, 4.0], rel=1e-6)
    with pytest.raises(ValueError, match="holds 3 samples, its summary says 4"):
        read_sample_times(path, 4)


def test_several_ranks_are_refused(tmp_path: Path) -> None:
    job = RoundJob(configs=[], facts=[], record_path=str(tmp_path / "r.jsonl"), round=0,
                   ranks=2, target_options={"command": ["./bench"]})
    with pytest.raises(InputError, match="not 2 ranks; leave out --np"):
        CommandTarget().round_command(tmp_path, tmp_path / "job.json", job)


# ---------------------------------------------------------------- the real Google Benchmark

# A C++ benchmark against the real library (Debian's libbenchmark-dev, .ci/run installs it):
# a sort with an items_per_second rate counter, a memcpy, a benchmark that aborts when
# CRASH is defined at build time, and one registered after it.
REAL_BENCH_CC = r'''
#include <benchmark/benchmark.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static void BM_sort(benchmark::State& state) {
  std::vector<int> v(state.range(0));
  for (auto _ : state) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>((i * 7919) % 1000);
    std::sort(v.begin(), v.end());
    benchmark::DoNotOptimize(v.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_sort)->Arg(1024);

static void BM_memcpy(benchmark::State& state) {
  std::vector<char> a(state.range(0)), b(state.range(0));
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), a.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_memcpy)->Arg(4096);

static void BM_parse(benchmark::State& state) {
  for (auto _ : state) {
#ifdef CRASH
    std::fprintf(stderr, "bench.cc:33: parse: unexpected end of input\n");
    std::abort();
#endif
    benchmark::DoNotOptimize(std::atoi("12345"));
  }
}
BENCHMARK(BM_parse);

static void BM_after(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(state.iterations());
}
BENCHMARK(BM_after);

BENCHMARK_MAIN();
'''
def documented_suite(top: dict[str, object], target: dict[str, object]) -> str:
    """docs/targets.md's example suite, its build recipe and command as written, with `top`
    and `target` changing its keys (None removes one)."""
    import yaml

    text = (Path(__file__).resolve().parents[1] / "docs" / "targets.md").read_text()
    section = text[text.index("## The `command` target"):]
    suite = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    suite["target"] = {**suite["target"], **target}
    suite.update(top)
    for block in (suite, suite["target"]):
        for key in [k for k, v in block.items() if v is None]:
            del block[key]
    return str(yaml.safe_dump(suite))


def _compile_hello(folder: Path) -> str | None:
    """Why the real Google Benchmark cannot be built here, None when it can."""
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        return "no g++ (Debian: apt-get install g++ libbenchmark-dev; .ci/run installs both)"
    source = folder / "hello.cc"
    source.write_text("#include <benchmark/benchmark.h>\nBENCHMARK_MAIN();\n")
    done = subprocess.run(["g++", "-o", str(folder / "hello"), str(source), "-lbenchmark",
                           "-lpthread"], capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        return ("Google Benchmark does not build here (Debian: apt-get install "
                f"libbenchmark-dev; .ci/run installs it): {done.stderr.strip()[-200:]}")
    return None


@pytest.fixture(scope="module")
def real_gbench(tmp_path_factory: pytest.TempPathFactory) -> None:
    why = _compile_hello(tmp_path_factory.mktemp("gbench-check"))
    if why is not None:
        pytest.skip(why)


def real_repo(root: Path, suite: str, crash_on_pr: bool = True) -> Path:
    """main: REAL_BENCH_CC; pr: the same with BM_parse aborting (CRASH defined)."""
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "bench.cc").write_text(REAL_BENCH_CC)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "benchmarks")
    git(root, "checkout", "-q", "-b", "pr")
    if crash_on_pr:
        (root / "bench.cc").write_text("#define CRASH 1\n" + REAL_BENCH_CC)
        git(root, "commit", "-q", "-am", "parse aborts")
    git(root, "checkout", "-q", "main")
    (root.parent / "suite.yaml").write_text(suite)
    return root


def counting_compiler(folder: Path) -> dict[str, str]:
    """git_env() with a g++ first on PATH that logs the folder it was started in to
    compiles.log in the build folder (the one place a build may write under the sandbox),
    then runs the real one."""
    import shutil

    folder.mkdir()
    real = shutil.which("g++")
    (folder / "g++").write_text(
        f'#!/bin/sh\necho "$PWD" >> "$ABDIFF_BUILD_DIR/compiles.log"\nexec {real} "$@"\n')
    (folder / "g++").chmod(0o755)
    env = git_env()
    env["PATH"] = f"{folder}:{env.get('PATH', '')}"
    return env


@pytest.mark.slow
def test_real_gbench_crash_is_blamed_on_its_benchmark_alone(tmp_path: Path,
                                                             real_gbench: None) -> None:
    """B's BM_parse aborts: Google Benchmark leaves its JSON cut after the benchmarks before
    it; BM_parse alone is `broken` (SIGABRT with its own stderr line, not the library's
    DEBUG warning), the others keep every round on both sides. The documented build recipe
    runs under the default sandbox, once per side for the whole run."""
    # the documented suite, every benchmark the sides list, fewer repetitions
    repo = real_repo(tmp_path / "repo", documented_suite(
        {"run_times": 3, "expect": None}, {"benchmarks": None}))
    out = tmp_path / "result.json"
    done = run_abdiff("main..pr", "--configs", tmp_path / "suite.yaml", "--target", "command",
                      "--repo", repo, "--cache-dir", tmp_path / "cache", "--rounds", "3",
                      "--max-rounds", "3", "--json", out, "--quiet",
                      env=counting_compiler(tmp_path / "bin"), timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr  # BM_parse broke: unintended
    configs = {c["id"]: c for c in json.loads(out.read_text())["configs"]}
    assert list(configs) == ["BM_sort/1024", "BM_memcpy/4096", "BM_parse", "BM_after"]
    parse = configs["BM_parse"]
    assert (parse["status_a"], parse["status_b"], parse["status_change"]) == (
        "ok", "aborted", "broken")
    assert parse["error_b"] == "SIGABRT: bench.cc:33: parse: unexpected end of input"
    for name in ("BM_sort/1024", "BM_memcpy/4096", "BM_after"):
        assert configs[name]["status_a"] == configs[name]["status_b"] == "ok", name
        latency = configs[name]["latency"]
        assert latency["rounds_a"] == latency["rounds_b"] == 3, name
    run_b = json.loads(next((tmp_path / "cache" / "runs").glob("*/b.json")).read_text())
    after = next(c for c in run_b["configs"] if c["id"] == "BM_after")
    assert all(len(r["latency_us"]) == 3 for r in after["rounds"])  # run_times repetitions
    # one build per side, each in its own checkout, for 3 rounds a side
    logs = list((tmp_path / "cache").glob("sides/*/build/compiles.log"))
    built_in = [line for log in logs for line in log.read_text().split()]
    assert len(logs) == 2 and len(built_in) == 2 and len(set(built_in)) == 2, built_in


@pytest.mark.slow
def test_real_gbench_rate_counter_passes_a_a(tmp_path: Path, real_gbench: None) -> None:
    """items_per_second, a rate that differs in every repetition, compared as a metric: an
    A/A run has no unintended change. Named as a fact (compared exactly) it fails with a
    line saying why, on both sides, and is not reported as a change."""
    # the documented suite as written, and a fact that is a rate
    repo = real_repo(tmp_path / "repo", documented_suite(
        {"facts": ["bytes_per_second"]}, {}),
                     crash_on_pr=False)
    out = tmp_path / "result.json"
    done = run_abdiff("main..main", "--configs", tmp_path / "suite.yaml", "--target",
                      "command", "--repo", repo, "--cache-dir", tmp_path / "cache", "--rounds",
                      "3", "--max-rounds", "3", "--metric", "real_time", "--metric",
                      "items_per_second", "--json", out, "--quiet", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    configs = {c["id"]: c for c in json.loads(out.read_text())["configs"]}
    rate = configs["BM_sort/1024 items_per_second"]
    assert rate["params"]["metric"] == "items_per_second"
    assert rate["status_a"] == rate["status_b"] == "ok" and not rate["facts_changed"]
    assert rate["latency"]["verdict"] != "slower" and rate["latency"]["verdict"] != "faster"
    # the declared-constant fact bytes_per_second is a rate: refused, not compared
    memcpy = configs["BM_memcpy/4096"]
    assert memcpy["status_change"] == "still-failing"
    assert "fact bytes_per_second varies between the repetitions" in memcpy["error_b"]


@pytest.mark.slow
def test_two_real_gbench_files_compare_directly(tmp_path: Path, real_gbench: None) -> None:
    """`abdiff compare a.json b.json` on two Google Benchmark outputs: repetitions as
    rounds, compared unpaired and said so; a file cut by a crash is read up to its cut,
    the crashing benchmark is in one file only."""
    import subprocess

    (tmp_path / "bench.cc").write_text(REAL_BENCH_CC)
    for name, defines in (("bench", []), ("crashing", ["-DCRASH"])):
        subprocess.run(["g++", "-O2", *defines, "-o", str(tmp_path / name),
                        str(tmp_path / "bench.cc"), "-lbenchmark", "-lpthread"], check=True,
                       timeout=300)
    for name, binary in (("a", "bench"), ("b", "bench"), ("cut", "crashing")):
        subprocess.run([str(tmp_path / binary), "--benchmark_min_time=0.01",
                        "--benchmark_repetitions=5", f"--benchmark_out={tmp_path / name}.json",
                        "--benchmark_out_format=json"], capture_output=True, timeout=300,
                       check=False)
    out = tmp_path / "result.json"
    done = run_abdiff("compare", tmp_path / "a.json", tmp_path / "b.json", "--json", out,
                      "--metric", "cpu_time")
    # two runs at different times of a loaded machine may differ: any verdict, no failure
    assert done.returncode in (0, 1), done.stdout + done.stderr
    result = json.loads(out.read_text())
    configs = {c["id"]: c for c in result["configs"]}
    assert list(configs) == ["BM_sort/1024", "BM_memcpy/4096", "BM_parse", "BM_after"]
    assert all(c["latency"]["rounds_a"] == c["latency"]["rounds_b"] == 5
               for c in configs.values())
    assert configs["BM_sort/1024"]["params"]["metric"] == "cpu_time"
    assert any("compared unpaired" in note for note in result["notes"])
    assert any(note.startswith("geometric mean of B/A over the 4 config(s)")
               for note in result["notes"])
    cut = run_abdiff("compare", tmp_path / "a.json", tmp_path / "cut.json", "--json", out)
    assert cut.returncode in (0, 1), cut.stdout + cut.stderr
    result = json.loads(out.read_text())
    assert [c["id"] for c in result["configs"]] == ["BM_sort/1024", "BM_memcpy/4096"]
    assert any("cut short" in note for note in result["notes"])
    # --benchmark_report_aggregates_only: the median row is each benchmark's one value
    from abdiff.targets.command.files import import_benchmark_file

    subprocess.run([str(tmp_path / "bench"), "--benchmark_min_time=0.01",
                    "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true",
                    f"--benchmark_out={tmp_path / 'aggregates.json'}",
                    "--benchmark_out_format=json"], capture_output=True, timeout=300, check=True)
    rows = json.loads((tmp_path / "aggregates.json").read_text())["benchmarks"]
    medians = {r["run_name"]: r["real_time"] for r in rows if r["aggregate_name"] == "median"}
    imported = import_benchmark_file(tmp_path / "aggregates.json", "gbench", ["real_time"])
    sort = imported.config("BM_sort/1024")
    assert sort is not None and len(sort.rounds) == 1
    assert sort.rounds[0].latency_us == pytest.approx([medians["BM_sort/1024"] / 1e3])  # ns
    mixed = run_abdiff("compare", tmp_path / "a.json", out)
    assert mixed.returncode == 2 and len(unwrapped(mixed.stderr)) == 1, mixed.stderr
    # a metric the files do not have: one line naming the ones they do, exit 2
    typo = run_abdiff("compare", tmp_path / "a.json", tmp_path / "b.json", "--metric", "nope")
    assert typo.returncode == 2 and len(unwrapped(typo.stderr)) == 1, typo.stderr
    assert "no benchmark has the metric 'nope'" in typo.stderr and "cpu_time" in typo.stderr


def test_a_gbench_document_nested_past_the_stack_is_read_to_its_last_whole_row() -> None:
    """The benchmark writes its own output: a row of 100000 nested arrays raised
    RecursionError out of abdiff's reading (an internal error, exit 3); it ends the rows
    there now, as a cut does."""
    from abdiff.targets.command.formats import gbench_document

    row = {"name": "BM_a", "run_name": "BM_a", "run_type": "iteration", "real_time": 10,
           "cpu_time": 9, "time_unit": "ns"}
    text = ('{"context": {}, "benchmarks": [' + json.dumps(row) + ", "
            + "[" * 100_000 + "]" * 100_000 + "]}")
    document, complete = gbench_document(text)
    assert not complete and document["benchmarks"] == [row]


def test_a_cut_gbench_document_is_read_to_its_last_whole_benchmark() -> None:
    """What a process that died leaves: every whole row before the cut; the last benchmark
    only when all its repetitions are there."""
    from abdiff.targets.command.formats import gbench_document

    rows = [{"name": n, "run_name": n, "run_type": "iteration", "repetitions": 2,
             "real_time": t, "cpu_time": t - 1, "time_unit": "ns", "items_per_second": 4e6}
            for n, t in (("BM_a", 10), ("BM_a", 12), ("BM_b", 20), ("BM_b", 22))]
    text = json.dumps({"context": {"library_build_type": "debug"}, "benchmarks": rows},
                      indent=2)
    whole, complete = gbench_document(text)
    assert complete and len(whole["benchmarks"]) == 4
    after_b_first = text.index('"BM_b"', text.index('"BM_b"') + 1)  # inside BM_b's 1st row
    for cut, expected in ((text.rindex("}") - 1, ["BM_a", "BM_b"]),  # all rows, no "]}"
                          (text.index("}", after_b_first) + 1, ["BM_a"]),  # 1 of 2 of BM_b
                          (after_b_first, ["BM_a"]),
                          (text.index('"benchmarks"') + 5, [])):
        document, complete = gbench_document(text[:cut])
        assert not complete
        report = gbench_report(document, metrics=["real_time", "items_per_second"],
                               complete=False)
        assert list(report.results) == [i for n in expected
                                        for i in (n, f"{n} items_per_second")], cut
    report = gbench_report(whole, metrics=["cpu_time", "items_per_second"])
    assert report.results["BM_a items_per_second"].latency_us == [0.25, 0.25]  # us per item
    assert report.results["BM_a"].latency_us == pytest.approx([0.009, 0.011])
    with pytest.raises(ValueError, match=r"benchmarks \(BM_a\): cpu_time None in unit 'ns'"):
        gbench_report({"benchmarks": [{"name": "BM_a", "real_time": 1}]}, metrics=["cpu_time"])
    assert report.env["warnings"] == [
        "the Google Benchmark library was built as DEBUG (its own timing loop is slower; the "
        "benchmark's code is as you built it)"]
    with pytest.raises(ValueError, match="no JSON object of Google Benchmark"):
        gbench_document("Segmentation fault")


def test_counters_and_facts() -> None:
    from abdiff.targets.command.formats import metric_value

    row = {"real_time": 2.0, "cpu_time": 1.5, "time_unit": "us", "items_per_second": 2e6,
           "bytes": 64, "rate": 0}
    assert metric_value(row, "cpu_time") == 1.5
    assert metric_value(row, "items_per_second") == 0.5  # a rate: microseconds per item
    assert metric_value(row, "bytes") == 64.0  # not a rate: as written
    assert metric_value(row, "misses") == "no counter 'misses' in its row"
    assert metric_value(row, "rate") == "rate 0 is not a positive value"
    varying = [{"name": "BM_x", "run_type": "iteration", "real_time": t, "time_unit": "ns",
                "bytes": 64, "items_per_second": 1e9 / t} for t in (10, 11)]
    report = gbench_report({"benchmarks": varying}, facts=["bytes", "items_per_second"])
    result = report.results["BM_x"]
    assert result.error is not None and result.error.startswith(
        "fact items_per_second varies between the repetitions of one process (100000000.0,")
    assert result.facts == {"bytes": 64}  # what is constant is still compared
    assert gbench_report({"benchmarks": varying}, facts=["bytes"]).results["BM_x"].latency_us \
        == pytest.approx([0.010, 0.011])


def test_the_death_line_is_the_benchmarks_own() -> None:
    from abdiff.targets.command.formats import death_line

    stderr = ("2026-12-05T10:27:49+00:00\nRunning ./bench\nRun on (2 X 2600 MHz CPU s)\n"
              "CPU Caches:\n  L1 Data 48 KiB (x2)\nLoad Average: 2.77, 1.93, 0.88\n"
              "***WARNING*** Library was built as DEBUG. Timings may be affected.\n")
    assert death_line(stderr) is None  # a silent abort: the signal alone says it
    assert death_line(stderr + "bench.cc:25: check failed\n") == "bench.cc:25: check failed"
    assert death_line("bench.cc:25: check failed\n" + stderr) == "bench.cc:25: check failed"


@pytest.mark.slow
def test_configs_from_both_sides_and_the_sandbox_in_the_runs_key(tmp_path: Path) -> None:
    """A benchmark only B registers is measured on B and reported as not on A; the same
    run with --sandbox off, or with another OMP_NUM_THREADS, keeps its rounds apart (a
    failed round under one sandbox or environment is not reused under another), a new
    Slurm job id does not."""
    script = GBENCH_PY.replace('("BM_broken", None, 0)]', '("BM_broken", None, 0)]\n'
                               'BENCHMARKS += [("BM_new", spin, 4)] if SPIN > 20 else []')
    suite = gbench_suite()
    repo = bench_repo(tmp_path / "repo", script, 20, 21, suite)
    out = tmp_path / "result.json"
    common = ("main..pr", "--configs", tmp_path / "suite.yaml", "--target", "command",
              "--repo", repo, "--cache-dir", tmp_path / "cache", "--rounds", "2",
              "--max-rounds", "2", "--json", out)
    done = run_abdiff(*common, env=git_env())
    assert done.returncode == 1, done.stdout + done.stderr  # BM_new: not reported on A
    assert "side A (main) does not list 1 config(s) the other side has (BM_new)" in " ".join(
        unwrapped(done.stderr))
    new = next(c for c in json.loads(out.read_text())["configs"] if c["id"] == "BM_new")
    assert (new["status_a"], new["status_b"]) == ("failed", "ok")
    assert "reported no result" in new["error_a"]
    again = run_abdiff(*common, "--sandbox", "off", env=git_env())
    assert again.returncode == 1, again.stdout + again.stderr
    assert len(list((tmp_path / "cache" / "runs").iterdir())) == 2
    # a variable the workers get is part of the key too; one that names the job is not
    env = {**git_env(), "OMP_NUM_THREADS": "3", "SLURM_JOB_ID": "17"}
    threads = run_abdiff(*common, env=env)
    assert threads.returncode == 1, threads.stdout + threads.stderr
    job = run_abdiff(*common, "--resume", env={**env, "SLURM_JOB_ID": "18"})
    assert job.returncode == 1, job.stdout + job.stderr
    assert "no worker started" in job.stderr  # the same rounds, re-reported
    assert len(list((tmp_path / "cache" / "runs").iterdir())) == 3


@pytest.mark.slow
def test_real_gbench_a_side_that_does_not_build(tmp_path: Path, real_gbench: None) -> None:
    """B's bench.cc does not compile: one line on stderr names the side and g++'s error,
    each of B's configs fails with it (A's are measured), exit 1; when neither side builds,
    nothing can be measured: exit 3 with both reasons."""
    repo = real_repo(tmp_path / "repo", documented_suite({"run_times": 2}, {}),
                     crash_on_pr=False)
    (repo / "bench.cc").write_text(REAL_BENCH_CC + "\nnot C++;\n")
    git(repo, "commit", "-q", "-am", "a syntax error")
    out = tmp_path / "result.json"
    common = ("--configs", tmp_path / "suite.yaml", "--target", "command", "--repo", repo,
              "--cache-dir", tmp_path / "cache", "--rounds", "2", "--max-rounds", "2")
    done = run_abdiff("main~1..main", *common, "--json", out, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    said = [line for line in unwrapped(done.stderr) if "target.build failed" in line]
    assert len(said) == 1 and said[0].startswith("abdiff: side B (main): target.build failed "
                                                 "(exit code 1: bench.cc:"), said
    assert "error:" in said[0] and "abdiff-build.log" in said[0]
    for config in json.loads(out.read_text())["configs"]:
        assert (config["status_a"], config["status_b"]) == ("ok", "failed"), config["id"]
        assert config["error_b"].startswith("target.build failed (exit code 1: bench.cc:")
    neither = run_abdiff("main..main", *common, "--quiet",
                         timeout=600)
    assert neither.returncode == 3, neither.stdout + neither.stderr
    said = " ".join(unwrapped(neither.stderr))
    assert "nothing measured" in said and "target.build failed" in said


@pytest.mark.slow
def test_two_nvbench_files_compare_directly(tmp_path: Path) -> None:
    """nvbench --jsonbin outputs: each sample a round, unpaired; --metric is refused for
    them, and for run files."""
    import subprocess

    script = tmp_path / "bench.py"
    script.write_text(NVBENCH_PY.format(spin=20))
    for name in ("a", "b"):
        subprocess.run([sys.executable, str(script), "--jsonbin", str(tmp_path / f"{name}.json")],
                       check=True, cwd=tmp_path, timeout=60)
    out = tmp_path / "result.json"
    done = run_abdiff("compare", tmp_path / "a.json", tmp_path / "b.json", "--json", out)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # timings of two runs
    result = json.loads(out.read_text())
    configs = {c["id"]: c for c in result["configs"]}
    small = configs["reduce[Device=0 Elements=256]"]["latency"]
    assert small["rounds_a"] == small["rounds_b"] == 25  # SAMPLES
    assert configs["reduce[Device=0 Elements=1048576]"]["status_change"] == "still-failing"
    assert any("A and B are nvbench JSON files" in n and "unpaired" in n
               for n in result["notes"])
    refused = run_abdiff("compare", tmp_path / "a.json", tmp_path / "b.json", "--metric",
                         "cpu_time")
    assert refused.returncode == 2
    assert "--metric is Google Benchmark's" in " ".join(unwrapped(refused.stderr))
    on_runs = run_abdiff("compare", out, out, "--metric", "cpu_time")
    assert on_runs.returncode == 2
    assert "--metric chooses what a benchmark's JSON" in " ".join(unwrapped(on_runs.stderr))


ORDERED_CRASH_PY = '''\
import os, re, sys
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if "=" in a)
wanted = re.compile(flags.get("benchmark_filter", "."))
names = [n for n in ("BM_first", "BM_second", "BM_third") if wanted.search(n)]
if flags.get("benchmark_list_tests") == "true":
    print("\\n".join(names))
    sys.exit(0)
out = open(flags["benchmark_out"], "w")
out.write('{"context": {}, "benchmarks": [')
for index, name in enumerate(names):
    if name == "BM_second":  # as the library: what was reported is flushed, the rest lost
        print("bench.cc:7: BM_second: out of range", file=sys.stderr, flush=True)
        os.abort()
    out.write(("," if index else "") + '{"name": "%s", "run_type": "iteration", '
              '"repetitions": 1, "real_time": 1000, "time_unit": "ns"}' % name)
    out.flush()
out.write("]}")
'''


def test_the_config_blamed_is_the_one_the_benchmark_ran_last(tmp_path: Path) -> None:
    """The job lists BM_third first, the benchmark runs its registration order: the death
    is BM_second's (the first it left unreported in its own order), BM_first keeps its
    value from the cut JSON, BM_third is left for the next process."""
    import subprocess

    record = worker_round(tmp_path, ORDERED_CRASH_PY, ["BM_third", "BM_second", "BM_first"])
    done = subprocess.run([sys.executable, "-m", "abdiff.targets.command.worker",
                           str(tmp_path / "job.json")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == -6, done.stderr
    log = read_round_log(record)
    assert log.in_progress == "BM_second" and list(log.done) == ["BM_first"]
    assert log.done["BM_first"].latency_us == [1.0]
    assert done.stderr.rstrip().endswith(
        "abdiff-worker: config BM_second\nbench.cc:7: BM_second: out of range")


@pytest.mark.slow
def test_a_build_into_the_checkout_is_told_where_to_build(tmp_path: Path) -> None:
    """Under the sandbox the checkout is read-only: a build that writes there fails with a
    line saying where to build instead. Control: with --sandbox off the same build works."""
    suite = gbench_suite().replace("target:\n", "target:\n  build: [sh, -c, 'echo > built']\n")
    repo = bench_repo(tmp_path / "repo", GBENCH_PY, 20, 21, suite)
    common = ("main..main", "--configs", tmp_path / "suite.yaml", "--target", "command",
              "--repo", repo, "--cache-dir", tmp_path / "cache", "--rounds", "1",
              "--max-rounds", "1", "--quiet")
    done = run_abdiff(*common, env=git_env())
    said = " ".join(unwrapped(done.stderr))
    if "runs without a sandbox here" in said:
        pytest.skip(f"no sandbox on this machine: {said}")
    assert done.returncode == 3, said  # neither side builds: nothing to measure
    assert "Read-only file system" in said
    assert "the checkout is read-only to the benchmark's code: build into $ABDIFF_BUILD_DIR" \
        in said
    control = run_abdiff(*common, "--sandbox", "off", env=git_env())
    assert control.returncode == 0, control.stdout + control.stderr


def test_a_build_log_planted_as_a_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    """The side's build folder is writable to its workers: one left `abdiff-build.log` as a
    link to a file of the user's. The next build's log replaces the link; the user's file
    keeps its text (the control: writing the log the way abdiff did before follows it)."""
    from abdiff.launchers.sandbox import NO_SANDBOX
    from abdiff.targets.command.target import CommandOptions, build

    checkout, folder, users = tmp_path / "checkout", tmp_path / "side-build", tmp_path / "rc"
    checkout.mkdir()
    folder.mkdir()
    users.write_text("the user's own file\n")
    log = folder / "abdiff-build.log"
    log.symlink_to(users)
    options = CommandOptions(command=["./bench"], build=["sh", "-c", "echo built"])
    assert build(options, checkout, folder, NO_SANDBOX) is None
    assert not log.is_symlink() and "built" in log.read_text()
    assert users.read_text() == "the user's own file\n"
    log.unlink()
    log.symlink_to(users)
    log.write_text("through the link")  # the control: what following the link does
    assert users.read_text() == "through the link"
