"""Reading a committed transaction back from the queue, in row order, compensated.

Per redo thread, a transaction's records are in the queue in input order, which is row
order ``(scn, sub, sequence, line)`` within the thread. The threads' streams are merged
lazily (``heapq.merge``), so a transaction of any size streams through in bounded
memory. Compensation needs to know, for each row, whether a later record cancels it; a
transaction with compensation records is read more than once: first the RIDs that
compensations name, then which rows they cancel, then the rows.

A ``CUT`` record (PostgreSQL: a subtransaction rolled back) cancels a range of row
ordinals of its transaction, whatever their RID.
"""

from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterator

from ..changes import (
    CODE,
    COMPENSATED_RID,
    COMPENSATION,
    CUT,
    CUT_END,
    CUT_FIRST,
    LINE,
    RID,
    ROW_CODES,
    SCN,
    SEQUENCE,
    SUB,
    decode_records,
)
from ..txbuffer import Block, TxQueue
from .transaction import OpenTransaction

# A replayed record: (scn, sub, thread, sequence, line, record list), ordered as rows are
ReplayItem = tuple[int, int, int, int, int, list]


@dataclass(slots=True)
class ReplayStats:
    compensations: int = 0
    unmatched_compensations: int = 0
    records_after_end: int = 0


class BlockCache:
    """A small LRU of decoded queue blocks: commits mostly re-read recent blocks."""

    def __init__(self, queue: TxQueue, capacity: int = 64) -> None:
        self.queue = queue
        self.capacity = capacity
        self._blocks: OrderedDict[int, Block] = OrderedDict()

    def get(self, first: int) -> Block:
        block = self._blocks.get(first)
        if block is not None:
            self._blocks.move_to_end(first)
            return block
        block = self.queue.read_block(first)
        self._blocks[first] = block
        if len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
        return block

    def put(self, block: Block) -> None:
        self._blocks[block.first] = block
        if len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)


class Replayer:
    def __init__(self, cache: BlockCache) -> None:
        self.cache = cache
        self.stats = ReplayStats()

    def _thread_items(self, thread: int, locs, c_scn: int, count_late: bool) -> Iterator[ReplayItem]:
        get = self.cache.get
        code_, scn_, sub_, seq_, line_ = CODE, SCN, SUB, SEQUENCE, LINE  # locals: the loop runs per record
        for i in range(0, len(locs), 3):
            start, count = locs[i + 1], locs[i + 2]
            for rec in decode_records(get(locs[i]).span(start, start + count), count):
                code = rec[code_]
                if code in ROW_CODES or code & COMPENSATION:
                    if rec[scn_] <= c_scn:
                        yield (rec[scn_], rec[sub_], thread, rec[seq_], rec[line_], rec)
                    elif count_late:
                        self.stats.records_after_end += 1

    def _items(self, txn: OpenTransaction, c_scn: int, count_late: bool = False) -> Iterator[ReplayItem]:
        streams = [self._thread_items(t, locs, c_scn, count_late) for t, locs in sorted(txn.locations.items())]
        if len(streams) == 1:
            return streams[0]
        return heapq.merge(*streams)

    def rows(self, txn: OpenTransaction, c_scn: int) -> Iterator[tuple[int, list]]:
        """``(thread, record)`` for each row of the transaction, compensation applied."""
        if not txn.compensations:
            for item in self._items(txn, c_scn, count_late=True):
                if item[5][CODE] in ROW_CODES:
                    yield item[2], item[5]
            return
        cancelled = self._cancelled(txn, c_scn)
        ordinal = 0
        for item in self._items(txn, c_scn, count_late=True):
            rec = item[5]
            if rec[CODE] in ROW_CODES:
                if ordinal not in cancelled:
                    yield item[2], rec
                ordinal += 1

    def _cancelled(self, txn: OpenTransaction, c_scn: int) -> "Cancelled":
        """Ordinals (among rows) of the rows that compensation and cut records cancel."""
        cancelled = Cancelled()
        rids = set()
        for item in self._items(txn, c_scn):
            rec = item[5]
            if rec[CODE] == CUT:
                cancelled.add_range(rec[CUT_FIRST], rec[CUT_END])
            elif rec[CODE] & COMPENSATION:
                rids.add(rec[COMPENSATED_RID])
        if not rids:
            return cancelled
        stacks: dict[str, list[int]] = {}
        ordinal = 0
        for item in self._items(txn, c_scn):
            rec = item[5]
            code = rec[CODE]
            if code in ROW_CODES:
                rid = rec[RID]
                if rid in rids:
                    stacks.setdefault(rid, []).append(ordinal)
                ordinal += 1
            elif code == CUT:
                continue
            else:
                self.stats.compensations += 1
                stack = stacks.get(rec[COMPENSATED_RID])
                if stack:
                    cancelled.add(stack.pop())
                else:
                    self.stats.unmatched_compensations += 1
        return cancelled


class Cancelled:
    """Row ordinals that are cancelled: single ones (compensations) and ranges (cuts)."""

    def __init__(self) -> None:
        self._ordinals: set[int] = set()
        self._starts: list[int] = []  # disjoint ranges, sorted
        self._ends: list[int] = []

    def add(self, ordinal: int) -> None:
        self._ordinals.add(ordinal)

    def add_range(self, first: int, end: int) -> None:
        if end <= first:
            return
        i = bisect.bisect_left(self._ends, first)  # the first range that ends at or after first
        j = bisect.bisect_right(self._starts, end)  # ranges from i up to j overlap or touch
        if i < j:
            first = min(first, self._starts[i])
            end = max(end, self._ends[j - 1])
        self._starts[i:j] = [first]
        self._ends[i:j] = [end]

    def __contains__(self, ordinal: int) -> bool:
        if ordinal in self._ordinals:
            return True
        i = bisect.bisect_right(self._starts, ordinal) - 1
        return i >= 0 and ordinal < self._ends[i]
