"""Reading a committed transaction back from the queue, in row order, compensated.

Per redo thread, a transaction's records are in the queue in input order, which is row
order ``(scn, sub, sequence, line)`` within the thread. The threads' streams are merged
lazily (``heapq.merge``), so a transaction of any size streams through in bounded
memory; rows are handed on in chunks (lists of one thread's rows), not one by one.

Compensation needs to know, for each row, whether a later record cancels it; a
transaction with compensation records is read twice. The first read goes backwards:
a compensation record is one more cancel pending for its RID, and a row whose RID has
one pending takes it. That is the same matching as the forward rule of the contract
(a compensation cancels the latest row before it with its RID that is not cancelled
already): per RID, rows and compensations pair like opening and closing brackets, and
the pairs are the same whichever end they are matched from. The second read hands on
the rows that are left.

A ``CUT`` record (PostgreSQL: a subtransaction rolled back) cancels a range of row
ordinals of its transaction, whatever their RID.
"""

from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter

import pyarrow as pa
import pyarrow.compute as pc

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
    row_columns,
)
from ..txbuffer import Block, TxQueue
from .transaction import OpenTransaction

# A replayed record: (scn, sub, thread, sequence, line, record list), ordered as rows are
ReplayItem = tuple[int, int, int, int, int, list]

# Rows of a transaction of several threads handed on at a time (at most)
CHUNK_ROWS = 4096

_code_of = itemgetter(CODE)
_scn_of = itemgetter(SCN)
_is_row = ROW_CODES.__contains__
_cancels = COMPENSATION.__and__  # compensations and cuts
_item_key = itemgetter(0, 1, 2, 3, 4)  # a ReplayItem's place in row order


def _rows_of(recs: list[list]) -> list[list]:
    return list(compress(recs, map(_is_row, map(_code_of, recs))))


@dataclass(slots=True)
class ReplayStats:
    compensations: int = 0
    unmatched_compensations: int = 0
    records_after_end: int = 0


class BlockCache:
    """A small LRU of decoded queue blocks (commits mostly re-read recent blocks), bounded
    by count and by the bytes it holds: the working set of reading back a transaction of
    any size stays the same."""

    def __init__(self, queue: TxQueue, capacity: int = 64, max_bytes: int = 16 << 20) -> None:
        self.queue = queue
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._blocks: OrderedDict[int, Block] = OrderedDict()

    def get(self, first: int) -> Block:
        block = self._blocks.get(first)
        if block is not None:
            self._blocks.move_to_end(first)
            return block
        block = self.queue.read_block(first)
        self.put(block)
        return block

    def put(self, block: Block) -> None:
        old = self._blocks.pop(block.first, None)
        if old is not None:
            self.nbytes -= old.nbytes
        self._blocks[block.first] = block
        self.nbytes += block.nbytes
        while len(self._blocks) > 1 and (len(self._blocks) > self.capacity or self.nbytes > self.max_bytes):
            self.nbytes -= self._blocks.popitem(last=False)[1].nbytes


