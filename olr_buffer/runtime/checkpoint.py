"""The checkpoint cycle: what makes a run's progress durable, and gives disk back.

One cycle, in this order (docs/architecture.md, "Checkpoints and cleanup";
docs/failure-scenarios.md says what a crash between two steps leaves)::

    0. sink.note_run_from(...)         where a new queue would read the source from, recorded
                                       with the publication of what was handed over so far
    1. sink.flush()                    every transaction handed to the sink is published
    2. queue meta <- checkpoint        the dispatcher's state and the sink's position, in one LMDB write
    3. delete segments below needed    nobody needs them: tail position and oldest held transaction

A checkpoint never claims a transaction that is not yet durable in the changefeed, and a
segment is deleted only after a checkpoint that no longer needs it. Before it, the
transactions the retention limit expires are abandoned (:meth:`Checkpointer.abandon_expired`);
after it, ``run`` warns about a transaction that keeps segments from cleanup.
"""

from __future__ import annotations

import logging
import time

from ..dead_letters import DeadLetters
from ..dispatcher import AbandonedTransaction, Dispatcher
from ..faults import fault_point
from ..sinks import RecordsRunFrom, Sink
from ..txbuffer import TxQueue, held_segments
from ..txbuffer.metadata import CHECKPOINT_KEY

log = logging.getLogger("olr_buffer")
_WARN_HELD_SEGMENTS = 4


class Checkpointer:
    """Runs the cycle when :meth:`due` (every ``interval`` seconds) or when told to."""

    def __init__(
        self,
        queue: TxQueue,
        dispatcher: Dispatcher,
        sink: Sink,
        threads: list[int],
        *,
        interval: float,
        retain_segments: int = 0,
        retain_seconds: float = 0.0,
        retention_seconds: float | None = None,
        retention_scn: int | None = None,
        dead_letter: str | None = None,
        run_from: bool = False,
    ) -> None:
        self.queue = queue
        self.dispatcher = dispatcher
        self.sink = sink
        self.threads = threads  # the threads in play, recorded in the checkpoint
        self.interval = interval
        self.retain_segments = retain_segments
        self.retain_seconds = retain_seconds
        self.retention_seconds = retention_seconds
        self.retention_scn = retention_scn
        self.dead_letter = dead_letter  # abandoned transactions are written there
        # record the dispatcher's run_from with the sink's publications (a source that can
        # start further on in its input, a sink that records it)
        self.run_from = run_from and isinstance(sink, RecordsRunFrom)
        self.count = 0  # cycles run
        self.segments_deleted = 0
        self._last = time.monotonic()
        self._held_warned: set[str] = set()
        self._held_last: str | None = None  # the transaction warn_held found at the last checkpoint
        self._dead_letters: DeadLetters | None = None  # abandoned transactions (opened at the first)

    def run(self, following: bool) -> None:
        """The whole cycle now: abandon what the retention limit expires, :meth:`commit`,
        and, ``following`` (a replay reports what is still open in its summary), warn about
        a transaction that keeps segments from cleanup."""
        self.abandon_expired()
        self.commit()
        if following:
            self.warn_held()

    def maybe(self, following: bool) -> None:
        """:meth:`run` if it is :meth:`due`."""
        if self.due():
            self.run(following)

    def due(self) -> bool:
        """Whether ``interval`` seconds have passed since the last cycle (or the start)."""
        return time.monotonic() - self._last >= self.interval

    def commit(self) -> None:
        """Run the cycle: flush the sink, store the dispatcher's state and the sink's
        position, clean up."""
        if self.run_from:  # 0.
            assert isinstance(self.sink, RecordsRunFrom)
            self.sink.note_run_from(self.dispatcher.run_from(), self.dispatcher.last_key)
        self.sink.flush()  # 1.
        fault_point("before_checkpoint")
        state = self.dispatcher.checkpoint_state(threads=self.threads, written=time.time())  # 2.
        self.queue.append([], {CHECKPOINT_KEY: state, self.sink.position_key: self.sink.position()})
        deleted = self.queue.delete_segments_before(  # 3.
            self.dispatcher.needed_from(),
            retain_segments=self.retain_segments,
            retain_seconds=self.retain_seconds,
        )
        if deleted:
            log.info(
                "cleanup: deleted %d segment(s), queue now starts at index %d",
                len(deleted),
                self.queue.first_index,
                extra={"segments_deleted": len(deleted), "first_index": self.queue.first_index},
            )
        self.segments_deleted += len(deleted)
        self.count += 1
        self._last = time.monotonic()

    def abandon_expired(self) -> list[AbandonedTransaction]:
        """The retention limit: abandon what it expires (see
        :meth:`Dispatcher.abandon_expired`), log each at WARNING and write it to the
        dead-letter file (before the checkpoint that forgets it: at least once)."""
        gone = self.dispatcher.abandon_expired(self.retention_seconds, self.retention_scn)
        for a in gone:
            log.warning(
                "transaction %s abandoned by the retention limit: %s; %d row(s) (%d record(s)) dropped, not published",
                a.xid,
                a.reason,
                a.rows,
                a.records,
                extra={"xid": a.xid, "rows": a.rows, "records": a.records, "first_scn": a.first_scn},
            )
            if self.dead_letter:
                if self._dead_letters is None:
                    self._dead_letters = DeadLetters(self.dead_letter)
                self._dead_letters.put_doc(a.as_dict(), what=f"abandoned transaction {a.xid}")
        return gone

    def warn_held(self) -> None:
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
                txn.xid,
                txn.first_scn,
                len(held),
                sum(s.bytes for s in held) / 1e6,
                extra={"xid": txn.xid, "first_scn": txn.first_scn, "segments_held": len(held)},
            )

    def close(self) -> None:
        """Close the dead-letter file, if it was opened."""
        if self._dead_letters is not None:
            self._dead_letters.close()
