"""Unit tests of LmdbQueue on real LMDB files: ownership, metadata, damage, crash recovery."""

from __future__ import annotations

import os
import random
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import lmdb
import pytest

from olr_buffer.txbuffer import (
    LmdbQueue,
    QueueCorruptError,
    QueueError,
    QueueFullError,
    QueueLockedError,
)
from olr_buffer.txbuffer import lmdb_queue as lmdb_queue_module
from olr_buffer.txbuffer.block import HEADER_SIZE, index_key

REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL = 16 * 1024  # segment_bytes that rolls every few blocks


def rnd_records(seed: int, count: int, size: int = 600) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(rnd.randint(0, size)) for _ in range(count)]


def segment_files(path: Path) -> list[str]:
    return sorted(f for f in os.listdir(path / "segments") if f.endswith(".mdb"))


def fill_until_segments(q: LmdbQueue, n_segments: int, meta_fn=lambda i: None) -> list[bytes]:
    """Append blocks until the queue has ``n_segments`` segments; return the records."""
    out: list[bytes] = []
    i = 0
    while len(q.segments()) < n_segments:
        recs = rnd_records(i, 5)
        assert q.append(recs, meta_fn(i)) == q.next_index - len(recs)
        out.extend(recs)
        i += 1
        assert i < 1000, "the queue never rolled"
    return out


def read_segment_meta(seg_path: str) -> dict[bytes, bytes]:
    """The ``meta`` database of one segment file, read with LMDB directly (queue closed)."""
    env = lmdb.open(seg_path, subdir=False, readonly=True, lock=False, max_dbs=2)
    try:
        db = env.open_db(b"meta", create=False)
        with env.begin(db=db) as txn:
            return dict(txn.cursor().iternext())
    finally:
        env.close()


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- ownership -----------------------------------------------------------------------------


def test_second_open_in_same_process_is_refused_naming_the_pid(tmp_path: Path) -> None:
    path = tmp_path / "q"
    q = LmdbQueue(path)
    q.append([b"a"], {b"k": b"v"})
    with pytest.raises(QueueLockedError) as info:
        LmdbQueue(path)
    assert f"pid {os.getpid()}" in str(info.value)
    assert str(path) in str(info.value)
    # The failed open did not disturb the owner.
    assert q.get(0) == b"a"
    assert q.append([b"b"]) == 1
    q.close()
    # Once released, the directory can be owned again.
    with LmdbQueue(path) as q2:
        assert q2.next_index == 2
        assert q2.meta(b"k") == b"v"


_TRY_OPEN = """
    import sys
    from olr_buffer.txbuffer import LmdbQueue, QueueLockedError
    try:
        q = LmdbQueue(sys.argv[1])
    except QueueLockedError as exc:
        print("LOCKED", exc)
        sys.exit(3)
    print("OPENED", q.next_index)
    q.close()
"""


def test_second_process_is_refused_while_the_first_holds_the_queue(tmp_path: Path) -> None:
    path = tmp_path / "q"
    q = LmdbQueue(path)
    q.append([b"x", b"y"])
    res = run_python(_TRY_OPEN, str(path))
    assert res.returncode == 3, res.stderr
    assert res.stdout.startswith("LOCKED")
    assert f"pid {os.getpid()}" in res.stdout
    q.close()
    res = run_python(_TRY_OPEN, str(path))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["OPENED", "2"]


