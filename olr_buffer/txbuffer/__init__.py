"""txbuffer: an append-only, segmented log of opaque records keyed by a gapless index.

Knows nothing of Oracle. :class:`LmdbQueue` is the durable implementation,
:class:`MemoryQueue` the in-memory one with the same behaviour.
"""

from .base import BlockAppender, SegmentInfo, Tailer, TxQueue, cleanup_candidates, held_segments
from .block import Block, BlockCodec
from .errors import QueueCorruptError, QueueError, QueueFullError, QueueLockedError
from .lmdb_queue import DEFAULT_SEGMENT_BYTES, LmdbQueue
from .memory import MemoryQueue

__all__ = [
    "Block",
    "BlockAppender",
    "BlockCodec",
    "DEFAULT_SEGMENT_BYTES",
    "LmdbQueue",
    "MemoryQueue",
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
