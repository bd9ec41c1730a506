"""The runner's side of the Source contract (sources/running.py): it runs a source's readers
in threads and owns their stop and their errors, and every source receives the
acknowledgement the same way, as one named value. Real threads, a real LMDB queue; the
source is the worked example of docs/examples (tests/sources/test_example_source.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from olr_buffer.changes import CommitKey
from olr_buffer.sources import Acknowledgement, SourceRunner, SourceSettings, open_source
from olr_buffer.txbuffer import LmdbQueue

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "examples"))
import lines_source  # noqa: E402

BEGIN = '{"scn": 5, "xid": "t", "op": "begin"}\n'
ROW = '{"scn": 5, "xid": "t", "op": "insert", "table": "S.T", "after": {"ID": 1}}\n'
COMMIT = '{"scn": 6, "xid": "t", "op": "commit"}\n'


class Recording(lines_source.LinesSource):
    """The example, keeping what it is acknowledged."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.acks: list[Acknowledgement] = []

    def acknowledge(self, ack: Acknowledgement) -> None:
        self.acks.append(ack)


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_the_runner_follows_until_its_stop_and_the_source_is_acknowledged(tmp_path: Path):
    src = tmp_path / "changes.jsonl"
    src.write_text(BEGIN + ROW + COMMIT)
    queue = LmdbQueue(str(tmp_path / "q"))
    try:
        settings = SourceSettings(block_records=100, block_bytes=1 << 20)
        source = Recording(f"lines://{src}", queue, settings)
        runner = SourceRunner(source, settings)
        assert runner.prepare(None, {}) == [1]
        published = CommitKey(4, 1, 0, 3)
        runner.refuse_below([1], published)  # the changefeed's position: before the readers start
        runner.start(follow=True, poll_interval=0.01)
        _wait(lambda: queue.next_index > 0, "the block of the first transaction")
        first = queue.next_index
        with src.open("a") as f:
            f.write(BEGIN.replace("5", "7") + COMMIT.replace("6", "8"))
        _wait(lambda: queue.next_index > first, "the block of the lines appended while it follows")
        durable = CommitKey(6, 1, 0, 3)
        runner.acknowledge(Acknowledgement(published=CommitKey(8, 1, 0, 5), durable=durable))
        assert runner.alive()
        runner.stop()
        runner.join()
        assert not runner.alive() and runner.errors == [] and runner.following
        assert source.acks == [Acknowledgement(published, published), Acknowledgement(CommitKey(8, 1, 0, 5), durable)]
        assert runner.figures().records_read == 5
        # a source without the optional members: one stream, no size, no identity, no metrics
        assert runner.threads() == {1: False} and runner.input_size() is None
        assert runner.source_id is None and runner.metrics() == [] and runner.closed_through() == {}
        assert runner.new_threads() == [] and not runner.watches_stalls
    finally:
        queue.close()


def test_what_a_reader_raises_is_the_runners_error(tmp_path: Path):
    src = tmp_path / "changes.jsonl"
    src.write_text(BEGIN + "{}\n")
    queue = LmdbQueue(str(tmp_path / "q"))
    try:
        settings = SourceSettings(block_records=100, block_bytes=1 << 20)
        runner = SourceRunner(lines_source.LinesSource(f"lines://{src}", queue, settings), settings)
        runner.prepare(None, {})
        runner.start(follow=True, poll_interval=0.01)
        runner.join()  # the error ended the reader, and stopped the run
        assert [type(e) for e in runner.errors] == [lines_source.BadLine] and settings.stop.is_set()
        assert f"{src}:2: not a change" in str(runner.errors[0])
    finally:
        queue.close()


def test_a_stream_source_confirms_what_its_acknowledgement_says_is_durable(tmp_path: Path):
    """The OpenLogReplicator and PostgreSQL sources take the same Acknowledgement: its
    ``durable`` is what their reader may confirm upstream (a durable of None changes
    nothing)."""
    queue = LmdbQueue(str(tmp_path / "q"))
    try:
        settings = SourceSettings(block_records=100, block_bytes=1 << 20)
        for location in ("olr://localhost:1/DB", "postgresql://u@localhost:1/db"):
            runner = open_source(location, queue, settings)
            stream = runner.source
            key = CommitKey(42, 1, 0, 7)
            runner.acknowledge(Acknowledgement(published=key, durable=key))
            runner.acknowledge(Acknowledgement(published=CommitKey(43, 1, 0, 1), durable=None))
            assert stream.durable == key, location
    finally:
        queue.close()
