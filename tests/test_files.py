"""files.py: remove_path, which clears where a round's records go before the round."""

from __future__ import annotations

import os
from pathlib import Path

from abdiff.store.files import remove_path


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
