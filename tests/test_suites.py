"""Suite loading: built-ins, matrix expansion, and one-line errors naming file and key."""

from pathlib import Path

import pytest

from abdiff.errors import InputError
from abdiff.suites import builtin_suites, load_suite
from abdiff.suites.loader import MAX_CONFIGS

GOOD = """
description: small
warmup_times: 1
run_times: 3
expect: {backend: DSA}
facts: [attn_metadata.max_draft_tokens]
matrix:
  run_type: [GEN]
  backend: [DSA, TRTLLM]
  batch_size: [2]
  seq_len_q: [1, 4]
  seq_len_kv_cache: [64]
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return str(path)


def test_builtin_suites_follow_the_design() -> None:
    assert {"mtp", "decode", "ctx"} <= set(builtin_suites())
    mtp = load_suite("mtp")
    params = [c.params for c in mtp.configs]
    assert {p["backend"] for p in params} == {"DSA", "TRTLLM"}
    assert {p["seq_len_q"] for p in params} == {1, 2, 4}
    assert len({p["batch_size"] for p in params}) >= 2
    assert {p["seq_len_kv_cache"] for p in params} == {2049}
    assert mtp.expect == {"backend": ["DSA"]}
    assert "GEN-TRTLLM-bs32-q4-kv2049" in [c.id for c in mtp.configs]
    assert load_suite("decode").expect == {} and load_suite("ctx").expect == {}
    assert {c.params["seq_len_q"] for c in load_suite("decode").configs} == {1}
    assert {c.params["run_type"] for c in load_suite("ctx").configs} == {"CTX"}


def test_matrix_expands_with_readable_ids(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, GOOD))
    assert [c.id for c in suite.configs] == [
        "GEN-DSA-bs2-q1-kv64", "GEN-DSA-bs2-q4-kv64", "GEN-TRTLLM-bs2-q1-kv64",
        "GEN-TRTLLM-bs2-q4-kv64",
    ]
    assert suite.expect == {"backend": ["DSA"]}
    assert (suite.warmup_times, suite.run_times) == (1, 3)
    one_backend = load_suite(write(tmp_path, GOOD.replace("[DSA, TRTLLM]", "TRTLLM")))
    assert [c.id for c in one_backend.configs] == [
        "GEN-TRTLLM-bs2-q1-kv64", "GEN-TRTLLM-bs2-q4-kv64"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("matrix: [1, 2", "malformed YAML"),
        ("- a\n- b\n", "must be a YAML mapping"),
        (GOOD + "colour: red\n", "unknown key 'colour'"),
        (GOOD.replace("backend: [DSA, TRTLLM]", "backend: [DSA, FLASH]"),
         "matrix.backend[1] must be one of 'DSA', 'TRTLLM', got 'FLASH'"),
        (GOOD.replace("batch_size: [2]", "batch_size: [two]"),
         "matrix.batch_size[0] must be int, got str"),
        (GOOD.replace("batch_size: [2]", "batch_size: [0]"),
         "matrix.batch_size[0] must be >= 1, got 0"),
        (GOOD.replace("batch_size: [2]", "batch_size: []"),
         "matrix.batch_size must have at least 1 item"),
        (GOOD.replace("batch_size: [2]", "beam: [2]"),
         "matrix has unknown key 'beam'; allowed: run_type, backend"),
        (GOOD.replace("run_times: 3", "run_times: lots"), "run_times must be int, got str"),
        (GOOD.replace("expect: {backend: DSA}", "expect: {colour: red}"), "unknown key 'colour'"),
        ("matrix: {}\n", "matrix is missing field 'run_type'"),
        (GOOD.replace("seq_len_q: [1, 4]", "seq_len_q: [4, 4]"),
         "matrix.seq_len_q lists a value twice"),
    ],
)
def test_bad_suites_name_file_and_key(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_suite(path)
    message = str(info.value)
    assert needle in message and path in message and "\n" not in message


def test_large_matrix_needs_yes(tmp_path: Path) -> None:
    sizes = ", ".join(str(i) for i in range(1, MAX_CONFIGS + 2))
    path = write(tmp_path, GOOD.replace("batch_size: [2]", f"batch_size: [{sizes}]"))
    with pytest.raises(InputError, match="--yes"):
        load_suite(path)
    assert len(load_suite(path, allow_large=True).configs) == 4 * (MAX_CONFIGS + 1)


def test_unknown_suite_name_lists_builtins() -> None:
    with pytest.raises(InputError, match="built-in suites are ctx, decode, mtp"):
        load_suite("nope")
