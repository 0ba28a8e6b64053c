"""compare.py: what identifies a failure, and how two sides' failures are told apart."""

from __future__ import annotations

from abdiff.compare import failure_signature, status_change

ABORT = ("SIGABRT: Assertion error (tinyllm/_torch/attention_backend/sparse/dsa.py:184): "
         "DG_HOST_ASSERT(batch_size == __batch_size and next_n == _next_n)")


def test_line_numbers_addresses_and_ids_do_not_make_a_different_failure() -> None:
    moved = ABORT.replace("dsa.py:184", "dsa.py:191")
    assert failure_signature("aborted", ABORT) == failure_signature("aborted", moved)
    a = ("RuntimeError: CUDA error at 0x7f3a2c001000 in worker pid 48213, file "
         "/cache/checkouts/0ee3276d94ab/x.py line 12")
    b = ("RuntimeError: CUDA error at 0x7f99aa000000 in worker pid 51007, file "
         "/cache/checkouts/2db9adaeea01/x.py line 40")
    assert failure_signature("failed", a) == failure_signature("failed", b)


def test_status_signal_type_and_message_each_make_a_different_failure() -> None:
    other_assert = ABORT.replace("next_n == _next_n", "next_n <= 1")
    assert status_change("aborted", "aborted", ABORT, ABORT) == "still-failing"
    assert status_change("aborted", "aborted", ABORT, other_assert) == "failure-changed"
    assert status_change("aborted", "aborted", "SIGABRT", "SIGSEGV") == "failure-changed"
    assert status_change("failed", "failed", "ValueError: x", "KeyError: x") == "failure-changed"
    assert status_change("failed", "timeout", "exit code 1", "exit code 1") == "failure-changed"
    assert status_change("ok", "aborted") == "broken"
    assert status_change("aborted", "ok", ABORT) == "fixed"
    assert status_change("ok", "ok") == "same"
