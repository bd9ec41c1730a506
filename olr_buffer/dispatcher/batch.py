"""The batch path: the rows a batch of small committed transactions publishes.

Transactions up to a few thousand rows, acted on together, are read back together: the
records of all of them in one piece of data (:func:`batch_spans` says where each one's
are), decoded in one call, either as lists (:class:`ListRows`) or as the Arrow columns of
their rows (:class:`ColumnRows`). Which rows are published does not depend on that:
:func:`plan_batch` works it out once, through the few things both give (how many rows come
before each record, a row's SCN, a span's records), and the one that read them builds
the rows from the plan.

The plan: a transaction of one thread without compensation records has its rows in row
order in the queue already; they are those of its records, up to its commit SCN (rows
after it are at the end of its run, since a thread's SCNs do not decrease: late, dropped).
One of several threads without compensation records has its rows among those read, in
another order: each thread's rows up to its commit SCN, merged by ``(scn, sub)``, a
thread's before a higher thread's at the same ones (the order ``transaction_rows`` gives,
for a thread's rows are in the queue in the order of their ``(sequence, line)``); read as
columns, they are taken from the columns in that order (:meth:`ColumnRows.merged`), read as
lists, worked out as the rest. The rest (compensation) have their own rows worked out
from their records (``transaction_rows``). Where every row is published as read, the plan
is empty and the rows go as they are; otherwise it lists the pieces to put together:
ranges of the rows as read, between such transactions, the rows of each merged one (their
numbers among the rows read) and each one's own rows.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from itertools import accumulate, chain, compress
from operator import itemgetter
from typing import Protocol

import pyarrow as pa

from ..changes import CODE, ROW_CODES, SCN, CommitKey, RowColumns, decode_records, rows_to_columns
from ..compiled import load_compiled
from ..txbuffer import Block
from .transaction import OpenTransaction

_is_row = ROW_CODES.__contains__
_code_of = itemgetter(CODE)

#: per transaction: (thread, first, end) of its records among the batch's, or, for one of
#: several threads, (None, [(thread, first, end) per thread], None)
Span = tuple
#: a piece of the rows published: (start, stop) of the rows as read, the numbers of some of
#: them (a merged transaction's, in its order), or a transaction's own rows
Piece = tuple[int, int] | array | list[list]
#: what the sink gets a transaction: (xid, key, tm, thread or each row's, rows)
TxEntry = tuple[str, CommitKey, int | None, int | list[int], int]


def python_batch_spans(
    batch: Sequence[tuple[OpenTransaction, CommitKey]],
) -> tuple[list[tuple[int, int, int]], list[Span], int]:
    """Where the records of ``batch``'s transactions are: the runs of records to read,
    ``(block, start, stop)`` (adjacent records of one block are one run: the groups of
    tiny transactions of a block are often adjacent, and in commit order), each
    transaction's span among the records of all runs joined, and how many records that is."""
    runs: list[tuple[int, int, int]] = []
    spans: list[Span] = []
    a = 0
    run_index = -1
    run_start = run_stop = 0
    for txn, _key in batch:
        locations = txn.locations
        if len(locations) == 1:
            ((thread, locs),) = locations.items()
            if len(locs) == 3:  # one group: the most common case, inline
                index, start, n = locs
                if index == run_index and start == run_stop:
                    run_stop += n
                else:
                    if run_index >= 0:
                        runs.append((run_index, run_start, run_stop))
                    run_index, run_start, run_stop = index, start, start + n
                spans.append((thread, a, a + n))
                a += n
                continue
        per_thread = []
        for thread, locs in sorted(locations.items()):
            n = 0
            for i in range(0, len(locs), 3):
                index, start, count = locs[i], locs[i + 1], locs[i + 2]
                if index == run_index and start == run_stop:
                    run_stop += count
                else:
                    if run_index >= 0:
                        runs.append((run_index, run_start, run_stop))
                    run_index, run_start, run_stop = index, start, start + count
                n += count
            per_thread.append((thread, a, a + n))
            a += n
        spans.append(per_thread[0] if len(per_thread) == 1 else (None, per_thread, None))
    if run_index >= 0:
        runs.append((run_index, run_start, run_stop))
    return runs, spans, a


