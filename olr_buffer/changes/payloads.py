"""A record's payload by kind, the whole record, and its encoding (MessagePack)."""

from __future__ import annotations

import msgspec

# A record is ``[code, scn, sub, sequence, line, *payload]``; a source hands the payload to
# :meth:`BlockBuilder.add`. These build each kind of payload, so that the layout
# (:mod:`olr_buffer.changes`) is written down once. (The redo reader's and the PostgreSQL reader's fast loops write the
# same lists inline; the tests hold them to these: tests/test_changes.py.)


def row_payload(
    tm: int | None,
    owner: str,
    table: str,
    obj: int | None,
    rid: str | None,
    before: str | None,
    after: str | None,
    sql: str | None = None,
) -> list:
    """A row's payload (insert, update, delete, ddl, truncate, a row of the initial copy):
    ``before``/``after`` are JSON text."""
    return [tm, owner, table, obj, rid, before, after, sql]


def schema_fields(version: str, document: str | None = None) -> list:
    """What follows a row's payload when the row names its schema version: the version,
    and the document too on a row that introduces it (:func:`schema_document`)."""
    return [version] if document is None else [version, document]


def compensation_payload(rid: str) -> list:
    """A compensation's payload (code with the :data:`COMPENSATION` bit): the rid of the
    row it cancels."""
    return [rid]


def cut_payload(first: int, end: int) -> list:
    """A :data:`CUT`'s payload: its transaction's rows ``first..end-1`` are dropped."""
    return [first, end]


def end_payload(tm: int | None) -> list:
    """The payload of a begin, commit or rollback: its ``tm``."""
    return [tm]


def record(code: int, scn: int, sub: int, sequence: int, line: int, payload: list) -> list:
    """A whole record, as stored."""
    return [code, scn, sub, sequence, line, *payload]


class RecordError(ValueError):
    """A record that cannot be stored as it is; the message is the reason."""


#: A record (a list) as stored: MessagePack.
encode_record = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


# -- a row record put together from encoded parts -----------------------------------------
# A hot loop (the PostgreSQL reader's inserts) writes a row's encoded record from parts:
# ``row_head(n) + encode_record(scn) + row_middle(...) + rid + NIL + str_header(len(after))
# + after + NIL + schema``, which is ``encode_record(record(INSERT, scn, 0, 0, 0,
# row_payload(None, owner, table, obj, rid, None, after) + schema_fields(...)))``
# (tests/test_changes.py holds the two equal).

NIL = b"\xc0"


def str_header(n: int) -> bytes:
    """The MessagePack header of a string of ``n`` UTF-8 bytes."""
    if n < 32:
        return bytes((0xA0 | n,))
    if n < 256:
        return b"\xd9" + bytes((n,))
    if n < 65536:
        return b"\xda" + n.to_bytes(2, "big")
    return b"\xdb" + n.to_bytes(4, "big")


#: :func:`str_header` of 0..255 bytes, by length
STR_HEADERS = tuple(str_header(n) for n in range(256))


def row_head(code: int, fields: int) -> bytes:
    """The start of an encoded record of ``fields`` fields (at most 15) and op ``code``."""
    return bytes((0x90 | fields,)) + encode_record(code)


def row_middle(owner: str, table: str, obj: int | None) -> bytes:
    """What follows the SCN of an encoded row with no ``tm``, up to its ``rid``."""
    return encode_record(0) * 3 + NIL + encode_record(owner) + encode_record(table) + encode_record(obj)


def decode_records(data: bytes | memoryview, count: int) -> list[list]:
    """The ``count`` records in ``data`` (consecutive encoded records), as lists."""
    return _decode(b"\xdd" + count.to_bytes(4, "big") + data)  # array 32: count, then the items


def decode_record(raw: bytes) -> list:
    """One encoded record, as a list ``[code, scn, sub, sequence, line, ...]``."""
    return _decode(raw)
