"""The dispatcher and ``close``: a closed thread holds nothing back within what its reader
confirmed; it opens again with its next record; the state survives a checkpoint; an end
that arrives after a later commit was published is never published out of order."""

from __future__ import annotations

import pytest

from olr_buffer.changes import BEGIN, COMMIT, INSERT, BlockBuilder, read_summary
from olr_buffer.dispatcher import Dispatcher
from olr_buffer.dispatcher.errors import DispatchError
from olr_buffer.testing import MemoryQueue
from tests.dispatcher.test_dispatcher_model import ListSink


def block(thread: int, *txs: tuple[str, int], close: int | None = None, lwn: int | None = None) -> list[bytes]:
    """A block of ``thread``: per (xid, scn) a begin, an insert and a commit at scn..scn+2."""
    b = BlockBuilder(thread)
    for line, (xid, scn) in enumerate(txs):
        b.add(BEGIN, scn, 0, xid, 1, 3 * line + 1, [None])
        b.add(INSERT, scn + 1, 0, xid, 1, 3 * line + 2, [None, "O", "T", None, xid.lower(), None, "{}", None])
        b.add(COMMIT, scn + 2, 0, xid, 1, 3 * line + 3, [None])
    if lwn is not None:
        b.heartbeat(lwn)
    if close is not None:
        b.close(close)
    return b.build()


def published(sink: ListSink) -> list[str]:
    return [r["xid"] for r in sink.rows]


def test_a_closed_thread_counts_as_infinite_only_below_its_confirmation():
    q, sink = MemoryQueue(), ListSink()
    d = Dispatcher(q, sink, [1, 2])
    d.follow()
    q.append(block(1, ("A", 10), close=13))
    closed_at = q.next_index - 1
    assert read_summary(q.read_block(0).record(0)).closed
    q.append(block(2, ("B", 20), lwn=30))
    d.poll()
    assert published(sink) == ["A"]  # thread 1 closed but not confirmed: its own progress (13) counts
    assert d.thread_state(1) == "closed" and d.watermark == 13
    d.confirm_closed({1: closed_at})  # a confirmation read before the close reached the queue
    d.poll()
    assert published(sink) == ["A"]
    d.confirm_closed({1: q.next_index})  # confirmed through every block so far
    d.poll()
    assert published(sink) == ["A", "B"]
    confirmed = q.next_index
    q.append(block(2, ("D", 33), lwn=38))  # written after the confirmation: not covered by it
    d.poll()
    assert published(sink) == ["A", "B"] and d.watermark == 30  # the highest progress below the confirmation
    d.confirm_closed({1: q.next_index})
    d.poll()
    assert published(sink) == ["A", "B", "D"]
    # a checkpoint keeps the closed state
    fresh = Dispatcher(q, ListSink(), [1, 2])
    fresh.restore(d.checkpoint_state())
    assert fresh.thread_state(1) == "closed" and fresh.watermark == 13  # no confirmation yet after a restart
    # thread 1 opens again: its progress comes from its records
    q.append(block(1, ("C", 40), lwn=45))
    d.poll()
    assert d.thread_state(1) == "open" and d.watermark == 38
    assert published(sink) == ["A", "B", "D"]
    q.append(block(2, lwn=50))
    d.poll()
    assert published(sink) == ["A", "B", "D", "C"]
    assert confirmed < q.next_index


def test_an_end_below_a_published_commit_is_late_off_play_and_an_error_in_play():
    q, sink = MemoryQueue(), ListSink()
    d = Dispatcher(q, sink, [1])
    q.append(block(1, ("A", 10), lwn=20))
    d.poll()
    assert published(sink) == ["A"]
    q.append(block(3, ("B", 5)))  # thread 3 is not in play: B commits at 7, below A's 12
    d.poll()
    assert published(sink) == ["A"]
    assert d.stats.late_transactions == 1 and d.stats.late_records == 3 and d.late_by_thread == {3: 3}
    assert "B" not in d.open and d.checkpoint_state().count(b'"B"') == 1  # only among the ended XIDs
    # a thread in play going back below a published commit: refused, never published
    q2, sink2 = MemoryQueue(), ListSink()
    d2 = Dispatcher(q2, sink2, [1, 2])
    q2.append(block(1, ("A", 10), close=13))
    q2.append(block(2, ("B", 20), lwn=30))
    d2.confirm_closed({1: q2.next_index})
    d2.poll()
    assert published(sink2) == ["A", "B"]
    q2.append(block(1, ("X", 15)))  # thread 1 opens again below B's commit (22)
    with pytest.raises(DispatchError, match=r"arrived after commit scn 22"):
        d2.poll()
    assert published(sink2) == ["A", "B"]


def test_a_restart_with_a_thread_new_in_play_counts_its_ends_below_the_published_as_late():
    """The checkpoint records the threads in play: restored with one more, the new one was
    not in play when the changefeed's last commit was published, so its end below it is a
    late record (as off play), while a thread in play both times stays strict."""
    q, sink = MemoryQueue(), ListSink()
    d = Dispatcher(q, sink, [1])
    q.append(block(1, ("A", 10), lwn=20))
    d.poll()
    assert published(sink) == ["A"]
    state = d.checkpoint_state(threads=[1])
    fresh = Dispatcher(q, sink, [1, 3], start_index=q.next_index, published_through=d.last_key)
    fresh.restore(state)
    q.append(block(3, ("B", 5), lwn=25))  # thread 3, new in play: B commits at 7, below A's 12
    fresh.poll()
    assert published(sink) == ["A"] and fresh.stats.late_transactions == 1
    q.append(block(1, ("X", 6)))  # thread 1 was in play when A was published: refused
    with pytest.raises(DispatchError, match=r"arrived after commit scn 12"):
        fresh.poll()
