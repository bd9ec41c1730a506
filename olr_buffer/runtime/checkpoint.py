"""The checkpoint cycle: what makes a run's progress durable, and gives disk back.

One cycle, in this order (docs/architecture.md, "Checkpoints and cleanup";
docs/failure-scenarios.md says what a crash between two steps leaves)::

    1. sink.flush()                    every transaction handed to the sink is published
    2. queue meta <- checkpoint        the dispatcher's state and the sink's position, in one LMDB write
    3. delete segments below needed    nobody needs them: tail position and oldest held transaction

A checkpoint never claims a transaction that is not yet durable in the changefeed, and a
segment is deleted only after a checkpoint that no longer needs it.
"""

from __future__ import annotations

import logging
import time

from .dispatcher import Dispatcher
from .faults import fault_point
from .sinks import Sink
from .txbuffer import TxQueue
from .txbuffer.metadata import CHECKPOINT_KEY

log = logging.getLogger("olr_buffer")


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
    ) -> None:
        self.queue = queue
        self.dispatcher = dispatcher
        self.sink = sink
        self.threads = threads  # the threads in play, recorded in the checkpoint
        self.interval = interval
        self.retain_segments = retain_segments
        self.retain_seconds = retain_seconds
        self.count = 0  # cycles run
        self.segments_deleted = 0
        self._last = time.monotonic()

    def due(self) -> bool:
        """Whether ``interval`` seconds have passed since the last cycle (or the start)."""
        return time.monotonic() - self._last >= self.interval

    def commit(self) -> None:
        """Run the cycle: flush the sink, store the dispatcher's state and the sink's
        position, clean up."""
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
            log.info("cleanup: deleted %d segment(s), queue now starts at index %d", len(deleted), self.queue.first_index,
                     extra={"segments_deleted": len(deleted), "first_index": self.queue.first_index})
        self.segments_deleted += len(deleted)
        self.count += 1
        self._last = time.monotonic()
