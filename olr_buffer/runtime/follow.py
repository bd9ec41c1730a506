"""Running until stopped: ``olr-buffer run`` follows its source."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..dead_letters import BadRecordLog
from ..errors import WriterHeldError
from ..service.role import ServiceRole
from ..sinks import CanBeTakenOver
from ..sources import SourceAt, locate
from ..store import OutageRetry, StoreError, store_state
from .assemble import Pipeline, RunSummary
from .options import PipelineOptions
from .running import running
from .standby import Standby

if TYPE_CHECKING:
    from ..service.metrics import Metrics

log = logging.getLogger("olr_buffer")


def run_service(
    source: str | SourceAt,
    queue_dir: str,
    changefeed_dir: str,
    options: PipelineOptions | None,
    stop: threading.Event,
    on_tick: Callable[[], None] | None = None,
    source_options: dict[str, Any] | None = None,
    role: ServiceRole | None = None,
    metrics: Metrics | None = None,
    hurry: threading.Event | None = None,
) -> RunSummary:
    """``olr-buffer run``: follow ``source`` (a directory of redo logs, a URI, with
    ``source_options``, or a :class:`~olr_buffer.sources.SourceAt`) until ``stop`` is set;
    ``on_tick()`` at each turn of its loop. ``metrics``: given the service's figures (at
    most once a second) and, while it stands by, its role. ``opts.standby``: first wait
    while another service writes the changefeed, then take it over (:mod:`.standby`;
    ``role`` says which it is). ``hurry`` (set after ``stop``: a second stop signal): a
    call to the changefeed's store under way is given up at once, not after
    ``opts.store_timeout_seconds``. Logs how it stopped, with what this run did."""
    summary = _run_until_stopped(
        source, queue_dir, changefeed_dir, options, stop, on_tick, source_options, role, metrics, hurry
    )
    if summary is None:  # stopped before the run began (said)
        return RunSummary()
    log.info(
        "stopped%s: %d records read (lwn heartbeats aside), %d transactions published this run, %s",
        " cleanly" if summary.unpublished is None else f" ({summary.unpublished} transaction(s) left in the queue)",
        summary.records_read,
        summary.transactions_published,
        changefeed_at(summary.next_tx_seq),
        extra={
            "records": summary.records_read,
            "transactions": summary.transactions_published,
            "last_tx_seq": summary.next_tx_seq - 1,
        },
    )
    return summary


def _run_until_stopped(
    source: str | SourceAt,
    queue_dir: str,
    changefeed_dir: str,
    options: PipelineOptions | None,
    stop: threading.Event,
    on_tick: Callable[[], None] | None,
    source_options: dict[str, Any] | None,
    role: ServiceRole | None,
    metrics: Metrics | None,
    hurry: threading.Event | None = None,
) -> RunSummary | None:
    """The run; None if it was stopped before it began: while it stood by, or while the
    changefeed's store did not answer (one line says so)."""
    at = locate(source, options=source_options)
    opts = options or PipelineOptions()
    if opts.reader_processes is None:
        opts = replace(opts, reader_processes=True)
    if not os.path.exists(queue_dir):  # a run the source would refuse leaves nothing behind
        at.check_new_run(opts.threads)
    # the changefeed's store calls of the whole run, a standby's looks at the lease included:
    # a store that cannot be reached is waited for (until stopped), not a reason to stop
    retry = OutageRetry(stop, timeout=opts.store_timeout_seconds, hurry=hurry)
    if metrics is not None:
        metrics.watch_store(retry)
    standby = None
    if opts.standby:  # it takes over what another queue wrote: as --adopt-changefeed
        opts = replace(opts, adopt_changefeed=True)
        role = role or ServiceRole()
        on_wait = metrics.standing_by if metrics is not None else None
        standby = Standby(changefeed_dir, queue_dir, opts, stop, role, on_wait, retry)
    while True:
        if standby is not None and not standby.wait():
            standby.stopped()
            return None
        try:
            pipeline = Pipeline(at, queue_dir, changefeed_dir, opts, retry=retry)
        except WriterHeldError as exc:
            if standby is None:
                raise
            standby.refused(exc)  # taken by another one meanwhile: stand by again
            if stop.wait(opts.standby_poll_seconds):
                standby.stopped()
                return None
            continue
        except StoreError as exc:
            if not (exc.retryable and stop.is_set()):
                raise
            _stopped_opening(exc)
            return None
        break
    if standby is not None:
        standby.active(pipeline.sink.figures().lease_generation)
    try:
        return pipeline.run(follow, stop, on_tick, metrics, role if standby is not None else None)
    finally:
        if standby is not None:
            standby.forget()


