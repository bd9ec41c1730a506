"""Wiring of the packages into the jobs the CLI runs.

A :class:`Pipeline` owns one queue directory and one changefeed directory: a source
(:mod:`olr_buffer.sources`, chosen by the scheme of its location) appends, the dispatcher
(in the calling thread) publishes to a sink (:mod:`olr_buffer.sinks`), and the checkpoint
cycle (:class:`~olr_buffer.checkpointer.Checkpointer`) makes progress durable and gives
disk back. The pipeline reaches the source and the sink only through their contracts
(:mod:`olr_buffer.sources.base`, :mod:`olr_buffer.sinks.base`).
"""

from __future__ import annotations

import copy
import gc
import logging
import os
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Callable, Iterator

from .changes import DEFAULT_BLOCK_BYTES, DEFAULT_BLOCK_RECORDS, INFINITE_SCN
from .checkpointer import Checkpointer
from .dead_letters import BadRecordLog, DeadLetters
from .dispatcher import AbandonedTransaction, DispatchError, Dispatcher, DispatchStats
from .dispatcher.errors import damaged_checkpoint
from .sinks import KINDS as SINKS
from .sinks import ChangefeedOwner, Sink
from .sinks.parquet import DEFAULT_FILE_ROWS, DEFAULT_MODE
from .sources import Acknowledgement, SourceRunner, SourceSettings, kind_of, open_source
from .store import OutageRetry
from .txbuffer import DEFAULT_SEGMENT_BYTES, LmdbQueue, held_segments
from .txbuffer.metadata import CHECKPOINT_KEY, QUEUE_ID_KEY

log = logging.getLogger("olr_buffer")
_WARN_HELD_SEGMENTS = 4
#: In the queue directory: temporary files of a changefeed on object storage.
CHANGEFEED_STAGING = "changefeed-tmp"


@dataclass
class PipelineOptions:
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    block_records: int = DEFAULT_BLOCK_RECORDS
    block_bytes: int = DEFAULT_BLOCK_BYTES
    file_rows: int = DEFAULT_FILE_ROWS
    durable: bool = True
    checkpoint_seconds: float = 5.0
    retain_segments: int = 0
    retain_seconds: float = 0.0
    # service (follow mode)
    threads: list[int] | None = None  # threads in play; None: those with files at start
    flush_seconds: float = 1.0  # a transaction is published at most this long after it is safe
    poll_seconds: float = 0.1  # how often an idle reader looks for new lines and files (see reader_poll_seconds)
    dead_letter: str | None = None  # quarantine bad records in this file instead of stopping
    # run the source's readers in child processes (both cores); False: threads of this
    # process; None: the source decides (the redo source reads a small replay in threads)
    reader_processes: bool | None = None
    changefeed_mode: int = DEFAULT_MODE  # the changefeed directory's mode; files get it without x bits
    table_format: str | None = None  # parquet or delta; None: the changefeed's own (a new one: parquet)
    adopt_changefeed: bool = False  # take over a changefeed written by another (lost) queue of the same input
    source_id: str | None = None  # the source's identity, checked beside the queue's (PostgreSQL: system id, slot)
    stall_seconds: float = 60.0  # warn once about a thread in play silent (and not closed) this long
    log_summary_seconds: float = 60.0  # run: an INFO line of what was published, this often (0: none)
    store_timeout_seconds: float = 30.0  # run: a store call unanswered this long is an outage (said, counted)
    # retention (opt-in, data loss by choice): abandon a transaction without an end that
    # started this long (source clock) or this many SCNs before the watermark
    transaction_retention_seconds: float | None = None
    transaction_retention_scn: int | None = None


def reader_poll_seconds(opts: PipelineOptions) -> float:
    """How often an idle reader of ``run`` looks for new lines: ``poll_seconds``, or half
    the flush interval if that is shorter (at least 10 ms). A commit waits for a look of
    every thread's reader (the watermark) and then for the flush: a poll as long as the
    flush interval would double the latency asked for."""
    return min(opts.poll_seconds, max(opts.flush_seconds / 2, 0.01))


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
class RunSummary:
    """What one run (``replay`` or ``run``) did (counts are this run's), and where the
    changefeed and queue stand."""

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
    late_transactions: int = 0
    abandoned_transactions: int = 0
    abandoned_rows: int = 0
    abandoned_records: int = 0
    extra_end_records: int = 0
    open_transactions: int = 0
    next_tx_seq: int = 0
    files_published: int = 0  # by this run
    changefeed_files: int = 0  # the changefeed's, this run's and earlier ones
    quarantined: int = 0
    checkpoints: int = 0
    segments_deleted: int = 0
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


