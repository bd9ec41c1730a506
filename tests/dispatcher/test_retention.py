"""Retention: a transaction without an end is abandoned once too old, its segments are
freed, its later records are counted and never published, and all of it survives a
checkpoint and a restart. Forgotten XIDs: a late record of an XID the dispatcher no
longer remembers does not open a transaction that never ends.

Blocks are built with the real BlockBuilder and appended to a real LMDB queue.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from olr_buffer.changes import OP_CODES, ROW_CODES, BlockBuilder
from olr_buffer.dispatcher import Dispatcher
from olr_buffer.dispatcher import dispatcher as dispatcher_module
from olr_buffer.dispatcher.dispatcher import CLOCK_ENDS
from olr_buffer.txbuffer import LmdbQueue
from tests.dispatcher.test_dispatcher_model import ListSink

T0 = 1_700_000_000_000_000_000  # ns
SECOND = 1_000_000_000
_lines = itertools.count(1)


def block(thread: int, *records: tuple, lwn: int | None = None) -> list[bytes]:
    """A queue block of ``thread``: records ``(op, scn, xid, tm)``; ``lwn`` moves progress."""
    b = BlockBuilder(thread)
    for op, scn, xid, tm in records:
        code = OP_CODES[op]
        line = next(_lines)
        payload = [tm, "APP", "T", 7, f"r{line}", None, '{"ID":1}', None] if code in ROW_CODES else [tm]
        b.add(code, scn, 0, xid, 1, line, payload)
    if lwn is not None:
        b.heartbeat(lwn)
    return b.build()


def tx(xid: str, scn: int, tm: int, rows: int = 1) -> list[tuple]:
    """A whole transaction: begin, rows, commit, from ``scn`` on, all at ``tm``."""
    return [
        ("begin", scn, xid, tm),
        *(("insert", scn + 1 + i, xid, tm) for i in range(rows)),
        ("commit", scn + 1 + rows, xid, tm),
    ]


def txs(prefix: str, scn: int, tm: int, n: int = CLOCK_ENDS) -> list[tuple]:
    """``n`` whole transactions of one row from ``scn`` on (3 SCNs each), all at ``tm``:
    by default enough ends for the clock (their median ``tm``) to be ``tm``."""
    return [r for i in range(n) for r in tx(f"{prefix}{i}", scn + 3 * i, tm)]


@pytest.fixture
def queue(tmp_path: Path):
    q = LmdbQueue(str(tmp_path / "q"), segment_bytes=64 * 1024, durable=False)
    yield q
    q.close()


def published_xids(sink: ListSink) -> list[str]:
    return list(dict.fromkeys(r["xid"] for r in sink.rows))


def test_time_rule_abandons_a_transaction_without_end_and_frees_its_blocks(queue):
    sink = ListSink()
    d = Dispatcher(queue, sink, [1])
    stuck_block = queue.append(block(1, ("begin", 10, "STUCK", T0), ("insert", 11, "STUCK", T0)))
    queue.append(block(1, *txs("A", 20, T0 + 60 * SECOND), lwn=99))
    d.poll()
    assert d.clock_tm == T0 + 60 * SECOND
    assert d.abandon_expired(seconds=600) == []  # the clock is 60 s after STUCK's begin
    assert d.needed_from() == stuck_block
    queue.append(block(1, *txs("B", 100, T0 + 600 * SECOND), lwn=199))
    d.poll()
    assert d.abandon_expired(seconds=600) == []  # exactly the limit: not more than it
    queue.append(block(1, *txs("C", 200, T0 + 601 * SECOND), lwn=299))
    d.poll()
    (gone,) = d.abandon_expired(seconds=600)
    assert (gone.xid, gone.rows, gone.records, gone.begin_scn, gone.begin_tm) == ("STUCK", 1, 2, 10, T0)
    assert (gone.start_tm, gone.clock_tm, gone.threads, gone.first_index) == (T0, T0 + 601 * SECOND, [1], stuck_block)
    assert "601.0s" in gone.reason and "limit 600s" in gone.reason
    assert gone.as_dict()["kind"] == "abandoned_transaction"
    assert "STUCK" not in d.open and d.needed_from() == d.position
    s = d.totals()
    assert (s.abandoned_transactions, s.abandoned_rows, s.abandoned_records) == (1, 1, 0)
    assert published_xids(sink) == [f"{p}{i}" for p in "ABC" for i in range(CLOCK_ENDS)]


def test_one_or_two_ends_with_a_wrong_tm_do_not_move_the_clock(queue):
    """An instance whose clock jumped a year ahead writes a few ends: with the newest tm
    as the clock, every open transaction would look a year old and be abandoned, and its
    commit, when it came, never published. The clock is the median of the last ends, and
    never goes back."""
    sink = ListSink()
    d = Dispatcher(queue, sink, [1])
    queue.append(block(1, ("begin", 10, "LONG", T0), ("insert", 11, "LONG", T0)))
    queue.append(block(1, *txs("A", 20, T0 + 60 * SECOND, n=CLOCK_ENDS - 1), lwn=99))
    d.poll()
    assert d.clock_tm is None  # fewer ends than the clock takes
    year = 365 * 24 * 3600 * SECOND
    queue.append(
        block(
            1,
            *tx("SKEW1", 100, T0 + year),
            *txs("B", 110, T0 + 61 * SECOND, n=2),
            *tx("SKEW2", 120, T0 + year),
            lwn=199,
        )
    )
    d.poll()
    assert d.clock_tm == T0 + 61 * SECOND  # median of 60, 61, 61, a year, a year
    assert d.abandon_expired(seconds=600) == []
    queue.append(block(1, *txs("C", 200, T0 + 30 * SECOND), lwn=299))  # older ends: the clock stays
    d.poll()
    assert d.clock_tm == T0 + 61 * SECOND and d.abandon_expired(seconds=600) == []
    queue.append(
        block(1, ("insert", 300, "LONG", T0 + 62 * SECOND), ("commit", 301, "LONG", T0 + 62 * SECOND), lwn=399)
    )
    d.poll()
    assert "LONG" in published_xids(sink)


def test_scn_rule_measures_from_the_watermark(queue):
    d = Dispatcher(queue, ListSink(), [1, 2])
    queue.append(block(1, ("begin", 100, "S", None), ("insert", 101, "S", None)))
    queue.append(block(1, lwn=1000))
    queue.append(block(2, lwn=150))  # thread 2 holds the watermark at 150
    d.poll()
    assert d.abandon_expired(scn=100) == []  # 150 - 100 = 50
    queue.append(block(2, lwn=200))
    d.poll()
    assert d.abandon_expired(scn=100) == []  # 100: not more than the limit
    queue.append(block(2, lwn=201))
    d.poll()
    (gone,) = d.abandon_expired(scn=100)
    assert gone.xid == "S" and gone.watermark == 201 and "limit 100" in gone.reason
    assert gone.begin_tm is None and gone.start_tm is None


def test_a_silent_thread_holding_the_watermark_abandons_nothing(queue):
    """Both clocks move only as ends pass the watermark: while a thread in play is
    silent, a transaction may still get its end from it."""
    d = Dispatcher(queue, ListSink(), [1, 2])
    queue.append(block(2, ("begin", 5, "S", T0), ("insert", 6, "S", T0), lwn=9))
    for i in range(10):  # thread 1 goes on for an hour, thread 2 says nothing more
        queue.append(block(1, *tx(f"A{i}", 10 + 10 * i, T0 + i * 600 * SECOND)))
    d.poll()
    assert d.clock_tm is None  # nothing at or below the watermark (9) ended
    assert d.abandon_expired(seconds=60, scn=10) == []
    assert "S" in d.open


def test_without_a_begin_tm_the_start_is_when_the_rule_first_saw_it(queue):
    d = Dispatcher(queue, ListSink(), [1])
    queue.append(block(1, ("insert", 10, "NB", None)))  # no begin: a partial transaction
    queue.append(block(1, *txs("A", 20, T0), lwn=99))
    d.poll()
    assert d.abandon_expired(seconds=60) == []
    assert d.open["NB"].seen_tm == T0
    # the choice survives a checkpoint and a restart, and so do the last ends' tm: three
    # more ends past the limit make the median (five are needed after a restart without them)
    d2 = Dispatcher(queue, ListSink(), [1])
    d2.restore(d.checkpoint_state())
    assert d2.open["NB"].seen_tm == T0 and d2.clock_tm == T0
    queue.append(block(1, *txs("B", 100, T0 + 61 * SECOND, n=3), lwn=199))
    d2.poll()
    (gone,) = d2.abandon_expired(seconds=60)
    assert gone.xid == "NB" and gone.begin_scn is None and gone.start_tm == T0


def test_later_records_of_an_abandoned_transaction_are_counted_and_survive_a_restart(queue, caplog):
    sink = ListSink()
    d = Dispatcher(queue, sink, [1])
    queue.append(block(1, ("begin", 10, "S", T0), ("insert", 11, "S", T0), ("insert", 12, "S", T0)))
    queue.append(block(1, *txs("A", 20, T0 + 3600 * SECOND), lwn=39))
    d.poll()
    (gone,) = d.abandon_expired(seconds=60)
    assert gone.rows == 2
    restarted = Dispatcher(queue, sink, [1])
    restarted.restore(d.checkpoint_state())
    queue.append(block(1, ("insert", 40, "S", T0), ("insert", 41, "S", T0)))
    queue.append(block(1, ("insert", 42, "S", T0), ("commit", 43, "S", T0 + 3601 * SECOND), lwn=50))
    with caplog.at_level("WARNING"):
        restarted.poll()
    assert "S" not in restarted.open and published_xids(sink) == [f"A{i}" for i in range(CLOCK_ENDS)]
    s = restarted.totals()
    assert (s.abandoned_transactions, s.abandoned_rows, s.abandoned_records) == (1, 2, 4)
    warnings = [r.getMessage() for r in caplog.records if "abandoned transaction S" in r.getMessage()]
    assert len(warnings) == 2  # the first later records, then its end
    assert "its end came (commit at scn 43)" in warnings[1]


def test_a_begin_above_everything_read_is_a_new_transaction_of_the_same_xid(queue):
    sink = ListSink()
    d = Dispatcher(queue, sink, [1, 2])
    queue.append(block(2, ("insert", 15, "S", T0), lwn=20))  # a row of S; its begin not read yet
    queue.append(block(1, *tx("A", 10, T0), lwn=20))
    d.poll()
    assert [a.xid for a in d.abandon_expired(scn=1)] == ["S"]
    # S's own begin comes late, from thread 3 (not in play), below a row of S already
    # read: the abandoned transaction's, not a new one
    queue.append(block(3, ("begin", 14, "S", T0), ("insert", 16, "S", T0), ("commit", 21, "S", T0)))
    queue.append(block(1, lwn=30))
    queue.append(block(2, lwn=30))
    d.poll()
    assert published_xids(sink) == ["A"] and d.totals().abandoned_records == 3
    # XID reuse: a begin above every SCN read so far starts a new transaction
    queue.append(block(1, *tx("S", 40, T0), lwn=50))
    queue.append(block(2, lwn=50))
    d.poll()
    assert published_xids(sink) == ["A", "S"]
    assert [r["scn"] for r in sink.rows if r["xid"] == "S"] == [41]


def test_a_forgotten_xid_below_the_last_commit_is_late_not_a_transaction_that_never_ends(queue, monkeypatch):
    """Thread 2 is not in play and far behind: its rows of a transaction published long
    ago come after the dispatcher forgot the XID. They are late records, counted; they do
    not open a transaction without begin whose end will never come."""
    monkeypatch.setattr(dispatcher_module, "_ENDED_MEMORY", 3)
    sink = ListSink()
    d = Dispatcher(queue, sink, [1])
    queue.append(block(1, *tx("X", 10, T0)))
    for i in range(5):  # enough ends to forget X
        queue.append(block(1, *tx(f"A{i}", 20 + 10 * i, T0)))
    queue.append(block(1, lwn=100))
    d.poll()
    assert "X" not in d._ended
    queue.append(block(2, ("insert", 12, "X", T0), ("update", 13, "X", T0)))  # X's rows from thread 2, late
    queue.append(block(2, ("insert", 150, "Y", T0)))  # above the last commit: may be a live transaction
    d.poll()
    assert "X" not in d.open and "Y" in d.open
    s = d.totals()
    assert (s.late_records, s.forgotten_records) == (2, 2)
    assert d.late_by_thread == {2: 2}
    assert d.needed_from() == min(t.first_block for t in d.open.values())  # only Y holds a block


def test_a_record_read_again_after_a_restart_is_not_taken_for_a_forgotten_xid(queue):
    """After a restart, the blocks after the last checkpoint are read again while the
    changefeed's last commit is already known: a record at or below it there may be of a
    live transaction whose begin comes in a later block (another thread's). The rule
    applies only to blocks a run reads first."""
    queue.append(block(2, ("insert", 11, "Z", T0), lwn=30))  # Z's row on thread 2 first
    queue.append(block(1, ("begin", 10, "Z", T0), *tx("A", 20, T0), lwn=25))  # then its begin, and A
    first = Dispatcher(queue, ListSink(), [1, 2])
    first.poll()
    assert first.last_key is not None and first.last_key.scn == 22  # A published; then a crash
    sink = ListSink()
    again = Dispatcher(queue, sink, [1, 2], published_through=first.last_key)  # no checkpoint was written
    again.poll()
    queue.append(block(1, ("commit", 40, "Z", T0), lwn=45))
    queue.append(block(2, lwn=45))
    again.poll()
    assert published_xids(sink) == ["Z"] and [r["scn"] for r in sink.rows] == [11]
    assert again.totals().forgotten_records == 0 and again.totals().already_published == 1