def follow(
    pipeline: Pipeline,
    stop: threading.Event,
    on_tick: Callable[[], None] | None = None,
    metrics: Metrics | None = None,
    role: ServiceRole | None = None,
) -> RunSummary:
    """Follow the source and publish until ``stop`` is set; then stop cleanly: readers
    at a record boundary, everything watermark-safe published, a last checkpoint. If the
    changefeed's store fails a call then, or does not answer it (see
    :class:`~olr_buffer.store.OutageRetry`), the stop goes on without it: one line says
    what is left unpublished (the summary's ``unpublished``), all of it in the queue. At each
    turn of the loop ``on_tick()``, and ``metrics`` ticks (``/health``) and is given the
    pipeline's figures when they are due (with ``role``: a standby's, once active)."""
    p = pipeline
    opts = p.options
    source, dispatcher, sink = p.source, p.dispatcher, p.sink
    dispatcher.follow()
    p.following = True

    def tick() -> None:
        if on_tick is not None:
            on_tick()
        if metrics is not None and metrics.tick():
            metrics.update(p.run_figures(), role)

    if p.retry is not None:  # while an outage blocks the loop, metrics and health stay fresh
        p.retry.on_wait = tick
    watch = _ThreadWatch(p, opts.stall_seconds) if source.watches_stalls else None
    bad_records = BadRecordLog(opts.dead_letter) if opts.dead_letter else None
    with running(p, follow=True):
        log.info(
            "following %s: %squeue index %d",
            source.name,
            f"threads in play {p.threads}, " if source.kind.shows_threads else "",
            dispatcher.position,
            extra={"input": source.name, "threads": p.threads, "queue_index": dispatcher.position},
        )
        last_scan = time.monotonic()
        published_log = _PublishedLog(p, opts.log_summary_seconds, last_scan)
        unpublished: int | None = None
        try:
            _follow_until_stopped(p, stop, tick, watch, published_log, bad_records)
        except StoreError as exc:
            if not (exc.retryable and stop.is_set()):
                raise
            unpublished = _stop_without_store(p, exc)  # (stopping, the store does not answer)
        if bad_records:
            bad_records.check(time.monotonic(), final=True)
    error = source.error()
    if error is not None:
        raise error
    log.info("stopped: %s", changefeed_at(sink.next_tx_seq), extra={"last_tx_seq": sink.next_tx_seq - 1})
    summary = p.summary()
    summary.unpublished = unpublished
    return summary


def _follow_until_stopped(
    p: Pipeline,
    stop: threading.Event,
    tick: Callable[[], None],
    watch: _ThreadWatch | None,
    published_log: _PublishedLog,
    bad_records: BadRecordLog | None,
) -> None:
    """The loop of :func:`follow`, then its clean stop: readers stopped at a block
    boundary, everything watermark-safe published, a last checkpoint."""
    opts, source, dispatcher, sink = p.options, p.source, p.dispatcher, p.sink
    # an output taken over by another writer (its lease, found so by a renewal while
    # nothing is published) stops the run as a fenced publication does
    check_held = sink.check_held if isinstance(sink, CanBeTakenOver) else None
    last_scan = time.monotonic()
    while not stop.is_set() and source.error() is None:
        if check_held is not None:
            check_held()
        dispatcher.confirm_closed(source.closed_through())
        n = dispatcher.poll()
        p.tell_published()
        now = time.monotonic()
        pending = sink.pending_since()
        if pending is not None and now - pending >= opts.flush_seconds:
            sink.flush()
        p.maybe_checkpoint()
        if now - last_scan >= 1.0:
            last_scan = now
            for t in source.new_threads():
                log.warning(
                    "redo thread %d appeared after the start and is not in play: it does not hold the "
                    "watermark, so its rows of transactions already published are counted as late "
                    "records and not published (give every thread with --threads)",
                    t,
                    extra={"redo_thread": t},
                )
            if watch:
                watch.check(now)
            published_log.check(now)
            if bad_records:
                bad_records.check(now)
        tick()
        if not n:
            pending = sink.pending_since()
            wait = opts.flush_seconds - (now - pending) if pending is not None else opts.poll_seconds
            p.appended.wait(max(0.005, min(wait, opts.poll_seconds)))
            p.appended.clear()
    log.info("stopping: readers finish their block")
    source.stop()
    while dispatcher.poll():
        pass
    p.checkpoint()


