"""The reader's stream loop (inserts on their own path, messages a batch at a time) against
its reference, every message decoded and handled one by one (``_handle``): on the model's
random histories, sent as the server would (XLogData frames, keepalives between them,
batches of any size), both publish the same rows and end in the same state."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from olr_buffer.changes import ROW_CODES, decode_record
from olr_buffer.dispatcher import Dispatcher
from olr_buffer.errors import OlrBufferError
from olr_buffer.sources.postgres import protocol as p
from olr_buffer.testing import MemoryQueue
from tests.dispatcher.test_dispatcher_model import BatchListSink
from tests.sources.postgres.test_protocol import tup
from tests.sources.postgres.test_reader_model import feed, histories
from tests.sources.postgres.test_reader_stream import OID, reader

VARIANTS = [
    (p.Column("id", 23, True), p.Column("v", 25, False)),
    (p.Column("id", 23, True), p.Column("w", 25, False)),
    (p.Column("id", 25, True), p.Column("v", 16, False)),
]


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def _us(ns: int) -> int:
    return ns // 1000 - p.PG_EPOCH_US


def encode(msg, in_stream: bool) -> bytes:
    """A pgoutput message as the server sends it."""
    xid = struct.pack("!I", msg.xid) if in_stream and hasattr(msg, "xid") and msg.xid is not None else b""
    kind = type(msg)
    if kind is p.Begin:
        return b"B" + struct.pack("!QqI", msg.final_lsn, _us(msg.commit_time), msg.xid)
    if kind is p.Commit:
        return b"C" + struct.pack("!BQQq", 0, msg.commit_lsn, msg.end_lsn, _us(msg.commit_time))
    if kind is p.StreamStart:
        return b"S" + struct.pack("!IB", msg.xid, msg.first_segment)
    if kind is p.StreamStop:
        return b"E"
    if kind is p.StreamCommit:
        return b"c" + struct.pack("!IBQQq", msg.xid, 0, msg.commit_lsn, msg.end_lsn, _us(msg.commit_time))
    if kind is p.StreamAbort:
        return b"A" + struct.pack("!II", msg.xid, msg.subxid)
    if kind is p.Relation:
        cols = b"".join(struct.pack("!B", c.key) + _s(c.name) + struct.pack("!Ii", c.type_oid, -1) for c in msg.columns)
        return (
            b"R"
            + xid
            + struct.pack("!I", msg.oid)
            + _s(msg.schema)
            + _s(msg.name)
            + msg.replica_identity.encode()
            + struct.pack("!H", len(msg.columns))
            + cols
        )
    if kind is p.Insert:
        return b"I" + xid + struct.pack("!I", msg.relation) + b"N" + tup(*msg.new)
    raise AssertionError(kind)


class Recorder:
    """Stands for the reader in ``feed``: keeps the messages and their LSNs."""

    def __init__(self) -> None:
        self.sent: list[tuple[object, int]] = []

    def _handle(self, msg, lsn: int) -> None:
        self.sent.append((msg, lsn))


class FakeStream:
    def __init__(self, batches: list[list[bytes]], stop) -> None:
        self.batches = list(batches)
        self.stop = stop

    def read_batch(self, timeout: float) -> list[bytes]:
        if not self.batches:
            self.stop.set()
            return []
        return self.batches.pop(0)

    def send_status(self, *args, **kwargs) -> None:
        pass


def published(q) -> tuple[list[dict], list[tuple]]:
    """The rows published from ``q``, and each one's schema version and document."""
    sink = BatchListSink()
    Dispatcher(q, sink, [1]).poll(max_blocks=10_000)
    return sink.rows, sink.schemas


def row_records(q) -> list[bytes]:
    """Every encoded row record of ``q``, in order (summaries, begins and ends left out)."""
    tailer = q.tailer(q.first_index)
    out = []
    while (block := tailer.next_block()) is not None:
        out += [r for r in block.records()[1:] if decode_record(r)[0] in ROW_CODES]
    return out


