"""Age retention (``--retain-age``) means the same on both queues: a segment is kept while
its last write is within the window, whenever the segment was created."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from olr_buffer.testing import MemoryQueue
from olr_buffer.txbuffer import LmdbQueue, TxQueue

SEGMENT_BYTES = 64 * 1024
BLOCK = 20_000  # random bytes: a few blocks fill a segment
PAUSE = 0.4


def _queue(kind: str, path: Path) -> TxQueue:
    if kind == "lmdb":
        return LmdbQueue(str(path), segment_bytes=SEGMENT_BYTES, durable=False)
    return MemoryQueue(segment_bytes=SEGMENT_BYTES)


@pytest.mark.parametrize("kind", ["lmdb", "memory"])
def test_a_segment_is_kept_while_its_last_write_is_within_the_window(kind: str, tmp_path: Path) -> None:
    q = _queue(kind, tmp_path / "q")
    try:
        q.append([os.urandom(BLOCK)])
        created = time.time()
        time.sleep(PAUSE)
        last_write = None
        while len(q.segments()) < 2:
            index = q.append([os.urandom(BLOCK)])
            if q.segments()[0].end > index:  # it went into the first segment
                last_write = time.time()
        assert last_write is not None, "the first segment took one block only: the test shows nothing"
        time.sleep(PAUSE)
        first = q.segments()[0]
        # created before the window, written within it: kept
        window = time.time() - (created + last_write) / 2
        assert q.delete_segments_before(q.next_index, retain_seconds=window) == []
        assert q.segments()[0] == first
        # last written before the window: deleted
        window = (time.time() - last_write) / 2
        assert q.delete_segments_before(q.next_index, retain_seconds=window) == [first]
    finally:
        q.close()