class Replayer:
    def __init__(self, cache: BlockCache, columns: bool = False) -> None:
        self.cache = cache
        self.stats = ReplayStats()
        self.columns = columns  # chunks may be record batches (the sink takes columns)

    def chunks(self, txn: OpenTransaction, c_scn: int) -> Iterator[tuple[int, list[list] | pa.RecordBatch]]:
        """The rows of a transaction committed at ``c_scn``, compensation applied, in row
        order, as ``(thread, rows)``: runs of rows of one redo thread. Records above
        ``c_scn`` are left out and counted (``records_after_end``). With ``columns``, the
        rows of a transaction of one thread without compensation come as columns
        (``olr_buffer.changes.ROW_SCHEMA``), a span of records at a time."""
        if self.columns and not txn.compensations and len(txn.locations) == 1:
            yield from self._column_chunks(txn, c_scn)
            return
        cancelled = self._cancelled(txn, c_scn) if txn.compensations else None
        ordinal = 0
        for thread, recs in self._record_chunks(txn, c_scn, count_late=True):
            rows = _rows_of(recs)
            if cancelled is not None and rows:
                n = len(rows)
                rows = cancelled.kept(ordinal, rows)
                ordinal += n
            if rows:
                yield thread, rows

    def _column_chunks(self, txn: OpenTransaction, c_scn: int) -> Iterator[tuple[int, list[list] | pa.RecordBatch]]:
        """:meth:`chunks` of a transaction of one thread without compensation: each span's
        rows as columns (as records, then rows, where the compiled step does not take it)."""
        ((thread, locs),) = txn.locations.items()
        get = self.cache.get
        for i in range(0, len(locs), 3):
            start, count = locs[i + 1], locs[i + 2]
            data = get(locs[i]).span(start, start + count)
            cols = row_columns(data, count)
            if cols is None:
                rows = _rows_of(self._upto(decode_records(data, count), c_scn, count_late=True))
                if rows:
                    yield thread, rows
                continue
            batch = cols.batch
            if batch.num_rows and pc.max(batch.column("scn")).as_py() > c_scn:
                keep = pc.less_equal(batch.column("scn"), c_scn)
                self.stats.records_after_end += batch.num_rows - pc.sum(keep).as_py()
                batch = batch.filter(keep)
            if batch.num_rows:
                yield thread, batch

    def transaction_rows(self, parts: list[tuple[int, list[list]]], c_scn: int) -> tuple[list[list], int | list[int]]:
        """The rows of a transaction committed at ``c_scn`` whose records are all in
        ``parts`` (``(thread, records)``, one thread's in order each), compensation
        applied: the rows :meth:`chunks` gives, and their thread (one for all, or a list
        of each one's)."""
        if len(parts) == 1:
            thread, recs = parts[0]
            recs = self._upto(recs, c_scn, count_late=True)
            return self._cancellations((recs[::-1],)).kept(0, _rows_of(recs)), thread
        items: list[ReplayItem] = []
        cancels = False
        for thread, recs in parts:
            recs = self._upto(recs, c_scn, count_late=True)
            codes = list(map(_code_of, recs))
            if any(map(_cancels, codes)):
                cancels = True
                recs = [r for r, code in zip(recs, codes) if code in ROW_CODES or code & COMPENSATION]
            else:
                recs = list(compress(recs, map(_is_row, codes)))
            items += [(r[SCN], r[SUB], thread, r[SEQUENCE], r[LINE], r) for r in recs]
        items.sort(key=_item_key)
        if cancels:
            backwards = [item[5] for item in reversed(items)]
            items = self._cancellations((backwards,)).kept(0, [item for item in items if item[5][CODE] in ROW_CODES])
        return [item[5] for item in items], [item[2] for item in items]

    # -- reading records ---------------------------------------------------------------

    def _upto(self, recs: list[list], c_scn: int, count_late: bool) -> list[list]:
        """``recs`` without those above ``c_scn``; the rows and compensations among those
        are counted as late if ``count_late``."""
        if not recs or max(map(_scn_of, recs)) <= c_scn:
            return recs
        if count_late:
            self.stats.records_after_end += sum(
                1 for r in recs if r[SCN] > c_scn and (r[CODE] in ROW_CODES or r[CODE] & COMPENSATION)
            )
        return [r for r in recs if r[SCN] <= c_scn]

    def _spans(self, locs: Sequence[int], c_scn: int, count_late: bool, reverse: bool) -> Iterator[list[list]]:
        """The records of each span of one thread's locations, at or below ``c_scn``, in
        order (or all in reverse order)."""
        get = self.cache.get
        order = range(len(locs) - 3, -1, -3) if reverse else range(0, len(locs), 3)
        for i in order:
            start, count = locs[i + 1], locs[i + 2]
            recs = self._upto(decode_records(get(locs[i]).span(start, start + count), count), c_scn, count_late)
            yield recs[::-1] if reverse else recs

    def _thread_items(self, thread: int, locs, c_scn: int, count_late: bool, reverse: bool) -> Iterator[ReplayItem]:
        code_, scn_, sub_, seq_, line_ = CODE, SCN, SUB, SEQUENCE, LINE  # locals: the loop runs per record
        for recs in self._spans(locs, c_scn, count_late, reverse):
            for rec in recs:
                code = rec[code_]
                if code in ROW_CODES or code & COMPENSATION:
                    yield (rec[scn_], rec[sub_], thread, rec[seq_], rec[line_], rec)

    def _record_chunks(
        self, txn: OpenTransaction, c_scn: int, count_late: bool = False, reverse: bool = False
    ) -> Iterator[tuple[int, list[list]]]:
        """``(thread, records)``, in row order (or reverse row order): of one thread, its
        spans as decoded (other records than rows and compensations included); of several,
        their merged records in runs of one thread."""
        if len(txn.locations) == 1:
            ((thread, locs),) = txn.locations.items()
            for recs in self._spans(locs, c_scn, count_late, reverse):
                yield thread, recs
            return
        streams = [self._thread_items(t, locs, c_scn, count_late, reverse) for t, locs in sorted(txn.locations.items())]
        run: list[list] = []
        run_thread: int | None = None
        for item in heapq.merge(*streams, reverse=reverse):
            if item[2] != run_thread or len(run) >= CHUNK_ROWS:
                if run:
                    assert run_thread is not None  # set with the run's first item
                    yield run_thread, run
                run, run_thread = [], item[2]
            run.append(item[5])
        if run:
            assert run_thread is not None
            yield run_thread, run

    # -- compensation --------------------------------------------------------------------

    def _cancelled(self, txn: OpenTransaction, c_scn: int) -> Cancelled:
        """The row ordinals that compensation and cut records cancel (one backward read)."""
        return self._cancellations(recs for _, recs in self._record_chunks(txn, c_scn, reverse=True))

    def _cancellations(self, backwards: Iterable[list[list]]) -> Cancelled:
        """The row ordinals cancelled among records given in reverse row order (lists of
        them, all at or below the commit SCN): see the module's docstring."""
        cancelled = Cancelled()
        pending: dict = {}  # RID -> compensations after the rows read so far, not yet matched
        matched: list[int] = []  # rows cancelled, counted from the last row
        rows = 0
        stats = self.stats
        for recs in backwards:
            codes = list(map(_code_of, recs))
            if not pending and not any(map(_cancels, codes)):  # nothing here is cancelled
                rows += sum(map(_is_row, codes))
                continue
            for rec, code in zip(recs, codes):
                if code in ROW_CODES:
                    if pending:
                        rid = rec[RID]
                        n = pending.get(rid)
                        if n:
                            matched.append(rows)
                            if n == 1:
                                del pending[rid]
                            else:
                                pending[rid] = n - 1
                    rows += 1
                elif code == CUT:
                    cancelled.add_range(rec[CUT_FIRST], rec[CUT_END])
                elif code & COMPENSATION:
                    stats.compensations += 1
                    rid = rec[COMPENSATED_RID]
                    pending[rid] = pending.get(rid, 0) + 1
        stats.unmatched_compensations += sum(pending.values())
        last = rows - 1
        for r in matched:
            cancelled.add(last - r)
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

    def kept(self, first: int, rows: list) -> list:
        """``rows``, whose ordinals are ``first``, ``first + 1``, ..., without the cancelled
        ones."""
        if not self._starts:  # no cut: compensations only
            ordinals = self._ordinals
            if not ordinals:
                return rows
            return [r for o, r in enumerate(rows, first) if o not in ordinals]
        if self._ordinals:
            self._fold()
        starts, ends = self._starts, self._ends  # ranges: the kept rows are slices between them
        stop = first + len(rows)
        i = bisect.bisect_right(ends, first)  # the first range that ends after first
        if i == len(starts) or starts[i] >= stop:
            return rows
        out: list = []
        pos = first
        while i < len(starts) and starts[i] < stop:
            if starts[i] > pos:
                out += rows[pos - first : starts[i] - first]
            pos = max(pos, ends[i])
            i += 1
        if pos < stop:
            out += rows[pos - first :]
        return out

    def _fold(self) -> None:
        """Fold the single ordinals into the ranges (once, before reading them in order)."""
        spans = sorted([*zip(self._starts, self._ends), *((o, o + 1) for o in self._ordinals)])
        starts: list[int] = []
        ends: list[int] = []
        for s, e in spans:
            if starts and s <= ends[-1]:
                if e > ends[-1]:
                    ends[-1] = e
            else:
                starts.append(s)
                ends.append(e)
        self._starts, self._ends = starts, ends
        self._ordinals = set()
