"""The wire of OpenLogReplicator's network protocol as the tests' own peers write it (the
receiver of ``tests/serve``, the stand-in sender of ``tests/sources/olr``), from the
protocol's facts (contracts sections 6 and 7), sharing no code with olr-buffer: the
request and response codes, protobuf's varints by hand, and the frame (a 4-byte
little-endian length, then the payload)."""

from __future__ import annotations

import struct

# request codes
INFO, START, CONTINUE, CONFIRM = 0, 1, 2, 3
# response codes
READY, FAILED_START, STARTING, ALREADY_STARTED, REPLICATE, PAYLOAD, INVALID_DATABASE, INVALID_COMMAND = range(8)


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``data[pos:]``, and the position after it."""
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def framed(payload: bytes) -> bytes:
    return struct.pack("<I", len(payload)) + payload
