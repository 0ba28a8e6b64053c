"""Bad input through the command line, as a user or a CI bot types it: every case is
answered with one line on stderr naming the problem, and exit code 2. Nothing here starts
a benchmark (each fails before the first round).

Module-level checks of the same parsers live in test_revs.py, test_suites.py and
test_checkouts.py; these go through `abdiff.cli.main`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import config_id, git, write_suite

from abdiff.cli import main
from abdiff.suites.loader import MAX_CONFIGS


@pytest.fixture(scope="module")
def repos(faulty_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo repository and its odd relatives: one with an unrelated history, a shallow
    clone, a bare clone, a detached HEAD, a folder that is no repository, an empty repo."""
    base = tmp_path_factory.mktemp("repos")
    url = faulty_repo.as_uri()
    unrelated = base / "unrelated"
    git(base, "clone", "-q", url, str(unrelated))
    git(unrelated, "checkout", "-q", "--orphan", "orphan")
    git(unrelated, "commit", "-q", "-m", "unrelated root")
    git(unrelated, "checkout", "-q", "main")
    shallow = base / "shallow"
    git(base, "clone", "-q", "--depth", "1", "--branch", "pr", url, str(shallow))
    bare = base / "bare.git"
    git(base, "clone", "-q", "--bare", url, str(bare))
    (base / "plain").mkdir()
    empty = base / "empty"
    git(base, "init", "-q", str(empty))
    return {"demo": faulty_repo, "unrelated": unrelated, "shallow": shallow, "bare": bare,
            "plain": base / "plain", "empty": empty,
            "main_sha": Path(git(faulty_repo, "rev-parse", "main"))}


def answer(capsys: pytest.CaptureFixture[str], argv: list[object]) -> str:
    """Run abdiff; it must exit 2 with exactly one line on stderr; returns that line."""
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("abdiff: error: ")
    return lines[0]


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    return write_suite(tmp_path / "ok.yaml", [1])


def diff_argv(rng: str, repo: Path, suite: Path, tmp_path: Path, *extra: object) -> list:
    return [rng, "--configs", suite, "--repo", repo, "--cache-dir", tmp_path / "cache",
            "--target", "reference", *extra]


# ---------------------------------------------------------------- revs and repositories

REV_CASES = {
    "unknown rev B": ("demo", "main..no-such-branch", r"unknown revision 'no-such-branch'"),
    "unknown rev A": ("demo", "no-such-branch..main", r"unknown revision 'no-such-branch'"),
    "rev typo": ("demo", "main..faulyt", r"unknown revision 'faulyt'.*; did you mean faulty\?$"),
    "not a commit": ("demo", "main^{tree}..pr", r"is not a commit"),
    "unrelated histories": ("unrelated", "main...orphan", r"no merge base .*unrelated"),
    "shallow clone": ("shallow", "{main_sha}..pr", r"shallow clone.*git fetch --unshallow"),
    "not a repository": ("plain", "main..pr", r"is not in a git repository"),
    "no commits yet": ("empty", "main..HEAD", r"unknown revision 'main'"),
    "missing repository": ("missing", "main..pr", r"does not exist"),
    "A.. in a bare repository": ("bare", "main..", r"bare repository.*no working tree"),
    "side A missing": ("demo", "..pr", r"side A is missing"),
    "four dots": ("demo", "main....pr", r"exactly one '\.\.' or '\.\.\.'"),
    "A... without B": ("demo", "main...", r"needs side B"),
    "control character": ("demo", "main..p\x1br", r"control character"),
    "unknown baseline": ("demo", "baseline:nightly..pr", r"baseline 'nightly' not found"),
    "bad baseline name": ("demo", "baseline:../../etc/x..pr", r"baseline name"),
}


