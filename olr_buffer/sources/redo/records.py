"""Redo-op input lines: parsing and validation of one line, against the contract.

A valid line becomes ``(code, scn, sub, xid, payload)``: the op code and the tail of its
queue record, laid out as :mod:`olr_buffer.changes` defines (``lwn`` and ``close`` have
no payload: they are not stored as records).
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

import msgspec
import orjson

from ...changes import (
    AFTER,
    BEFORE,
    COMPENSATION,
    DDL,
    DELETE,
    DML_CODES,
    INSERT,
    MARKER_CODES,
    OP_CODES,
    TM,
    UPDATE,
    RecordError,
    SchemaColumn,
    compensation_payload,
    end_payload,
    row_payload,
    schema_document,
    schema_fields,
)
from .types import spark_type

MAX_SCN = (1 << 63) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


# Lines with a run of 20 digits, or "-" and 19 digits, may hold an integer beyond 64 bits:
# mapping every digit to "0" and searching is far cheaper than a regular expression.
_DIGITS_TO_ZERO = bytes(0x30 if 0x30 <= i <= 0x39 else (0x2D if i == 0x2D else 0x20) for i in range(256))
_TWENTY_ZEROS = b"0" * 20
_MINUS_NINETEEN_ZEROS = b"-" + b"0" * 19
_PARSER_POSITION = re.compile(r": line \d+ column \d+ \(char (\d+)\)$")


def parse_line(raw: bytes) -> dict[str, Any]:
    """Parse one line of JSON into a dict, or raise :class:`RecordError` with the reason.

    orjson turns integers beyond 64 bits into floats, and refuses numbers beyond double
    range; lines that may hold either go through the stdlib parser, which keeps integers
    exact and takes any number (one beyond double range, or of more than 4,300 digits,
    becomes an infinite float: out of range for any field that must be an integer).
    """
    shape = raw.translate(_DIGITS_TO_ZERO)
    stdlib = _TWENTY_ZEROS in shape or _MINUS_NINETEEN_ZEROS in shape
    if not stdlib:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            if "infinity" not in str(exc):
                raise RecordError(f"malformed JSON: {_reason(exc)}") from None
            stdlib = True
    if stdlib:
        try:
            obj = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant, parse_int=_any_int)
        except UnicodeDecodeError:
            raise RecordError("malformed JSON: invalid UTF-8") from None
        except ValueError as exc:
            raise RecordError(f"malformed JSON: {_reason(exc)}") from None
        except RecursionError:
            raise RecordError("malformed JSON: nested too deeply") from None
    if type(obj) is not dict:
        raise RecordError(f"not a JSON object but {_json_type(obj)}")
    return obj


def _any_int(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:  # more digits than Python converts by default
        return -math.inf if text[0] == "-" else math.inf


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "UTF-8" in text:
        return "invalid UTF-8"
    # the parsers' own "line 1 column 7 (char 6)" would clash with the file's line number
    return _PARSER_POSITION.sub(r" (at character \1)", text)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


_REQUIRED = object()


def _int(d: dict, name: str, lo: int, hi: int, default: Any = _REQUIRED) -> Any:
    v = d.get(name)
    if v is None:
        if default is _REQUIRED:
            raise RecordError(
                f"missing field {name!r}" if name not in d else f"field {name!r} must be an integer, not null"
            )
        return default
    if type(v) is not int:
        if v in (math.inf, -math.inf):
            raise RecordError(f"field {name!r} out of range: {v} (allowed {lo}..{hi})")
        raise RecordError(f"field {name!r} must be an integer, not {_json_type(v)}")
    if not lo <= v <= hi:
        raise RecordError(f"field {name!r} out of range: {v} (allowed {lo}..{hi})")
    return v


def _str(d: dict, name: str) -> str:
    v = d.get(name)
    if type(v) is str:
        return v
    if v is None:
        raise RecordError(f"missing field {name!r}" if name not in d else f"field {name!r} must be a string, not null")
    raise RecordError(f"field {name!r} must be a string, not {_json_type(v)}")


def _object_text(d: dict, name: str, required: bool) -> str | None:
    v = d.get(name)
    if v is None:
        if required:
            raise RecordError(
                f"missing field {name!r}" if name not in d else f"field {name!r} must be an object, not null"
            )
        return None
    if type(v) is not dict:
        raise RecordError(f"field {name!r} must be an object, not {_json_type(v)}")
    try:
        return orjson.dumps(v).decode()
    except TypeError:  # integers beyond 64 bits
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def validate(d: dict[str, Any]) -> tuple[int, int, int, str | None, list | None]:
    """Check a parsed record against the contract: the reference rules, which word the
    reason when a record is invalid (:func:`decode_line` takes most lines faster, and
    accepts the same ones: the differential fuzz test holds the two together).

    Returns ``(code, scn, sub, xid, payload)`` where payload is the tail of the queue
    record (after ``[code, scn, sub, sequence, line]``), or ``None`` for ``lwn`` and ``close``.
    """
    op = d.get("op")
    code = OP_CODES.get(op) if type(op) is str else None
    if code is None:
        if "op" not in d:
            raise RecordError("missing field 'op'")
        raise RecordError(f"unknown op {op!r} (expected one of {', '.join(OP_CODES)})")
    scn = _int(d, "scn", 0, MAX_SCN)
    sub = _int(d, "sub", 0, INT64_MAX, 0)
    if code in MARKER_CODES:
        return code, scn, sub, None, None
    xid = d.get("xid")
    if type(xid) is not str or not xid:
        if xid is None:
            raise RecordError("missing field 'xid'")
        raise RecordError(f"field 'xid' must be a non-empty string, not {_json_type(xid) if xid != '' else 'empty'}")
    tm = _int(d, "tm", INT64_MIN, INT64_MAX, None)
    if code in DML_CODES:
        owner = _str(d, "owner")
        table = _str(d, "table")
        rid = _str(d, "rid")
        obj = _int(d, "obj", INT64_MIN, INT64_MAX, None)
        rb = d.get("rollback", False)
        if type(rb) is not bool:
            if rb is not None:
                raise RecordError(f"field 'rollback' must be a boolean, not {_json_type(rb)}")
            rb = False
        if rb:
            _object_text(d, "before", False)
            _object_text(d, "after", False)
            return code | COMPENSATION, scn, sub, xid, compensation_payload(rid)
        before = _object_text(d, "before", code != INSERT)
        after = _object_text(d, "after", code != DELETE)
        return code, scn, sub, xid, row_payload(tm, owner, table, obj, rid, before, after)
    if code == DDL:
        owner = _str(d, "owner")
        table = _str(d, "table")
        sql = _str(d, "sql")
        obj = _int(d, "obj", INT64_MIN, INT64_MAX, None)
        ddl_rid = _str(d, "rid") if d.get("rid") is not None else None
        before = _object_text(d, "before", False)
        after = _object_text(d, "after", False)
        payload = row_payload(tm, owner, table, obj, ddl_rid, before, after, sql)
        if d.get("columns") is not None:
            payload += schema_fields(*_schema(owner, table, d["columns"]))
        return code, scn, sub, xid, payload
    return code, scn, sub, xid, end_payload(tm)


def _schema(owner: str, table: str, columns: Any) -> tuple[str, str]:
    """The schema document of a ``ddl`` record's ``columns`` (docs/formats.md): ``(version,
    text)``, or :class:`RecordError` naming the item that is wrong."""
    if type(columns) is not list:
        raise RecordError(f"field 'columns' must be an array, not {_json_type(columns)}")
    if not columns:
        raise RecordError("field 'columns' must list at least one column")
    cols, key, names = [], [], set()
    for n, c in enumerate(columns, 1):
        if type(c) is not dict:
            raise RecordError(f"field 'columns' item {n} must be an object, not {_json_type(c)}")
        name, type_ = c.get("name"), c.get("type")
        if type(name) is not str or not name:
            raise RecordError(f"field 'columns' item {n}: 'name' must be a non-empty string")
        if type(type_) is not str or not type_.strip():
            raise RecordError(f"field 'columns' item {n} ({name}): 'type' must be a non-empty string")
        if name in names:
            raise RecordError(f"field 'columns' item {n}: column {name!r} is listed twice")
        names.add(name)
        nullable, is_key = c.get("nullable", True), c.get("key", False)
        if type(nullable) is not bool and nullable is not None:
            raise RecordError(f"field 'columns' item {n} ({name}): 'nullable' must be a boolean")
        if type(is_key) is not bool and is_key is not None:
            raise RecordError(f"field 'columns' item {n} ({name}): 'key' must be a boolean")
        type_ = type_.strip()
        cols.append(SchemaColumn(name, type_, nullable is not False, spark_type(type_)))
        if is_key:
            key.append(name)
    try:
        return schema_document("redo", owner, table, cols, key)
    except TypeError:  # orjson: a lone surrogate
        raise RecordError("field 'columns' holds a string that is not valid Unicode (lone surrogate)") from None


# ``last_sub`` after an ``lwn`` or ``close`` at the thread's last SCN: above any record's
# sub, so that a record at that SCN is refused (the marker said every record at or below
# it is written); a marker at that SCN again is not
AFTER_MARKER = 1 << 63


def check_order(code: int, scn: int, sub: int, last_scn: int, last_sub: int) -> None:
    """Raise :class:`RecordError` if a record (``code``, ``scn``, ``sub``) may not follow
    the thread's last ``(last_scn, last_sub)`` (``last_sub`` :data:`AFTER_MARKER` after an
    ``lwn`` or ``close``): within a thread, ``(scn, sub)`` never decreases."""
    if scn < last_scn or (scn == last_scn and sub < last_sub and code not in MARKER_CODES):
        if last_sub == AFTER_MARKER and scn == last_scn:
            raise RecordError(
                f"record at scn {scn} after an lwn or close at scn {scn} (they say every record of the thread "
                "at or below their scn is written)"
            )
        raise RecordError(f"SCN goes back: (scn {scn}, sub {sub}) after (scn {last_scn}, sub {last_sub})")


# ---------------------------------------------------------------------------------------
# The fast path: one typed decode in C (msgspec), with ``before``/``after`` kept as the
# input's own JSON text. Anything it does not accept at once goes through
# ``validate(parse_line(raw))`` above, which is the reference: it accepts the same records
# and words the reason when a line is invalid.

_Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]


class _Line(msgspec.Struct, gc=False):
    op: str
    scn: Annotated[int, msgspec.Meta(ge=0, le=MAX_SCN)]
    xid: str | None = None
    sub: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)] | None = None
    tm: _Int64 | None = None
    owner: str | None = None
    table: str | None = None
    obj: _Int64 | None = None
    rid: str | None = None
    before: msgspec.Raw = None  # type: ignore[assignment]  # absent: None; else the text (may be b"null")
    after: msgspec.Raw = None  # type: ignore[assignment]
    sql: str | None = None
    rollback: bool | None = None
    columns: msgspec.Raw = None  # type: ignore[assignment]  # a ddl's: the reference path reads it


_line_decoder = msgspec.json.Decoder(_Line)
_decode_line = _line_decoder.decode
_decode_lines = _line_decoder.decode_lines


class _Images(msgspec.Struct, gc=False):
    before: msgspec.Raw = None  # type: ignore[assignment]
    after: msgspec.Raw = None  # type: ignore[assignment]


_decode_images = msgspec.json.Decoder(_Images).decode
_DML_CODES = (INSERT, UPDATE, DELETE)


class _NotFast(Exception):
    """The fast path cannot take this line as it is: the reference path decides."""


def _text(raw: msgspec.Raw | None) -> str | None:
    """``before``/``after``: ``None`` when absent or null, else the object's JSON text exactly
    as the input has it."""
    if raw is None:
        return None
    b = bytes(raw)
    if b[0] != 123:  # "{"
        if b == b"null":
            return None
        raise _NotFast  # not an object: the reference path words the error
    return b.decode()


def decode_line(raw: bytes) -> tuple[int, int, int, str | None, list | None]:
    """Parse and check one line: ``(code, scn, sub, xid, payload)`` as :func:`validate`
    returns it, or :class:`RecordError` with the reason.

    ``before``/``after`` are the input's own text of the object, byte for byte: numbers
    keep their digits whatever their size, strings their escapes.
    """
    try:
        if len(raw) >= 1000 and raw.count(b"[") + raw.count(b"{") >= 500:
            raise _NotFast  # perhaps nested deeply: how deep is too deep is the reference's to say
        if not raw.isascii():
            raw.decode()  # msgspec does not check the UTF-8 of the fields it skips
        r = _decode_line(raw)
        code = OP_CODES.get(r.op)
        scn = r.scn
        sub = r.sub or 0
        if code in MARKER_CODES:
            return code, scn, sub, None, None
        xid = r.xid
        if code is None or not xid:
            raise _NotFast
        if code in _DML_CODES:
            owner, table, rid = r.owner, r.table, r.rid
            if owner is None or table is None or rid is None:
                raise _NotFast
            before, after = _text(r.before), _text(r.after)
            if r.rollback:
                return code | COMPENSATION, scn, sub, xid, compensation_payload(rid)
            if (before is None and code != INSERT) or (after is None and code != DELETE):
                raise _NotFast
            return code, scn, sub, xid, row_payload(r.tm, owner, table, r.obj, rid, before, after)
        if code == DDL:
            if (
                r.owner is None
                or r.table is None
                or r.sql is None
                or (r.columns is not None and bytes(r.columns) != b"null")
            ):
                raise _NotFast
            return (
                code,
                scn,
                sub,
                xid,
                row_payload(r.tm, r.owner, r.table, r.obj, r.rid, _text(r.before), _text(r.after), r.sql),
            )
        return code, scn, sub, xid, end_payload(r.tm)
    except (_NotFast, msgspec.MsgspecError, ValueError, RecursionError):
        pass
    code, scn, sub, xid, payload = validate(parse_line(raw))  # the reason, if invalid
    if payload is not None and len(payload) >= 8:
        try:  # a valid record the fast path did not take: the same text for its images
            images = _decode_images(raw)
            payload[BEFORE - TM], payload[AFTER - TM] = _text(images.before), _text(images.after)
        except (_NotFast, msgspec.MsgspecError, ValueError, RecursionError):
            pass
    return code, scn, sub, xid, payload


def batch_decode(region: bytes, lines: list[bytes], max_line_bytes: int) -> list | None:
    """The typed decode of each line of ``region`` (``lines``: its lines, split at
    ``\n``), in one call, or ``None`` when the lines must be decoded one by one.

    One call decodes every value of the buffer, whatever the line breaks between them.
    It stands for one decode per line only when every line is one object: the region
    starts with ``{``, ends with ``}``, and every line break is ``}\n{``. A value
    spanning two lines would then have to go on after a ``}`` with ``{``, which JSON does
    not allow (a raw newline inside a string neither), so each line holds whole values,
    at least one; as many values as lines means one each. The checks of
    :func:`decode_line` that msgspec does not make are made here for the whole region:
    valid UTF-8, and no line that may be nested deeply.
    """
    n = len(lines)
    if region[:1] != b"{" or region[-1:] != b"}" or region.count(b"}\n{") != n - 1:
        return None
    longest = max(map(len, lines))
    if longest >= max_line_bytes:
        return None
    if longest >= 1000 and any(len(x) >= 1000 and x.count(b"[") + x.count(b"{") >= 500 for x in lines):
        return None
    if not region.isascii():
        # only the lines that are not ASCII (each starts with "{" and ends with "}": joined,
        # no two can make one UTF-8 sequence); decoding a whole chunk that holds a few
        # non-ASCII characters was ~0.6 us a line
        try:
            b"\n".join([x for x in lines if not x.isascii()]).decode()
        except UnicodeDecodeError:
            return None
    try:
        decoded = _decode_lines(region)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    return decoded if len(decoded) == n else None