class Pipeline:
    """Queue, source, dispatcher and sink of one run, restored from the queue.

    ``source``: where the changes come from, a directory of redo log files or a URI whose
    scheme names the kind of source (:func:`olr_buffer.sources.kind_of`);
    ``source_options``: that source's own options (PostgreSQL: slot, publication ...)."""

    def __init__(
        self,
        source: str,
        queue_dir: str,
        changefeed_dir: str,
        options: PipelineOptions | None = None,
        source_options: dict[str, Any] | None = None,
        retry: OutageRetry | None = None,
    ):
        self.options = opts = options or PipelineOptions()
        self.started = time.monotonic()
        self.queue = LmdbQueue(queue_dir, segment_bytes=opts.segment_bytes, durable=opts.durable)
        self.sink: Sink | None = None
        self.source: SourceRunner | None = None
        #: an object store that cannot be reached: retried (run), or the run fails (replay)
        self.retry = retry
        try:
            queue_id = self.queue.meta(QUEUE_ID_KEY)
            self.sink = SINKS["parquet"].build(
                changefeed_dir, file_rows=opts.file_rows, durable=opts.durable, mode=opts.changefeed_mode,
                table_format=opts.table_format, retry=retry,
                # a changefeed on object storage: temporary files in the queue directory (local,
                # this process's), and the lease recorded as this queue's
                staging=os.path.join(queue_dir, CHANGEFEED_STAGING),
                lease_owner=queue_id.decode() if queue_id else None,
            )
            self.appended = threading.Event()
            settings = SourceSettings(
                block_records=opts.block_records,
                block_bytes=opts.block_bytes,
                processes=opts.reader_processes,
                dead_letter=opts.dead_letter,
                on_append=self.appended.set,
            )
            self.source = open_source(source, self.queue, settings, **(source_options or {}))
            self.kind = kind_of(source)  # how its positions read in logs
            self.threads = self.source.prepare(opts.threads, self.queue.meta_items(self.source.state_prefix))
            self.dispatcher = Dispatcher(
                self.queue,
                self.sink,
                self.threads,
                start_index=self.queue.first_index,
                published_through=self.sink.last_commit,
            )
            state = self.queue.meta(CHECKPOINT_KEY)
            legacy = None  # the changefeed's position in an older checkpoint
            new_threads: set[int] = set()  # in play now, not when the last checkpoint was written
            if state is not None:
                try:
                    doc = self.dispatcher.restore(state)
                except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                    raise damaged_checkpoint(queue_dir, exc) from exc
                legacy = doc.changefeed or {}
                previous = doc.threads
                if previous is not None:
                    # a thread newly in play may deliver records below what was published
                    # while it was not: late records, not bad input
                    self.dispatcher.strict = set(self.threads) & set(previous)
                    new_threads = set(self.threads) - set(previous)
            elif self.queue.first_index > 0:
                raise DispatchError(
                    f"{queue_dir}: the queue starts at index {self.queue.first_index} but has no dispatcher checkpoint",
                    hint="the queue directory is damaged; start again with an empty queue and changefeed",
                )
            adopting = self._open_sink(queue_dir, legacy)
            # replay checks them too (see replay): its input is complete, so their records
            # below what was published would be lost, not late
            self._new_threads = set() if adopting else new_threads
            self.source.refuse_below(self.dispatcher.strict, self.dispatcher.published_through)
        except BaseException:
            # refused: a queue or changefeed directory it made, still unused, is removed
            if self.source is not None:
                self.source.close()
            if self.sink is not None:
                self.sink.release(remove_if_unused=True)
            self.queue.close_and_remove_if_unused({QUEUE_ID_KEY})
            raise
        self._stats0 = copy.copy(self.dispatcher.totals())
        self._files0 = self.sink.figures().files_published
        self.checkpointer = Checkpointer(
            self.queue,
            self.dispatcher,
            self.sink,
            self.threads,
            interval=opts.checkpoint_seconds,
            retain_segments=opts.retain_segments,
            retain_seconds=opts.retain_seconds,
        )
        self.following = False  # serve(): the input is never complete
        self._held_warned: set[str] = set()
        self._held_last: str | None = None  # the transaction _warn_held found at the last checkpoint
        self._dead_letters: DeadLetters | None = None  # abandoned transactions (opened at the first)

    def _open_sink(self, queue_dir: str, legacy: Any) -> bool:
        """Record the queue's id (a new queue: before anything reaches the sink), then open
        the sink: it checks that this queue (and source) may write it, against the
        position stored at the queue's last checkpoint (:meth:`Sink.open`). True when the
        sink is adopted from another queue."""
        assert self.sink is not None and self.source is not None
        raw = self.queue.meta(QUEUE_ID_KEY)
        source_id = self.options.source_id if self.options.source_id is not None else self.source.source_id
        owner = ChangefeedOwner(raw.decode() if raw else uuid.uuid4().hex, source_id)
        if raw is None:
            self.queue.append([], {QUEUE_ID_KEY: owner.queue_id.encode()})
        stored = self.queue.meta(self.sink.position_key)
        opening = self.sink.open(owner, stored, queue=queue_dir, adopt=self.options.adopt_changefeed, legacy=legacy)
        self.dispatcher.log_skipped = opening.adopting
        if opening.adopting:
            # the input is read again from its start: ends below the changefeed's last
            # commit are skipped as published, neither refused nor counted as late
            self.dispatcher.strict = set()
            self.dispatcher.last_key = None
        else:
            # published after the last checkpoint (or before the first) by this queue, which
            # then crashed: its counters do not have them, and they are skipped when read again
            tx, rows = opening.published_since_checkpoint
            self.dispatcher.stats.published += tx
            self.dispatcher.stats.rows += rows
        return opening.adopting

    # -- checkpoint cycle ----------------------------------------------------------------

    def checkpoint(self) -> None:
        """Run the checkpoint cycle now (see :class:`Checkpointer`), after abandoning the
        transactions the retention limit expires."""
        self.abandon_expired()
        self.checkpointer.commit()
        if self.source.following:  # a replay reports what is still open in its summary
            self._warn_held()

    def abandon_expired(self) -> list[AbandonedTransaction]:
        """The retention limit: abandon what it expires (see
        :meth:`Dispatcher.abandon_expired`), log each at WARNING and write it to the
        dead-letter file (before the checkpoint that forgets it: at least once)."""
        opts = self.options
        gone = self.dispatcher.abandon_expired(opts.transaction_retention_seconds, opts.transaction_retention_scn)
        for a in gone:
            log.warning(
                "transaction %s abandoned by the retention limit: %s; %d row(s) (%d record(s)) dropped, not published",
                a.xid, a.reason, a.rows, a.records,
                extra={"xid": a.xid, "rows": a.rows, "records": a.records, "first_scn": a.first_scn},
            )
            if opts.dead_letter:
                if self._dead_letters is None:
                    self._dead_letters = DeadLetters(opts.dead_letter)
                self._dead_letters.put_doc(a.as_dict(), what=f"abandoned transaction {a.xid}")
        return gone

    def _warn_held(self) -> None:
        """Warn once per transaction without an end that keeps ``_WARN_HELD_SEGMENTS`` or more
        segments from cleanup, at two checkpoints in a row (fewer, or once, may be one that
        is simply in flight: its end in a block another thread's reader has not appended
        yet)."""
        txn = self.dispatcher.oldest_unended()
        last, self._held_last = self._held_last, (txn.xid if txn is not None else None)
        if txn is None or txn.xid in self._held_warned or txn.xid != last:
            return
        held = held_segments(self.queue.segments(), txn.first_block, self.dispatcher.tailer.index)
        if len(held) >= _WARN_HELD_SEGMENTS:
            self._held_warned.add(txn.xid)
            log.warning(
                "transaction %s (from scn %d) has not ended and keeps %d queue segment(s), %.1f MB, from cleanup; "
                "olr-buffer status shows what it holds",
                txn.xid, txn.first_scn, len(held), sum(s.bytes for s in held) / 1e6,
                extra={"xid": txn.xid, "first_scn": txn.first_scn, "segments_held": len(held)},
            )

    def maybe_checkpoint(self) -> None:
        if self.checkpointer.due():
            self.checkpoint()

    # -- offline -------------------------------------------------------------------------

    def replay(self, on_progress: Callable[[Progress], None] | None = None, progress_every: float = 0.5) -> RunSummary:
        """Read every log file to its end, publish every committed transaction."""
        source, dispatcher = self.source, self.dispatcher
        progress = Progress()
        if self._new_threads:
            # a thread new to this queue, whose records lie at or below a commit published
            # without it, is refused (run counts them as late and warns; a replay, which
            # takes its input as complete, would drop committed transactions)
            source.refuse_below(dispatcher.strict | self._new_threads, dispatcher.published_through)
        with self._running(follow=False):
            last_report = 0.0
            while True:
                n = dispatcher.poll()
                self._tell_published()
                now = time.monotonic()
                if on_progress and now - last_report >= progress_every:
                    last_report = now
                    self._fill_progress(progress)
                    on_progress(progress)
                self.maybe_checkpoint()
                if n:
                    continue
                if not source.alive():
                    if dispatcher.poll() == 0 and dispatcher.position >= self.queue.next_index:
                        break
                    continue
                self.appended.wait(0.2)
                self.appended.clear()
            source.join()
            if not source.errors:
                # the input is complete: every thread has written everything
                dispatcher.publish_ready(INFINITE_SCN)
            # also after bad input: what was accepted is published and checkpointed
            self.checkpoint()
        if on_progress:
            self._fill_progress(progress)
            on_progress(progress)
        if source.errors:
            raise source.errors[0]
        return self.summary()

    # -- service -------------------------------------------------------------------------

    def serve(self, stop: threading.Event, on_tick: Callable[["Pipeline"], None] | None = None) -> RunSummary:
        """Follow the source and publish until ``stop`` is set; then stop cleanly: readers
        at a record boundary, everything watermark-safe published, a last checkpoint."""
        opts = self.options
        source, dispatcher, sink = self.source, self.dispatcher, self.sink
        dispatcher.track_closed = True
        self.following = True
        if self.retry is not None:  # while an outage blocks the loop, metrics and health stay fresh
            self.retry.on_wait = (lambda: on_tick(self)) if on_tick else None
        watch = _ThreadWatch(self, opts.stall_seconds) if source.watches_stalls else None
        bad_records = BadRecordLog(opts.dead_letter) if opts.dead_letter else None
        with self._running(follow=True):
            log.info("following %s: %squeue index %d", source.name,
                     f"threads in play {self.threads}, " if self.kind.shows_threads else "", dispatcher.position,
                     extra={"input": source.name, "threads": self.threads, "queue_index": dispatcher.position})
            last_scan = time.monotonic()
            published_log = _PublishedLog(self, opts.log_summary_seconds, last_scan)
            while not stop.is_set() and not source.errors:
                dispatcher.closed_through.update(source.closed_through())
                n = dispatcher.poll()
                self._tell_published()
                now = time.monotonic()
                pending = sink.pending_since()
                if pending is not None and now - pending >= opts.flush_seconds:
                    sink.flush()
                self.maybe_checkpoint()
                if now - last_scan >= 1.0:
                    last_scan = now
                    for t in source.new_threads():
                        log.warning(
                            "redo thread %d appeared after the start and is not in play: it does not hold the "
                            "watermark, so its rows of transactions already published are counted as late "
                            "records and not published (give every thread with --threads)", t,
                            extra={"redo_thread": t})
                    if watch:
                        watch.check(now)
                    published_log.check(now)
                    if bad_records:
                        bad_records.check(now)
                if on_tick:
                    on_tick(self)
                if not n:
                    pending = sink.pending_since()
                    wait = opts.flush_seconds - (now - pending) if pending is not None else opts.poll_seconds
                    self.appended.wait(max(0.005, min(wait, opts.poll_seconds)))
                    self.appended.clear()
            log.info("stopping: readers finish their block")
            source.stop()
            source.join()
            while dispatcher.poll():
                pass
            self.checkpoint()
            if bad_records:
                bad_records.check(time.monotonic(), final=True)
        if source.errors:
            raise source.errors[0]
        log.info("stopped: %s", changefeed_at(sink.next_tx_seq), extra={"last_tx_seq": sink.next_tx_seq - 1})
        return self.summary()

    @contextmanager
    def _running(self, follow: bool) -> Iterator[None]:
        """The source started (to the end of the input, or following it) with the garbage
        collector quiet; on any error the source is stopped and joined and the sink's
        unpublished file dropped (the next run publishes it again) before it goes on."""
        source = self.source
        with quiet_gc():
            source.start(follow=follow, poll_interval=reader_poll_seconds(self.options))
            try:
                yield
            except BaseException:
                source.stop()
                source.join()
                self.sink.abandon()
                raise

    def _tell_published(self) -> None:
        """Tell the source what the sink accepted and what it made durable."""
        self.source.acknowledge(Acknowledgement(self.dispatcher.last_key, self.sink.last_commit))

    # -- reporting -----------------------------------------------------------------------

    def waiting_for(self) -> list[int]:
        """Threads in play that have not written a record yet: nothing is published before."""
        return [t for t in self.threads if self.dispatcher.progress.get(t, -1) < 0 and t not in self.dispatcher.closed]

    def thread_states(self) -> dict[int, str]:
        """``open``, ``closed`` or ``finished`` (its input read to the end, by replay) per thread."""
        d = self.dispatcher
        read = self.source.threads()
        out = {}
        for t in sorted(set(read) | set(d.progress) | set(d.closed)):
            done = read.get(t, False) and not self.following
            out[t] = "finished" if done and t not in d.closed else d.thread_state(t)
        return out

    def _fill_progress(self, p: Progress) -> None:
        d = self.dispatcher
        p.bytes_read, p.bytes_total = self.source.input_size() or (0, 0)
        p.records = d.stats.records
        p.published = d.stats.published
        p.open_transactions = len(d.open)
        p.watermark = d.watermark

    def summary(self) -> RunSummary:
        s = self.dispatcher.totals()
        d = {f.name: getattr(s, f.name) - getattr(self._stats0, f.name) for f in fields(DispatchStats)}
        segs = self.queue.segments()
        figures = self.source.figures()
        return RunSummary(
            threads=list(self.threads),
            records_read=figures.records_read,
            blocks_dispatched=d["blocks"],
            transactions_published=d["published"],
            rows_published=d["rows"],
            rolled_back=d["rolled_back"],
            no_begin=d["no_begin"],
            empty=d["empty"],
            already_published=d["already_published"],
            compensations=d["compensations"],
            unmatched_compensations=d["unmatched_compensations"],
            late_records=d["late_records"],
            late_transactions=d["late_transactions"],
            abandoned_transactions=d["abandoned_transactions"],
            abandoned_rows=d["abandoned_rows"],
            abandoned_records=d["abandoned_records"],
            extra_end_records=d["extra_ends"],
            open_transactions=len(self.dispatcher.open),
            next_tx_seq=self.sink.next_tx_seq,
            files_published=self.sink.figures().files_published - self._files0,
            changefeed_files=self.sink.figures().files_published,
            quarantined=figures.quarantined,
            checkpoints=self.checkpointer.count,
            segments_deleted=self.checkpointer.segments_deleted,
            queue_segments=len(segs),
            queue_bytes=sum(x.bytes for x in segs),
            seconds=time.monotonic() - self.started,
        )

    def close(self, failed: bool = False) -> None:
        """``failed``: the run stopped on an error; a queue or changefeed directory it made
        and left unused (nothing read into the queue, nothing published) is removed."""
        self.source.close()
        if self._dead_letters is not None:
            self._dead_letters.close()
        if self.sink is not None:
            self.sink.release(remove_if_unused=failed)
        if failed:
            self.queue.close_and_remove_if_unused({QUEUE_ID_KEY})
        else:
            self.queue.close()


