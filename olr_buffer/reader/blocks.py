"""Redo blocks: how a reader lays out one queue block, and the summary the dispatcher reads.

A reader thread turns a run of one redo thread's records into one queue block::

    record 0        the block summary (orjson), see :class:`BlockSummary`
    records 1..n    the records, grouped by transaction: each group holds one XID's
                    records in input order; groups appear in order of first appearance

The summary says, per group, where it is and what it holds (begin, end records, row and
compensation counts), and the thread's progress after the block. The dispatcher reads
only summaries while tailing; it decodes a transaction's records only at commit, and
only its own groups. Memory per open transaction is then a list of group locations,
which grows with the number of blocks it spans, not with its rows.

If a ``begin`` follows an end record of the same XID (XID reuse), a new group starts,
so a group never mixes two transactions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from .records import BEGIN, COMMIT, COMPENSATION, ROLLBACK, ROW_CODES

INFINITE_SCN = 1 << 63  # progress of a thread whose input is complete

# A group in the summary: [xid, start, count, rows, compensations, first_scn, begin_scn, begin_tm, ends]
# begin_scn is -1 without a begin (begin_tm then None); ends is a list of [code, scn, sequence, line, tm].


class _Group:
    __slots__ = ("xid", "records", "rows", "comps", "first_scn", "begin_scn", "begin_tm", "ends")

    def __init__(self, xid: str) -> None:
        self.xid = xid
        self.records: list[bytes] = []
        self.rows = 0
        self.comps = 0
        self.first_scn = -1
        self.begin_scn = -1
        self.begin_tm: int | None = None
        self.ends: list[list] = []


class BlockBuilder:
    """Collects one thread's records into a block; :meth:`build` returns the queue records."""

    def __init__(self, thread: int) -> None:
        self.thread = thread
        self._groups: dict[str, _Group] = {}
        self._order: list[_Group] = []
        self.count = 0
        self.nbytes = 0
        self.progress = -1

    def add(self, code: int, scn: int, sub: int, xid: str, seq: int, line: int, payload: list) -> None:
        g = self._groups.get(xid)
        if g is None or (code == BEGIN and g.ends):
            g = _Group(xid)
            self._groups[xid] = g
            self._order.append(g)
        rec = orjson.dumps([code, scn, sub, seq, line, *payload])
        if not g.records:
            g.first_scn = scn
        g.records.append(rec)
        if code in ROW_CODES:
            g.rows += 1
        elif code & COMPENSATION:
            g.comps += 1
        elif code == BEGIN:
            if g.begin_scn < 0:
                g.begin_scn = scn
                g.begin_tm = payload[0]
        elif code == COMMIT or code == ROLLBACK:
            g.ends.append([code, scn, seq, line, payload[0]])
        self.count += 1
        self.nbytes += len(rec)
        if scn - 1 > self.progress:
            self.progress = scn - 1

    def heartbeat(self, scn: int) -> None:
        """An ``lwn``: every record with an SCN up to ``scn`` is written."""
        if scn > self.progress:
            self.progress = scn

    def build(self, end_of_thread: bool = False) -> list[bytes]:
        """The block's records: the summary first, then the groups."""
        groups = []
        records: list[bytes] = [b""]
        for g in self._order:
            groups.append(
                [g.xid, len(records), len(g.records), g.rows, g.comps, g.first_scn, g.begin_scn, g.begin_tm, g.ends]
            )
            records.extend(g.records)
        progress = INFINITE_SCN if end_of_thread else self.progress
        records[0] = orjson.dumps({"t": self.thread, "p": progress, "g": groups})
        return records

    def reset(self) -> None:
        self._groups.clear()
        self._order.clear()
        self.count = 0
        self.nbytes = 0


@dataclass(slots=True)
class BlockSummary:
    """What the dispatcher reads of a block."""

    thread: int
    progress: int
    groups: list[list] = field(default_factory=list)


def read_summary(record0: bytes) -> BlockSummary:
    d = orjson.loads(record0)
    return BlockSummary(d["t"], d["p"], d["g"])