def python_read_runs(runs: list[tuple[int, int, int]], get: Callable[[int], Block]) -> bytes:
    """The encoded records of ``runs``, joined (``get``: a block by its queue index)."""
    blocks: dict[int, Block] = {}
    parts: list[bytes] = []
    append = parts.append
    for index, start, stop in runs:
        block = blocks.get(index)
        if block is None:
            block = blocks[index] = get(index)
        append(block.span(start, stop))
    return parts[0] if len(parts) == 1 else b"".join(parts)


#: the compiled module (``batchscan.pyx``), or None; and the batch step in words
#: (``olr-buffer --version``)
BATCHSCAN, BATCH_STEP = load_compiled(f"{__package__}.batchscan", "batch step")
#: where the transactions' records are (runs to read, spans, count): compiled, or the reference
batch_spans: Callable[
    [Sequence[tuple[OpenTransaction, CommitKey]]], tuple[list[tuple[int, int, int]], list[Span], int]
] = BATCHSCAN.batch_spans if BATCHSCAN is not None else python_batch_spans
#: the runs' records joined: compiled, or the reference
read_runs: Callable[[list[tuple[int, int, int]], Callable[[int], Block]], bytes] = (
    BATCHSCAN.read_runs if BATCHSCAN is not None else python_read_runs
)


class BatchRows(Protocol):
    """The rows among a batch's records, as one reading of them gives them."""

    #: rows before each record (one more than the records: the rows in all)
    cum: list[int]

    def last_scns(self, rows: list[int]) -> list[int]:
        """The SCN of each of ``rows`` (row numbers, ascending)."""
        ...

    def scn_at(self, row: int) -> int: ...

    def records(self, first: int, end: int) -> list[list]:
        """Records ``first`` to ``end`` (not included), decoded."""
        ...


class ListRows:
    """The records decoded as lists (:func:`~olr_buffer.changes.decode_records`)."""

    def __init__(self, recs: list[list]) -> None:
        self.recs = recs
        flags = list(map(_is_row, map(_code_of, recs)))
        self.rows = list(compress(recs, flags))
        self.cum = list(accumulate(flags, initial=0))

    def last_scns(self, rows: list[int]) -> list[int]:
        got = self.rows
        return [got[i][SCN] for i in rows]

    def scn_at(self, row: int) -> int:
        return self.rows[row][SCN]

    def records(self, first: int, end: int) -> list[list]:
        return self.recs[first:end]

    def build(self, pieces: list[Piece] | None) -> list[list]:
        if pieces is None:
            return self.rows
        rows = self.rows
        return list(chain.from_iterable(rows[p[0] : p[1]] if isinstance(p, tuple) else p for p in pieces))


