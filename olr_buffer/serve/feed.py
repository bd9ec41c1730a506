"""The changefeed as ``serve`` reads it: its published files, listed with the changefeed's
own listing (every footer checked, a gapless chain) and then followed as ``run``
publishes more, and the stream of messages from a position on.

Memory stays flat whatever the changefeed holds: files are read a batch of rows at a
time, and a message stream makes at most about ``max_bytes`` of messages per call.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import OlrBufferError
from ..olr_protocol import COLUMNS, SCN_NOW, MessageBuilder, Position
from ..sinks.parquet import Location, PublishedFile, chain_names, list_files, read_schema_document

#: Rows per batch read from a Parquet file.
BATCH_ROWS = 8192
#: OpenLogReplicator's "no SCN" (its ``Scn::none()``, 2^64-1): a ``START`` from it means
#: "from now on", a ``CONTINUE`` from it "after the confirmed position".
NO_SCN = SCN_NOW
#: The largest c_scn a changefeed can hold (its c_scn column is an int64).
MAX_C_SCN = (1 << 63) - 1


class Changefeed:
    """The published files of the changefeed at ``path`` (a directory or
    ``s3://BUCKET/PREFIX``, read through the changefeed's :class:`Location`), in tx_seq
    order. ``refresh`` lists the files published since the last call; of a Delta
    changefeed, those of its table and those published after them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.location = Location(path)
        self.files: list[PublishedFile] = []
        self._last_scns: list[int] = []  # each file's last c_scn, for bisect
        self._tx_tables: dict[str, _TxTable] = {}

    @property
    def next_tx_seq(self) -> int:
        return self.files[-1].last + 1 if self.files else 0

    def refresh(self) -> int:
        """List the files published since the last call; returns how many there are."""
        new = list_files(
            self.location,
            start=self.next_tx_seq,
            names=chain_names(self.location),
            hint="files were removed, or the changefeed was compacted in place while served",
        )
        self.files.extend(new)
        self._last_scns.extend(f.last_commit.scn for f in new)
        return len(new)

    def reset(self) -> None:
        """Forget the files listed (the changefeed changed under us: compaction)."""
        self.files.clear()
        self._last_scns.clear()
        self._tx_tables.clear()

    def first_file_for(self, c_scn: int) -> int:
        """The index of the first file that can hold a message of ``c_scn`` or above (its
        last transaction's c_scn is at least ``c_scn``): every file before it ends below
        ``c_scn``, so a run of messages sharing ``c_scn`` starts in it or later."""
        return bisect.bisect_left(self._last_scns, c_scn)

    def end(self) -> Position | None:
        """The position of the changefeed's last message (its last transaction's commit),
        None when it holds none. Reads the transactions of the files that hold messages of
        the last c_scn (the last ones read are kept)."""
        if not self.files:
            return None
        c_scn = self._last_scns[-1]
        messages = 0
        for f in self.files[self.first_file_for(c_scn) :]:
            t = self._tx_table(f)
            lo, hi = bisect.bisect_left(t.c_scn, c_scn), bisect.bisect_right(t.c_scn, c_scn)
            messages += sum(t.rows[lo:hi]) + 2 * (hi - lo)  # a begin, the rows, a commit
        return Position(c_scn, messages - 1)

    def transactions_before(self, start: Position) -> int:
        """The tx_seq of the first transaction that a stream from ``start`` sends a
        message of (every one before it ends below ``start``): the next one to be
        published when ``start`` is after the last message."""
        before = Position(start.c_scn, start.c_idx - 1) if start.c_idx else Position(start.c_scn - 1, NO_SCN)
        tx_seq, _ = self.confirmed_transaction(before)
        return tx_seq + 1 if tx_seq >= 0 else (self.files[0].first if self.files else 0)

    def full_path(self, f: PublishedFile) -> str:
        return self.location.where(f.name)

    def open_file(self, f: PublishedFile):
        """A random-access file over ``f`` (on object storage: ranged reads)."""
        return self.location.open_input(f.name)

    def schema_document(self, version: str) -> bytes:
        """The text of the schema document ``version`` (a row's ``schema_version``)."""
        return read_schema_document(self.location, version)

    def last_c_tm(self) -> int | None:
        """The largest commit time in the last file (its footer's statistics), or None."""
        return max_c_tm(self.location, self.files[-1].name) if self.files else None

    def confirmed_transaction(self, pos: Position) -> tuple[int, int | None]:
        """``(tx_seq, c_tm)`` of the last transaction whose every message is at or below
        ``pos`` (its commit message is), ``(-1, None)`` when there is none. Reads the
        ``tx_seq``, ``c_scn`` and ``c_tm`` columns of the file (or files) that ``pos``
        falls in (the last ones read are kept)."""
        if not self.files:
            return -1, None
        k = min(self.first_file_for(pos.c_scn), len(self.files) - 1)
        found: tuple[int, int | None] = (-1, None)
        run = 0  # messages of pos.c_scn before the file (a run of them that crosses files)
        while k < len(self.files):
            t = self._tx_table(self.files[k])
            lo = bisect.bisect_left(t.c_scn, pos.c_scn)  # before lo: below pos.c_scn, done
            hi = bisect.bisect_right(t.c_scn, pos.c_scn)
            done = lo
            for j in range(lo, hi):
                run += t.rows[j] + 2
                if run - 1 > pos.c_idx:  # the commit message's c_idx
                    break
                done = j + 1
            if done:
                found = (t.tx_seq[done - 1], t.c_tm[done - 1])
            elif k > 0 and found[0] < 0:
                prev = self._tx_table(self.files[k - 1])
                found = (prev.tx_seq[-1], prev.c_tm[-1])
            if done < len(t.tx_seq) or k + 1 >= len(self.files):
                break
            k += 1  # every transaction of the file is done: the run of pos.c_scn may go on
        return found

    def _tx_table(self, f: PublishedFile) -> _TxTable:
        t = self._tx_tables.get(f.name)
        if t is None:
            if len(self._tx_tables) >= 4:
                self._tx_tables.pop(next(iter(self._tx_tables)))
            with self.open_file(f) as fh:
                t = self._tx_tables[f.name] = _TxTable.read(fh)
        return t


@dataclass(slots=True)
class _TxTable:
    """A file's transactions, in order: tx_seq, c_scn, c_tm and row count of each."""

    tx_seq: list[int]
    c_scn: list[int]
    c_tm: list[int | None]
    rows: list[int]

    @classmethod
    def read(cls, source) -> _TxTable:
        table = pq.read_table(source, columns=["tx_seq", "c_scn", "c_tm"])
        runs = pc.run_end_encode(table.column("tx_seq").combine_chunks())
        ends = runs.run_ends.to_pylist()
        starts = pa.array([0] + ends[:-1], pa.int64())
        rows = [e - s for s, e in zip([0] + ends[:-1], ends)]
        return cls(
            runs.values.to_pylist(),
            pc.take(table.column("c_scn"), starts).to_pylist(),
            pc.take(table.column("c_tm"), starts).to_pylist(),
            rows,
        )


def max_c_tm(location: Location, name: str) -> int | None:
    """The largest ``c_tm`` of a changefeed file, from its footer's statistics."""
    try:
        with location.open_input(name) as fh:
            meta = pq.read_metadata(fh)
        col = meta.schema.names.index("c_tm")
        best = None
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(col).statistics
            if stats is not None and stats.has_min_max:
                best = stats.max if best is None else max(best, stats.max)
        return best
    except (OSError, ValueError, OlrBufferError):
        return None


def start_position(feed: Changefeed, scn: int) -> Position:
    """Where the stream of a ``START(scn)`` begins: at the first transaction whose commit
    SCN is at least ``scn``; for :data:`NO_SCN` ("from now on", as OpenLogReplicator reads
    it), right after the last message of ``feed`` as listed (refresh it first): with the
    first transaction published after the request."""
    if scn == NO_SCN:
        end = feed.end()
        return Position(0, 0) if end is None else Position(end.c_scn, end.c_idx + 1)
    return Position(scn, 0)


def continue_position(
    c_scn: int | None, c_idx: int | None, confirmed: Position | None
) -> tuple[Position, Position | None]:
    """Where the stream of a ``CONTINUE(c_scn, c_idx)`` begins, and the position it goes
    on after (None: none). ``c_scn`` 0 (or absent) and :data:`NO_SCN` (as
    OpenLogReplicator reads it, whatever ``c_idx``): after the ``confirmed`` position (the
    start of the changefeed when there is none); ``c_scn`` without ``c_idx``: every
    message of ``c_scn`` on (SynchDB sends its last c_scn + 1 alone); otherwise right
    after ``(c_scn, c_idx)``. Any uint64 is a position: those above any c_scn the
    changefeed can hold give a stream that waits."""
    if not c_scn or c_scn == NO_SCN:
        return (Position(0, 0) if confirmed is None else Position(confirmed.c_scn, confirmed.c_idx + 1)), confirmed
    if c_idx is None:
        return Position(c_scn, 0), None
    return Position(c_scn, c_idx + 1), Position(c_scn, c_idx)


class MessageStream:
    """The messages of the changefeed from a position on: the first one at or above
    ``start`` (a START from an SCN: ``(scn, 0)``; a CONTINUE after ``(c_scn, c_idx)``:
    ``(c_scn, c_idx + 1)``), then every later one, following the changefeed as it grows.
    :meth:`next_chunk` gives framed messages, or ``b""`` when there is nothing new yet."""

    def __init__(self, feed: Changefeed, database: str, start: Position, batch_rows: int = BATCH_ROWS) -> None:
        self.feed = feed
        self.start = start
        self.builder = MessageBuilder(database, start, documents=feed.schema_document)
        self.batch_rows = batch_rows
        self._file = feed.first_file_for(start.c_scn) if start.c_scn else 0
        self._batches: Iterator[Any] | None = None  # of the current file's record batches
        self._batch: Any = None  # a pyarrow.RecordBatch, or None
        self._row = 0

    @property
    def last(self) -> Position | None:
        """The position of the last message made."""
        return self.builder.last

    def next_chunk(self, max_bytes: int) -> bytes:
        out = []
        size = 0
        b = self.builder
        while size < max_bytes:
            if self._batch is None:
                if self._batches is None:
                    if self._file >= len(self.feed.files):
                        break  # caught up: the caller refreshes the listing
                    if b.skipping and self.feed._last_scns[self._file] < self.start.c_scn:
                        self._file += 1  # every message of the file is before the start (published since)
                        continue
                    f = self.feed.files[self._file]
                    self._batches = pq.ParquetFile(self.feed.open_file(f)).iter_batches(
                        batch_size=self.batch_rows, columns=list(COLUMNS)
                    )
                batch = next(self._batches, None)
                if batch is None:
                    data = b.end_of_file()
                    self._batches = None
                    self._file += 1
                    out.append(data)
                    size += len(data)
                    continue
                self._batch, self._row = batch, 0
                if b.skipping:
                    self._row = _first_row_at(batch, self.start.c_scn)
            data, self._row = b.add(self._batch, self._row, max_bytes - size)
            out.append(data)
            size += len(data)
            if self._row >= self._batch.num_rows:
                self._batch = None
        return b"".join(out)

    def close(self) -> None:
        self._batches = self._batch = None


def _first_row_at(batch, c_scn: int) -> int:
    """The first row of ``batch`` whose c_scn is at least ``c_scn``, when its c_scn never
    decreases (rows below it are of whole transactions that a resumed stream skips);
    otherwise 0, leaving every row to the builder, which checks the order. A ``c_scn``
    above any the changefeed can hold (an int64) is after every row."""
    if c_scn > MAX_C_SCN:
        return batch.num_rows
    scns = batch.column("c_scn")
    if len(scns) > 1 and pc.any(pc.less(pc.pairwise_diff(scns), 0)).as_py():
        return 0
    return pc.sum(pc.less(scns, c_scn)).as_py() or 0
