"""The block: the unit of I/O of the queue.

A block holds ``count`` consecutive records (opaque byte strings) whose queue indexes
are ``first .. first + count - 1``. On disk a block is one LMDB value under the key
``first`` (8 bytes, big-endian, so that keys sort by index)::

    header  = version u8 | count u32 | raw_len u32 | crc32(compressed) u32   (big-endian)
    payload = zstd( offsets u32[count + 1] (little-endian) | record bytes ... )

The checksum covers the compressed payload, so a damaged block is reported instead of
being decoded into wrong records.
"""

from __future__ import annotations

import struct
import threading
import zlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate

import zstandard

from .errors import QueueCorruptError

FORMAT_VERSION = 1
_HEADER = struct.Struct(">BIII")
HEADER_SIZE = _HEADER.size
KEY_SIZE = 8


def index_key(index: int) -> bytes:
    """The LMDB key of the block whose first record has ``index``."""
    return index.to_bytes(KEY_SIZE, "big")


def key_index(key: bytes) -> int:
    return int.from_bytes(key, "big")


class BlockCodec:
    """Encodes and decodes blocks; one instance per thread (zstd contexts are not shared)."""

    def __init__(self, level: int = 1) -> None:
        self._compressor = zstandard.ZstdCompressor(level=level)
        self._decompressor = zstandard.ZstdDecompressor()

    def encode(self, records: Sequence[bytes]) -> bytes:
        count = len(records)
        offsets = array("I", [0])
        offsets.extend(accumulate(map(len, records)))
        if offsets.itemsize != 4:  # pragma: no cover - every platform we run on
            raise RuntimeError("array('I') is not 32-bit here")
        raw = offsets.tobytes() + b"".join(records)
        compressed = self._compressor.compress(raw)
        return _HEADER.pack(FORMAT_VERSION, count, len(raw), zlib.crc32(compressed)) + compressed

    def decode(self, first: int, value: bytes | memoryview, where: str = "") -> Block:
        if len(value) < HEADER_SIZE:
            raise QueueCorruptError(f"queue block {first}{where}: truncated header", index=first)
        version, count, raw_len, crc = _HEADER.unpack_from(value, 0)
        if version != FORMAT_VERSION:
            raise QueueCorruptError(f"queue block {first}{where}: unknown format version {version}", index=first)
        compressed = bytes(value[HEADER_SIZE:])
        if zlib.crc32(compressed) != crc:
            raise QueueCorruptError(
                f"queue block {first}{where}: checksum mismatch, the block is damaged",
                index=first,
                hint="restore the segment from a backup or re-read the redo from before this index",
            )
        try:
            raw = self._decompressor.decompress(compressed, max_output_size=raw_len)
        except zstandard.ZstdError as exc:
            raise QueueCorruptError(f"queue block {first}{where}: {exc}", index=first) from exc
        if len(raw) < 4 * (count + 1):
            raise QueueCorruptError(f"queue block {first}{where}: record count {count} exceeds the block", index=first)
        offsets = array("I")
        offsets.frombytes(raw[: 4 * (count + 1)])
        if len(raw) != raw_len or len(offsets) != count + 1 or offsets[-1] != raw_len - 4 * (count + 1):
            raise QueueCorruptError(f"queue block {first}{where}: inconsistent lengths", index=first)
        return Block(first, count, offsets, raw, 4 * (count + 1))


class _PerThreadCodec(threading.local):
    def __init__(self, level: int = 1) -> None:
        self.codec = BlockCodec(level)


_THREAD_CODECS = _PerThreadCodec()


def thread_codec() -> BlockCodec:
    """The calling thread's codec."""
    return _THREAD_CODECS.codec


@dataclass(frozen=True, slots=True)
class Block:
    """A decoded block: records ``first .. end - 1``."""

    first: int
    count: int
    _offsets: array
    _raw: bytes
    _base: int

    @property
    def end(self) -> int:
        """One past the last index of the block."""
        return self.first + self.count

    def record(self, i: int) -> bytes:
        """The ``i``-th record of the block (0-based position, not queue index)."""
        if not 0 <= i < self.count:
            raise IndexError(i)
        o = self._offsets
        b = self._base
        return self._raw[b + o[i] : b + o[i + 1]]

    def at(self, index: int) -> bytes:
        """The record with queue index ``index``."""
        return self.record(index - self.first)

    def records(self, start: int = 0, stop: int | None = None) -> list[bytes]:
        """Records at positions ``start .. stop - 1`` of the block."""
        stop = self.count if stop is None else min(stop, self.count)
        o = self._offsets
        b = self._base
        raw = self._raw
        return [raw[b + o[i] : b + o[i + 1]] for i in range(start, stop)]

    def span(self, start: int, stop: int) -> bytes:
        """The bytes of records ``start .. stop - 1``, concatenated (one slice)."""
        o = self._offsets
        return self._raw[self._base + o[start] : self._base + o[stop]]

    def buffers(self) -> tuple[bytes, array, int]:
        """The decoded bytes, the offsets (``array("I")``, ``count + 1`` of them) and where
        the records start: record ``i`` is ``raw[base + offsets[i] : base + offsets[i + 1]]``
        (for code that joins the spans of many blocks in one pass, as the dispatcher's
        compiled batch step does; :meth:`span` is one of them)."""
        return self._raw, self._offsets, self._base

    @property
    def nbytes(self) -> int:
        """The memory its decoded bytes take."""
        return len(self._raw)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.records())

    def __len__(self) -> int:
        return self.count
