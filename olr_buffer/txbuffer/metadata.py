"""The queue's metadata: the checksummed envelope of its values, typed versioned
documents in it, and the keys the runtime reserves.

Metadata values (a source's resume state, the dispatcher's checkpoint, a sink's position)
are small JSON documents stored beside the blocks. Like the blocks, each value is checksummed, so that a damaged
value is refused in one line instead of being read as other numbers::

    value = version u8 (1) | crc32(body) u32 (big-endian) | body (JSON)

A value that starts with ``{`` is a bare JSON document, as versions before the envelope
wrote them: it is still read, without a checksum to check.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, ClassVar, TypeVar

import msgspec
import orjson

from .errors import QueueCorruptError

# Keys of the runtime. A source's and a sink's keys are their own (a source's
# ``state_prefix``, a sink's ``position_key``).
CHECKPOINT_KEY = b"dispatcher/checkpoint"  # the dispatcher's state (dispatcher/checkpoint.py)
# the queue's identity: a random hex id, stored before anything of the queue reaches a
# changefeed, which records it (olr_buffer/runtime/assemble.py, sinks/parquet/layout.py)
QUEUE_ID_KEY = b"pipeline/queue_id"

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


class StoredDocument(msgspec.Struct, kw_only=True):
    """Base of a typed document stored in the metadata (a source's resume state, a sink's
    position), with a ``version``: a stored document of another version is refused in one
    line (:func:`decode_document`); fields added later have defaults, so older documents of
    the same version still decode, and unknown fields are ignored."""

    VERSION: ClassVar[int] = 1
    version: int = 1


def encode_document(doc: StoredDocument) -> bytes:
    """``doc`` in the checksummed envelope, ready to store."""
    return seal(msgspec.json.encode(doc))


_D = TypeVar("_D", bound=StoredDocument)


def decode_document(cls: type[_D], key: bytes, value: bytes, where: str = "queue") -> _D:
    """The ``cls`` document stored under ``key`` (a document without ``version`` is of
    version 1), or a one-line :class:`QueueCorruptError`."""
    doc = load_json(key, value, where)
    name = key.decode(errors="backslashreplace")
    if not isinstance(doc, dict):
        raise damaged(key, where, "not a JSON object")
    version = doc.get("version", 1)
    if version != cls.VERSION:
        raise QueueCorruptError(
            f"{where}: the stored {name} has version {version!r}; this olr-buffer reads version {cls.VERSION}",
            hint="the queue was written by another version of olr-buffer: use that version to finish it, "
            "or start a new queue",
            key=name,
        )
    try:
        return msgspec.convert(doc, cls)
    except msgspec.ValidationError as exc:
        raise damaged(key, where, str(exc)) from None
