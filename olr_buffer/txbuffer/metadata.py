"""The queue's reserved metadata keys, and the checksummed envelope of their values.

Metadata values (reader positions, the dispatcher's checkpoint) are small JSON documents
stored beside the blocks. Like the blocks, each value is checksummed, so that a damaged
value is refused in one line instead of being read as other numbers::

    value = version u8 (1) | crc32(body) u32 (big-endian) | body (JSON)

A value that starts with ``{`` is a bare JSON document, as versions before the envelope
wrote them: it is still read, without a checksum to check.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import orjson

from .errors import QueueCorruptError

CHECKPOINT_KEY = b"dispatcher/checkpoint"  # the dispatcher's state (dispatcher/dispatcher.py)
POSITION_PREFIX = b"reader/"  # + thread number: a reader's position (reader/position.py)
# the queue's identity: a random hex id, stored before anything of the queue reaches a
# changefeed, which records it (olr_buffer/pipeline.py, spark_sink/layout.py)
QUEUE_ID_KEY = b"pipeline/queue_id"
POSTGRES_POSITION_KEY = b"postgres/position"  # the PostgreSQL reader's state (reader/postgres/reader.py)

_VERSION = 1
_HEADER = struct.Struct(">BI")


def seal(body: bytes) -> bytes:
    """``body`` with its checksum, ready to store."""
    return _HEADER.pack(_VERSION, zlib.crc32(body)) + body


def unseal(key: bytes, value: bytes, where: str = "queue") -> bytes:
    """The body of a stored value; raises :class:`QueueCorruptError` if it is damaged."""
    value = bytes(value)
    if value[:1] == b"{":
        return value
    if len(value) < _HEADER.size or value[0] != _VERSION:
        raise damaged(key, where, "unknown format")
    _, crc = _HEADER.unpack_from(value)
    body = value[_HEADER.size :]
    if zlib.crc32(body) != crc:
        raise damaged(key, where, "checksum mismatch")
    return body


def load_json(key: bytes, value: bytes, where: str = "queue") -> Any:
    """The JSON document stored under ``key``."""
    try:
        return orjson.loads(unseal(key, value, where))
    except orjson.JSONDecodeError as exc:
        raise damaged(key, where, f"not JSON ({exc})") from None


def damaged(key: bytes, where: str, reason: str) -> QueueCorruptError:
    """The one-line error for a stored value under ``key`` that cannot be read."""
    name = key.decode(errors="backslashreplace")
    return QueueCorruptError(
        f"{where}: the stored {name} is damaged: {reason}",
        hint="restore the queue directory from a backup, or replay the input into a new queue and changefeed",
        key=name,
    )
