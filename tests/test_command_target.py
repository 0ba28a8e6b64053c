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
from tests.conftest import git, git_env, run_abdiff

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
    assert min(spin32.latency_us) > max(spin8.latency_us)  # 4x the work
    assert all(500 <= v < 50_000 for v in sleep.latency_us)  # sleep(0.5 ms), in us
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
    configs = target.prepare(suite, tmp_path, tmp_path / "build").configs
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
    prepared = CommandTarget().prepare(suite, tmp_path, tmp_path / "build")
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
    slower on both of its configs, the sleep is not, the broken benchmark still fails."""
    repo = bench_repo(tmp_path / "repo", GBENCH_PY, 20, 40, gbench_suite())
    out = tmp_path / "result.json"
    done = run_abdiff("main..pr", "--configs", tmp_path / "suite.yaml", "--target", "command",
                      "--repo", repo, "--cache-dir", tmp_path / "cache", "--rounds", "6",
                      "--max-rounds", "6", "--json", out, "--quiet", env=git_env())
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
    assert len(run_a["configs"][0]["rounds"]) == 6  # one benchmark process per round
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
                      "--repo", repo, "--cache-dir", tmp_path / "cache", "--rounds", "6",
                      "--max-rounds", "6", "--json", out, "--quiet", "--expect",
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
