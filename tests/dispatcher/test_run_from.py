"""``Dispatcher.run_from``: per thread, the log sequence a new queue must read again from so
that nothing still held is lost: the first record on the thread of the oldest transaction
held, else the first record of the last block of the thread that holds a transaction's."""

from __future__ import annotations

from collections.abc import Iterable

from olr_buffer.changes import BEGIN, COMMIT, INSERT, BlockBuilder, Commit, end_payload, row_payload
from olr_buffer.dispatcher import Dispatcher
from olr_buffer.testing import MemoryQueue


class Collect:
    """A sink that keeps the xids handed to it."""

    def __init__(self) -> None:
        self.xids: list[str] = []

    def write_transaction(self, commit: Commit, chunks: Iterable[tuple[int, list[list]]]) -> int:
        n = sum(len(rows) for _, rows in chunks)
        self.xids.append(commit.xid)
        return n

    def write_rows(self, rows, txs) -> None:
        self.xids.extend(t[0] for t in txs)


def block(queue: MemoryQueue, thread: int, seq: int, records: list[tuple[str, int, str]], lwn: int = -1) -> None:
    """One block of ``thread`` from log sequence ``seq``: ``(op, scn, xid)`` records."""
    b = BlockBuilder(thread)
    for line, (op, scn, xid) in enumerate(records):
        if op == "insert":
            b.add(INSERT, scn, 0, xid, seq, line, row_payload(None, "S", "T", None, f"r{scn}", None, "{}"))
        else:
            b.add(BEGIN if op == "begin" else COMMIT, scn, 0, xid, seq, line, end_payload(None))
    if lwn >= 0:
        b.heartbeat(lwn)
    queue.append(b.build())


def tx(xid: str, scn: int) -> list[tuple[str, int, str]]:
    return [("begin", scn, xid), ("insert", scn + 1, xid), ("commit", scn + 2, xid)]


def test_run_from_follows_the_oldest_transaction_held_and_else_the_last_block_read():
    queue, sink = MemoryQueue(), Collect()
    d = Dispatcher(queue, sink, [1, 2])
    block(queue, 1, 1, tx("A", 10))
    block(queue, 1, 2, [("begin", 20, "X"), ("insert", 21, "X"), *tx("B", 22)])
    block(queue, 1, 3, [("insert", 30, "X"), *tx("C", 31)], lwn=40)
    block(queue, 2, 1, tx("D", 14))
    block(queue, 2, 2, [], lwn=40)  # a heartbeat alone: no record of a transaction
    d.poll()
    assert sink.xids == ["A", "D", "B", "C"]
    # X is open from thread 1's sequence 2; thread 2 holds none: its last block with one's
    assert d.run_from() == {1: 2, 2: 1}
    block(queue, 1, 4, [("insert", 41, "X"), ("commit", 42, "X")], lwn=60)
    block(queue, 2, 3, [*tx("E", 50)], lwn=60)
    d.poll()
    assert sink.xids[-2:] == ["X", "E"]
    assert d.run_from() == {1: 4, 2: 3}


def test_a_transaction_over_two_threads_holds_both():
    queue, sink = MemoryQueue(), Collect()
    d = Dispatcher(queue, sink, [1, 2])
    block(queue, 1, 5, [("begin", 10, "X"), ("insert", 11, "X")])
    block(queue, 2, 7, tx("A", 12))
    block(queue, 2, 8, [("insert", 20, "X"), *tx("B", 21)], lwn=30)
    block(queue, 1, 6, tx("C", 25), lwn=30)
    d.poll()
    assert sink.xids == ["A", "B", "C"]
    assert d.run_from() == {1: 5, 2: 8}