@settings(max_examples=150, deadline=None)
@given(histories(), st.integers(1, 6), st.data())
def test_stream_loop_equals_handling_each_message(order, block_records, data):
    rec = Recorder()
    feed(rec, order)
    # some inserts out of the ordinary (the general path): a NULL key, another column count
    odd = data.draw(st.sets(st.integers(0, max(len(rec.sent) - 1, 0)), max_size=4))
    sent = []
    for n, (msg, lsn) in enumerate(rec.sent):
        if isinstance(msg, p.Relation):  # the table as it is at this point: its columns may change
            msg = p.Relation(
                msg.xid, msg.oid, msg.schema, msg.name, msg.replica_identity, data.draw(st.sampled_from(VARIANTS))
            )
        if n in odd and isinstance(msg, p.Insert):
            new = (None, b"x") if n % 2 else msg.new + (b"extra",)
            msg = p.Insert(msg.xid, msg.relation, new)
        sent.append((msg, lsn))

    q1 = MemoryQueue()
    r1 = reader(q1, block_records=block_records)
    for msg, lsn in sent:
        r1._handle(msg, lsn)
    r1._append()

    frames = []
    in_stream = False
    for msg, lsn in sent:
        if data.draw(st.integers(0, 9)) == 0:
            frames.append(b"k" + struct.pack("!QqB", lsn, 0, 0))
        frames.append(b"w" + struct.pack("!QQq", lsn, lsn + 5, 0) + encode(msg, in_stream))
        in_stream = (in_stream or isinstance(msg, p.StreamStart)) and not isinstance(msg, p.StreamStop)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(frames) - 1, 1)), max_size=6)))
    batches = [frames[a:b] for a, b in zip([0, *cuts], [*cuts, len(frames)]) if frames[a:b]]
    q2 = MemoryQueue()
    r2 = reader(q2, block_records=block_records)
    r2.flush_seconds = 1e9  # blocks closed by size only, as the reference's
    r2._stream_loop(FakeStream(batches, r2.stop))
    r2._append()

    assert published(q2) == published(q1)
    for name in ("last_commit", "committed", "cuts", "records"):
        assert getattr(r2, name) == getattr(r1, name), name
    assert {x: (t.rows, t.subs, t.skip) for x, t in r2.txns.items()} == {
        x: (t.rows, t.subs, t.skip) for x, t in r1.txns.items()
    }
    assert r2.server_lsn == (max(lsn for _, lsn in sent) + 5 if sent else 0)


def test_encoder_round_trip():
    rel = p.Relation(7, OID, "public", "t", "d", (p.Column("id", 23, True),))
    assert p.decode_message(encode(rel, True), True) == rel
    ins = p.Insert(None, OID, (b"1", None))
    assert p.decode_message(encode(ins, False)) == ins


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["begin", "row", "commit", "rollback"]),
            st.sampled_from(["1", "2", "x"]),
            st.integers(0, 2**40),
            st.text(max_size=5),
        ),
        max_size=30,
    )
)
def test_block_builder_add_row_builds_what_add_builds(ops):
    from olr_buffer.changes import BEGIN, COMMIT, INSERT, ROLLBACK, BlockBuilder

    a, b = BlockBuilder(1), BlockBuilder(1)
    for op, xid, scn, text in ops:
        if op == "row":
            payload = [None, "public", "t", 5, text or None, None, text, None]
            a.add(INSERT, scn, 0, xid, 0, 0, payload)
            b.add_row(scn, xid, [INSERT, scn, 0, 0, 0, *payload])
        else:
            code = {"begin": BEGIN, "commit": COMMIT, "rollback": ROLLBACK}[op]
            for builder in (a, b):
                builder.add(code, scn, 0, xid, 0, 0, [None])
    assert (a.count, a.nbytes, a.progress) == (b.count, b.nbytes, b.progress)
    assert a.build() == b.build()


_FRAME_HEAD = struct.pack("!QQq", 100, 105, 0)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(min_size=1, max_size=60),  # anything (both streams give no empty message)
            st.binary(max_size=40).map(lambda b: b"w" + _FRAME_HEAD + b"I" + b),  # an Insert, damaged
            st.binary(max_size=40).map(lambda b: b"w" + _FRAME_HEAD + b"I" + struct.pack("!I", OID) + b"N" + b),
            st.binary(max_size=40).map(lambda b: b"w" + _FRAME_HEAD + b"I" + struct.pack("!II", 700, OID) + b"N" + b),
            st.sampled_from(
                [
                    b"w" + _FRAME_HEAD + b"B" + struct.pack("!QqI", 10**6, 0, 700),
                    b"w" + _FRAME_HEAD + b"S" + struct.pack("!IB", 700, 1),
                    b"w" + _FRAME_HEAD + encode(p.Relation(None, OID, "public", "t", "d", VARIANTS[0]), False),
                    b"w" + _FRAME_HEAD + encode(p.Relation(700, OID, "public", "t", "d", VARIANTS[2]), True),
                    b"w" + _FRAME_HEAD + b"E",
                ]
            ),
        ),
        max_size=12,
    )
)
def test_stream_loop_fails_only_with_one_line_errors(frames):
    """Whatever the server sends, the stream loop handles it or stops with one of our
    one-line errors (the decoder's fuzz test, through the loop's own insert path)."""
    from olr_buffer.errors import OlrBufferError

    r = reader(MemoryQueue())
    r.flush_seconds = 1e9
    try:
        r._stream_loop(FakeStream([frames], r.stop))
    except OlrBufferError as exc:
        assert "\n" not in str(exc) and str(exc)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
            st.one_of(st.none(), st.text(max_size=20), st.integers(0, 70_000).map(lambda n: "x\u00e9"[n % 2] * n)),
            st.integers(1, 2**33),
        ),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
)
def test_fast_inserts_are_encoded_as_the_reference_encodes_them(values, streamed):
    """The stream loop writes an insert's record from encoded parts: byte for byte the
    record the reference encodes from its list, whatever the rid (null or not), the length
    of the images (string headers of each size), the LSN's size and whether the row carries
    its table's schema document."""
    lsn = 1
    sent = []

    def send(msg):
        nonlocal lsn
        sent.append((msg, lsn))

    xid = 700 if streamed else None
    send(p.StreamStart(700, 1) if streamed else p.Begin(10**12, 0, 700))
    send(p.Relation(xid, OID, "public", "t", "d", VARIANTS[0]))
    for id_, text, step in values:
        lsn += step
        send(p.Insert(xid, OID, (None if id_ is None else str(id_).encode(), None if text is None else text.encode())))
    lsn += 1
    if streamed:
        send(p.StreamStop())
        send(p.StreamCommit(700, 10**12, 10**12 + 1, 0))
    else:
        send(p.Commit(10**12, 10**12 + 1, 0))

    q1 = MemoryQueue()
    r1 = reader(q1, block_records=1000)
    for msg, at in sent:
        r1._handle(msg, at)
    r1._append()
    frames = []
    in_stream = False
    for msg, at in sent:
        frames.append(b"w" + struct.pack("!QQq", at, at + 5, 0) + encode(msg, in_stream))
        in_stream = (in_stream or isinstance(msg, p.StreamStart)) and not isinstance(msg, p.StreamStop)
    q2 = MemoryQueue()
    r2 = reader(q2, block_records=1000)
    r2.flush_seconds = 1e9
    r2._stream_loop(FakeStream([frames], r2.stop))
    r2._append()
    assert len(row_records(q1)) == len(values)
    assert row_records(q2) == row_records(q1)


