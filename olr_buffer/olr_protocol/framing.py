"""Framing, both ways: a 4-byte little-endian unsigned length, then that many bytes.

OpenLogReplicator announces a message of 4 GiB or more with the length ``0xFFFFFFFF``
followed by an 8-byte little-endian length; :func:`frame_header` does the same and
:class:`FrameReader` reads it, so that neither side ever sends a wrong length. A reader
is given the largest frame it accepts (a request is at most 1 KiB): a longer announced
length is refused before any of its bytes are buffered.
"""

from __future__ import annotations

import struct

from .errors import FrameTooLargeError

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
#: A 4-byte length of this value announces an 8-byte length after it.
LONG_LENGTH = 0xFFFFFFFF
#: The largest request a receiver sends (docs/formats.md, "Network protocol").
MAX_REQUEST_BYTES = 1024

pack_length = _U32.pack  # the header of a frame below 4 GiB: the hot path of the sender


def frame_header(length: int) -> bytes:
    """The bytes that announce a frame of ``length`` bytes."""
    if length < LONG_LENGTH:
        return _U32.pack(length)
    return _U32.pack(LONG_LENGTH) + _U64.pack(length)


def frame(payload: bytes) -> bytes:
    """``payload`` with its length header."""
    return frame_header(len(payload)) + payload


class FrameReader:
    """Splits the bytes of a connection into frames, whatever pieces they arrive in.

    ``feed(data)`` returns the frames that ``data`` completes; a header that announces
    more than ``max_length`` bytes raises :class:`FrameTooLargeError` (the connection is
    then of no further use: where the next frame starts is unknown), which holds the
    frames ``data`` completed before it (``facts["frames"]``)."""

    __slots__ = ("max_length", "_buf")

    def __init__(self, max_length: int) -> None:
        self.max_length = max_length
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        """Bytes received that do not complete a frame yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (length,) = _U32.unpack_from(buf, pos)
            head = 4
            if length == LONG_LENGTH:
                if end - pos < 12:
                    break
                (length,) = _U64.unpack_from(buf, pos + 4)
                head = 12
            if length > self.max_length:
                del buf[:pos]
                raise FrameTooLargeError(
                    f"a frame of {length:,} bytes is announced; at most {self.max_length:,} are accepted",
                    length=length,
                    frames=frames,  # the frames complete before it
                )
            if end - pos - head < length:
                break
            frames.append(bytes(buf[pos + head : pos + head + length]))
            pos += head + length
        if pos:
            del buf[:pos]
        return frames