class ColumnRows:
    """The rows read as columns (:func:`~olr_buffer.changes.row_columns`); a span's
    records, where a transaction needs them, are decoded from ``data`` (``cols.starts``
    says where each record starts)."""

    def __init__(self, cols: RowColumns, data: bytes) -> None:
        self.batch = cols.batch
        self.starts = cols.starts
        self.data = data
        self.cum = list(accumulate(cols.flags, initial=0))
        self._scns: list[int] | None = None
        self._subs: list[int] | None = None

    def merged(self, ranges: list[tuple[int, int, int]], c_scn: int) -> tuple[array, list[int], int]:
        """The rows of a transaction of several threads without compensation, committed
        at ``c_scn``, whose rows are ``ranges`` (``(thread, start, stop)`` among the rows
        read, in thread order): the numbers of those at or below ``c_scn``, in the order
        of their ``(scn, sub)``, then their thread's, then as read; each one's thread; how
        many were above ``c_scn`` (late, dropped)."""
        if self._scns is None:
            self._scns = self.batch.column("scn").to_pylist()
        if self._subs is None:
            self._subs = self.batch.column("sub").to_pylist()
        scns, subs = self._scns, self._subs
        items = [(scns[i], subs[i], t, i) for t, a, b in ranges for i in range(a, b) if scns[i] <= c_scn]
        items.sort()
        late = sum(b - a for _, a, b in ranges) - len(items)
        return array("q", [item[3] for item in items]), [item[2] for item in items], late

    def last_scns(self, rows: list[int]) -> list[int]:
        if not rows:
            return []
        return self.batch.column("scn").take(pa.array(rows, pa.int64())).to_pylist()

    def scn_at(self, row: int) -> int:
        if self._scns is None:
            self._scns = self.batch.column("scn").to_pylist()
        return self._scns[row]

    def records(self, first: int, end: int) -> list[list]:
        starts = self.starts
        assert starts is not None  # (a batch with such transactions is read as columns only with them)
        return decode_records(self.data[starts[first] : starts[end]], end - first)

    def build(self, pieces: list[Piece] | None) -> pa.RecordBatch:
        batch = self.batch
        if pieces is None:
            return batch
        own = [p for p in pieces if isinstance(p, list)]
        own_batch = rows_to_columns(list(chain.from_iterable(own))) if own else None
        if any(type(p) is array for p in pieces):
            return self._taken(pieces, own_batch)
        out = []
        k = 0
        for p in pieces:
            if isinstance(p, tuple):
                if p[1] > p[0]:
                    out.append(batch.slice(p[0], p[1] - p[0]))
            else:
                assert own_batch is not None
                out.append(own_batch.slice(k, len(p)))
                k += len(p)
        return pa.concat_batches(out) if out else batch.slice(0, 0)

    def _taken(self, pieces: list[Piece], own_batch: pa.RecordBatch | None) -> pa.RecordBatch:
        """The pieces, some of them rows by their numbers, in one take: of the rows read,
        followed by the own rows (``own_batch``) if there are any."""
        batch = self.batch
        n = batch.num_rows
        rows = array("q")
        k = n  # the next own row, after the rows read
        for p in pieces:
            if type(p) is tuple:
                rows.extend(range(p[0], p[1]))
            elif type(p) is array:
                rows.extend(p)
            else:
                rows.extend(range(k, k + len(p)))
                k += len(p)
        if own_batch is not None:
            batch = pa.concat_batches([batch, own_batch])
        taken = pa.Array.from_buffers(pa.int64(), len(rows), [None, pa.py_buffer(rows)])
        return batch.take(taken)


def plan_batch(
    batch: Sequence[tuple[OpenTransaction, CommitKey]],
    spans: Sequence[Span],
    rows: BatchRows,
    transaction_rows: Callable[[list[tuple[int, list[list]]], int], tuple[list[list], int | list[int]]],
) -> tuple[list[TxEntry], list[Piece] | None, int, int]:
    """What ``batch`` publishes, from ``rows`` (see the module's docstring): the sink's
    entries of the transactions with rows left, the pieces of the rows published (None:
    all rows as read), the late rows dropped and the transactions left without a row."""
    cum = rows.cum
    # the SCN of the last row of each transaction of one thread, in one call
    lasts = [
        cum[b] - 1
        for (txn, _), (t, a, b) in zip(batch, spans)
        if t is not None and not txn.compensations and cum[b] > cum[a]
    ]
    last_scns = iter(rows.last_scns(lasts))
    txs: list[TxEntry] = []
    pieces: list[Piece] = []
    done = late = empty = 0  # done: rows before this are in pieces
    merged = getattr(rows, "merged", None)  # (ColumnRows: several threads' rows taken as read)
    for (txn, key), (thread, a, b) in zip(batch, spans):
        if thread is None or txn.compensations:
            thread_spans = a if thread is None else ((thread, a, b),)
            ra, rb = cum[thread_spans[0][1]], cum[thread_spans[-1][2]]
            kept: Piece
            if thread is None and merged is not None and not txn.compensations:  # taken by number
                kept, threads, lost = merged([(t, cum[x], cum[y]) for t, x, y in thread_spans], key[0])
                late += lost
            else:  # rows of its own
                kept, threads = transaction_rows([(t, rows.records(x, y)) for t, x, y in thread_spans], key[0])
            pieces.append((done, ra))
            done = rb
            if kept:
                txs.append((txn.xid, key, txn.end_tm, threads, len(kept)))
                pieces.append(kept)
            else:
                empty += 1
            continue
        ra, rb = cum[a], cum[b]
        if rb > ra and next(last_scns) > key[0]:  # rows after the commit: late, dropped
            end, c = rb, key[0]
            while rb > ra and rows.scn_at(rb - 1) > c:
                rb -= 1
            late += end - rb
            pieces.append((done, rb))
            done = end
        if rb > ra:
            txs.append((txn.xid, key, txn.end_tm, thread, rb - ra))
        else:
            empty += 1
    if not pieces:
        return txs, None, late, empty
    pieces.append((done, cum[-1]))
    return txs, pieces, late, empty
