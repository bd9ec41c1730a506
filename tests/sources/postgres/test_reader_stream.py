"""The PostgreSQL reader's state machine with the real dispatcher (no server): streamed
transactions interleaved, subtransaction aborts (PostgreSQL's subscriber rule), restarts."""

from __future__ import annotations

from olr_buffer.dispatcher import Dispatcher
from olr_buffer.sources.postgres import protocol as p
from olr_buffer.sources.postgres.reader import PostgresReader
from olr_buffer.sources.postgres.state import STATE_KEY, load_state
from olr_buffer.testing import MemoryQueue
from tests.dispatcher.test_dispatcher_model import BatchListSink

OID = 16384
COLS = (p.Column("id", 23, True), p.Column("v", 25, False))


def reader(queue, block_records: int = 3) -> PostgresReader:
    """A reader of ``queue`` restored from the state stored there, as the source does."""
    r = PostgresReader(
        queue,
        "postgresql://u:secret@/db?host=/nowhere",
        block_records=block_records,
        state=load_state(queue.meta_items(STATE_KEY)),
    )
    r._key_names = lambda oid, conn=None: ("id",)  # the catalog, without a server
    r._not_null_names = lambda oid, conn=None: frozenset(("id",))
    return r


class Feed:
    def __init__(self, r: PostgresReader) -> None:
        self.r, self.lsn = r, 1000

    def __call__(self, msg) -> None:
        self.lsn += 10
        self.r._handle(msg, self.lsn)

    def ins(self, xid, id_):
        self(p.Insert(xid, OID, (str(id_).encode(), b"x")))

    def rel(self, xid):
        self(p.Relation(xid, OID, "public", "t", "d", COLS))


def published(queue, sink=None):
    sink = sink or BatchListSink()
    d = Dispatcher(queue, sink, [1])
    d.poll()
    return sink.rows


def ids(rows, xid):
    return [r["after"]["id"] for r in rows if r["xid"] == xid]


def test_subtransaction_aborts_drop_from_first_row_of_the_subxid_on():
    q = MemoryQueue()
    r = reader(q)
    f = Feed(r)
    f(p.StreamStart(700, True))
    f.rel(700)
    f.ins(700, 1)
    f.ins(701, 2)  # savepoint a (701)
    f.ins(702, 3)  # savepoint b inside a (702)
    f(p.StreamStop())
    f(p.StreamStart(800, True))  # another transaction, interleaved
    f.rel(800)
    f.ins(800, 10)
    f.ins(801, 11)
    f(p.StreamStop())
    f(p.StreamStart(700, False))
    f.ins(700, 4)  # back in the top level after RELEASE b, RELEASE a? no: still inside a
    f(p.StreamStop())
    f(p.StreamAbort(700, 999))  # never seen: nothing
    f(p.StreamAbort(700, 702))  # child first
    f(p.StreamAbort(700, 701))  # drops 2, 3 and 4 (rows after 701's first one)
    f(p.StreamStart(700, False))
    f.ins(703, 5)
    f.ins(700, 6)
    f(p.StreamStop())
    f(p.StreamAbort(800, 801))
    f(p.StreamCommit(800, 2000, 2010, 0))
    f(p.StreamCommit(700, 2020, 2030, 0))
    r._append()
    rows = published(q)
    assert ids(rows, "800") == [10]
    assert ids(rows, "700") == [1, 5, 6]
    assert [row["c_scn"] for row in rows] == [2000, 2020, 2020, 2020]


def test_aborted_transaction_and_empty_stream_blocks_publish_nothing():
    q = MemoryQueue()
    r = reader(q)
    f = Feed(r)
    f(p.StreamStart(700, True))
    f.rel(700)
    f.ins(700, 1)
    f(p.StreamStop())
    f(p.StreamStart(701, True))
    f(p.StreamStop())  # empty block
    f(p.StreamAbort(700, 700))
    f(p.StreamCommit(701, 3000, 3010, 0))  # committed, no row: not published
    f(p.Begin(3100, 0, 702))
    f.ins(None, 7)
    f(p.Commit(3100, 3110, 0))
    r._append()
    rows = published(q)
    assert [(row["xid"], row["after"]["id"]) for row in rows] == [("702", 7)]


def test_relation_of_an_aborted_transaction_is_discarded():
    q = MemoryQueue()
    r = reader(q)
    f = Feed(r)
    f(p.StreamStart(700, True))
    f(p.Relation(700, OID, "public", "renamed", "d", COLS))
    f.ins(700, 1)
    f(p.StreamStop())
    f(p.StreamAbort(700, 700))
    f(p.Begin(3100, 0, 702))
    f.rel(None)
    f(p.Commit(3100, 3110, 0))
    assert r.tables[OID].name == "t"


def test_restart_discards_partial_transactions_and_skips_appended_commits():
    q = MemoryQueue()
    r = reader(q)
    f = Feed(r)
    f(p.StreamStart(700, True))
    f.rel(700)
    f.ins(700, 1)
    f(p.StreamStop())
    f(p.StreamStart(800, True))
    f.rel(800)
    f.ins(800, 10)
    f(p.StreamStop())
    f(p.StreamCommit(800, 2000, 2010, 0))
    r._append()  # the state is stored with the block; then the process dies
    r2 = reader(q)
    assert set(r2.txns) == {"700"} and r2.committed == {"800": 2000}
    r2._discard_open()
    f2 = Feed(r2)
    # the server sends both again, from their first chunk
    for xid, id_ in ((700, 1), (800, 10)):
        f2(p.StreamStart(xid, True))
        f2.rel(xid)
        f2.ins(xid, id_)
        f2(p.StreamStop())
    f2(p.StreamCommit(800, 2000, 2010, 0))
    f2(p.StreamCommit(700, 2100, 2110, 0))
    f2(p.Begin(2000, 0, 900))  # re-sent whole (commit at or below the last appended): skipped
    f2.ins(None, 99)
    f2(p.Commit(2000, 2010, 0))
    r2._append()
    rows = published(q)
    assert [(row["xid"], row["after"]["id"]) for row in rows] == [("800", 10), ("700", 1)]
