"""Follow mode: ``ThreadReader.follow`` tailing logs that a capture process is writing.

Each test runs the reader in a thread (with a stop event and a short poll interval) over
a real directory, writes to the logs the way a capture process does, and looks at what
reached the queue, or at the error the reader stopped with.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard

from olr_buffer.changes import decode_record
from olr_buffer.dead_letters import DeadLetters
from olr_buffer.runtime import PipelineOptions, run_service
from olr_buffer.sources.redo import files as files_mod
from olr_buffer.sources.redo import thread_reader as thread_reader_mod
from olr_buffer.sources.redo.errors import InputError, MissingSequenceError
from olr_buffer.sources.redo.files import scan
from olr_buffer.sources.redo.thread_reader import ThreadReader
from olr_buffer.testing import MemoryQueue
from tests.contract_model import assert_changefeed_equal, check_changefeed_layout, expected_changefeed, load_changefeed

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

POLL = 0.01


def line(rec: dict[str, Any]) -> bytes:
    return json.dumps(rec, separators=(",", ":")).encode() + b"\n"


def ins(scn: int, xid: str, rid: str, **after: Any) -> bytes:
    return line(
        {
            "op": "insert",
            "scn": scn,
            "xid": xid,
            "owner": "APP",
            "table": "T",
            "rid": rid,
            "after": {"ID": rid, **after},
        }
    )


def tx(xid: str, scn: int, rid: str) -> bytes:
    return (
        line({"op": "begin", "scn": scn, "xid": xid})
        + ins(scn + 1, xid, rid)
        + line({"op": "commit", "scn": scn + 2, "xid": xid, "tm": scn})
    )


def append(path: Path, data: bytes) -> None:
    with open(path, "ab", buffering=0) as fh:
        fh.write(data)


class Follower:
    """A ThreadReader following ``input_dir`` in a background thread."""

    def __init__(self, input_dir: Path, thread: int = 1, **kw: Any) -> None:
        self.queue = MemoryQueue()
        self.stop = threading.Event()
        self.reader = ThreadReader(
            self.queue,
            str(input_dir),
            thread,
            scan(str(input_dir)).get(thread, {}),
            None,
            stop=self.stop,
            block_records=kw.pop("block_records", 1000),
            **kw,
        )
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.reader.follow(POLL)
        except BaseException as exc:  # handed to the test
            self.error = exc

    def records(self) -> list[list]:
        """Every record in the queue (``[code, scn, sub, sequence, line, ...]``), in order."""
        q = self.queue
        out, index = [], q.first_index
        end = q.next_index
        while index < end:
            block = q.read_block(index)
            out.extend(decode_record(block.record(i)) for i in range(1, block.count))
            index = block.end
        return out

    def lines(self) -> list[tuple[int, int]]:
        return [(r[3], r[4]) for r in self.records()]

    def wait_for(self, cond: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
        t0 = time.monotonic()
        while not cond():
            if self.error is not None:
                raise AssertionError(f"reader stopped with {self.error!r} while waiting for {what}")
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"timed out waiting for {what}: queue holds {self.lines()}")
            time.sleep(POLL)

    def wait_for_lines(self, n: int, timeout: float = 5.0) -> None:
        self.wait_for(lambda: len(self.lines()) >= n, timeout, f"{n} records")

    def idle(self, polls: int = 10) -> None:
        """Give the reader time for several polls."""
        time.sleep(polls * POLL + 0.05)

    def wait_for_error(self, timeout: float = 8.0) -> BaseException:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the reader did not stop within {timeout}s; queue holds {self.lines()}"
        assert self.error is not None, "the reader stopped without an error"
        return self.error

    def finish(self) -> None:
        self.stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error


@pytest.fixture
def follower(tmp_path: Path):
    started: list[Follower] = []

    def make(thread: int = 1, **kw: Any) -> Follower:
        f = Follower(tmp_path / "in", thread, **kw)
        started.append(f)
        return f

    (tmp_path / "in").mkdir()
    yield make
    for f in started:
        f.stop.set()
        f._thread.join(10)


# ---------------------------------------------------------------------------------------
# Lines written in pieces, log switches


@pytest.mark.parametrize("cut", ["middle", "before-newline", "after-first-byte"])
def test_line_written_in_two_parts_is_read_once_whole(tmp_path: Path, follower, cut: str) -> None:
    path = tmp_path / "in" / "redo_1_1.jsonl"
    first = tx("A", 100, "r1")
    second = ins(200, "B", "r2", NOTE="é" * 50)
    at = {"middle": len(second) // 2, "before-newline": len(second) - 1, "after-first-byte": 1}[cut]
    path.write_bytes(first + second[:at])
    f = follower()
    f.wait_for_lines(3)
    f.idle()
    assert f.lines() == [(1, 1), (1, 2), (1, 3)], "half a line was read"
    assert f.reader.pos.offset == len(first)
    append(path, second[at:])
    f.wait_for_lines(4)
    append(path, tx("C", 300, "r3"))
    f.wait_for_lines(7)
    f.idle()
    f.finish()
    recs = f.records()
    assert [(r[3], r[4]) for r in recs] == [(1, n) for n in range(1, 8)], "a line was read twice or skipped"
    row = recs[3]
    assert json.loads(row[11]) == {"ID": "r2", "NOTE": "é" * 50}, row


def test_many_lines_in_random_pieces(tmp_path: Path, follower) -> None:
    """A writer that flushes at arbitrary byte boundaries: every line read once, whole."""
    import random

    rng = random.Random(7)
    path = tmp_path / "in" / "redo_1_1.jsonl"
    path.write_bytes(b"")
    data = b"".join(tx(f"X{i}", 1000 + 10 * i, f"r{i}") for i in range(60))
    f = follower()
    pos = 0
    while pos < len(data):
        step = rng.randint(1, 120)
        append(path, data[pos : pos + step])
        pos += step
        if rng.random() < 0.3:
            time.sleep(POLL * rng.random() * 2)
    f.wait_for_lines(180)
    f.idle()
    f.finish()
    recs = f.records()
    assert [(r[3], r[4]) for r in recs] == [(1, n) for n in range(1, 181)]
    assert [json.loads(r[11])["ID"] for r in recs if r[0] == 2] == [f"r{i}" for i in range(60)]


def test_log_switch_while_last_line_is_incomplete(tmp_path: Path, follower) -> None:
    """The last line of sequence 1 is half written; the writer finishes it and switches to
    sequence 2: the finished line is read once, whole, then sequence 2."""
    inp = tmp_path / "in"
    last = ins(150, "A", "r9", NOTE="last line of sequence 1")
    (inp / "redo_1_1.jsonl").write_bytes(
        tx("A0", 100, "r0") + line({"op": "begin", "scn": 140, "xid": "A"}) + last[:20]
    )
    f = follower()
    f.wait_for_lines(4)
    f.idle()
    assert f.lines() == [(1, 1), (1, 2), (1, 3), (1, 4)]
    append(inp / "redo_1_1.jsonl", last[20:])
    (inp / "redo_1_2.jsonl").write_bytes(line({"op": "commit", "scn": 160, "xid": "A"}) + tx("B", 170, "r10"))
    f.wait_for_lines(9)
    f.idle()
    f.finish()
    recs = f.records()
    assert [(r[3], r[4]) for r in recs] == [(1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (2, 1), (2, 2), (2, 3), (2, 4)]
    assert json.loads(recs[4][11]) == {"ID": "r9", "NOTE": "last line of sequence 1"}
    assert f.reader.pos.sequence == 2


def test_log_switch_completes_a_last_line_without_newline(tmp_path: Path, follower) -> None:
    """Once ``redo_1_2`` exists, sequence 1 is complete: its last line, whole but without
    ``\\n``, is a record (read once, at the switch), not something still being written."""
    inp = tmp_path / "in"
    last = ins(150, "A", "r9")
    (inp / "redo_1_1.jsonl").write_bytes(line({"op": "begin", "scn": 140, "xid": "A"}) + last[:-1])
    f = follower()
    f.wait_for_lines(1)
    f.idle()
    assert f.lines() == [(1, 1)]
    (inp / "redo_1_2.jsonl").write_bytes(line({"op": "commit", "scn": 160, "xid": "A"}))
    f.wait_for_lines(3)
    f.idle()
    f.finish()
    assert f.lines() == [(1, 1), (1, 2), (2, 1)]


def test_switch_to_an_archived_sequence(tmp_path: Path, follower) -> None:
    """The next sequence may appear already archived (``.jsonl.zst``)."""
    inp = tmp_path / "in"
    (inp / "redo_1_1.jsonl").write_bytes(tx("A", 100, "r1"))
    f = follower()
    f.wait_for_lines(3)
    (inp / "redo_1_2.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(tx("B", 200, "r2")))
    (inp / "redo_1_3.jsonl").write_bytes(tx("C", 300, "r3"))
    f.wait_for_lines(9)
    f.idle()
    f.finish()
    assert f.lines() == [(s, n) for s in (1, 2, 3) for n in (1, 2, 3)]


@pytest.mark.parametrize("first_part", ["empty", "half"])
def test_newest_archived_sequence_being_copied_in_is_read_once_whole(tmp_path: Path, follower, first_part) -> None:
    """A .jsonl.zst that arrives in two writes: read again until whole, each line once."""
    inp = tmp_path / "in"
    (inp / "redo_1_1.jsonl").write_bytes(tx("A", 100, "r1"))
    data = zstandard.ZstdCompressor().compress(tx("B", 200, "r2") + tx("C", 300, "r3"))
    cut = 0 if first_part == "empty" else len(data) // 2
    f = follower()
    f.wait_for_lines(3)
    (inp / "redo_1_2.jsonl.zst").write_bytes(data[:cut])
    f.idle()
    assert f.error is None and f.lines() == [(1, n) for n in (1, 2, 3)]
    append(inp / "redo_1_2.jsonl.zst", data[cut:])
    f.wait_for_lines(9)
    f.idle()
    f.finish()
    assert f.lines() == [(1, n) for n in (1, 2, 3)] + [(2, n) for n in range(1, 7)]


def test_newest_archived_sequence_truncated_too_long_is_bad_input(tmp_path: Path, follower, monkeypatch) -> None:
    monkeypatch.setattr(thread_reader_mod, "TRUNCATED_ZST_WAIT_SECONDS", 0.5)
    inp = tmp_path / "in"
    data = zstandard.ZstdCompressor().compress(tx("A", 100, "r1"))
    (inp / "redo_1_1.jsonl.zst").write_bytes(data[:-4])
    f = follower()
    err = f.wait_for_error()
    assert isinstance(err, InputError)
    assert "redo_1_1.jsonl.zst" in str(err) and "ends inside a frame, still after 0s" in str(err)
    assert "temporary name and rename" in str(err)


def test_archived_sequence_of_zero_bytes_that_is_not_the_newest_is_bad_input_at_once(tmp_path: Path, follower) -> None:
    """An empty .zst whose next sequence exists cannot be still being copied in: it is bad
    input at once (it was read as a sequence without records, which lost them for good)."""
    inp = tmp_path / "in"
    (inp / "redo_1_1.jsonl").write_bytes(tx("A", 100, "r1"))
    (inp / "redo_1_2.jsonl.zst").write_bytes(b"")
    (inp / "redo_1_3.jsonl").write_bytes(tx("C", 300, "r3"))
    f = follower()
    err = f.wait_for_error()
    assert isinstance(err, InputError), repr(err)
    assert str(err).startswith(f"{inp / 'redo_1_2.jsonl.zst'}:1: empty .zst file"), str(err)
    assert "still after" not in str(err)
    assert f.lines() == [(1, n) for n in (1, 2, 3)]  # nothing of sequence 3 before 2


# ---------------------------------------------------------------------------------------
# Files that change in ways a log must not


def test_file_that_shrank_is_an_input_error(tmp_path: Path, follower) -> None:
    path = tmp_path / "in" / "redo_1_1.jsonl"
    path.write_bytes(tx("A", 100, "r1") + tx("B", 200, "r2"))
    f = follower()
    f.wait_for_lines(6)
    with open(path, "r+b") as fh:
        fh.truncate(len(tx("A", 100, "r1")))
    err = f.wait_for_error()
    assert isinstance(err, InputError), repr(err)
    text = str(err)
    assert text.startswith(f"{path}:"), text
    assert "file shrank" in text and "\n" not in text, text
    assert f.lines() == [(1, n) for n in range(1, 7)]  # nothing read twice or lost


def test_file_replaced_by_a_copy_that_kept_what_was_read_is_read_on(tmp_path: Path, follower) -> None:
    """Delivery by temporary file and rename (rsync): a new inode with the same beginning."""
    path = tmp_path / "in" / "redo_1_1.jsonl"
    path.write_bytes(tx("A", 100, "r1"))
    f = follower()
    f.wait_for_lines(3)
    for i, more in enumerate((tx("B", 200, "r2"), tx("C", 300, "r3"))):
        tmp = tmp_path / "in" / f".redo_1_1.jsonl.{i}"
        tmp.write_bytes(path.read_bytes() + more)
        os.replace(tmp, path)
        f.wait_for_lines(6 + 3 * i)
    assert f.error is None and f.lines()[-1] == (1, 9)


def test_file_replaced_by_a_new_inode_with_other_content_is_an_input_error(tmp_path: Path, follower) -> None:
    path = tmp_path / "in" / "redo_1_1.jsonl"
    path.write_bytes(tx("A", 100, "r1"))
    f = follower()
    f.wait_for_lines(3)
    tmp = tmp_path / "in" / "new.tmp"
    tmp.write_bytes(tx("A", 100, "r7") + tx("B", 200, "r2"))  # longer: not caught as "shrank"
    os.replace(tmp, path)
    err = f.wait_for_error()
    assert isinstance(err, InputError), repr(err)
    text = str(err)
    assert text.startswith(f"{path}:3: "), text
    assert "replaced" in text and "differs" in text and "\n" not in text, text
    assert f.lines() == [(1, 1), (1, 2), (1, 3)]


def archive(path: Path, content: bytes | None = None) -> Path:
    """Archive a plain log as the docs say: .jsonl.zst under a temporary name, rename,
    then remove the plain file. ``content``: what the archive holds (default: the file's)."""
    zst = path.with_name(path.name + ".zst")
    tmp = path.with_name(path.name + ".zst.tmp")
    tmp.write_bytes(zstandard.ZstdCompressor().compress(path.read_bytes() if content is None else content))
    os.replace(tmp, zst)
    path.unlink()
    return zst


@pytest.mark.parametrize("more", [False, True], ids=["as-read", "with-lines-not-read-yet"])
def test_sequence_archived_to_zst_while_followed_is_read_on(tmp_path: Path, follower, more: bool) -> None:
    """The capture archives a sequence right after its log switch, before the reader has
    moved on: the .zst replaces the plain file it holds. Same content: read on (the lines
    not read yet from the archive), each line once. It stopped the service with 'file
    was replaced ... differs', without comparing anything."""
    inp = tmp_path / "in"
    path = inp / "redo_1_1.jsonl"
    path.write_bytes(tx("A", 100, "r1") + b'{"op":"begin","scn":200,')  # the last line not written yet
    f = follower()
    f.wait_for_lines(3)
    if more:  # the line is finished, and one more written, then the archive: the reader sees only the archive
        content = tx("A", 100, "r1") + tx("B", 200, "r2")
    else:  # the archive holds what was read: the unfinished line never was finished
        content = tx("A", 100, "r1")
    archive(path, content)
    f.wait_for_lines(6 if more else 3)
    f.idle()
    (inp / "redo_1_2.jsonl").write_bytes(tx("C", 300, "r3"))
    f.wait_for_lines(9 if more else 6)
    f.idle()
    assert f.error is None, f.error
    first = [(1, n) for n in range(1, 7 if more else 4)]
    assert f.lines() == first + [(2, n) for n in (1, 2, 3)]


def test_sequence_archived_between_the_look_and_the_read_is_read_from_its_archive(
    tmp_path: Path, follower, monkeypatch
) -> None:
    """The reader finds redo_1_2.jsonl, and the capture archives it before the reader opens
    it: the reader reads the archive (it stopped with 'cannot open: No such file')."""
    inp = tmp_path / "in"
    (inp / "redo_1_1.jsonl").write_bytes(tx("A", 100, "r1"))
    f = follower()
    f.wait_for_lines(3)
    plain = inp / "redo_1_2.jsonl"
    original_open = files_mod.LogFile.open
    raced: list[str] = []

    def open_after_the_archive(self):
        if self.path == str(plain) and not raced:
            raced.append(self.path)
            archive(plain)
        return original_open(self)

    monkeypatch.setattr(files_mod.LogFile, "open", open_after_the_archive)
    # whole before the reader can see it: a reader that saw it between its creation and its
    # write archived it empty (the full run's one failure, under load)
    tmp = plain.with_name("incoming.tmp")
    tmp.write_bytes(tx("B", 200, "r2"))
    os.replace(tmp, plain)
    f.wait_for_lines(6)
    f.idle()
    assert raced and f.error is None, f.error
    assert f.lines() == [(1, n) for n in (1, 2, 3)] + [(2, n) for n in (1, 2, 3)]


def test_sequence_archived_to_a_zst_with_other_content_is_an_input_error(tmp_path: Path, follower) -> None:
    inp = tmp_path / "in"
    path = inp / "redo_1_1.jsonl"
    path.write_bytes(tx("A", 100, "r1"))
    f = follower()
    f.wait_for_lines(3)
    zst = archive(path, tx("A", 100, "r7") + tx("B", 200, "r2"))
    err = f.wait_for_error()
    assert isinstance(err, InputError), repr(err)
    assert str(err).startswith(f"{zst}:3: ") and "differs" in str(err), str(err)
    assert f.lines() == [(1, 1), (1, 2), (1, 3)]


def test_file_removed_under_the_reader_is_an_input_error(tmp_path: Path, follower) -> None:
    path = tmp_path / "in" / "redo_1_1.jsonl"
    path.write_bytes(tx("A", 100, "r1"))
    (tmp_path / "in" / "redo_1_2.jsonl").write_bytes(b"")  # the reader moves on to sequence 2
    f = follower()
    f.wait_for(lambda: f.reader.pos.sequence == 2, what="the switch to sequence 2")
    p2 = tmp_path / "in" / "redo_1_2.jsonl"
    append(p2, tx("B", 200, "r2"))
    f.wait_for_lines(6)
    p2.unlink()
    err = f.wait_for_error(timeout=2.0)
    assert isinstance(err, InputError), repr(err)
    assert str(err).startswith(str(p2)), str(err)


def test_missing_sequence_at_start(tmp_path: Path, follower) -> None:
    inp = tmp_path / "in"
    (inp / "redo_1_1.jsonl").write_bytes(tx("A", 100, "r1"))
    (inp / "redo_1_3.jsonl").write_bytes(tx("C", 300, "r3"))
    f = follower()
    err = f.wait_for_error()
    assert isinstance(err, MissingSequenceError), repr(err)
    assert "thread 1 is missing sequence 2" in str(err), str(err)
    assert str(err).startswith(str(inp / "redo_1_2.jsonl")), str(err)


def test_missing_sequence_appearing_while_following(tmp_path: Path, follower) -> None:
    """redo_1_1 is being followed; redo_1_3 appears, redo_1_2 never does."""
    inp = tmp_path / "in"
    (inp / "redo_1_1.jsonl").write_bytes(tx("A", 100, "r1"))
    f = follower()
    f.wait_for_lines(3)
    (inp / "redo_1_3.jsonl").write_bytes(tx("C", 300, "r3"))
    err = f.wait_for_error(timeout=10.0)  # the reader looks for gaps every 5 s
    assert isinstance(err, MissingSequenceError), repr(err)
    text = str(err)
    assert "thread 1 is missing sequence 2" in text and "\n" not in text, text
    assert f.lines() == [(1, 1), (1, 2), (1, 3)]  # nothing of sequence 3 was read


# ---------------------------------------------------------------------------------------
# Threads whose files appear later


def test_thread_without_files_starts_at_its_lowest_sequence(tmp_path: Path, follower) -> None:
    inp = tmp_path / "in"
    f = follower(thread=2)
    f.idle()
    assert f.lines() == []
    (inp / "redo_2_7.jsonl").write_bytes(tx("A", 100, "r1"))
    (inp / "redo_2_8.jsonl").write_bytes(tx("B", 200, "r2"))
    f.wait_for_lines(6)
    (inp / "redo_2_9.jsonl").write_bytes(tx("C", 300, "r3"))
    f.wait_for_lines(9)
    f.idle()
    f.finish()
    assert f.lines() == [(s, n) for s in (7, 8, 9) for n in (1, 2, 3)]


def test_service_with_a_thread_in_play_whose_files_come_later(tmp_path: Path) -> None:
    """``run --threads 1,2`` with only thread 1's logs at start: nothing is published
    (thread 2 holds the watermark) until thread 2's first log (sequence 4) appears; then
    thread 2 is read from sequence 4 on, and the changefeed is the model's."""
    inp, q, cf = tmp_path / "in", tmp_path / "q", tmp_path / "cf"
    inp.mkdir()
    (inp / "redo_1_1.jsonl").write_bytes(tx("A", 100, "r1") + tx("B", 200, "r2") + line({"op": "lwn", "scn": 250}))
    stop = threading.Event()
    result: dict[str, Any] = {}

    def serve() -> None:
        try:
            result["summary"] = run_service(
                str(inp),
                str(q),
                str(cf),
                PipelineOptions(threads=[1, 2], flush_seconds=0.05, poll_seconds=POLL, checkpoint_seconds=0.2),
                stop,
            )
        except BaseException as exc:
            result["error"] = exc

    service = threading.Thread(target=serve, daemon=True)
    service.start()
    try:
        time.sleep(0.5)
        assert "error" not in result, result
        assert not (cf.is_dir() and load_changefeed(cf)), "published without thread 2's progress"
        # thread 2's first log: a transaction that began before B committed, and a heartbeat
        (inp / "redo_2_4.jsonl").write_bytes(
            line({"op": "begin", "scn": 150, "xid": "T2"})
            + ins(160, "T2", "t1")
            + line({"op": "commit", "scn": 210, "xid": "T2"})
            + line({"op": "lwn", "scn": 400})
        )
        append(inp / "redo_1_1.jsonl", line({"op": "lwn", "scn": 400}))
        model = expected_changefeed(inp)
        assert model.committed == 3
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10 and len(load_changefeed(cf)) < len(model.rows):
            assert "error" not in result, result
            time.sleep(0.05)
    finally:
        stop.set()
        service.join(20)
    assert not service.is_alive()
    assert "error" not in result, result
    check_changefeed_layout(cf)
    assert_changefeed_equal(load_changefeed(cf), model.rows)
    assert [r["xid"] for r in model.rows] == ["A", "B", "T2"]


# ---------------------------------------------------------------------------------------
# Bugs


def test_over_long_line_still_being_written_is_one_dead_letter(tmp_path: Path, follower) -> None:
    path = tmp_path / "in" / "redo_1_1.jsonl"
    long_line = b'{"op":"lwn","scn":1,"pad":"' + b"x" * 2000 + b'"}\n'
    path.write_bytes(line({"op": "lwn", "scn": 1}) + long_line[:1500])
    dead = DeadLetters(str(tmp_path / "dead.jsonl"))
    f = follower(max_line_bytes=1000, dead_letters=dead)
    f.idle(20)
    append(path, long_line[1500:] + tx("A", 100, "r1"))
    f.wait_for_lines(3)
    f.idle()
    f.finish()
    dead.close()
    letters = [json.loads(x) for x in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(d["line"], len(d["raw"])) for d in letters] == [(2, len(long_line))], letters
    assert f.lines() == [(1, 3), (1, 4), (1, 5)]


def test_idle_archived_last_sequence_is_not_decompressed_at_every_poll(tmp_path: Path, follower, monkeypatch) -> None:
    opened = []
    real_open = files_mod.LogFile.open

    def counting_open(self):
        opened.append(self.sequence)
        return real_open(self)

    monkeypatch.setattr(files_mod.LogFile, "open", counting_open)
    (tmp_path / "in" / "redo_1_1.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(tx("A", 100, "r1")))
    f = follower()
    f.wait_for_lines(3)
    f.idle(30)
    f.finish()
    assert len(opened) <= 3, f"the archived log was opened {len(opened)} times in 30 polls"


def test_an_unfinished_last_line_is_read_again_only_once_the_file_grew(tmp_path: Path, follower, monkeypatch) -> None:
    path = tmp_path / "in" / "redo_1_1.jsonl"
    big = ins(101, "A", "r1", NOTE="x" * (4 << 20))
    path.write_bytes(line({"op": "begin", "scn": 100, "xid": "A"}) + big[:-100])
    reads: list[int] = []
    real = ThreadReader._read_file
    monkeypatch.setattr(
        ThreadReader, "_read_file", lambda self, lf, final, **kw: reads.append(1) or real(self, lf, final, **kw)
    )
    f = follower()
    f.wait_for_lines(1)
    time.sleep(50 * POLL)
    assert len(reads) <= 2, f"the unfinished line was read {len(reads)} times in {50 * POLL}s"
    append(path, big[-100:] + line({"op": "commit", "scn": 102, "xid": "A"}))
    f.wait_for_lines(3)
    assert f.error is None


def _looks(tmp_path: Path, poll: float, looks: int) -> tuple[list[float], list[float]]:
    """The waits of a reader following one file with ``poll``: the first ``looks`` after it
    read a transaction, and those after a second one was appended (and read)."""
    waits: list[float] = []

    class Stop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            assert timeout is not None
            waits.append(timeout)
            return super().wait(timeout)

    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "redo_1_1.jsonl"
    path.write_bytes(tx("A", 100, "r1"))
    stop = Stop()
    reader = ThreadReader(MemoryQueue(), str(tmp_path / "in"), 1, scan(str(tmp_path / "in"))[1], None, stop=stop)
    runner = threading.Thread(target=reader.follow, args=(poll,), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while len(waits) < looks and time.monotonic() < deadline:
            time.sleep(0.01)
        first = waits[:looks]
        before = len(waits)
        append(path, tx("B", 200, "r2"))
        while (reader.stats.records < 6 or len(waits) < before + looks) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert reader.stats.records == 6
    finally:
        stop.set()
        runner.join(10)
    assert not runner.is_alive()
    return first, waits[before:]


def test_a_reader_that_found_lines_looks_again_sooner_than_the_poll_interval(tmp_path: Path) -> None:
    """A commit waits for every thread's reader to read past it (the watermark): with a
    short poll interval (latency asked for), a reader that just found lines looks again
    after an eighth of it, and the wait doubles with each look that finds nothing, up to
    the poll interval."""
    first, after = _looks(tmp_path, 0.05, 5)
    assert first == pytest.approx([0.01, 0.02, 0.04, 0.05, 0.05])  # (never below 10 ms)
    # the look that found B's lines is followed by the short wait, then the doubling again
    i = after.index(pytest.approx(0.01))
    assert after[i : i + 2] == pytest.approx([0.01, 0.02]), after
    assert max(first + after) == pytest.approx(0.05)


def test_a_reader_with_a_long_poll_interval_keeps_it_after_finding_lines(tmp_path: Path) -> None:
    """Each look that finds lines appends a block: with a poll interval above 50 ms
    (the default 0.1 s) a reader does not look sooner, which would cost CPU for no gain."""
    first, after = _looks(tmp_path, 0.1, 3)
    assert set(first + after) == {0.1}


def test_two_log_switches_while_the_reader_reads_are_no_gap(tmp_path: Path, follower, monkeypatch) -> None:
    """A reader behind the writer: while it reads sequence 1 (after it looked for sequence
    2, which was not there yet), the writer switches to 2, then to 3. Nothing is missing:
    it reads on into both (its look for gaps saw 3, and 2 too)."""
    inp = tmp_path / "in"
    (inp / "redo_1_1.jsonl").write_bytes(tx("A", 100, "r1"))
    real = ThreadReader._read_file
    switched: list[int] = []

    def read_file(self: ThreadReader, lf, final: bool, truncated_ok: bool = False) -> int:
        n = real(self, lf, final, truncated_ok)
        if lf.sequence == 1 and not switched:
            switched.append(1)
            (inp / "redo_1_2.jsonl").write_bytes(tx("B", 200, "r2"))
            (inp / "redo_1_3.jsonl").write_bytes(tx("C", 300, "r3"))
        return n

    monkeypatch.setattr(ThreadReader, "_read_file", read_file)
    f = follower()
    f.wait_for_lines(9)
    f.idle()
    assert f.error is None, repr(f.error)
    assert [(s, n) for s, n in f.lines()] == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3), (3, 1), (3, 2), (3, 3)]
