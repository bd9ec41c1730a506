"""`run` publishes a file every few milliseconds at a short --flush-interval: once its
first file is out, a publication starts no thread (the last row group is written by the
publishing thread, and the store's calls reuse the thread that ran the last one)."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from olr_buffer.changes import Commit, CommitKey
from olr_buffer.sinks.parquet.writer import ChangefeedWriter
from olr_buffer.store import OutageRetry


def _publish(writer: ChangefeedWriter, scn: int) -> None:
    row = [2, scn, 0, 1, scn, None, "O", "T", None, f"R{scn}", None, '{"A":1}', None]
    assert writer.write_transaction(Commit(f"x{scn}", CommitKey(scn, 1, 1, scn), None), [(1, [row])]) == 1
    assert writer.flush() is not None


def test_a_publication_starts_no_thread_once_the_first_is_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # as `run` sets it up: its store's calls watched, with a timeout
    writer = ChangefeedWriter(tmp_path / "cf", retry=OutageRetry(timeout=30.0))
    _publish(writer, 100)
    started: list[str] = []
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    for scn in (200, 300, 400):
        _publish(writer, scn)
    monkeypatch.undo()
    writer.close()
    assert started == []
    files = sorted((tmp_path / "cf").glob("part-*.parquet"))
    assert [pq.read_table(f).column("c_scn").to_pylist() for f in files] == [[100], [200], [300], [400]]


def test_a_store_call_in_the_thread_of_the_last_one_raises_its_error_to_its_caller() -> None:
    retry = OutageRetry(timeout=30.0)
    names = [retry.call(lambda: threading.current_thread().name, "look") for _ in range(3)]
    assert names == ["store-call"] * 3

    def fail() -> None:
        raise OSError("disk on fire")

    with pytest.raises(OSError, match="disk on fire"):
        retry.call(fail, "fail")
    assert retry.call(lambda: 42, "answer") == 42
