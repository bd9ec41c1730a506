"""Assembling one run: the queue, the sink, the source, the dispatcher and the checkpoint
cycle of a queue directory and a changefeed, restored from the queue (:class:`Pipeline`).
Running it is :mod:`.replay` (to the end of the input) and :mod:`.follow` (until stopped).

The runtime reaches the source and the sink only through their contracts
(:mod:`olr_buffer.sources.base`, through :mod:`.source_calls`; :mod:`olr_buffer.sinks.base`,
the sink built by its kind in the sink registry with its own options).
"""

from __future__ import annotations

import copy
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..changes import INFINITE_SCN
from ..dispatcher import Dispatcher, DispatchError, DispatchStats, ReplayFigures
from ..sinks import ChangefeedOwner, Sink, SinkSettings, open_sink
from ..sources import SourceAt, locate
from ..store import OutageRetry
from ..txbuffer import LmdbQueue
from ..txbuffer.metadata import CHECKPOINT_KEY, QUEUE_ID_KEY
from .checkpoint import Checkpointer
from .options import PipelineOptions
from .source_calls import SourceCalls

if TYPE_CHECKING:
    from ..service.metrics import RunFigures

#: In the queue directory: temporary files of a changefeed on object storage.
CHANGEFEED_STAGING = "changefeed-tmp"


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
class RunSummary(ReplayFigures):
    """What one run (``replay`` or ``run``) did (counts are this run's), and where the
    changefeed and queue stand: the figures of every replay, and the queue's."""

    blocks_dispatched: int = 0
    late_transactions: int = 0
    abandoned_transactions: int = 0
    abandoned_rows: int = 0
    abandoned_records: int = 0
    checkpoints: int = 0
    segments_deleted: int = 0
    queue_segments: int = 0
    queue_bytes: int = 0
    #: ``run`` stopped while the changefeed's store did not answer: the transactions handed
    #: to the sink and not published (in the queue: the next run publishes them); None: none
    unpublished: int | None = None


