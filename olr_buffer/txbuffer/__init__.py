"""txbuffer: an append-only, segmented log of opaque records keyed by a gapless index.

Knows nothing of Oracle. :class:`LmdbQueue` is the implementation (durable); the tests'
in-memory one is :class:`olr_buffer.testing.MemoryQueue`.
"""

from .base import BlockAppender, SegmentInfo, Tailer, TxQueue, cleanup_candidates, held_segments
from .block import Block, BlockCodec
from .errors import QueueCorruptError, QueueError, QueueFullError, QueueLockedError
from .lmdb_queue import DEFAULT_SEGMENT_BYTES, LmdbQueue

__all__ = [
    "Block",
    "BlockAppender",
    "BlockCodec",
    "DEFAULT_SEGMENT_BYTES",
    "LmdbQueue",
    "QueueCorruptError",
    "QueueError",
    "QueueFullError",
    "QueueLockedError",
    "SegmentInfo",
    "Tailer",
    "TxQueue",
    "cleanup_candidates",
    "held_segments",
]
