"""The dispatcher: tails the queue, tracks transactions by XID, publishes safe commits.

Rules (see docs/formats.md for the contract they implement):

* Thread progress P(t) comes from block summaries (record SCNs and ``lwn``); the
  watermark is ``min P(t)`` over the threads in play.
* A transaction's end is its end record with the smallest ``(scn, thread, sequence,
  line)``; an end is acted on once its SCN is at or below the watermark, so every record
  with an SCN up to it has been seen, whatever the interleaving of threads in the queue.
* Commits are published in that key order. A commit is published when the transaction
  has a ``begin`` at or below its SCN and at least one row left after compensation.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol

from ..reader.blocks import INFINITE_SCN, read_summary
from ..reader.records import COMMIT
from ..txbuffer import Block, TxQueue
from .replay import BlockCache, Replayer
from .transaction import Commit, CommitKey, OpenTransaction

_ENDED_MEMORY = 100_000  # XIDs remembered after their end, to tell late records from new ones


class TransactionSink(Protocol):
    """Where committed transactions go (the changefeed writer)."""

    def write_transaction(self, commit: Commit, rows: Iterable[tuple[int, list]]) -> int:
        """Consume ``rows`` (``(thread, record)``); publish them as one transaction.

        Returns the number of rows written; 0 means nothing was written and no ``tx_seq``
        was used.
        """


@dataclass(slots=True)
class DispatchStats:
    blocks: int = 0
    records: int = 0
    published: int = 0
    rows: int = 0
    rolled_back: int = 0
    no_begin: int = 0
    empty: int = 0
    already_published: int = 0
    extra_ends: int = 0
    late_records: int = 0


class Dispatcher:
    def __init__(
        self,
        queue: TxQueue,
        sink: TransactionSink,
        threads: Iterable[int],
        *,
        start_index: int | None = None,
        published_through: CommitKey | None = None,
        cache_blocks: int = 64,
    ) -> None:
        self.queue = queue
        self.sink = sink
        self.progress: dict[int, int] = {t: -1 for t in threads}
        self.other_progress: dict[int, int] = {}
        self.open: dict[str, OpenTransaction] = {}
        self._pending: list[tuple[CommitKey, int, OpenTransaction]] = []
        self._tiebreak = itertools.count()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self.published_through = published_through
        self.tailer = queue.tailer(start_index)
        self.cache = BlockCache(queue, cache_blocks)
        self.replayer = Replayer(self.cache)
        self.stats = DispatchStats()

    # -- state -------------------------------------------------------------------------

    @property
    def watermark(self) -> int:
        return min(self.progress.values()) if self.progress else INFINITE_SCN

    @property
    def position(self) -> int:
        """The next queue index the dispatcher will read."""
        return self.tailer.index

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- work --------------------------------------------------------------------------

    def poll(self, max_blocks: int = 64) -> int:
        """Process up to ``max_blocks`` available blocks and publish what became safe."""
        n = 0
        while n < max_blocks:
            block = self.tailer.next_block()
            if block is None:
                break
            self._process(block)
            n += 1
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
        first = block.first
        open_ = self.open
        for xid, start, count, rows, comps, begin_scn, ends in summary.groups:
            txn = open_.get(xid)
            if txn is None or (begin_scn >= 0 and txn.end_key is not None):
                if txn is None and begin_scn < 0 and xid in self._ended:
                    self.stats.late_records += count
                    continue
                txn = open_[xid] = OpenTransaction(xid, first)
                self._ended.pop(xid, None)
            if begin_scn >= 0 and (txn.begin_scn < 0 or begin_scn < txn.begin_scn):
                txn.begin_scn = begin_scn
            txn.add(thread, first, start, count)
            txn.rows += rows
            txn.compensations += comps
            for code, scn, seq, line, tm in ends:
                key = CommitKey(scn, thread, seq, line)
                if txn.end_key is None or key < txn.end_key:
                    if txn.end_key is not None:
                        self.stats.extra_ends += 1
                    txn.end_key, txn.end_code, txn.end_tm = key, code, tm
                    heapq.heappush(self._pending, (key, next(self._tiebreak), txn))
                else:
                    self.stats.extra_ends += 1

    def publish_ready(self) -> int:
        """Act on every end at or below the watermark, in key order."""
        watermark = self.watermark
        pending = self._pending
        done = 0
        while pending and pending[0][0].scn <= watermark:
            key, _, txn = heapq.heappop(pending)
            if txn.end_key != key:
                continue  # superseded by an earlier end of the same transaction
            if self.open.get(txn.xid) is txn:
                del self.open[txn.xid]
            self._remember_ended(txn.xid)
            done += 1
            if txn.end_code != COMMIT:
                self.stats.rolled_back += 1
            elif self.published_through is not None and key <= self.published_through:
                self.stats.already_published += 1
            elif txn.begin_scn < 0 or txn.begin_scn > key.scn:
                self.stats.no_begin += 1
            else:
                n = self.sink.write_transaction(Commit(txn.xid, key, txn.end_tm), self.replayer.rows(txn, key.scn))
                if n:
                    self.stats.published += 1
                    self.stats.rows += n
                else:
                    self.stats.empty += 1
        return done

    def _remember_ended(self, xid: str) -> None:
        ended = self._ended
        ended[xid] = None
        ended.move_to_end(xid)
        if len(ended) > _ENDED_MEMORY:
            ended.popitem(last=False)

    def open_transactions(self) -> Iterator[OpenTransaction]:
        return iter(self.open.values())