@pytest.mark.parametrize("case", REV_CASES)
def test_bad_revs_and_repositories(case: str, repos: dict[str, Path], suite: Path,
                                   tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    which, rng, pattern = REV_CASES[case]
    repo = repos.get(which, tmp_path / "does-not-exist")
    line = answer(capsys, diff_argv(rng.replace("{main_sha}", str(repos["main_sha"])), repo,
                                    suite, tmp_path))
    assert re.search(pattern, line), line
    assert not any((tmp_path / "cache" / "runs").glob("*"))  # refused before measuring anything


def test_detached_head_open_range_is_accepted(repos: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`A..` on a detached HEAD is fine (the working tree is there, revs.py): abdiff gets
    past the range and only stops at the next problem, here an impossible memory limit."""
    detached = tmp_path / "detached"
    git(tmp_path, "clone", "-q", repos["demo"].as_uri(), str(detached))
    git(detached, "checkout", "-q", "--detach", "origin/pr")
    rc = main([str(a) for a in diff_argv("main..", detached, write_suite(tmp_path / "s.yaml", [1]),
                                         tmp_path, "--max-memory", "1K", "--quiet")])
    err = capsys.readouterr().err
    assert rc == 3, err  # the tool could not start a worker: not bad input, not a verdict
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "a worker could not start" in err and "--max-memory 1K too small" in err


# ---------------------------------------------------------------- suites

BIG = ", ".join(str(n) for n in range(1, MAX_CONFIGS + 2))
SUITE_CASES = {
    "malformed YAML": ("matrix: [unclosed\n", r"malformed YAML at line"),
    "tab indentation": ("matrix:\n\trun_type: [GEN]\n", r"malformed YAML"),
    "unknown top-level key": ("colour: red\nmatrix: {run_type: [GEN]}\n", r"unknown key 'colour'"),
    "unknown matrix key": ("matrix: {run_type: [GEN], dtype: [fp8]}\n",
                           r"matrix has unknown key 'dtype'; allowed: run_type, backend"),
    "wrong value type": ("matrix: {run_type: [GEN], backend: [DSA], batch_size: [eight], "
                         "seq_len_q: [1], seq_len_kv_cache: [64]}\n",
                         r"matrix.batch_size\[0\] must be int, got str"),
    "boolean as integer": ("matrix: {run_type: [GEN], backend: [DSA], batch_size: [true], "
                           "seq_len_q: [1], seq_len_kv_cache: [64]}\n",
                           r"matrix.batch_size\[0\] must be int, got bool"),
    "unknown backend": ("matrix: {run_type: [GEN], backend: [FLASH], batch_size: [1], "
                        "seq_len_q: [1], seq_len_kv_cache: [64]}\n",
                        r"matrix.backend\[0\] must be one of 'DSA', 'TRTLLM', got 'FLASH'"),
    "negative size": ("matrix: {run_type: [GEN], backend: [DSA], batch_size: [-4], "
                      "seq_len_q: [1], seq_len_kv_cache: [64]}\n",
                      r"matrix.batch_size\[0\] must be >= 1, got -4"),
    "wrong top-level type": ("run_times: many\nmatrix: {run_type: [GEN], backend: [DSA], "
                             "batch_size: [1], seq_len_q: [1], seq_len_kv_cache: [64]}\n",
                             r"run_times must be int, got str"),
    "facts not a list": ("facts: attn_metadata\nmatrix: {run_type: [GEN], backend: [DSA], "
                         "batch_size: [1], seq_len_q: [1], seq_len_kv_cache: [64]}\n",
                         r"facts must be a list or null, got str"),
    "empty matrix": ("matrix: {}\n", r"matrix is missing field 'run_type'"),
    "no matrix": ("description: nothing to run\n", r"target reference needs a 'matrix'"),
    "key without values": ("matrix: {run_type: [], backend: [DSA]}\n",
                           r"matrix.run_type must have at least 1 item"),
    "matrix missing a key": ("matrix: {run_type: [GEN], backend: [DSA]}\n",
                             r"matrix is missing field 'batch_size'"),
    "a list, not a mapping": ("- run_type: GEN\n", r"must be a YAML mapping"),
    "empty file": ("", r"must be a YAML mapping"),
    "expect names an unknown key": ("expect: {colour: [red]}\nmatrix: {run_type: [GEN], "
                                    "backend: [DSA], batch_size: [1], seq_len_q: [1], "
                                    "seq_len_kv_cache: [64]}\n",
                                    r"expect has unknown key 'colour'"),
    "absurdly large matrix": (f"matrix: {{run_type: [GEN, CTX], backend: [DSA, TRTLLM], "
                              f"batch_size: [{BIG}], seq_len_q: [1, 2, 4], "
                              f"seq_len_kv_cache: [64]}}\n",
                              rf"expands to \d+ configs \(limit {MAX_CONFIGS}\); pass --yes"),
    "alias bomb": ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
                   "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nmatrix: {batch_size: *c}\n",
                   r"unknown key 'a'"),
}


@pytest.mark.parametrize("case", SUITE_CASES)
def test_bad_suites(case: str, repos: dict[str, Path], tmp_path: Path,
                    capsys: pytest.CaptureFixture[str]) -> None:
    text, pattern = SUITE_CASES[case]
    path = tmp_path / "suite.yaml"
    path.write_text(text, encoding="utf-8")
    line = answer(capsys, diff_argv("main..pr", repos["demo"], path, tmp_path))
    assert str(path) in line, line  # the file is named
    assert re.search(pattern, line), line


def test_suite_not_utf8_or_missing(repos: dict[str, Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"matrix: \xff\xfe\x00\x81\n")
    assert "cannot read suite" in answer(capsys, diff_argv("main..pr", repos["demo"], binary,
                                                           tmp_path))
    line = answer(capsys, diff_argv("main..pr", repos["demo"], tmp_path / "nope.yaml", tmp_path))
    assert f"the file {tmp_path / 'nope.yaml'} does not exist" in line and "mtp" in line
    line = answer(capsys, diff_argv("main..pr", repos["demo"], tmp_path, tmp_path))
    assert f"the file {tmp_path} is a folder" in line


def test_large_matrix_runs_with_yes(repos: dict[str, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """--yes accepts the large matrix: abdiff goes on to the next check (the range)."""
    path = tmp_path / "big.yaml"
    path.write_text(SUITE_CASES["absurdly large matrix"][0])
    line = answer(capsys, diff_argv("main..no-such-branch", repos["demo"], path, tmp_path,
                                    "--yes"))
    assert "unknown revision 'no-such-branch'" in line


# ---------------------------------------------------------------- options

OPTION_CASES = {
    "unknown --expect key": (["--expect", "colour=red"], r"unknown key 'colour'"),
    "--expect without =": (["--expect", "backend"], r"expected KEY=VALUE"),
    "--expect without value": (["--expect", "backend="], r"expected KEY=VALUE"),
    "--rounds 0": (["--rounds", "0"], r"--rounds: '0' is not a positive integer"),
    "--rounds text": (["--rounds", "many"], r"--rounds"),
    "--timeout negative": (["--timeout", "-5"], r"--timeout"),
    "--timeout nan": (["--timeout", "nan"], r"must be a positive number"),
    "--max-memory unit": (["--max-memory", "12Q"], r"is not a size like 4G"),
    "--min-effect 150": (["--min-effect", "150"], r"--min-effect: '150' is 15000%"),
    "--min-effect 2 (a fraction: 200%)": (["--min-effect", "2"], r"write 2% or 0.02"),
    # a signed value is the option's, not another option: its range is what is wrong
    "--min-effect -2%": (["--min-effect", "-2%"], r"--min-effect: '-2%' is -2%, outside"),
    "--target unknown": (["--target", "tensorflow"], r"--target 'tensorflow' is unknown"),
    "--format unknown": (["--format", "pdf"], r"invalid choice: 'pdf'"),
    "unknown option": (["--colour"], r"unrecognized arguments: --colour"),
}


@pytest.mark.parametrize("case", OPTION_CASES)
def test_bad_options(case: str, repos: dict[str, Path], suite: Path, tmp_path: Path,
                     capsys: pytest.CaptureFixture[str]) -> None:
    extra, pattern = OPTION_CASES[case]
    line = answer(capsys, diff_argv("main..pr", repos["demo"], suite, tmp_path, *extra))
    assert re.search(pattern, line), line


@pytest.mark.parametrize(("extra", "pattern"), [
    (["--sessions", "0"], r"--sessions: '0' is not a positive integer"),
    (["--session-gap", "-1"], r"--session-gap: '-1' is not a number of seconds >= 0"),
    (["--session-gap", "nan"], r"--session-gap: 'nan' is not a number of seconds"),
])
def test_bad_refresh_sessions(extra: list[str], pattern: str, repos: dict[str, Path],
                              tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = answer(capsys, ["baseline", "refresh", "rel", "--rev", "pr", "--repo", repos["demo"],
                           "--baselines-dir", tmp_path / "b", *extra])
    assert re.search(pattern, line), line
    assert not (tmp_path / "b").exists()


def test_no_command_and_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert capsys.readouterr().err == ("abdiff: error: no command: try `abdiff demo`, `abdiff "
                                       "A..B --configs SUITE`, or `abdiff --help` for the "
                                       "subcommands\n")
    line = answer(capsys, ["frobnicate"])
    assert line.startswith("abdiff: error: unknown command 'frobnicate': expected A..B or one of ")
    assert "did you mean" not in line


@pytest.mark.parametrize(("argv", "meant"), [
    (["doctr"], "doctor"), (["sutes"], "suites"), (["main.pr-v1", "--configs", "mtp"],
                                                   "main..pr-v1"),
])
def test_did_you_mean_a_command(argv: list[str], meant: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert answer(capsys, argv).endswith(f"; did you mean {meant}?")


# ---------------------------------------------------------------- did you mean, next steps


@pytest.mark.parametrize(("extra", "said"), [
    (["--configs", "mpt"], "--configs 'mpt': no such suite; built-in suites are ctx, decode, "
                           "mtp, mtp-hopper, or give a path to a YAML file; did you mean mtp?"),
    (["--configs", "mtp", "--expect", "backnd=DSA"],
     "--expect 'backnd=DSA': unknown key 'backnd'; allowed: run_type, backend, batch_size, "
     "seq_len_q, seq_len_kv_cache; did you mean backend=DSA?"),
    (["--configs", "mtp", "--expect", "backend=dsa"],
     "--expect backend=dsa: no config has backend 'dsa' (values are case-sensitive: DSA, "
     "TRTLLM); did you mean backend=DSA?"),
])
def test_did_you_mean_a_suite_or_an_expect_key_or_value(
        extra: list[str], said: str, repos: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    line = answer(capsys, ["main..pr", "--repo", repos["demo"], "--cache-dir",
                           tmp_path / "cache", *extra])
    assert line == f"abdiff: error: {said}"
    assert not any((tmp_path / "cache" / "runs").glob("*"))


def test_an_unknown_rev_with_no_close_name_says_where_to_look(
        repos: dict[str, Path], suite: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    line = answer(capsys, diff_argv("main..zzzqqq", repos["demo"], suite, tmp_path))
    assert line.endswith("(no branch, tag or commit by that name); `git branch -a` and `git "
                         "tag` list the names (git fetch one that is not here)")


def test_a_repository_without_a_benchmark_names_what_was_looked_for(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No target's layout: one line naming the repository, its commit, what was looked for
    and --target, before any checkout or worker (no cache folder appears)."""
    repo = tmp_path / "plain-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "model.py").write_text("print('no benchmark here')\n")
    git(repo, "add", "model.py")
    git(repo, "commit", "-q", "-m", "no benchmark")
    git(repo, "branch", "pr")
    head = git(repo, "rev-parse", "--short=10", "HEAD").strip()
    line = answer(capsys, ["main..pr", "--configs", "mtp", "--repo", repo, "--cache-dir",
                           tmp_path / "cache"])
    assert line == (f"abdiff: error: no benchmark found in {repo} at {head}: looked for "
                    "tensorrt_llm/tools/layer_wise_benchmarks (trtllm); "
                    "tinyllm/tools/layer_wise_benchmarks/runner.py (reference); pass --target "
                    "trtllm|reference|command (or --repo the benchmark's repository)")
    assert not (tmp_path / "cache").exists()
    line = answer(capsys, ["doctor", "main..pr", "--repo", repo, "--cache-dir",
                           tmp_path / "cache"])
    assert line.startswith(f"abdiff: error: no benchmark found in {repo} at {head}: ")


def test_bisect_did_you_mean_a_config(repos: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "two.yaml", [1, 2])
    line = answer(capsys, ["bisect", "main..pr", "--configs", suite, "--repo", repos["demo"],
                           "--cache-dir", tmp_path / "cache", "--config",
                           config_id(3).replace("bs3", "bs22")])
    assert line.endswith(f"; did you mean {config_id(2)} or {config_id(1)}?"), line


def test_usage_errors_name_abdiff_once(capsys: pytest.CaptureFixture[str]) -> None:
    line = answer(capsys, ["compare"])
    assert line.startswith("abdiff: error: compare: the following arguments are required: ")
    assert answer(capsys, ["--frobnicate"]).count("abdiff") == 1


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from abdiff import __version__

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"abdiff {__version__}\n"


@pytest.mark.parametrize(("expect", "pattern"), [
    ("backend=dsa", r"--expect backend=dsa: no config has backend 'dsa' \(values are "
                    r"case-sensitive: DSA, TRTLLM\); did you mean backend=DSA\?$"),
    ("batch_size=7", r"no config has batch_size '7' \(values are case-sensitive: 1\)$"),
])
def test_expect_values_are_checked_against_the_suite(
        expect: str, pattern: str, repos: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "both.yaml", [1], backends=("DSA", "TRTLLM"))
    line = answer(capsys, diff_argv("main..pr", repos["demo"], suite, tmp_path, "--expect",
                                    expect))
    assert re.search(pattern, line), line
    assert not any((tmp_path / "cache" / "runs").glob("*"))


# ---------------------------------------------------------------- run files and baselines


def run_file(configs: dict[str, list[float]], **top: object) -> dict:
    data = {"schema": "abdiff.run/1", "rev": "main", "sha": "a" * 40, "target": "reference",
            "suite": "faults", "env": {"device": "cpu"},
            "configs": [{"id": cid, "params": {"backend": "TRTLLM", "batch_size": n},
                         "rounds": [{"status": "ok", "latency_us": lat, "round": i}
                                    for i in range(3)]}
                        for n, (cid, lat) in enumerate(configs.items(), 1)]}
    data.update(top)
    return data


GOOD = {config_id(1): [100.0, 101.0, 99.0], config_id(2): [200.0, 202.0, 198.0]}


def _mutate(data: dict, how: str) -> object:
    if how == "missing configs":
        del data["configs"]
    elif how == "missing round status":
        del data["configs"][0]["rounds"][0]["status"]
    elif how == "unknown status":
        data["configs"][0]["rounds"][0]["status"] = "great"
    elif how == "negative latency":
        data["configs"][0]["rounds"][0]["latency_us"] = [-1.0]
    elif how == "latency as text":
        data["configs"][0]["rounds"][0]["latency_us"] = "fast"
    elif how == "config without id":
        del data["configs"][1]["id"]
    elif how == "duplicate config":
        data["configs"][1]["id"] = data["configs"][0]["id"]
    elif how == "kernels not counts":
        data["configs"][0]["rounds"][0]["kernels"] = {"aten::bmm": "four"}
    elif how == "round not an object":
        data["configs"][0]["rounds"][0] = [1, 2]
    elif how == "configs not a list":
        data["configs"] = {"a": 1}
    elif how == "a JSON list":
        return [data]
    return data


RUN_FILE_CASES = {
    "not JSON": ("text", "this is not json", r"not JSON \(line 1"),
    "empty file": ("text", "", r"not JSON"),
    "truncated": ("text", json.dumps(run_file(GOOD))[:200], r"not JSON"),
    "binary": ("bytes", b"\xff\xfe\x00garbage", r"cannot read run file"),
    "wrong schema version": ("json", run_file(GOOD, schema="abdiff.run/2"),
                             r"schema is 'abdiff.run/2', expected 'abdiff.run/1'"),
    "no schema": ("json", {k: v for k, v in run_file(GOOD).items() if k != "schema"},
                  r"schema is None"),
    "a result, not a run file": ("json", {"schema": "abdiff.result/1"}, r"schema is"),
    **{how: ("mutate", how, pattern) for how, pattern in {
        "missing configs": r"the document is missing field 'configs'",
        "missing round status": r"missing field 'status'",
        "unknown status": r"configs\[0\]\.rounds\[0\]\.status must be one of 'ok'",
        "negative latency": r"configs\[0\]\.rounds\[0\]\.latency_us\[0\] must be > 0",
        "latency as text": r"configs\[0\]\.rounds\[0\]\.latency_us must be a list, got str",
        "config without id": r"configs\[1\] is missing field 'id'",
        "duplicate config": r"duplicate config id",
        "kernels not counts": r"rounds\[0\]\.kernels\.aten::bmm must be int, got str",
        "round not an object": r"configs\[0\]\.rounds\[0\] must be an object, got list",
        "configs not a list": r"configs must be a list, got object",
        "a JSON list": r"a run file must be a JSON object",
    }.items()},
}


def _write_case(path: Path, kind: str, payload: object) -> None:
    if kind == "text":
        path.write_text(payload)
    elif kind == "bytes":
        path.write_bytes(payload)
    elif kind == "json":
        path.write_text(json.dumps(payload))
    else:
        path.write_text(json.dumps(_mutate(run_file(GOOD), payload)))


@pytest.mark.parametrize("case", RUN_FILE_CASES)
@pytest.mark.parametrize("side", ["A", "B"])
def test_bad_run_files(case: str, side: str, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    kind, payload, pattern = RUN_FILE_CASES[case]
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(run_file(GOOD)))
    _write_case(bad, kind, payload)
    pair = [bad, good] if side == "A" else [good, bad]
    line = answer(capsys, ["compare", *pair])
    assert str(bad) in line, line
    assert re.search(pattern, line), line


def test_missing_run_file_and_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(run_file(GOOD)))
    assert "no such run file" in answer(capsys, ["compare", good, tmp_path / "nope.json"])
    assert "cannot read run file" in answer(capsys, ["compare", tmp_path, good])


def test_configs_that_do_not_match_are_compared_on_the_intersection(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not an error: the common configs are compared, the others listed."""
    only_a, only_b = config_id(7), config_id(8)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(run_file({**GOOD, only_a: [1.0, 1.0, 1.0]})))
    b.write_text(json.dumps(run_file({only_b: [1.0, 1.0, 1.0], **GOOD})))
    out = tmp_path / "result.json"
    rc = main(["compare", str(a), str(b), "--format", "json", "--output", str(out)])
    err = capsys.readouterr().err
    assert rc in (0, 1) and "Traceback" not in err, err
    result = json.loads(out.read_text())
    assert sorted(c["id"] for c in result["configs"]) == sorted(GOOD)
    assert result["only_in_a"] == [only_a] and result["only_in_b"] == [only_b]
    assert any("one file only" in note for note in result["notes"])


@pytest.mark.parametrize("content, pattern", [
    ("{", r"nightly\.json: not JSON"),
    (json.dumps(run_file(GOOD, schema="abdiff.run/0")), r"schema is 'abdiff.run/0'"),
    (json.dumps({"schema": "abdiff.run/1", "rev": "main"}),
     r"nightly\.json: the document is missing field 'sha'"),
    (json.dumps({k: v for k, v in run_file(GOOD).items() if k != "configs"}),
     r"nightly\.json: the document is missing field 'configs'"),
])
def test_bad_baselines(content: str, pattern: str, repos: dict[str, Path], suite: Path,
                       tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "baselines"
    folder.mkdir()
    (folder / "nightly.json").write_text(content)
    line = answer(capsys, diff_argv("baseline:nightly..pr", repos["demo"], suite, tmp_path,
                                    "--baselines-dir", folder))
    assert re.search(pattern, line), line
    line = answer(capsys, ["baseline", "show", "nightly", "--repo", repos["demo"],
                           "--baselines-dir", folder])
    assert re.search(pattern, line), line


# ---------------------------------------------------------------- abdiff's own state


def test_damaged_state_folder_is_one_line(repos: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A state folder whose state.json was damaged (by hand, a disk error): one line naming
    it (or a fresh start), never a traceback. Refused before any worker starts."""
    suite = write_suite(tmp_path / "s.yaml", [1])
    argv = [str(a) for a in diff_argv("main..pr", repos["demo"], suite, tmp_path,
                                      "--max-memory", "1K", "--quiet")]
    assert main(argv) == 3  # the state folder exists now; no worker could start
    capsys.readouterr()
    (state,) = (tmp_path / "cache" / "runs").iterdir()
    (state / "state.json").write_text('{"seed": 1, "compl')
    try:
        rc = main(argv)
    except Exception as exc:  # noqa: BLE001 - the defect this test documents
        pytest.fail(f"traceback: {exc!r}")
    err = capsys.readouterr().err
    assert rc in (2, 3) and str(state) in err, err