class _ThreadWatch:
    """What `run` warns about, once each: late records of a thread (again when more come,
    at most once a minute), and a thread in play that is silent and not closed while a
    commit or rollback waits for the watermark."""

    def __init__(self, pipeline: Pipeline, stall_seconds: float) -> None:
        self.pipeline = pipeline
        self.stall_seconds = stall_seconds
        self._late_logged: dict[int, tuple[int, float]] = {}
        self._silent: dict[int, tuple[int, float]] = {}
        self._stalled: set[int] = set()

    def check(self, now: float) -> None:
        d = self.pipeline.dispatcher
        for t, n in d.late_by_thread.items():
            seen, when = self._late_logged.get(t, (0, -1e9))
            if n > seen and now - when >= 60.0:
                self._late_logged[t] = (n, now)
                log.warning("redo thread %d: %d late record(s) so far: rows of transactions already published "
                            "(or ends below them), not published; the thread is %s", t, n,
                            "in play" if t in d.progress else "not in play for the watermark",
                            extra={"redo_thread": t, "late_records": n})
        for t in self.pipeline.threads:
            p = d.progress.get(t, -1)
            if t in d.closed:
                self._silent.pop(t, None)
                self._stalled.discard(t)
                continue
            last = self._silent.get(t)
            if last is None or last[0] != p:
                self._silent[t] = (p, now)
                self._stalled.discard(t)
            elif now - last[1] >= self.stall_seconds and t not in self._stalled and d.ends_waiting:
                # (an idle source, nothing waiting: a silent thread holds nothing back)
                self._stalled.add(t)
                log.warning("redo thread %d has written nothing for %.0fs and is not closed (progress %s): it holds "
                            "the watermark, so nothing above it is published", t, now - last[1],
                            p if p >= 0 else "none yet", extra={"redo_thread": t, "progress": p})