def _stopped_opening(exc: StoreError) -> None:
    """Stopped while the changefeed was being opened, its store not answering (the call
    given up, see :class:`~olr_buffer.store.OutageRetry`) or not reached: nothing was
    read or published, the queue holds what it held (a new one is removed). One line
    says so."""
    log.warning(
        "stopped during start-up, before the changefeed was opened: its store %s; nothing was published or "
        "lost, the next start begins where this one would have",
        store_state(exc),
        extra={"error": str(exc)},
    )


def _stop_without_store(p: Pipeline, exc: StoreError) -> int:
    """Stopping, a call to the changefeed's store failed or was given up (it does not
    answer): the readers are stopped, what the sink holds is dropped (the queue keeps it,
    and the checkpoint does not cover it: the next run publishes it), the lease is left to
    expire, and one line says so. How many transactions were handed over and not published."""
    p.source.stop()
    p.sink.abandon()
    figures = p.sink.figures()
    left = figures.transactions_dropped
    why = store_state(exc)
    lease = ""
    if figures.lease_expiry is not None:
        ttl, skew = figures.lease_expiry
        lease = (
            "; the changefeed's lease is not released: another writer takes over once it expires "
            f"({ttl:g} s + {skew:g} s after its last renewal)"
        )
    log.warning(
        "stopping without publishing %d transaction(s): the changefeed's store %s; they are in the queue and are "
        "published at the next start%s",
        left,
        why,
        lease,
        extra={"unpublished_transactions": left, "error": str(exc)},
    )
    return left


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
                log.warning(
                    "redo thread %d: %d late record(s) so far: rows of transactions already published "
                    "(or ends below them), not published; the thread is %s",
                    t,
                    n,
                    "in play" if t in d.progress else "not in play for the watermark",
                    extra={"redo_thread": t, "late_records": n},
                )
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
                log.warning(
                    "redo thread %d has written nothing for %.0fs and is not closed (progress %s): it holds "
                    "the watermark, so nothing above it is published",
                    t,
                    now - last[1],
                    p if p >= 0 else "none yet",
                    extra={"redo_thread": t, "progress": p},
                )


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
        p, kind = self.pipeline, self.pipeline.source.kind
        commit = p.sink.last_commit
        behind = p.seconds_behind_source(time.time_ns())
        log.info(
            "published %d file(s), %d transaction(s), %d row(s) in the last %.0fs; %s, last commit at %s %s; "
            "%.1fs behind the source",
            files,
            transactions,
            rows,
            seconds,
            changefeed_at(p.sink.next_tx_seq),
            kind.position_name,
            kind.format_position(commit.scn) if commit else "-",
            behind,
            extra={
                "files": files,
                "transactions": transactions,
                "rows": rows,
                "interval_seconds": round(seconds, 3),
                "last_tx_seq": p.sink.next_tx_seq - 1,
                "c_scn": commit.scn if commit else None,
                "position": kind.format_position(commit.scn) if commit else None,
                "seconds_behind_source": round(behind, 3),
            },
        )


def changefeed_at(next_tx_seq: int) -> str:
    """Where the changefeed stands, for a log line: its last ``tx_seq``, if it has one."""
    return f"changefeed at tx_seq {next_tx_seq - 1}" if next_tx_seq else "nothing published yet"
