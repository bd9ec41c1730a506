"""Transactions as the dispatcher holds them: where their records are, never the records."""

from __future__ import annotations

from array import array

import msgspec

from ..changes import CommitKey
from .checkpoint import TransactionState

_LOCATIONS_AS_LIST = 24  # a thread's locations are a list below this many items (8 triples)


class OpenTransaction(msgspec.Struct, gc=False, eq=False):
    """One transaction by XID until its end is past the watermark.

    ``locations`` holds, per redo thread, flat triples ``(block, start, count)``: the
    queue block and the run of records of this transaction in it. Memory grows with the
    number of blocks the transaction spans, not with its rows. A thread's first triples
    are a plain list (cheaper to make and extend, and most transactions are in one to a
    few blocks); from :data:`_LOCATIONS_AS_LIST` items on, an ``array("q")`` (8 bytes an
    item, where a list holds a pointer and an int object).

    A msgspec ``Struct`` (a C type: made in a quarter of the time of a Python class, one
    per transaction), compared by identity; not tracked by the garbage collector, as
    nothing it holds refers back to it. ``begin_scn`` is -1 without a begin, and
    ``begin_tm`` then ``None``: the callers pass them so.
    """

    xid: str
    first_block: int
    first_scn: int = -1
    begin_scn: int = -1
    begin_tm: int | None = None
    locations: dict[int, array | list[int]] = msgspec.field(default_factory=dict)
    rows: int = 0
    compensations: int = 0
    end_key: CommitKey | None = None
    end_code: int = 0
    end_tm: int | None = None
    # the dispatcher's clock when the retention rule first saw it without a begin tm:
    # its start for --transaction-retention (None: not looked at yet)
    seen_tm: int | None = None

    def add(self, thread: int, block: int, start: int, count: int) -> None:
        locs = self.locations.get(thread)
        if locs is None:
            self.locations[thread] = [block, start, count]
            return
        locs.extend((block, start, count))
        if len(locs) >= _LOCATIONS_AS_LIST and type(locs) is list:
            self.locations[thread] = array("q", locs)

    def to_state(self) -> TransactionState:
        return TransactionState(
            self.xid,
            self.first_block,
            self.first_scn,
            self.begin_scn,
            self.begin_tm,
            self.rows,
            self.compensations,
            self.end_key,
            self.end_code,
            self.end_tm,
            {t: list(a) for t, a in self.locations.items()},
            self.seen_tm,
        )

    @classmethod
    def from_state(cls, state: TransactionState) -> OpenTransaction:
        txn = cls(state.xid, state.first_block, state.first_scn)
        txn.begin_scn, txn.begin_tm = state.begin_scn, state.begin_tm
        txn.rows, txn.compensations = state.rows, state.compensations
        txn.end_key = CommitKey(*state.end_key) if state.end_key else None
        txn.end_code, txn.end_tm = state.end_code, state.end_tm
        txn.locations = {t: array("q", a) for t, a in state.locations.items()}
        txn.seen_tm = state.seen_tm
        return txn
