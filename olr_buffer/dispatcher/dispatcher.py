"""The dispatcher: tails the queue, tracks transactions by XID, publishes safe commits.

Rules (see docs/formats.md for the contract they implement):

* Thread progress P(t) comes from block summaries (record SCNs and ``lwn``); the
  watermark is ``min P(t)`` over the threads in play. A thread closed by a ``close``
  record does not hold it, within what its reader confirmed (see :meth:`watermark`).
* An end that reaches the queue after a later commit was published cannot be published
  in order: from a thread not in play it is late (counted, never published); from a
  thread in play it is bad input, which the readers refuse before it reaches the queue.
* A transaction's end is its end record with the smallest ``(scn, thread, sequence,
  line)``; an end is acted on once its SCN is at or below the watermark, so every record
  with an SCN up to it has been seen, whatever the interleaving of threads in the queue.
* Commits are published in that key order. A commit is published when the transaction
  has a ``begin`` at or below its SCN and at least one row left after compensation.
* Records without a ``begin`` of an XID that is not held open a transaction, unless they
  are known not to belong to a live one: the XID ended recently (``_ended``), it was
  abandoned, or (in blocks this run reads first) they are at or below the last published
  commit, which no thread in play can still write: late records, counted. So a forgotten
  XID's late records do not open a transaction that never ends.
* Retention (opt-in, :meth:`abandon_expired`): a transaction without an end that started
  too long before the watermark (by SCN) or before the clock (the median ``tm`` of the
  last :data:`CLOCK_ENDS` ends acted on, never going back) is abandoned: no longer held,
  so cleanup frees its segments, never published; its later records are counted as
  abandoned records.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from array import array
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial

from ..changes import (
    COMMIT,
    INFINITE_SCN,
    SEQUENCE,
    Commit,
    CommitKey,
    decode_record,
    decode_records,
    read_summary,
    row_columns,
)
from ..sinks.base import TakesColumns, TransactionSink
from ..txbuffer import Block, QueueError, TxQueue
from ..txbuffer.metadata import seal
from .batch import ColumnRows, ListRows, batch_spans, plan_batch, read_runs
from .checkpoint import (
    Checkpoint,
    DispatchStats,
    HeldTransaction,
    decode_checkpoint,
    encode_checkpoint,
    needed_from,
)
from .errors import DispatchError, damaged_checkpoint
from .replay import BlockCache, Replayer
from .transaction import _LOCATIONS_AS_LIST, OpenTransaction

log = logging.getLogger(__name__)

_ENDED_MEMORY = 20_000  # XIDs remembered after their end, to tell late records from new ones
# Retention's clock is the median tm of this many last ends acted on: one or two ends with
# a wrong tm (an instance's clock far ahead) cannot move it, and so cannot make every open
# transaction look old at once.
CLOCK_ENDS = 5
_ABANDONED_MEMORY = 10_000  # abandoned XIDs remembered, to count their later records
# The batch path: transactions up to this many rows are decoded together (one call per
# batch) and handed to the sink in batches of about _BATCH_MAX_RECORDS records. Batches
# are kept small enough for the CPU's caches: every pass over a batch's rows (decoding,
# slicing, the writer's columns) is then a pass over memory just written; batches of
# 100,000 records cost ~10 % more CPU than of 1,000 (bench/log/2026-11-performance-history.md).
_BATCH_TX_MAX_ROWS = 50_000
# a batch goes over as columns if at most one transaction in this many has rows of its own
_COLUMNS_OWN_SHARE = 16
_BATCH_MAX_RECORDS = 1_000

# A CommitKey without the Python-level ``__new__`` of a NamedTuple (one per end record)
_commit_key = partial(tuple.__new__, CommitKey)


#: an end not yet acted on: (its SCN, its key, when it was added, its transaction). In the
#: order of these tuples, with no key function (the sort compares the SCNs as ints, in C),
#: the entries sort by key, then by when they were added; never by transaction.
Pending = tuple[int, CommitKey, int, OpenTransaction]


@dataclass(frozen=True, slots=True)
class AbandonedTransaction:
    """What :meth:`Dispatcher.abandon_expired` dropped: enough to log it and to write it
    to the dead-letter file (its records are not kept)."""

    xid: str
    reason: str
    rows: int
    records: int
    first_scn: int
    begin_scn: int | None
    begin_tm: int | None
    start_tm: int | None  # the start the time rule measured from (begin tm, or when first seen)
    clock_tm: int | None  # the dispatcher's clock then
    watermark: int
    threads: list[int]
    first_index: int  # the queue index of its first block

    def as_dict(self) -> dict:
        return {"kind": "abandoned_transaction", **{f: getattr(self, f) for f in self.__slots__}}


class Dispatcher:
    """Tails the queue from ``start_index``, holds the transactions of ``threads`` (the
    threads in play) by XID, and hands each committed one to ``sink`` once the watermark
    allows, in commit order; commits at or below ``published_through`` (the changefeed's
    last) are skipped as published. ``batching=False`` sends every transaction down the
    streaming path (tests compare both paths)."""

    def __init__(
        self,
        queue: TxQueue,
        sink: TransactionSink,
        threads: Iterable[int],
        *,
        start_index: int | None = None,
        published_through: CommitKey | None = None,
        cache_blocks: int = 64,
        batching: bool = True,
    ) -> None:
        self.queue = queue
        self.sink = sink
        self.batching = batching
        self.progress: dict[int, int] = {t: -1 for t in threads}
        self.other_progress: dict[int, int] = {}
        self.open: dict[str, OpenTransaction] = {}
        # ends not yet acted on (Pending); sorted by publish_ready (a sorted list is also a
        # heap), appended to by _process
        self._pending: list[Pending] = []
        self._pending_sorted = True
        self._tiebreak = itertools.count()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._abandoned: OrderedDict[str, int] = OrderedDict()  # xid -> scn bound (see abandon_expired)
        self._abandoned_seen: set[str] = set()  # abandoned XIDs whose later records were logged, this run
        self.clock_tm: int | None = None  # retention's clock: see abandon_expired
        self._clock_tms: deque[int] = deque(maxlen=CLOCK_ENDS)  # the tm of the last ends acted on
        self.published_through = published_through  # the changefeed's last commit when this run began
        self.last_key = published_through  # the last commit handed to the sink: never publish below it
        self._fresh_from = queue.next_index  # blocks from here on were never read by an earlier run
        self.late_by_thread: dict[int, int] = {}  # late records per redo thread, this run
        # threads whose late end is bad input, not a late record: in play now and when the
        # changefeed's last commit was published (set by restore and adopt)
        self.strict: set[int] = set(self.progress)
        # closed threads: thread -> first index of the block that closed it
        self.closed: dict[int, int] = {}
        # follow mode: thread -> queue index below which its reader confirmed it still closed
        self.closed_through: dict[int, int] = {}
        self.track_closed = False  # keep the marks that turn a confirmation into progress
        self._top = -1  # the highest progress any block showed: every SCN up to it is written
        self._marks: list[tuple[int, int]] = []  # (block end, _top after it) while a thread is closed
        self.log_skipped = False  # log each commit skipped as already published (adopting a changefeed)
        # per thread, the last block read that holds records of a transaction (see run_from),
        # and the sequence of its first record, once looked up
        self._last_block: dict[int, int] = {}
        self._reached: dict[int, int] = {}
        self.tailer = queue.tailer(start_index)
        self.cache = BlockCache(queue, cache_blocks)
        # a sink that takes rows as columns gets them so, read back without a list a row
        self.columns = isinstance(sink, TakesColumns)
        self.columns_own_share = _COLUMNS_OWN_SHARE  # (the tests take 1: always columns)
        self.replayer = Replayer(self.cache, columns=self.columns)
        self.stats = DispatchStats()
        self._acted = 0  # entries of the ready list publish_ready has looked at

    # -- checkpoint --------------------------------------------------------------------

    def checkpoint_state(
        self,
        *,
        threads: list[int] | None = None,
        written: float | None = None,
    ) -> bytes:
        """The dispatcher's whole state, sealed, to be stored once the sink has made durable
        every transaction handed to it (see :meth:`restore`), with what the pipeline adds:
        the threads in play, the time."""
        txns = {id(t): t for t in self.open.values()}
        for *_, t in self._pending:
            if t.end_key is not None:
                txns.setdefault(id(t), t)
        in_open = {id(t) for t in self.open.values()}
        self._sync_replay_stats()
        doc = Checkpoint(
            position=self.tailer.index,
            progress=dict(self.progress),
            other_progress=dict(self.other_progress),
            closed=dict(self.closed),
            top=self._top,
            watermark=self.watermark,
            transactions=[HeldTransaction(i in in_open, t.to_state()) for i, t in txns.items()],
            ended=list(self._ended),
            stats=self.stats,
            threads=threads,
            written=written,
            clock_tm=self.clock_tm,
            clock_tms=list(self._clock_tms),
            abandoned=list(self._abandoned.items()),
        )
        return seal(encode_checkpoint(doc))

    def restore(self, state: bytes) -> Checkpoint:
        """Take the state of :meth:`checkpoint_state`; returns the whole document. A
        document that decodes but lacks what it must hold is a one-line error naming the
        queue."""
        where = getattr(self.queue, "path", "queue")
        try:
            doc = decode_checkpoint(state, where)
            self._restore(doc)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise damaged_checkpoint(where, exc) from exc
        return doc

    def _restore(self, doc: Checkpoint) -> None:
        self.tailer.index = doc.position
        for t, p in doc.progress.items():
            if t in self.progress:
                self.progress[t] = p
            else:
                self.other_progress[t] = p
        for t, p in doc.other_progress.items():
            self.other_progress.setdefault(t, p)
        self.closed = dict(doc.closed)
        self._top = doc.top
        self._marks.clear()
        self.open.clear()
        self._pending.clear()
        for held in doc.transactions:
            txn = OpenTransaction.from_state(held.transaction)
            if held.in_open:
                self.open[txn.xid] = txn
            if txn.end_key is not None:
                self._pending.append((txn.end_key.scn, txn.end_key, next(self._tiebreak), txn))
        self._pending.sort()
        self._pending_sorted = True
        self._ended = OrderedDict.fromkeys(doc.ended)
        self._abandoned = OrderedDict((x, scn) for x, scn in doc.abandoned)
        self.clock_tm = doc.clock_tm
        self._clock_tms = deque(doc.clock_tms, maxlen=CLOCK_ENDS)
        self.stats = doc.stats
        self.replayer.stats.compensations = self.stats.compensations
        self.replayer.stats.unmatched_compensations = self.stats.unmatched_compensations
        self.replayer.stats.records_after_end = 0
        if doc.threads is not None:
            # a thread newly in play may deliver records below what was published while it
            # was not: late records, not bad input
            self.strict = set(self.progress) & set(doc.threads)

    def adopt(self) -> None:
        """The changefeed is taken over from another queue of the same input, which is read
        again from its start: ends below the changefeed's last commit are skipped as
        published (each logged), neither refused nor counted as late."""
        self.log_skipped = True
        self.strict = set()
        self.last_key = None

    def count_published(self, transactions: int, rows: int) -> None:
        """Count what this queue published after its last checkpoint (or before the first)
        and then crashed: the restored counters do not have it, and it is skipped when read
        again."""
        self.stats.published += transactions
        self.stats.rows += rows

    def follow(self) -> None:
        """The input is followed (``run``): keep the marks that turn a closed thread's
        confirmation (:meth:`confirm_closed`) into progress."""
        self.track_closed = True

    def confirm_closed(self, through: Mapping[int, int]) -> None:
        """Per closed thread, the queue index below which its reader confirmed it still
        closed (the source's ``closed_through``)."""
        self.closed_through.update(through)

    def totals(self) -> DispatchStats:
        """The cumulative counters of this queue (restored from checkpoints)."""
        self._sync_replay_stats()
        return self.stats

    def _sync_replay_stats(self) -> None:
        rs = self.replayer.stats
        self.stats.compensations = rs.compensations
        self.stats.unmatched_compensations = rs.unmatched_compensations
        self.stats.late_records += rs.records_after_end
        rs.records_after_end = 0

    def needed_from(self) -> int:
        """The lowest queue index anyone still needs: the tail position, or the first block
        of the oldest transaction still held. Segments wholly below it can go."""
        return needed_from(
            self.tailer.index,
            itertools.chain((t.first_block for t in self.open.values()), (t.first_block for *_, t in self._pending)),
        )

    def run_from(self) -> dict[int, int]:
        """Per queue thread, the ``sequence`` (a redo log sequence) of the first record a
        new queue must read again so that nothing still held is lost: that of the first
        record on the thread of the transactions held (open, or ended and not yet handed
        to the sink), or, with none there, of the first record of the last block read
        from the thread that holds records of a transaction (what follows it is later in
        the thread's files). A thread for which neither can be told (nothing read from it
        by this process, a block already gone) is left out: it says nothing of it.

        Valid for a changefeed holding every commit handed to the sink so far (call it
        when the sink is about to make them durable): a new queue that reads each thread
        from there, skipping the commits published, publishes every later one whole.
        Cheap: one pass over the transactions held and one block read per thread."""
        for thread, first in self._last_block.items():
            seq = self._sequence_at(first, None)
            if seq is not None:
                self._reached[thread] = seq
        self._last_block.clear()
        firsts: dict[int, tuple[int, int]] = {}
        held = itertools.chain(self.open.values(), (t for *_, t in self._pending))
        for txn in held:
            for thread, locs in txn.locations.items():
                at = (locs[0], locs[1])
                old = firsts.get(thread)
                if old is None or at < old:
                    firsts[thread] = at
        out = dict(self._reached)
        for thread, (first, start) in firsts.items():
            seq = self._sequence_at(first, start)
            if seq is None:
                out.pop(thread, None)  # not known: rather nothing than a file too late
            elif seq < out.get(thread, seq + 1):
                out[thread] = seq
        return out

    def _sequence_at(self, first: int, start: int | None) -> int | None:
        """The ``sequence`` of record ``start`` of the block at ``first`` (None: of the
        block's first transaction record); None if the block is gone or has none."""
        if first < self.queue.first_index:
            return None
        try:
            block = self.queue.read_block(first)
            if start is None:
                groups = read_summary(block.record(0)).groups
                if not groups:
                    return None
                start = groups[0][1]
            return int(decode_record(block.record(start))[SEQUENCE])
        except (QueueError, KeyError, IndexError):
            return None

    def oldest_unended(self) -> OpenTransaction | None:
        """The transaction without an end that started lowest in the queue, if any."""
        return min((t for t in self.open.values() if t.end_key is None), key=lambda t: t.first_block, default=None)

    # -- state -------------------------------------------------------------------------

    @property
    def ends_waiting(self) -> int:
        """How many ends (commits, rollbacks) wait for the watermark (superseded ones included)."""
        return len(self._pending)

    @property
    def watermark(self) -> int:
        """``min P(t)`` over the threads in play. A closed thread counts as infinite for
        every block below the queue index its reader confirmed it closed through (the
        reader read that index, then found nothing after the ``close``): a reopened
        thread writes above every SCN written by then, and everything below that index
        was. Beyond it, and without a confirmation (offline), its own progress counts."""
        w = INFINITE_SCN
        for t, p in self.progress.items():
            if t in self.closed:
                p = max(p, self._closed_bound(t))
            if p < w:
                w = p
        return w

    def _closed_bound(self, thread: int) -> int:
        q = self.closed_through.get(thread, -1)
        if q <= self.closed[thread]:
            return -1  # confirmed before the close reached the queue: not yet
        if q >= self.tailer.index:
            return INFINITE_SCN  # every block read so far is covered
        i = bisect.bisect_right(self._marks, (q, INFINITE_SCN)) - 1
        return self._marks[i][1] if i >= 0 else -1

    def thread_state(self, thread: int) -> str:
        return "closed" if thread in self.closed else "open"

    @property
    def position(self) -> int:
        """The next queue index the dispatcher will read."""
        return self.tailer.index

    # -- work --------------------------------------------------------------------------

    def poll(self, max_blocks: int = 64) -> int:
        """Process up to ``max_blocks`` available blocks and publish what became safe:
        also on the way, each time the blocks read fill a quarter of the block cache, so
        that the blocks of the commits published are still in it (read once, not twice)."""
        n = 0
        cache = self.cache
        every_bytes, every_blocks = cache.max_bytes // 4, max(1, cache.capacity // 4)
        read = blocks = 0
        while n < max_blocks:
            block = self.tailer.next_block()
            if block is None:
                break
            self._process(block)
            n += 1
            read += block.nbytes
            blocks += 1
            if read >= every_bytes or blocks >= every_blocks:
                self.publish_ready()
                read = blocks = 0
        self.publish_ready()
        return n

    def _process(self, block: Block) -> None:
        summary = read_summary(block.record(0))
        self.cache.put(block)
        thread = summary.thread
        self.stats.blocks += 1
        self.stats.records += block.count - 1
        if thread in self.progress:
            if summary.progress > self.progress[thread]:
                self.progress[thread] = summary.progress
        elif summary.progress > self.other_progress.get(thread, -1):
            self.other_progress[thread] = summary.progress
        if summary.progress > self._top:
            self._top = summary.progress
        first = block.first
        if summary.closed:
            self.closed[thread] = first
        elif self.closed:
            self.closed.pop(thread, None)
        if self.closed and self.track_closed:
            self._mark(block.end)
        elif self._marks and not self.closed:
            self._marks.clear()
        open_ = self.open
        ended = self._ended
        pending = self._pending
        tiebreak = self._tiebreak
        last_key = self.last_key
        fresh = first >= self._fresh_from
        if summary.groups:
            self._last_block[thread] = first
        self._pending_sorted = False  # (before anything is appended: an error may stop the loop)
        for xid, start, count, rows, comps, first_scn, begin_scn, begin_tm, ends in summary.groups:
            txn = open_.get(xid)
            # a begin above an end's SCN is XID reuse: a new transaction; a begin below it
            # belongs to the transaction (another thread's end may reach the queue first)
            if txn is None or (txn.end_key is not None and begin_scn > txn.end_key.scn):
                if txn is None:
                    if begin_scn < 0:
                        if xid in ended:
                            self._count_late(thread, count)
                            continue
                        if xid in self._abandoned:
                            self._abandoned_records(xid, thread, count, ends)
                            continue
                        # no thread in play writes at or below the last published commit
                        # any more (a reopened one writes above it): a record there, of an
                        # XID not held, is of a transaction that ended (and was forgotten)
                        if not ends and fresh and last_key is not None and first_scn <= last_key.scn:
                            self.stats.forgotten_records += count
                            self._count_late(thread, count)
                            continue
                    elif self._abandoned and begin_scn <= self._abandoned.get(xid, -1):
                        self._abandoned_records(xid, thread, count, ends)  # its own begin, late
                        continue
                txn = open_[xid] = OpenTransaction(
                    xid, first, first_scn, begin_scn, begin_tm, {thread: [first, start, count]}, rows, comps
                )
                if ended:
                    ended.pop(xid, None)
                if self._abandoned:
                    self._abandoned.pop(xid, None)  # XID reuse: a begin above what was abandoned
            else:
                if begin_scn >= 0 and (txn.begin_scn < 0 or begin_scn < txn.begin_scn):
                    txn.begin_scn = begin_scn
                    txn.begin_tm = begin_tm
                locs = txn.locations.get(thread)  # OpenTransaction.add, inline
                if locs is None:
                    txn.locations[thread] = [first, start, count]
                else:
                    locs.extend((first, start, count))
                    if len(locs) >= _LOCATIONS_AS_LIST and type(locs) is list:
                        txn.locations[thread] = array("q", locs)
                txn.rows += rows
                txn.compensations += comps
            for code, scn, seq, line, tm in ends:
                key = _commit_key((scn, thread, seq, line))
                # a late rollback publishes nothing, so it cannot break commit order (the
                # PostgreSQL source rolls back, at scn 0, what a reconnect sends again)
                if (
                    code == COMMIT
                    and fresh
                    and last_key is not None
                    and key < last_key
                    and (txn.end_key is None or key < txn.end_key)
                ):
                    self._late_end(txn, key, first)
                    break
                if txn.end_key is None or key < txn.end_key:
                    if txn.end_key is not None:
                        self.stats.extra_ends += 1
                    txn.end_key, txn.end_code, txn.end_tm = key, code, tm
                    pending.append((scn, key, next(tiebreak), txn))
                else:
                    self.stats.extra_ends += 1

    def _mark(self, end: int) -> None:
        """Remember the highest progress after the block ending at ``end``; forget the
        marks no confirmation can need any more."""
        marks = self._marks
        marks.append((end, self._top))
        low = min(max(self.closed_through.get(t, -1), i) for t, i in self.closed.items())
        drop = 0
        while drop + 1 < len(marks) and marks[drop + 1][0] <= low:
            drop += 1
        if drop:
            del marks[:drop]

    def _count_late(self, thread: int, n: int) -> None:
        self.stats.late_records += n
        self.late_by_thread[thread] = self.late_by_thread.get(thread, 0) + n

    def _abandoned_records(self, xid: str, thread: int, count: int, ends: list) -> None:
        """Records of an abandoned transaction: counted, never published; logged once per
        XID and run, and when its end comes."""
        self.stats.abandoned_records += count
        if xid not in self._abandoned_seen or ends:
            self._abandoned_seen.add(xid)
            end = (
                f"; its end came ({'commit' if ends[0][0] == COMMIT else 'rollback'} at scn {ends[0][1]})"
                if ends
                else ""
            )
            log.warning(
                "%d record(s) of abandoned transaction %s (redo thread %d) came after it was abandoned: not "
                "published%s",
                count,
                xid,
                thread,
                end,
                extra={"xid": xid, "redo_thread": thread, "abandoned_records": self.stats.abandoned_records},
            )

    # -- retention ---------------------------------------------------------------------

    def abandon_expired(self, seconds: float | None = None, scn: int | None = None) -> list[AbandonedTransaction]:
        """Abandon every transaction without an end that started more than ``scn`` below
        the watermark, or more than ``seconds`` before :attr:`clock_tm`. The clock is the
        median ``tm`` of the last :data:`CLOCK_ENDS` ends acted on (those with a ``tm``),
        and it never goes back; it starts once that many ends were acted on. Its start:
        the lower of its first record's and its begin's SCN; its begin's ``tm``, or
        without one the clock when this rule first saw it.
        Both measures move only as ends pass the watermark: a silent thread that holds
        the watermark abandons nothing. Returns what was abandoned (no longer held, so
        cleanup frees its segments; its later records are counted, not published)."""
        if seconds is None and scn is None:
            return []
        watermark = self.watermark
        ref = watermark if watermark < INFINITE_SCN else self._top
        clock = self.clock_tm
        limit_ns = None if seconds is None else int(seconds * 1e9)
        out = []
        for txn in list(self.open.values()):
            if txn.end_key is not None:
                continue  # ended: waits for the watermark
            start_scn = txn.first_scn if txn.begin_scn < 0 else min(txn.first_scn, txn.begin_scn)
            reason = None
            if scn is not None and ref >= 0 and ref - start_scn > scn:
                reason = f"started at scn {start_scn}, {ref - start_scn} below the watermark {ref} (limit {scn})"
            start_tm = txn.begin_tm if txn.begin_tm is not None else txn.seen_tm
            if reason is None and limit_ns is not None and clock is not None:
                if start_tm is None:
                    txn.seen_tm = start_tm = clock
                elif clock - start_tm > limit_ns:
                    reason = (
                        f"started {(clock - start_tm) / 1e9:.1f}s before the clock, the median tm of the "
                        f"last {CLOCK_ENDS} ends (limit {seconds:g}s)"
                    )
            if reason is not None:
                out.append(self._abandon(txn, reason, start_tm, ref))
        return out

    def _abandon(self, txn: OpenTransaction, reason: str, start_tm: int | None, ref: int) -> AbandonedTransaction:
        del self.open[txn.xid]
        # a begin of this XID above every SCN read so far is a new transaction (XID reuse);
        # anything else of it is the abandoned one's (its own begin may come late, from a
        # thread behind the others, below records of it already read)
        self._abandoned[txn.xid] = max(ref, self._top + 1)
        self._abandoned.move_to_end(txn.xid)
        if len(self._abandoned) > _ABANDONED_MEMORY:
            self._abandoned.popitem(last=False)
        self.stats.abandoned_transactions += 1
        self.stats.abandoned_rows += txn.rows
        return AbandonedTransaction(
            xid=txn.xid,
            reason=reason,
            rows=txn.rows,
            records=sum(sum(locs[2::3]) for locs in txn.locations.values()),
            first_scn=txn.first_scn,
            begin_scn=txn.begin_scn if txn.begin_scn >= 0 else None,
            begin_tm=txn.begin_tm,
            start_tm=start_tm,
            clock_tm=self.clock_tm,
            watermark=ref,
            threads=sorted(txn.locations),
            first_index=txn.first_block,
        )

    def _late_end(self, txn: OpenTransaction, key: CommitKey, block: int) -> None:
        """The end of ``txn`` reached the queue after commit ``last_key`` was published:
        publishing it now would break commit order."""
        last = self.last_key
        assert last is not None  # an end is late after a published commit
        if key.thread in self.strict:
            raise DispatchError(
                f"queue block {block}: the end of transaction {txn.xid} at scn {key.scn} (thread {key.thread}, "
                f"sequence {key.sequence}, line {key.line}) arrived after commit scn {last.scn} "
                f"(thread {last.thread}) was published",
                hint="the input of a thread in play went back below what was published; nothing out of order "
                "was published",
                index=block,
                xid=txn.xid,
            )
        # a thread not in play: the transaction is late, whole; never published
        if self.open.get(txn.xid) is txn:
            del self.open[txn.xid]
        txn.end_key = None  # its heap entries, if any, are skipped; no checkpoint keeps it
        self._remember_ended(txn.xid)
        self.stats.late_transactions += 1
        self._count_late(key.thread, sum(sum(locs[2::3]) for locs in txn.locations.values()))

    def publish_ready(self, watermark: int | None = None) -> int:
        """Act on every end at or below the watermark, in key order.

        ``watermark=INFINITE_SCN`` acts on every end: the end of a replay, whose input is
        complete, so no thread can still deliver anything.
        """
        watermark = self.watermark if watermark is None else watermark
        pending = self._pending
        if not pending:
            return 0
        if not self._pending_sorted:
            pending.sort()
            self._pending_sorted = True
        cut = bisect.bisect_left(pending, (watermark + 1,))  # (a tuple sorts before those it begins)
        if not cut:
            return 0
        ready = pending[:cut]
        del pending[:cut]
        try:
            return self._act_on(ready)
        except BaseException:
            pending[:0] = ready[self._acted :]  # not looked at: still pending (as with a heap)
            raise

    def _act_on(self, ready: list[Pending]) -> int:
        """Act on ``ready``'s ends (sorted), in order."""
        done = 0
        batch: list[tuple[OpenTransaction, CommitKey]] = []
        batch_records = 0
        batching = self.batching
        open_ = self.open
        ended = self._ended
        stats = self.stats
        # ready is sorted: only its first keys can be at or below these two
        published_through = self.published_through
        if published_through is not None and ready[0][1] > published_through:
            published_through = None
        check_order = self.last_key is not None and ready[0][1] < self.last_key
        remember_tm = self._clock_tms.append
        i = 0
        try:
            for i, (_, key, _, txn) in enumerate(ready):  # noqa: B007 - i is read after the loop, in except
                if txn.end_key is not key and txn.end_key != key:
                    continue  # superseded by an earlier end of the same transaction
                xid = txn.xid
                if open_.get(xid) is txn:
                    del open_[xid]
                if xid in ended:
                    ended.move_to_end(xid)
                else:
                    ended[xid] = None
                done += 1
                if txn.end_tm is not None:
                    remember_tm(txn.end_tm)
                if txn.end_code != COMMIT:
                    stats.rolled_back += 1
                elif published_through is not None and key <= published_through:
                    stats.already_published += 1
                    if self.log_skipped:
                        log.info(
                            "skipped as already published: xid %r, commit %s",
                            xid,
                            tuple(key),
                            extra={"xid": xid, "c_scn": key.scn},
                        )
                elif txn.begin_scn < 0 or txn.begin_scn > key[0]:
                    stats.no_begin += 1
                elif check_order and self.last_key is not None and key < self.last_key:
                    raise DispatchError(  # the last line of defence: _process keeps such ends out
                        f"commit of {xid} at scn {key.scn} would be published after commit scn {self.last_key.scn}",
                        hint="this is a bug: nothing out of order was published",
                        xid=xid,
                    )
                elif batching and txn.rows <= _BATCH_TX_MAX_ROWS:
                    self.last_key = key
                    batch.append((txn, key))
                    for locs in txn.locations.values():
                        batch_records += locs[2] if len(locs) == 3 else sum(locs[2::3])
                    if batch_records >= _BATCH_MAX_RECORDS:
                        self._publish_batch(batch)
                        batch, batch_records = [], 0
                else:
                    if batch:  # commit order: what is batched goes first
                        self._publish_batch(batch)
                        batch, batch_records = [], 0
                    self.last_key = key
                    n = self.sink.write_transaction(Commit(xid, key, txn.end_tm), self.replayer.chunks(txn, key.scn))
                    self._count_published(n)
            i = len(ready)
            if batch:
                self._publish_batch(batch)
        except BaseException:
            self._acted = i + 1 if i < len(ready) else i
            raise
        finally:
            tms = self._clock_tms
            if len(tms) == CLOCK_ENDS:
                median = sorted(tms)[CLOCK_ENDS // 2]
                if self.clock_tm is None or median > self.clock_tm:
                    self.clock_tm = median
            while len(ended) > _ENDED_MEMORY:
                ended.popitem(last=False)
        return done

    def _count_published(self, n: int) -> None:
        if n:
            self.stats.published += 1
            self.stats.rows += n
        else:
            self.stats.empty += 1

    def _publish_batch(self, batch: list[tuple[OpenTransaction, CommitKey]]) -> None:
        """Transactions up to ``_BATCH_TX_MAX_ROWS`` rows, read back together and published
        as :func:`~.batch.plan_batch` says. The sink gets the rows in one flat list
        (:meth:`TransactionSink.write_rows`), or, when it takes them (and few transactions
        of the batch have rows of their own to work out), as columns
        (:meth:`TakesColumns.write_columns`)."""
        runs, spans, count = batch_spans(batch)
        data = read_runs(runs, self.cache.get)
        rows: ListRows | ColumnRows | None = None
        # as columns, unless many transactions have rows of their own to work out (those
        # with compensation records): each is then a piece of its own to put together,
        # which costs more than the columns save (20 % of rows compensated: +25 % CPU).
        # Those of several threads are not: their rows are taken from the columns
        if self.columns:
            own = sum(1 for txn, _ in batch if txn.compensations)
            if own * self.columns_own_share <= len(batch):
                cols = row_columns(data, count)
                if cols is not None and (cols.starts is not None or not own):
                    rows = ColumnRows(cols, data)
        if rows is None:
            rows = ListRows(decode_records(data, count))
        txs, pieces, late, empty = plan_batch(batch, spans, rows, self.replayer.transaction_rows)
        self.stats.late_records += late
        self.stats.empty += empty
        if isinstance(rows, ColumnRows):
            out = rows.build(pieces)
            if txs:
                assert isinstance(self.sink, TakesColumns)  # (self.columns)
                self.sink.write_columns(out, txs)
            self.stats.rows += out.num_rows
        else:
            recs = rows.build(pieces)
            if txs:
                self.sink.write_rows(recs, txs)
            self.stats.rows += len(recs)
        self.stats.published += len(txs)

    def _remember_ended(self, xid: str) -> None:
        ended = self._ended
        ended[xid] = None
        ended.move_to_end(xid)
        if len(ended) > _ENDED_MEMORY:
            ended.popitem(last=False)