@pytest.mark.parametrize("bad", ["not UTF-8", "cut", "another column count"])
@pytest.mark.parametrize("streamed", [False, True])
def test_a_bad_insert_in_a_run_fails_as_handled_alone(bad, streamed):
    """An insert the run of inserts (``Table.insert_run``) does not take ends the run: the
    general path gives it its own one-line error, or takes it, as when every message is
    handled one by one, with the rows before it in the block."""
    xid = 700 if streamed else None
    msgs: list = [p.StreamStart(700, 1) if streamed else p.Begin(10**12, 0, 700)]
    msgs.append(p.Relation(xid, OID, "public", "t", "d", VARIANTS[0]))
    msgs += [p.Insert(xid, OID, (str(i).encode(), b"v%d" % i)) for i in range(5)]
    frames = []
    in_stream = False
    for n, msg in enumerate(msgs):
        frames.append(b"w" + struct.pack("!QQq", 100 + n, 105 + n, 0) + encode(msg, in_stream))
        in_stream = streamed
    last = frames[-1]
    if bad == "not UTF-8":
        frames.append(last[:-2] + b"\xff" + last[-1:])
    elif bad == "cut":
        frames.append(last[:-3])
    else:
        frames.append(
            b"w" + struct.pack("!QQq", 200, 205, 0) + encode(p.Insert(xid, OID, (b"9", b"x", b"y")), streamed)
        )
    frames += frames[2:4]

    def outcome(run) -> tuple[str, list[bytes]]:
        q = MemoryQueue()
        r = reader(q, block_records=1000)
        r.flush_seconds = 1e9
        try:
            run(r)
            error = ""
        except OlrBufferError as exc:
            error = str(exc)
        r._append()
        return error, row_records(q)

    def one_by_one(r) -> None:
        decoder = p.StreamDecoder()
        for frame in frames:
            xlog = p.decode_frame(frame)
            r._handle(decoder.decode(xlog.payload), xlog.data_start)

    expected = outcome(one_by_one)
    assert outcome(lambda r: r._stream_loop(FakeStream([frames], r.stop))) == expected
    error, rows = expected
    assert (error != "") == (bad != "another column count") and "\n" not in error
    assert len(rows) == (5 if error else 8)


@pytest.mark.parametrize("empty_reads", [0, 1, 2])
def test_a_pause_of_the_stream_closes_no_block(empty_reads):
    """The rows received are appended as one block once the stream is quiet (two reads
    with nothing: now, then after ``PAUSE``), not at each pause of a busy stream (one read
    with nothing, the next one with more)."""
    msgs = [p.Begin(10**12, 0, 700), p.Relation(None, OID, "public", "t", "d", VARIANTS[0])]
    msgs += [p.Insert(None, OID, (str(i).encode(), b"v")) for i in range(6)]
    msgs.append(p.Commit(10**12, 10**12 + 1, 0))
    frames = [b"w" + struct.pack("!QQq", 100 + n, 105 + n, 0) + encode(m, False) for n, m in enumerate(msgs)]
    q = MemoryQueue()
    r = reader(q, block_records=1000)
    r.flush_seconds = r.status_interval = 1e9  # blocks closed by the stream's pauses alone
    r._stream_loop(FakeStream([frames[:5]] + [[]] * empty_reads + [frames[5:]], r.stop))
    r._append()
    tailer = q.tailer(q.first_index)
    sizes = []
    while (block := tailer.next_block()) is not None:
        if len(block.records()) > 1:
            sizes.append(len(block.records()) - 1)
    assert sizes == ([4, 4] if empty_reads == 2 else [8])  # BEGIN, 6 rows, COMMIT
