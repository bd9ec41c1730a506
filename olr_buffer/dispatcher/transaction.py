"""Transactions as the dispatcher holds them: where their records are, never the records."""

from __future__ import annotations

from array import array

from ..changes import CommitKey
from .checkpoint import TransactionState

_LOCATIONS_AS_LIST = 24  # a thread's locations are a list below this many items (8 triples)


class OpenTransaction:
    """One transaction by XID until its end is past the watermark.

    ``locations`` holds, per redo thread, flat triples ``(block, start, count)``: the
    queue block and the run of records of this transaction in it. Memory grows with the
    number of blocks the transaction spans, not with its rows. A thread's first triples
    are a plain list (cheaper to make and extend, and most transactions are in one to a
    few blocks); from :data:`_LOCATIONS_AS_LIST` items on, an ``array("q")`` (8 bytes an
    item, where a list holds a pointer and an int object).
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
        "seen_tm",
    )

    def __init__(
        self,
        xid: str,
        first_block: int,
        first_scn: int = -1,
        begin_scn: int = -1,
        begin_tm: int | None = None,
        locations: dict[int, array | list[int]] | None = None,
        rows: int = 0,
        compensations: int = 0,
    ) -> None:
        self.xid = xid
        self.first_scn = first_scn
        self.begin_scn = begin_scn if begin_scn >= 0 else -1
        self.begin_tm: int | None = begin_tm if begin_scn >= 0 else None
        self.locations: dict[int, array | list[int]] = {} if locations is None else locations
        self.rows = rows
        self.compensations = compensations
        self.end_key: CommitKey | None = None
        self.end_code = 0
        self.end_tm: int | None = None
        self.first_block = first_block
        # the dispatcher's clock when the retention rule first saw it without a begin tm:
        # its start for --transaction-retention (None: not looked at yet)
        self.seen_tm: int | None = None

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
    def from_state(cls, state: TransactionState) -> "OpenTransaction":
        txn = cls(state.xid, state.first_block, state.first_scn)
        txn.begin_scn, txn.begin_tm = state.begin_scn, state.begin_tm
        txn.rows, txn.compensations = state.rows, state.compensations
        txn.end_key = CommitKey(*state.end_key) if state.end_key else None
        txn.end_code, txn.end_tm = state.end_code, state.end_tm
        txn.locations = {t: array("q", a) for t, a in state.locations.items()}
        txn.seen_tm = state.seen_tm
        return txn
