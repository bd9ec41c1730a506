"""An in-memory queue with the same behaviour as :class:`~olr_buffer.txbuffer.LmdbQueue`,
for tests, models and benchmarks.

Segments roll by the encoded size of their blocks, like the LMDB ones roll by file size,
so cleanup behaves alike; nothing survives the process.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping, Sequence

from ..txbuffer import Block, QueueError, SegmentInfo, TxQueue, cleanup_candidates
from ..txbuffer.block import thread_codec


class MemoryQueue(TxQueue):
    def __init__(self, *, segment_bytes: int = 64 * 1024 * 1024) -> None:
        self.segment_bytes = segment_bytes
        self._segments: list[list[Block]] = []  # blocks of each segment
        self._seg_first: list[int] = []
        self._seg_size: list[int] = []
        # the time of each segment's last write, for age retention (LmdbQueue: its file's mtime)
        self._seg_time: list[float] = []
        self._next = 0
        self._meta: dict[bytes, bytes] = {}
        self._closed = False

    @property
    def first_index(self) -> int:
        return self._seg_first[0] if self._seg_first else self._next

    @property
    def next_index(self) -> int:
        return self._next

    def append(self, records: Sequence[bytes], meta: Mapping[bytes, bytes] | None = None) -> int:
        self._check_open()
        first = self._next
        if records:
            codec = thread_codec()
            value = codec.encode(records)
            block = codec.decode(first, value)
            if not self._segments or (self._seg_size[-1] >= self.segment_bytes and self._seg_first[-1] != self._next):
                self._segments.append([])
                self._seg_first.append(first)
                self._seg_size.append(0)
            if len(self._seg_time) < len(self._segments):
                self._seg_time.append(0.0)
            self._seg_time[-1] = time.time()
            self._segments[-1].append(block)
            self._seg_size[-1] += len(value)
            self._next += len(records)
        if meta:
            self._meta.update(meta)
        return first

    def read_block(self, index: int) -> Block:
        self._check_open()
        if not (self.first_index <= index < self._next):
            raise IndexError(f"queue index {index} is not stored")
        seg = self._segments[bisect.bisect_right(self._seg_first, index) - 1]
        firsts = [b.first for b in seg]
        return seg[bisect.bisect_right(firsts, index) - 1]

    def meta(self, key: bytes) -> bytes | None:
        return self._meta.get(key)

    def meta_items(self, prefix: bytes = b"") -> dict[bytes, bytes]:
        return {k: v for k, v in self._meta.items() if k.startswith(prefix)}

    def segments(self) -> list[SegmentInfo]:
        n = len(self._segments)
        return [
            SegmentInfo(
                self._seg_first[i],
                self._seg_first[i + 1] if i + 1 < n else self._next,
                f"memory:{i}",
                self._seg_size[i],
                i == n - 1,
            )
            for i in range(n)
        ]

    def delete_segments_before(
        self, index: int, *, retain_segments: int = 0, retain_seconds: float = 0.0
    ) -> list[SegmentInfo]:
        self._check_open()
        deleted = []
        for info in cleanup_candidates(self.segments(), index, retain_segments, retain_seconds, self._mtime):
            self._segments.pop(0)
            self._seg_first.pop(0)
            self._seg_size.pop(0)
            self._seg_time.pop(0)
            deleted.append(info)
        return deleted

    def _mtime(self, path: str) -> float:
        """When the segment named ``path`` (``memory:<position>``) was last written."""
        return self._seg_time[int(path.split(":")[1])]

    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise QueueError("memory queue is closed")