class _PublishedLog:
    """`run`'s INFO line every ``seconds`` in which something was published: files,
    transactions and rows since the last line, where the changefeed stands (its last
    ``tx_seq`` and commit position) and how far behind the source it is."""

    def __init__(self, pipeline: Pipeline, seconds: float, now: float) -> None:
        self.pipeline = pipeline
        self.seconds = seconds
        self.last = now
        self.counts = self._counts()

    def _counts(self) -> tuple[int, int, int]:
        # the sink's own counts: what its files hold, not what the dispatcher handed over
        # (a transaction handed over in one interval may be in a file of the next)
        f = self.pipeline.sink.figures()
        return f.files_published, f.transactions_published, f.rows_published

    def check(self, now: float) -> None:
        if self.seconds <= 0 or now - self.last < self.seconds:
            return
        counts = self._counts()
        files, transactions, rows = (a - b for a, b in zip(counts, self.counts))
        seconds, self.last, self.counts = now - self.last, now, counts
        if not files:
            return
        from .service import seconds_behind_source

        p, kind = self.pipeline, self.pipeline.kind
        commit = p.sink.last_commit
        behind = seconds_behind_source(p, time.time_ns())
        log.info("published %d file(s), %d transaction(s), %d row(s) in the last %.0fs; %s, last commit at %s %s; "
                 "%.1fs behind the source", files, transactions, rows, seconds, changefeed_at(p.sink.next_tx_seq),
                 kind.position_name, kind.format_position(commit.scn) if commit else "-", behind,
                 extra={"files": files, "transactions": transactions, "rows": rows,
                        "interval_seconds": round(seconds, 3),
                        "last_tx_seq": p.sink.next_tx_seq - 1, "c_scn": commit.scn if commit else None,
                        "position": kind.format_position(commit.scn) if commit else None,
                        "seconds_behind_source": round(behind, 3)})


