"""Property-based fuzzing of what abdiff reads from people and machines: suite files, run
files (and baselines, which are run files) and rev ranges. Any input gives a result or
exit 2 with one line, never a traceback.

Each property goes through `abdiff.cli.main` as a user would meet it; the suite and run
file loaders are also fuzzed directly, where many more examples are cheap.
"""

from __future__ import annotations

import json
import os
import string
import tempfile
from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from conftest import git, write_suite
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abdiff.cli import main
from abdiff.errors import InputError
from abdiff.store.records import RunFile, load_run_file
from abdiff.suites.loader import Suite, SuiteFile, load_suite
from abdiff.targets.layerwise import MATRIX_KEYS

# examples per CLI property (each runs abdiff in-process and a few git commands);
# ABDIFF_FUZZ_EXAMPLES=2000 for a longer hunt
CLI = settings(max_examples=int(os.environ.get("ABDIFF_FUZZ_EXAMPLES", 60)), deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DIRECT = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def empty_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository without commits: no rev resolves, so no fuzzed input starts a run."""
    path = tmp_path_factory.mktemp("fuzz") / "empty"
    git(path.parent, "init", "-q", str(path))
    return path


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-files")


def exit_2_in_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("abdiff: error: "), err
    return lines[0]


# ---------------------------------------------------------------- suites

_scalars = (st.none() | st.booleans() | st.integers(-5, 300) | st.floats(allow_nan=True)
            | st.text(max_size=8) | st.sampled_from(["GEN", "CTX", "DSA", "TRTLLM", "", "~"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=5)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)
_matrix = st.dictionaries(
    st.sampled_from([*MATRIX_KEYS, "dtype", ""]) | st.text(max_size=6),
    st.lists(_scalars, max_size=4) | _scalars, max_size=7)
_suite_data = st.dictionaries(
    st.sampled_from([*(f.name for f in fields(SuiteFile)), "colour"]) | st.text(max_size=6),
    _values, max_size=6).flatmap(
    lambda d: st.builds(lambda m: {**d, "matrix": m}, _matrix) | st.just(d))
_yaml_text = (st.text(max_size=200)
              | st.lists(st.sampled_from(["matrix:", "  batch_size: [1, 2]", "- x", "&a [1]",
                                          "*a", "!!python/object:os.system", "{", "]", "\t",
                                          "run_type: [GEN]", "expect: {backend: DSA}", "---",
                                          "? [a, b]", ": x", "%YAML 1.1", "'", '"\\x', "\x00"]),
                         max_size=8).map("\n".join))


def _suite_or_input_error(path: Path) -> None:
    try:
        suite = load_suite(str(path))
    except InputError:
        return  # the CLI prints it as one line (test_suite_through_the_cli)
    # a suite without a matrix axis has its configs from its target (the command target's
    # benchmarks; a layer-wise target refuses it then: test_bad_input)
    assert isinstance(suite, Suite)
    if not suite.configs:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        matrix = data.get("matrix") if isinstance(data, dict) else None
        assert not matrix or all(v is None for v in matrix.values()), matrix


@pytest.mark.slow
@DIRECT
@given(st.one_of(_suite_data.map(lambda d: yaml.safe_dump(d, allow_unicode=True)), _yaml_text))
def test_suite_loader_total(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "suite.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        _suite_or_input_error(path)


@pytest.mark.slow
@DIRECT
@given(st.binary(max_size=200))
def test_suite_loader_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "suite.yaml"
        path.write_bytes(data)
        _suite_or_input_error(path)


@pytest.mark.slow
@CLI
@given(text=st.one_of(_suite_data.map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
                      _yaml_text))
def test_suite_through_the_cli(text: str, empty_repo: Path, scratch: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """A broken suite is exit 2; a valid one gets as far as the rev (which never resolves
    in an empty repository): exit 2 as well, never a traceback."""
    path = scratch / "suite.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    exit_2_in_one_line(capsys, ["main..pr", "--configs", str(path), "--repo", str(empty_repo),
                                "--cache-dir", str(scratch / "cache"), "--target", "reference"])


# ---------------------------------------------------------------- run files

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 10**20) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=4), max_leaves=10)
_status = st.sampled_from(["ok", "failed", "aborted", "timeout", "great", "", None])
_latency = st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-3, 10**6),
                    max_size=5) | _json
_round = st.fixed_dictionaries(
    {"status": _status},
    optional={"error": st.none() | st.text(max_size=20) | _json, "latency_us": _latency,
              "facts": st.dictionaries(st.text(max_size=10), _json, max_size=3) | _json,
              "kernels": st.dictionaries(st.text(max_size=10), st.integers(-2, 50), max_size=3)
              | _json,
              "round": st.integers(-2, 5) | st.none() | st.booleans() | st.text(max_size=2)})
_config = st.fixed_dictionaries(
    {"id": st.sampled_from(["c1", "c2", "c3"]) | st.text(max_size=4) | _json,
     "rounds": st.lists(_round | _json, max_size=4) | _json},
    optional={"params": st.dictionaries(st.sampled_from(["backend", "batch_size", "x"]),
                                        _json, max_size=3) | _json})
_run = st.fixed_dictionaries(
    {"schema": st.sampled_from(["abdiff.run/1", "abdiff.run/1", "abdiff.run/2"]) | _json,
     "configs": st.lists(_config, max_size=4) | _json},
    optional={"rev": _json, "sha": st.text(string.hexdigits, max_size=40) | _json,
              "target": _json, "suite": st.sampled_from(["mtp", "decode", "mine"]) | _json,
              "env": st.dictionaries(st.text(max_size=6), _json, max_size=3) | _json})
# valid run files with odd content: every status, empty or extreme latencies, one round,
# repeated round numbers, params of any type, configs on one side only
_valid_round = st.fixed_dictionaries({
    "status": st.sampled_from(["ok", "ok", "failed", "aborted", "timeout"]),
    "error": st.none() | st.text(max_size=30),
    "latency_us": st.lists(st.floats(min_value=1e-300, max_value=1e300, allow_nan=False,
                                     allow_infinity=False)
                           | st.floats(min_value=50, max_value=60), max_size=6),
    "facts": st.dictionaries(st.sampled_from(["attn.x", "attn.y"]), _json, max_size=2),
    "kernels": st.dictionaries(st.sampled_from(["aten::bmm", "k<b>", "x|y"]),
                               st.integers(0, 10**12), max_size=3),
    "round": st.none() | st.integers(0, 3)})
_valid_run = st.builds(
    lambda configs, suite: {"schema": "abdiff.run/1", "rev": "x", "sha": "a" * 40,
                            "target": "reference", "suite": suite, "env": {},
                            "configs": configs},
    st.lists(st.fixed_dictionaries({
        "id": st.sampled_from(["c1", "c2", "c3"]),
        "params": st.dictionaries(st.sampled_from(["backend", "batch_size", "run_type"]),
                                  st.sampled_from(["DSA", "TRTLLM", 8]) | _json, max_size=3),
        "rounds": st.lists(_valid_round, max_size=5)}), max_size=3,
        unique_by=lambda c: c["id"]),
    st.sampled_from(["mtp", "decode", "ctx", "mine"]))
_run_text = st.one_of(
    _valid_run.map(json.dumps), _valid_run.map(json.dumps),
    _run.map(json.dumps),
    _run.map(json.dumps).flatmap(lambda t: st.integers(0, len(t)).map(lambda n: t[:n])),
    _json.map(json.dumps), st.text(max_size=100))


@pytest.mark.slow
@DIRECT
@given(_run_text)
def test_run_file_loader_total(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            run = load_run_file(path)
        except InputError:
            return
        assert isinstance(run, RunFile)


@pytest.mark.slow
@CLI
@given(text_a=_run_text, text_b=_run_text,
       fmt=st.sampled_from(["table", "markdown", "json", "html"]))
def test_compare_through_the_cli(text_a: str, text_b: str, fmt: str, scratch: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`abdiff compare` of any two files: a report (exit 0 or 1; 3 with one line when no
    config ran on either side) or exit 2 in one line. Files that pass validation must also
    survive the comparison and every report format (an internal error fails the test)."""
    a, b = scratch / "a.json", scratch / "b.json"
    a.write_text(text_a, encoding="utf-8", errors="surrogatepass")
    b.write_text(text_b, encoding="utf-8", errors="surrogatepass")
    rc = main(["compare", str(a), str(b), "--format", fmt])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("abdiff: error: "), err
    else:
        assert rc in (0, 1, 3), (rc, err)
        if rc == 3:
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("abdiff: error: nothing measured"), err
        assert out.strip()
        if fmt == "json":
            assert json.loads(out)["summary"]["exit_code"] == rc


@pytest.mark.slow
@CLI
@given(text=st.sampled_from(["", "baseline:"]).flatmap(
    lambda prefix: st.one_of(
        st.text(max_size=30),
        st.lists(st.sampled_from(["main", "pr", "..", "...", "@{1}", "^", "~2", ":", "/", "-",
                                  "--upload-pack=x", "HEAD", "\x00", " ", "é", "\udcff", "{",
                                  "^{tree}", "refs/heads/", "a" * 40, "*", "?", "[", "\\"]),
                 max_size=6).map("".join)).map(lambda t: prefix + t)))
def test_rev_ranges_through_the_cli(text: str, empty_repo: Path, scratch: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Any range a user could type (surrogates from a non-UTF-8 command line included)."""
    suite = write_suite(scratch / "ok.yaml", [1])
    if text.startswith("-"):
        text = "x" + text  # an option is argparse's business (and -h prints help)
    exit_2_in_one_line(capsys, ["diff", text, "--configs", str(suite), "--repo", str(empty_repo),
                                "--cache-dir", str(scratch / "cache"), "--target", "reference"])
