"""Wiring of the packages into the jobs the CLI runs (``replay``)."""

from __future__ import annotations

import gc
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

from .dispatcher import Dispatcher
from .reader.thread_reader import DEFAULT_BLOCK_BYTES, DEFAULT_BLOCK_RECORDS, ReaderGroup
from .spark_sink import ChangefeedWriter
from .spark_sink.writer import DEFAULT_FILE_ROWS
from .txbuffer import DEFAULT_SEGMENT_BYTES, LmdbQueue


@dataclass
class ReplayOptions:
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    block_records: int = DEFAULT_BLOCK_RECORDS
    block_bytes: int = DEFAULT_BLOCK_BYTES
    file_rows: int = DEFAULT_FILE_ROWS
    durable: bool = True


@dataclass
class Progress:
    """What a progress display shows; ``bytes_total`` is the input's size on disk."""

    bytes_read: int = 0
    bytes_total: int = 0
    records: int = 0
    published: int = 0
    open_transactions: int = 0
    watermark: int = -1


@dataclass
class ReplaySummary:
    threads: list[int] = field(default_factory=list)
    records_read: int = 0
    blocks_dispatched: int = 0
    transactions_published: int = 0
    rows_published: int = 0
    rolled_back: int = 0
    no_begin: int = 0
    empty: int = 0
    already_published: int = 0
    compensations: int = 0
    unmatched_compensations: int = 0
    late_records: int = 0
    extra_end_records: int = 0
    open_transactions: int = 0
    next_tx_seq: int = 0
    files_published: int = 0
    queue_segments: int = 0
    queue_bytes: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


@contextmanager
def quiet_gc() -> Iterator[None]:
    """The cyclic garbage collector costs several times the parsing on hot loops; our
    structures are acyclic, so it runs rarely while a job runs."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(200_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def replay(
    input_dir: str,
    queue_dir: str,
    changefeed_dir: str,
    options: ReplayOptions | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    progress_every: float = 0.5,
) -> ReplaySummary:
    """Read every log file of ``input_dir`` to its end through the queue, publish every
    committed transaction, return the summary. Resumes where a killed run stopped."""
    opts = options or ReplayOptions()
    t0 = time.monotonic()
    queue = LmdbQueue(queue_dir, segment_bytes=opts.segment_bytes, durable=opts.durable)
    try:
        sink = ChangefeedWriter(changefeed_dir, file_rows=opts.file_rows, durable=opts.durable)
        appended = threading.Event()
        readers = ReaderGroup(
            queue,
            input_dir,
            block_records=opts.block_records,
            block_bytes=opts.block_bytes,
            on_append=appended.set,
        )
        threads = readers.prepare()
        dispatcher = Dispatcher(queue, sink, threads, start_index=queue.first_index, published_through=sink.last_commit)
        progress = Progress(bytes_total=readers.bytes_total)
        with quiet_gc():
            readers.start()
            last_report = 0.0
            try:
                while True:
                    n = dispatcher.poll()
                    now = time.monotonic()
                    if on_progress and now - last_report >= progress_every:
                        last_report = now
                        _fill_progress(progress, readers, dispatcher)
                        on_progress(progress)
                    if n:
                        continue
                    if not readers.alive():
                        if dispatcher.poll() == 0 and dispatcher.position >= queue.next_index:
                            break
                        continue
                    appended.wait(0.2)
                    appended.clear()
            except BaseException:
                readers.stop.set()
                readers.join()
                sink.abandon()
                raise
            readers.join()
            sink.flush()
        if on_progress:
            _fill_progress(progress, readers, dispatcher)
            on_progress(progress)
        if readers.errors:
            raise readers.errors[0]
        return _summary(readers, dispatcher, sink, queue, time.monotonic() - t0, threads)
    finally:
        queue.close()


def _fill_progress(p: Progress, readers: ReaderGroup, d: Dispatcher) -> None:
    p.bytes_read = sum(_bytes_read(r) for r in readers.readers.values())
    p.records = d.stats.records
    p.published = d.stats.published
    p.open_transactions = len(d.open)
    p.watermark = d.watermark


def _bytes_read(r) -> int:
    """Bytes on disk of the files passed, plus the current file's offset (capped at its size:
    offsets count decompressed bytes)."""
    total = 0
    for seq, f in r.files.items():
        if seq < r.pos.sequence:
            total += os.path.getsize(f.path)
        elif seq == r.pos.sequence:
            total += min(r.pos.offset, os.path.getsize(f.path))
    return total


def _summary(readers, d: Dispatcher, sink: ChangefeedWriter, queue, seconds: float, threads) -> ReplaySummary:
    s, rs = d.stats, d.replayer.stats
    segs = queue.segments()
    return ReplaySummary(
        threads=list(threads),
        records_read=readers.records_read,
        blocks_dispatched=s.blocks,
        transactions_published=s.published,
        rows_published=s.rows,
        rolled_back=s.rolled_back,
        no_begin=s.no_begin,
        empty=s.empty,
        already_published=s.already_published,
        compensations=rs.compensations,
        unmatched_compensations=rs.unmatched_compensations,
        late_records=s.late_records + rs.records_after_end,
        extra_end_records=s.extra_ends,
        open_transactions=len(d.open),
        next_tx_seq=sink.next_tx_seq,
        files_published=sink.files_published,
        queue_segments=len(segs),
        queue_bytes=sum(x.bytes for x in segs),
        seconds=seconds,
    )
