"""files.py: remove_path, which clears where a round's records go before the round, and
write_output, which writes the reports a user names."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from abdiff.errors import InputError
from abdiff.store.files import remove_path, worker_json, write_output


def test_what_the_benchmark_planted_where_a_round_goes_is_removed(tmp_path: Path) -> None:
    """The other side's benchmark can write the cache's runs/: a link to a folder of the
    user's (never followed, never emptied), a FIFO that would block the worker's record
    log, a folder of forged records."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    link, fifo, folder = tmp_path / "A-r1", tmp_path / "A-r2", tmp_path / "A-r3"
    link.symlink_to(precious)
    os.mkfifo(fifo)
    (folder / "worker0").mkdir(parents=True)
    (folder / "worker0" / "records.jsonl").write_text('{"event": "done"}\n')
    for path in (link, fifo, folder, tmp_path / "never-made"):
        remove_path(path)
        assert not path.exists() and not path.is_symlink()
    assert (precious / "keep.txt").read_text() == "mine"


def test_a_report_goes_into_a_device_or_pipe_the_user_named_never_through_a_link(
        tmp_path: Path) -> None:
    """`--json /dev/stdout > r.json` fills r.json; a named pipe gets the report once its
    reader is there, and is refused (InputError) without one rather than waited on; a link
    in a checkout to a pipe (a pull request can commit one where a user writes a report)
    is replaced like any file, the pipe left alone."""
    target = tmp_path / "r.json"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        write_output(Path(f"/proc/self/fd/{fd}"), '{"ok": true}\n')
    finally:
        os.close(fd)
    assert target.read_text() == '{"ok": true}\n'
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="a pipe nothing reads yet"):
        write_output(fifo, "report")
    link = tmp_path / "report.html"
    link.symlink_to(fifo)
    write_output(link, "<html>")
    assert not link.is_symlink() and link.read_text() == "<html>"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_a_new_file_in_a_folder_under_dev_is_a_file() -> None:
    """`--json /dev/shm/result.json` (missing): written as any file, not opened as a device
    that is not there (refused after the measurement before)."""
    path = Path("/dev/shm") / f"abdiff-test-{os.getpid()}.json"
    try:
        write_output(path, "{}\n")
        assert path.read_text() == "{}\n" and path.is_file()
    finally:
        path.unlink(missing_ok=True)


def test_json_the_benchmark_wrote_is_decoded_or_refused_with_a_value_error() -> None:
    assert worker_json('{"a": [1, 2.5]}') == {"a": [1, 2.5]}
    for text in ("{", "1" * 5000, "[" * 100_000 + "]" * 100_000):
        with pytest.raises(ValueError):
            worker_json(text)


def test_a_worker_file_is_read_up_to_the_limit(tmp_path: Path) -> None:
    from abdiff.store.files import WORKER_FILE_LIMIT, read_worker_file

    assert WORKER_FILE_LIMIT == 256 * 2**20
    path = tmp_path / "records.jsonl"
    path.write_text("0123456789abcdef")
    assert read_worker_file(path, limit=10) == "0123456789"
    assert read_worker_file(path, tail=4) == "cdef"
    assert read_worker_file(path, limit=None) == "0123456789abcdef"