def test_lock_names_the_owning_child_and_is_released_when_it_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "q"
    code = textwrap.dedent(
        """
        import sys
        from olr_buffer.txbuffer import LmdbQueue
        q = LmdbQueue(sys.argv[1])
        q.append([b"from-child-0", b"from-child-1"], {b"owner": b"child"})
        print("ready", flush=True)
        sys.stdin.readline()  # hold the queue until killed
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        with pytest.raises(QueueLockedError) as info:
            LmdbQueue(path)
        assert f"pid {child.pid}" in str(info.value)
    finally:
        child.kill()  # a crash: no close()
        child.wait(timeout=30)
        child.stdin.close()
        child.stdout.close()
        child.stderr.close()
    with LmdbQueue(path) as q:
        assert q.next_index == 2
        assert [q.get(0), q.get(1)] == [b"from-child-0", b"from-child-1"]
        assert q.meta(b"owner") == b"child"


def test_create_false_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(QueueError):
        LmdbQueue(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()


def test_queue_directory_is_private(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        fill_until_segments(q, 2)
        seg_paths = [s.path for s in q.segments()]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path / "segments").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path / "LOCK").st_mode) == 0o600
    for p in seg_paths:
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p


# -- metadata ------------------------------------------------------------------------------


def test_meta_written_with_blocks_survives_reopen_with_the_last_value(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with LmdbQueue(path) as q:
        assert q.append([b"r0", b"r1"], {b"pos/a": b"1", b"ckpt": b"c1"}) == 0
        assert q.append([b"r2"], {b"pos/a": b"2", b"pos/b": b"7"}) == 2
        assert q.append([], {b"pos/a": b"3"}) == 3  # meta only: no record, index unchanged
        assert q.next_index == 3
        assert q.meta(b"pos/a") == b"3"
    with LmdbQueue(path) as q:
        assert q.next_index == 3
        assert q.meta(b"pos/a") == b"3"
        assert q.meta(b"pos/b") == b"7"
        assert q.meta(b"ckpt") == b"c1"
        assert q.meta(b"nope") is None
        assert q.meta_items(b"pos/") == {b"pos/a": b"3", b"pos/b": b"7"}
        assert q.meta_items() == {b"pos/a": b"3", b"pos/b": b"7", b"ckpt": b"c1"}


def test_meta_only_write_on_an_empty_queue_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with LmdbQueue(path) as q:
        assert q.append([], {b"k": b"v"}) == 0
        assert q.next_index == 0
    with LmdbQueue(path) as q:
        assert (q.first_index, q.next_index) == (0, 0)
        assert q.meta_items() == {b"k": b"v"}
        assert q.append([b"first"], {b"k": b"w"}) == 0
    with LmdbQueue(path) as q:
        assert q.get(0) == b"first"
        assert q.meta_items() == {b"k": b"w"}


def test_new_segment_carries_the_metadata(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        q.append([b"r"], {b"set-once": b"x", b"pos": b"-1"})
        records = [b"r"] + fill_until_segments(q, 4, meta_fn=lambda i: {b"pos": str(i).encode()})
        last_pos = q.meta(b"pos")
        segs = q.segments()
        assert len(segs) == 4
        assert q.meta(b"set-once") == b"x"
    # Written once, in the first segment, yet the newest segment holds it too.
    assert read_segment_meta(segs[-1].path) == {b"set-once": b"x", b"pos": last_pos}
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        assert q.meta_items() == {b"set-once": b"x", b"pos": last_pos}
        # Cleanup removes the old segments; the metadata stays.
        deleted = q.delete_segments_before(q.next_index)
        assert [s.first for s in deleted] == [s.first for s in segs[:-1]]
        assert q.first_index == segs[-1].first
        assert q.meta_items() == {b"set-once": b"x", b"pos": last_pos}
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        assert q.meta_items() == {b"set-once": b"x", b"pos": last_pos}
        assert q.first_index == segs[-1].first
        assert q.next_index == len(records)
        assert [r for _, r in q.tailer()] == records[segs[-1].first :]


def test_meta_in_the_rolling_append_overrides_the_copied_value(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        q.append(rnd_records(1, 5), {b"pos": b"old", b"other": b"o"})
        n = len(q.segments())
        i = 0
        while len(q.segments()) == n:  # the append that rolls writes pos=new<i>
            i += 1
            q.append(rnd_records(100 + i, 5), {b"pos": b"new%d" % i})
        newest = q.segments()[-1].path
    assert read_segment_meta(newest) == {b"pos": b"new%d" % i, b"other": b"o"}
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        assert q.meta_items() == {b"pos": b"new%d" % i, b"other": b"o"}


# -- reading -------------------------------------------------------------------------------


def test_reads_by_index_across_segments(tmp_path: Path) -> None:
    with LmdbQueue(tmp_path / "q", segment_bytes=SMALL) as q:
        records = fill_until_segments(q, 3)
        for i in (0, 1, len(records) // 2, len(records) - 1):
            assert q.get(i) == records[i]
            block = q.read_block(i)
            assert block.first <= i < block.end
            assert block.records() == records[block.first : block.end]
        for bad in (-1, len(records), len(records) + 10):
            with pytest.raises(IndexError):
                q.get(bad)
        segs = q.segments()
        bounds = [0, segs[1].first, segs[2].first, len(records)]
        assert [(s.first, s.end) for s in segs] == list(zip(bounds, bounds[1:]))
        assert [s.current for s in segs] == [False, False, True]
    with pytest.raises(QueueError):
        q.get(0)  # closed


def test_delete_segments_before_never_removes_the_current_or_a_needed_segment(tmp_path: Path) -> None:
    with LmdbQueue(tmp_path / "q", segment_bytes=SMALL) as q:
        records = fill_until_segments(q, 3)
        segs = q.segments()
        # An index inside the second segment keeps it (and the current one).
        assert q.delete_segments_before(segs[1].first + 1) == [segs[0]]
        assert q.first_index == segs[1].first
        assert not os.path.exists(segs[0].path)
        with pytest.raises(IndexError):
            q.get(0)
        # Far beyond the end: everything but the current segment goes.
        assert [s.first for s in q.delete_segments_before(10**9)] == [segs[1].first]
        assert [s.first for s in q.segments()] == [segs[2].first]
        assert q.delete_segments_before(10**9) == []
        assert q.get(len(records) - 1) == records[-1]


def test_durable_false_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with LmdbQueue(path, segment_bytes=SMALL, durable=False) as q:
        records = fill_until_segments(q, 3, meta_fn=lambda i: {b"i": b"%d" % i})
        last = q.meta(b"i")
        with pytest.raises(QueueLockedError):
            LmdbQueue(path, durable=False)
    with LmdbQueue(path, segment_bytes=SMALL, durable=False) as q:
        assert q.next_index == len(records)
        assert q.meta(b"i") == last
        assert [r for _, r in q.tailer()] == records
        assert q.append([b"more"]) == len(records)


def test_tailer_returns_none_at_the_end_and_resumes(tmp_path: Path) -> None:
    with LmdbQueue(tmp_path / "q", segment_bytes=SMALL) as q:
        t = q.tailer()
        assert t.index == 0
        assert t.next_block() is None
        assert list(t) == []
        q.append([b"a", b"b", b"c"])
        block = t.next_block()
        assert (block.first, block.end, block.records()) == (0, 3, [b"a", b"b", b"c"])
        assert t.index == 3
        assert t.next_block() is None
        assert t.next_block() is None  # still nothing, position unchanged
        assert t.index == 3
        q.append([], {b"k": b"v"})  # metadata alone is not a record
        assert t.next_block() is None
        q.append([b"d"])
        q.append([b"e", b"f"])
        assert list(t) == [(3, b"d"), (4, b"e"), (5, b"f")]
        assert list(t) == []
        # Started in the middle of a block: iteration skips the records before the start,
        # next_block returns the whole block.
        mid = q.tailer(1)
        assert list(mid) == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f")]
        mid = q.tailer(5)
        assert mid.next_block().records() == [b"e", b"f"]
        # Started beyond the end: waits for that index.
        ahead = q.tailer(7)
        assert ahead.next_block() is None
        q.append([b"g", b"h", b"i"])
        assert list(ahead) == [(7, b"h"), (8, b"i")]


def test_tailer_behind_cleanup_raises_index_error(tmp_path: Path) -> None:
    with LmdbQueue(tmp_path / "q", segment_bytes=SMALL) as q:
        t = q.tailer()
        records = fill_until_segments(q, 3)
        q.delete_segments_before(q.segments()[1].first)
        with pytest.raises(IndexError):
            t.next_block()
        assert t.index == 0
        # Restarting from what is stored works.
        assert [r for _, r in q.tailer()] == records[q.first_index :]


# -- damage --------------------------------------------------------------------------------


def _three_block_queue(path: Path) -> list[list[bytes]]:
    blocks = [rnd_records(1, 4, 300), rnd_records(2, 5, 300), rnd_records(3, 3, 300)]
    with LmdbQueue(path) as q:
        for b in blocks:
            q.append(b, {b"m": b"1"})
    return blocks


def _rewrite_value(seg_path: str, first: int, change) -> None:
    env = lmdb.open(seg_path, subdir=False, max_dbs=2)
    try:
        db = env.open_db(b"blocks", create=False)
        with env.begin(write=True, db=db) as txn:
            value = bytearray(txn.get(index_key(first)))
            change(value)
            txn.put(index_key(first), bytes(value))
    finally:
        env.close()


@pytest.mark.parametrize(
    "where",
    [0, 1, 4, 5, 8, 9, 12, HEADER_SIZE, HEADER_SIZE + 20, -1],
    ids=[
        "version",
        "count-hi",
        "count-lo",
        "rawlen-hi",
        "rawlen-lo",
        "crc-hi",
        "crc-lo",
        "payload-0",
        "payload-20",
        "payload-last",
    ],
)
def test_damaged_block_raises_corrupt_error_naming_the_index(tmp_path: Path, where: int) -> None:
    path = tmp_path / "q"
    blocks = _three_block_queue(path)
    first = len(blocks[0])  # damage the middle block: records first .. first + 4
    seg = str(path / "segments" / segment_files(path)[0])

    def flip(value: bytearray) -> None:
        value[where] ^= 0x5A

    _rewrite_value(seg, first, flip)
    with LmdbQueue(path) as q:
        assert q.next_index == sum(map(len, blocks))  # the last block is intact
        for index in (first, first + 2):
            for read in (q.read_block, q.get):
                with pytest.raises(QueueCorruptError) as info:
                    read(index)
                assert f"queue block {first} " in str(info.value)
                assert info.value.facts["index"] == first
        t = q.tailer()
        assert t.next_block().records() == blocks[0]
        with pytest.raises(QueueCorruptError):
            t.next_block()
        # The blocks around it still read.
        assert q.get(0) == blocks[0][0]
        assert q.get(first + len(blocks[1])) == blocks[2][0]


def test_damaged_record_count_is_a_corrupt_error_not_a_value_error(tmp_path: Path) -> None:
    """BUG: a damaged ``count`` field makes BlockCodec.decode raise a bare ValueError.

    With a count larger than the block, ``raw[: 4 * (count + 1)]`` is the whole payload;
    when its length is not a multiple of 4, ``array.frombytes`` raises ValueError before
    the length check that would have raised QueueCorruptError.
    """
    path = tmp_path / "q"
    with LmdbQueue(path) as q:
        q.append([b"abc"])  # payload: 8 bytes of offsets + 3 bytes: 11, not a multiple of 4
        q.append([b"next"])
    seg = str(path / "segments" / segment_files(path)[0])
    _rewrite_value(seg, 0, lambda v: v.__setitem__(1, v[1] ^ 0x01))  # count 1 -> 0x01000001
    with LmdbQueue(path) as q:
        with pytest.raises(QueueCorruptError) as info:  # fails: ValueError
            q.get(0)
        assert info.value.facts["index"] == 0
        assert q.get(1) == b"next"


def test_byte_flipped_in_the_segment_file_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "q"
    blocks = _three_block_queue(path)
    first = len(blocks[0])
    seg = path / "segments" / segment_files(path)[0]
    env = lmdb.open(str(seg), subdir=False, readonly=True, lock=False, max_dbs=2)
    with env.begin(db=env.open_db(b"blocks", create=False)) as txn:
        value = bytes(txn.get(index_key(first)))
    env.close()
    data = bytearray(seg.read_bytes())
    at = data.find(value)
    assert at >= 0, "the block's value is not stored contiguously in the file"
    while at >= 0:  # LMDB may keep stale copies in free pages: damage them all
        data[at + len(value) // 2] ^= 0x01
        at = data.find(value, at + 1)
    seg.write_bytes(bytes(data))
    with LmdbQueue(path) as q:
        with pytest.raises(QueueCorruptError) as info:
            q.get(first)
        assert str(first) in str(info.value)
        assert q.get(0) == blocks[0][0]


def test_damaged_newest_block_is_reported_on_open_and_releases_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "q"
    blocks = _three_block_queue(path)
    last_first = len(blocks[0]) + len(blocks[1])
    seg = str(path / "segments" / segment_files(path)[0])
    _rewrite_value(seg, last_first, lambda v: v.__setitem__(-1, v[-1] ^ 0xFF))
    for _ in range(2):  # the failed open must not keep the directory locked
        with pytest.raises(QueueCorruptError) as info:
            LmdbQueue(path)
        assert str(last_first) in str(info.value)


# -- crash recovery ------------------------------------------------------------------------


def _make_empty_env(path: str) -> None:
    lmdb.open(path, subdir=False, max_dbs=2).close()


def _make_empty_env_with_dbs(path: str) -> None:
    env = lmdb.open(path, subdir=False, max_dbs=2)
    env.open_db(b"blocks")
    env.open_db(b"meta")
    env.close()


def _make_zero_byte_file(path: str) -> None:
    open(path, "wb").close()


def _make_first_meta_page_only(path: str) -> None:
    """What a full disk (or a kill) leaves when LMDB wrote one of its two meta pages: a
    file no run could open ('MDB_INVALID: File is not an LMDB file') until it is removed."""
    whole = path + ".whole"
    _make_empty_env(whole)
    with open(whole, "rb") as fh:
        first_page = fh.read(os.sysconf("SC_PAGE_SIZE"))
    os.unlink(whole)
    if os.path.exists(whole + "-lock"):
        os.unlink(whole + "-lock")
    with open(path, "wb") as fh:
        fh.write(first_page)


@pytest.mark.parametrize(
    "make", [_make_empty_env, _make_empty_env_with_dbs, _make_zero_byte_file, _make_first_meta_page_only]
)
@pytest.mark.parametrize("n_segments", [1, 3])
def test_reopen_after_crash_left_an_empty_newest_segment(tmp_path: Path, make, n_segments: int) -> None:
    path = tmp_path / "q"
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        q.append([b"r"], {b"keep": b"k", b"pos": b"p0"})
        records = [b"r"] + fill_until_segments(q, n_segments, meta_fn=lambda i: {b"pos": b"p%d" % i})
        segs = [(s.first, s.end) for s in q.segments()]
        meta = q.meta_items()
        next_index = q.next_index
    assert next_index == len(records)
    # The crash: the roll created the next segment's file, its first write never committed
    # (or LMDB did not even finish creating it).
    crashed = path / "segments" / lmdb_queue_module.segment_name(next_index)
    make(str(crashed))
    assert len(segment_files(path)) == n_segments + 1
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        assert q.next_index == next_index
        assert q.meta_items() == meta
        assert [(s.first, s.end) for s in q.segments()] == segs
        assert not crashed.exists()
        assert not Path(str(crashed) + "-lock").exists()
        assert [r for _, r in q.tailer()] == records
        assert q.append([b"after"], {b"pos": b"after"}) == next_index
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        assert q.next_index == next_index + 1
        assert q.get(next_index) == b"after"
        assert q.meta_items() == {**meta, b"pos": b"after"}


# -- failed writes (bug) -------------------------------------------------------------------


def _fail_next_block_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next block write fail inside its LMDB transaction, as ENOSPC would."""
    real = lmdb_queue_module.index_key

    def failing(index: int) -> bytes:
        monkeypatch.setattr(lmdb_queue_module, "index_key", real)
        raise lmdb.Error("mdb_put: No space left on device")

    monkeypatch.setattr(lmdb_queue_module, "index_key", failing)


def _queue_with_a_failed_roll(path: Path, monkeypatch: pytest.MonkeyPatch, failing_meta) -> LmdbQueue:
    """A queue with metadata written long ago whose last append, the one that started a
    new segment, failed (QueueFullError)."""
    q = LmdbQueue(path, segment_bytes=SMALL)
    q.append(rnd_records(0, 5), {b"written-once": b"w", b"pos": b"0"})
    for _ in range(1000):
        n_segments = len(q.segments())
        _fail_next_block_write(monkeypatch)
        with pytest.raises(QueueFullError):
            q.append([b"x"], failing_meta)
        if len(q.segments()) > n_segments:
            return q  # this failed append was the one that rolled
        q.append(rnd_records(q.next_index, 5), {b"pos": b"%d" % q.next_index})
    raise AssertionError("the queue never rolled")


def test_failed_write_in_a_new_segment_then_retry_keeps_all_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BUG: a block write that fails in a freshly rolled segment loses older metadata.

    The roll creates the new segment, the copy of the metadata is part of the failed
    transaction, and the retry sees the (empty) new segment as the current one, so it
    does not copy the metadata again. The newest segment then lacks every key not
    rewritten since, and reopen (which reads metadata from the newest segment) loses them.
    """
    path = tmp_path / "q"
    q = _queue_with_a_failed_roll(path, monkeypatch, {b"pos": b"x"})
    n = q.next_index
    meta_before = q.meta_items()
    assert b"written-once" in meta_before
    assert q.meta_items() == meta_before
    # "free disk space, then run the same command again"
    assert q.append([b"x"], {b"pos": b"x"}) == n
    assert q.meta_items() == {**meta_before, b"pos": b"x"}
    q.close()
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        assert q.next_index == n + 1
        assert q.meta_items() == {**meta_before, b"pos": b"x"}  # fails: b"written-once" is gone


def test_failed_write_in_a_new_segment_then_meta_only_write_survives_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BUG (same cause): after a failed roll, a metadata-only write goes to the empty new
    segment; reopen deletes that segment as a crash leftover, and the write is lost."""
    path = tmp_path / "q"
    q = _queue_with_a_failed_roll(path, monkeypatch, None)
    n = q.next_index
    meta_before = q.meta_items()
    assert q.append([], {b"pos": b"acknowledged"}) == n
    assert q.meta(b"pos") == b"acknowledged"
    q.close()
    with LmdbQueue(path, segment_bytes=SMALL) as q:
        assert q.next_index == n
        assert q.meta_items() == {**meta_before, b"pos": b"acknowledged"}  # fails: old pos
