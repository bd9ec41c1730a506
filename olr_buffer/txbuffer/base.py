"""The queue's public surface: an append-only log of records keyed by a gapless index.

Records are opaque byte strings. ``append`` stores a block of records in one write and
returns the index of its first record; indexes are global, gapless, start at 0 and are
never reused. Small metadata (reader positions, checkpoints) is written in the *same*
write as the records it describes, so a crash can neither lose nor repeat a record.

Reading is by block: a :class:`Tailer` walks the blocks in index order; "nothing there
yet" is ``None``, not an exception. Segments are contiguous ranges of indexes; cleanup
deletes whole segments that nobody needs any more.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .block import Block


class BlockAppender(Protocol):
    """What a writer of blocks needs of the queue (a reader; a reader process's pipe to
    its parent): :meth:`TxQueue.append`."""

    def append(self, records: Sequence[bytes], meta: Mapping[bytes, bytes] | None = None) -> int:
        """Store ``records`` as one block, and ``meta`` in the same write; return the first index."""


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment: records ``first .. end - 1``, stored in ``path`` (``bytes`` on disk)."""

    first: int
    end: int
    path: str
    bytes: int
    current: bool


class TxQueue(ABC):
    """An append-only, segmented log of records. One writer at a time."""

    @property
    @abstractmethod
    def first_index(self) -> int:
        """The lowest index still stored (indexes below it were cleaned up)."""

    @property
    @abstractmethod
    def next_index(self) -> int:
        """The index the next appended record will get."""

    @abstractmethod
    def append(self, records: Sequence[bytes], meta: Mapping[bytes, bytes] | None = None) -> int:
        """Store ``records`` as one block, and ``meta`` in the same write; return the first index.

        With no records, only ``meta`` is written and the next index is returned.
        """

    def append_encoded(self, value: bytes, count: int, meta: Mapping[bytes, bytes] | None = None) -> int:
        """:meth:`append` for a block already encoded with :class:`BlockCodec` (elsewhere,
        e.g. in a reader process): ``value`` holds ``count`` records."""
        from .block import thread_codec

        return self.append(thread_codec().decode(0, value).records(), meta)

    @abstractmethod
    def read_block(self, index: int) -> Block:
        """The block that holds ``index``. ``IndexError`` if it is not stored."""

    @abstractmethod
    def meta(self, key: bytes) -> bytes | None:
        """The last value written for a metadata key, or ``None``."""

    @abstractmethod
    def meta_items(self, prefix: bytes = b"") -> dict[bytes, bytes]:
        """Every metadata key that starts with ``prefix``, with its value."""

    @abstractmethod
    def segments(self) -> list[SegmentInfo]:
        """The stored segments in index order."""

    @abstractmethod
    def delete_segments_before(
        self, index: int, *, retain_segments: int = 0, retain_seconds: float = 0.0
    ) -> list[SegmentInfo]:
        """Delete every segment whose records all lie below ``index``; never the current one.

        Retention keeps, of those, the newest ``retain_segments`` and any written within
        the last ``retain_seconds`` (for audit and re-derivation).
        """

    @abstractmethod
    def close(self) -> None:
        """Release files and locks. The queue cannot be used afterwards."""

    def get(self, index: int) -> bytes:
        """The record with queue index ``index``."""
        return self.read_block(index).at(index)

    def tailer(self, start: int | None = None) -> Tailer:
        """A reader that walks the blocks from ``start`` (default: the first stored index)."""
        return Tailer(self, self.first_index if start is None else start)

    def __enter__(self) -> TxQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cleanup_candidates(
    segments: list[SegmentInfo],
    index: int,
    retain_segments: int,
    retain_seconds: float,
    mtime: Callable[[str], float],
) -> list[SegmentInfo]:
    """The segments that cleanup deletes, oldest first (always a prefix of ``segments``)."""
    below = []
    for info in segments:
        if info.current or info.end > index:
            break
        below.append(info)
    if retain_segments > 0:
        below = below[:-retain_segments] if retain_segments < len(below) else []
    if retain_seconds > 0:
        cutoff = time.time() - retain_seconds
        out = []
        for info in below:
            if mtime(info.path) > cutoff:
                break
            out.append(info)
        below = out
    return below


def held_segments(segments: list[SegmentInfo], needed: int, position: int) -> list[SegmentInfo]:
    """The segments kept only because index ``needed`` is still needed: cleanup would
    delete them if everything below ``position`` were done with."""
    return [s for s in segments if not s.current and needed < s.end <= position]


class Tailer:
    """Walks a queue block by block. Its position is the next index it will return."""

    def __init__(self, queue: TxQueue, start: int) -> None:
        self._queue = queue
        self.index = start

    def next_block(self) -> Block | None:
        """The block holding ``self.index`` (whole), or ``None`` when nothing is there yet.

        The position moves past the block. Records of the block below ``self.index`` (when
        the tailer was started in the middle of a block) are the caller's to skip.
        """
        if self.index >= self._queue.next_index:
            return None
        block = self._queue.read_block(self.index)
        self.index = block.end
        return block

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        """``(index, record)`` for every record available now, from the position on."""
        while True:
            start = self.index
            block = self.next_block()
            if block is None:
                return
            for i in range(start - block.first, block.count):
                yield block.first + i, block.record(i)