def changefeed_at(next_tx_seq: int) -> str:
    """Where the changefeed stands, for a log line: its last ``tx_seq``, if it has one."""
    return f"changefeed at tx_seq {next_tx_seq - 1}" if next_tx_seq else "nothing published yet"


def run_service(
    source: str,
    queue_dir: str,
    changefeed_dir: str,
    options: PipelineOptions | None,
    stop: threading.Event,
    on_tick: Callable[[Pipeline], None] | None = None,
    source_options: dict[str, Any] | None = None,
) -> RunSummary:
    """``olr-buffer run``: follow ``source`` (a directory of redo logs, a URI) until
    ``stop`` is set."""
    opts = options or PipelineOptions()
    if opts.reader_processes is None:
        opts = replace(opts, reader_processes=True)
    if not os.path.exists(queue_dir):  # a run the source would refuse leaves nothing behind
        kind_of(source).check_new_run(source, opts.threads)
    # a store that cannot be reached is waited for (until stopped), not a reason to stop
    pipeline = Pipeline(source, queue_dir, changefeed_dir, opts, source_options,
                        retry=OutageRetry(stop, timeout=opts.store_timeout_seconds))
    try:
        summary = pipeline.serve(stop, on_tick)
    except BaseException:
        pipeline.close(failed=True)
        raise
    pipeline.close()
    return summary


def replay(
    input_dir: str,
    queue_dir: str,
    changefeed_dir: str,
    options: PipelineOptions | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    progress_every: float = 0.5,
) -> RunSummary:
    """Read every log file of ``input_dir`` to its end through the queue, publish every
    committed transaction, return the summary. Resumes where a killed run stopped. An
    input the source cannot replay (no log files) is refused before anything is created."""
    kind_of(input_dir).check_replay(input_dir)
    pipeline = Pipeline(input_dir, queue_dir, changefeed_dir, options)
    try:
        summary = pipeline.replay(on_progress, progress_every)
    except BaseException:
        pipeline.close(failed=True)
        raise
    pipeline.close()
    return summary
