"""Transactions as the dispatcher holds them: where their records are, never the records."""

from __future__ import annotations

from array import array

from ..changes import CommitKey


class OpenTransaction:
    """One transaction by XID until its end is past the watermark.

    ``locations`` holds, per redo thread, flat triples ``(block, start, count)``: the
    queue block and the run of records of this transaction in it. Memory grows with the
    number of blocks the transaction spans, not with its rows.
    """

    __slots__ = (
        "xid",
        "first_scn",
        "begin_scn",
        "begin_tm",
        "locations",
        "rows",
        "compensations",
        "end_key",
        "end_code",
        "end_tm",
        "first_block",
    )

    def __init__(self, xid: str, first_block: int, first_scn: int = -1) -> None:
        self.xid = xid
        self.first_scn = first_scn
        self.begin_scn = -1
        self.begin_tm: int | None = None
        self.locations: dict[int, array] = {}
        self.rows = 0
        self.compensations = 0
        self.end_key: CommitKey | None = None
        self.end_code = 0
        self.end_tm: int | None = None
        self.first_block = first_block

    def add(self, thread: int, block: int, start: int, count: int) -> None:
        locs = self.locations.get(thread)
        if locs is None:
            locs = self.locations[thread] = array("q")
        locs.extend((block, start, count))

    def to_state(self) -> list:
        return [
            self.xid,
            self.first_block,
            self.first_scn,
            self.begin_scn,
            self.begin_tm,
            self.rows,
            self.compensations,
            list(self.end_key) if self.end_key else None,
            self.end_code,
            self.end_tm,
            {str(t): a.tolist() for t, a in self.locations.items()},
        ]

    @classmethod
    def from_state(cls, state: list) -> "OpenTransaction":
        xid, first_block, first_scn, begin_scn, begin_tm, rows, comps, end_key, end_code, end_tm, locs = state
        txn = cls(xid, first_block, first_scn)
        txn.begin_scn, txn.begin_tm, txn.rows, txn.compensations = begin_scn, begin_tm, rows, comps
        txn.end_key = CommitKey(*end_key) if end_key else None
        txn.end_code, txn.end_tm = end_code, end_tm
        txn.locations = {int(t): array("q", a) for t, a in locs.items()}
        return txn
