"""The reader and the dispatcher against a model of PostgreSQL's savepoints, on random
programs: transactions streamed in random chunks or sent at commit, interleaved, with
nested savepoints released and rolled back (the server aborting every rolled-back
subtransaction that was streamed, children first). Published rows must be exactly the
rows the model keeps, per transaction, in commit order; and whatever the cuts dropped,
the schema document of each version a transaction's rows name comes with its first row
that names it."""

from __future__ import annotations

import itertools

from hypothesis import event, given
from hypothesis import strategies as st

from olr_buffer.changes import schema_version
from olr_buffer.dispatcher import Dispatcher
from olr_buffer.sources.postgres import protocol as p
from olr_buffer.testing import MemoryQueue
from tests.dispatcher.test_dispatcher_model import BatchListSink
from tests.sources.postgres.test_reader_stream import COLS, OID, reader


@st.composite
def programs(draw, top: int, ids: itertools.count):
    """One transaction: its events ("row", subxid, id) / ("abort", subxid), the rows the
    model keeps, and whether it commits."""
    next_sub = itertools.count(top + 1)
    stack: list[list] = []  # savepoint levels: [subxid or None, subxids within it (own + released children)]
    events, rows = [], []  # rows: (id, subxid)
    aborted: set[int] = set()
    for _ in range(draw(st.integers(0, 20))):
        op = draw(st.sampled_from(["row", "row", "savepoint", "savepoint", "release", "rollback"]))
        if op == "savepoint":
            stack.append([None, []])
        elif op == "release" and stack:
            sub, within = stack.pop()
            if stack:
                stack[-1][1].extend(within)
        elif op == "rollback" and stack:
            level = draw(st.integers(0, len(stack) - 1))
            gone = [s for lvl in stack[level:] for s in lvl[1]]
            del stack[level + 1 :]
            stack[level] = [None, []]  # ROLLBACK TO keeps the savepoint, with a new subtransaction
            for s in sorted(gone, reverse=True):  # children (later xids) first
                events.append(("abort", s))
            aborted.update(gone)
        else:
            sub = top
            if stack:
                for lvl in stack:  # a child's xid is assigned after its parents'
                    if lvl[0] is None:
                        lvl[0] = next(next_sub)
                        lvl[1].append(lvl[0])
                sub = stack[-1][0]
            i = next(ids)
            events.append(("row", sub, i))
            rows.append((i, sub))
    commit = draw(st.integers(0, 4)) > 0
    kept = [i for i, s in rows if s not in aborted]
    return events, kept, commit


@st.composite
def histories(draw):
    ids = itertools.count(1)
    txns = []
    for n in range(draw(st.integers(1, 5))):
        top = 1000 * (n + 1)
        events, kept, commit = draw(programs(top, ids))
        streamed = draw(st.integers(0, 3)) > 0
        units = []
        if streamed:
            chunk: list = []
            first = True
            for ev in events:
                if ev[0] == "abort":
                    if chunk:
                        units.append(("chunk", first, chunk))
                        first, chunk = False, []
                    units.append(("abort", ev[1]))
                else:
                    chunk.append(ev)
                    if draw(st.integers(0, 3)) == 0:
                        units.append(("chunk", first, chunk))
                        first, chunk = False, []
            if chunk or first:
                units.append(("chunk", first, chunk))
            units.append(("end",))
        else:
            units.append(("whole",))
        txns.append({"top": top, "streamed": streamed, "units": units, "kept": kept, "commit": commit})
    # interleave, keeping each transaction's order
    order = []
    live = [(t, list(t["units"])) for t in txns]
    while live:
        k = draw(st.integers(0, len(live) - 1))
        t, units = live[k]
        order.append((t, units.pop(0)))
        live = [x for x in live if x[1]]
    return order


def feed(r, order, lsn0: int = 100) -> list[tuple[str, list[int]]]:
    """Send the history's messages to reader ``r``; returns the transactions the model
    publishes, in commit order."""
    lsn = itertools.count(lsn0, 10)
    expected = []

    def send(msg):
        r._handle(msg, next(lsn))

    def ins(xid, i):
        send(p.Insert(xid, OID, (str(i).encode(), b"x")))

    for t, unit in order:
        top = t["top"]
        kind = unit[0]
        if kind == "chunk":
            send(p.StreamStart(top, unit[1]))
            if unit[1]:
                send(p.Relation(top, OID, "public", "t", "d", COLS))
            for _, sub, i in unit[2]:
                ins(sub, i)
            send(p.StreamStop())
        elif kind == "abort":
            send(p.StreamAbort(top, unit[1]))
        elif kind == "end":
            if t["commit"]:
                c = next(lsn)
                send(p.StreamCommit(top, c, c + 1, 0))
                if t["kept"]:
                    expected.append((str(top), t["kept"]))
            else:
                send(p.StreamAbort(top, top))
        elif t["commit"]:  # sent whole at commit, without what was rolled back
            c = next(lsn) + 10 * (len(t["kept"]) + 3)  # the commit LSN, above its changes
            send(p.Begin(c, 0, top))
            send(p.Relation(None, OID, "public", "t", "d", COLS))
            for i in t["kept"]:
                ins(None, i)
            send(p.Commit(c, c + 1, 0))
            lsn = itertools.count(c + 10, 10)
            if t["kept"]:
                expected.append((str(top), t["kept"]))
    return expected


def published(sink) -> list[tuple[str, list[int]]]:
    got: list[tuple[str, list[int]]] = []
    for row in sink.rows:
        if not got or got[-1][0] != row["xid"]:
            got.append((row["xid"], []))
        got[-1][1].append(int(row["after"]["id"]))
    return got


def assert_documents_travel(sink) -> None:
    """Every published row names its table's version; the first row of each transaction
    that names it carries its document."""
    carried: set[str] = set()
    tx_seq = None
    for row, (version, document) in zip(sink.rows, sink.schemas, strict=True):
        assert version is not None, row
        if row["tx_seq"] != tx_seq:
            tx_seq, carried = row["tx_seq"], set()
        if version not in carried:
            assert document is not None and schema_version(document) == version, (row, version)
            carried.add(version)


@given(histories(), st.integers(1, 6))
def test_published_rows_are_the_models(order, block_records):
    q = MemoryQueue()
    r = reader(q, block_records=block_records)
    expected = feed(r, order)
    r._append()
    event(f"rows cut by subtransaction aborts: {'yes' if r.cuts else 'no'}")
    sink = BatchListSink()
    Dispatcher(q, sink, [1]).poll(max_blocks=10_000)
    assert published(sink) == expected
    assert_documents_travel(sink)


@given(histories(), st.integers(1, 6), st.data())
def test_killed_and_sent_again_publishes_each_once(order, block_records, data):
    """The reader dies at a random message (what it had not appended is lost), the
    dispatcher may or may not have run; nothing was confirmed, so the server sends the
    whole history again (the same messages). Each transaction is published once."""
    q = MemoryQueue()
    sink = BatchListSink()
    dispatcher = Dispatcher(q, sink, [1])
    crash = data.draw(st.integers(0, len(order)), label="crash after unit")
    first = reader(q, block_records=block_records)
    feed(first, order[:crash])  # no final append: the builder's records die with it
    if data.draw(st.booleans(), label="dispatcher ran before the crash"):
        dispatcher.poll(max_blocks=10_000)
    again = reader(q, block_records=block_records)
    again._discard_open()
    expected = feed(again, order)
    again._append()
    dispatcher.poll(max_blocks=10_000)
    assert published(sink) == expected
    assert_documents_travel(sink)