class Pipeline:
    """Queue, source, dispatcher, sink and checkpoint cycle of one run, restored from the
    queue.

    ``source``: where the changes come from, resolved once
    (:func:`olr_buffer.sources.locate`: a directory of redo log files or a URI whose scheme
    names the kind of source, with that source's own options)."""

    def __init__(
        self,
        source: SourceAt | str,
        queue_dir: str,
        changefeed_dir: str,
        options: PipelineOptions | None = None,
        retry: OutageRetry | None = None,
    ):
        self.options = opts = options or PipelineOptions()
        self.started = time.monotonic()
        self.queue = LmdbQueue(queue_dir, segment_bytes=opts.segment_bytes, durable=opts.durable)
        sink: Sink | None = None
        source_calls: SourceCalls | None = None
        #: an object store that cannot be reached: retried (run), or the run fails (replay)
        self.retry = retry
        try:
            queue_id = self.queue.meta(QUEUE_ID_KEY)
            settings = SinkSettings(
                durable=opts.durable,
                retry=retry,
                # a changefeed on object storage: temporary files in the queue directory (local,
                # this process's), and the lease recorded as this queue's
                staging=os.path.join(queue_dir, CHANGEFEED_STAGING),
                lease_owner=queue_id.decode() if queue_id else None,
                lease_timing=opts.lease,
                lease_local=opts.standby,  # (a standby takes a lease over, never a lock)
            )
            self.sink = sink = open_sink(opts.sink, changefeed_dir, settings, opts.sink_flags())
            self.appended = threading.Event()
            self.source = source_calls = SourceCalls(
                locate(source),
                self.queue,
                block_records=opts.block_records,
                block_bytes=opts.block_bytes,
                processes=opts.reader_processes,
                dead_letter=opts.dead_letter,
                on_append=self.appended.set,
            )
            self.threads = self.source.prepare(opts.threads)
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
                doc = self.dispatcher.restore(state)
                legacy = doc.changefeed or {}
                if doc.threads is not None:
                    new_threads = set(self.threads) - set(doc.threads)
            elif self.queue.first_index > 0:
                raise DispatchError(
                    f"{queue_dir}: the queue starts at index {self.queue.first_index} but has no dispatcher checkpoint",
                    hint="the queue directory is damaged; start again with an empty queue and changefeed",
                )
            adopting = self._open_sink(queue_dir, legacy, new_queue=state is None)
            # replay checks them too (see replay): its input is complete, so their records
            # below what was published would be lost, not late
            self.new_threads = set() if adopting else new_threads
            self.source.refuse_below(self.dispatcher.strict, self.dispatcher.published_through)
        except BaseException:
            # refused: a queue or changefeed directory it made, still unused, is removed
            if source_calls is not None:
                source_calls.close()
            if sink is not None:
                sink.release(remove_if_unused=True)
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
            retention_seconds=opts.transaction_retention_seconds,
            retention_scn=opts.transaction_retention_scn,
            dead_letter=opts.dead_letter,
            run_from=self.source.starts_from,
        )
        self.following = False  # follow(): the input is never complete

    def _open_sink(self, queue_dir: str, legacy: Any, new_queue: bool) -> bool:
        """Record the queue's id (a new queue: before anything reaches the sink), then open
        the sink: it checks that this queue (and source) may write it, against the
        position stored at the queue's last checkpoint (:meth:`Sink.open`). True when the
        sink is adopted from another queue: a new queue then reads the source from where
        the changefeed says (its ``run_from``), if it records that and the source can."""
        raw = self.queue.meta(QUEUE_ID_KEY)
        source_id = self.options.source_id if self.options.source_id is not None else self.source.source_id
        owner = ChangefeedOwner(raw.decode() if raw else uuid.uuid4().hex, source_id)
        if raw is None:
            self.queue.append([], {QUEUE_ID_KEY: owner.queue_id.encode()})
        stored = self.queue.meta(self.sink.position_key)
        opening = self.sink.open(owner, stored, queue=queue_dir, adopt=self.options.adopt_changefeed, legacy=legacy)
        if opening.adopting:
            self.dispatcher.adopt()
            if new_queue and opening.run_from:
                self.source.start_from(opening.run_from)
        else:
            self.dispatcher.count_published(*opening.published_since_checkpoint)
        return opening.adopting

    def checkpoint(self) -> None:
        """Run the checkpoint cycle now (see :class:`Checkpointer`)."""
        self.checkpointer.run(following=self.source.following)

    def maybe_checkpoint(self) -> None:
        self.checkpointer.maybe(following=self.source.following)

    def tell_published(self) -> None:
        """Tell the source what the sink accepted and what it made durable."""
        self.source.tell_published(self.dispatcher.last_key, self.sink.last_commit)

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

    def fill_progress(self, p: Progress) -> None:
        d = self.dispatcher
        p.bytes_read, p.bytes_total = self.source.input_size() or (0, 0)
        p.records = d.stats.records
        p.published = d.stats.published
        p.open_transactions = len(d.open)
        p.watermark = d.watermark

    def seconds_behind_source(self, now_ns: int) -> float:
        """Like Debezium's MilliSecondsBehindSource, in seconds: how far the changefeed is
        behind the source's clock. While a commit waits for the watermark (a silent thread
        holds it), now minus the oldest such commit's ``tm``, growing; otherwise the delay
        of the last published commit (publication time minus its ``tm``), 0 before any."""
        waiting = [t.end_tm for t in self.dispatcher.open.values() if t.end_key is not None and t.end_tm]
        latencies = self.sink.figures().latencies
        last = latencies[-1] if latencies else 0.0
        return max(last, (now_ns - min(waiting)) / 1e9 if waiting else 0.0, 0.0)

    def run_figures(self) -> RunFigures:
        """The figures `run`'s metrics show (:class:`~olr_buffer.service.metrics.RunFigures`)."""
        from ..service.metrics import RunFigures  # (with prometheus_client: only where metrics are served)

        d, sink = self.dispatcher, self.sink
        totals = d.totals()
        source = self.source.figures()
        sf = sink.figures()
        progress = dict(d.progress)
        finite = [v for v in progress.values() if v < INFINITE_SCN]
        now_ns = time.time_ns()
        tms = [t.begin_tm for t in d.open.values() if t.begin_tm]
        segments = self.queue.segments()
        pending = sink.pending_since()
        return RunFigures(
            records_read=source.records_read,
            dead_letters=source.quarantined,
            queue_bytes=sum(s.bytes for s in segments),
            queue_segments=len(segments),
            open_transactions=len(d.open),
            oldest_open_age_seconds=round((now_ns - min(tms)) / 1e9, 3) if tms else 0.0,
            thread_progress=progress,
            thread_states=self.thread_states(),
            threads_waiting=len(self.waiting_for()),
            watermark=d.watermark,
            watermark_lag=(max(finite) - d.watermark) if finite and d.watermark < INFINITE_SCN else 0,
            seconds_behind_source=round(self.seconds_behind_source(now_ns), 3),
            late_records=totals.late_records,
            abandoned_transactions=totals.abandoned_transactions,
            abandoned_rows=totals.abandoned_rows,
            abandoned_records=totals.abandoned_records,
            rolled_back=totals.rolled_back,
            unmatched_compensations=totals.unmatched_compensations,
            transactions_published=totals.published,
            rows_published=totals.rows,
            next_tx_seq=sink.next_tx_seq,
            unpublished_seconds=max(time.monotonic() - pending, 0.0) if pending is not None else 0.0,
            store_outages=sf.store_outages,
            store_retries=sf.store_retries,
            store_outage_seconds=round(sf.store_outage_seconds, 3),
            clock_ahead=sf.clock_ahead,
            latencies=sorted(sf.latencies),
            source_metrics=list(self.source.metrics()),
            lease_generation=sf.lease_generation,
            lease_seconds_left=sf.lease_seconds_left,
            retry=self.retry,
        )

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

    def run(self, how: Callable[..., RunSummary], *args: Any) -> RunSummary:
        """``how(self, *args)`` (:func:`.replay.run_to_end`, :func:`.follow.follow`), then
        close, as failed if it raised."""
        try:
            summary = how(self, *args)
        except BaseException:
            self.close(failed=True)
            raise
        self.close()
        return summary

    def close(self, failed: bool = False) -> None:
        """``failed``: the run stopped on an error; a queue or changefeed directory it made
        and left unused (nothing read into the queue, nothing published) is removed."""
        self.source.close()
        self.checkpointer.close()
        self.sink.release(remove_if_unused=failed)
        if failed:
            self.queue.close_and_remove_if_unused({QUEUE_ID_KEY})
        else:
            self.queue.close()
