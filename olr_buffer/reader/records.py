"""Redo records: validation of one parsed line, and their compact encoding in the queue.

A record in the queue is the orjson encoding of a list; its first five items are always
``[code, scn, sub, sequence, line]``:

* rows (insert, update, delete, ddl): ``+ [tm, owner, table, obj, rid, before, after, sql]``
  where ``before``/``after`` are JSON text (compact, keys in input order) or ``None``;
* compensations (DML with ``"rollback": true``): ``+ [rid]``, code has ``COMPENSATION``;
* begin, commit, rollback: ``+ [tm]``.

``lwn`` records are not stored as records: they only move the thread's progress, which
the block summary carries (see :mod:`olr_buffer.reader.blocks`).
"""

from __future__ import annotations

import json
import math
import operator
import re
from typing import Any

import orjson

BEGIN, INSERT, UPDATE, DELETE, DDL, COMMIT, ROLLBACK, LWN = 1, 2, 3, 4, 5, 6, 7, 8
COMPENSATION = 16  # or'ed into INSERT/UPDATE/DELETE

OP_CODES = {
    "begin": BEGIN,
    "insert": INSERT,
    "update": UPDATE,
    "delete": DELETE,
    "ddl": DDL,
    "commit": COMMIT,
    "rollback": ROLLBACK,
    "lwn": LWN,
}
ROW_CODES = frozenset((INSERT, UPDATE, DELETE, DDL))
DML_CODES = frozenset((INSERT, UPDATE, DELETE))
CHANGEFEED_OP = {INSERT: "c", UPDATE: "u", DELETE: "d", DDL: "ddl"}

MAX_SCN = (1 << 63) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


class RecordError(ValueError):
    """A line that is not a valid record; the message is the reason."""


# Lines with a run of 20 digits, or "-" and 19 digits, may hold an integer beyond 64 bits:
# mapping every digit to "0" and searching is far cheaper than a regular expression.
_DIGITS_TO_ZERO = bytes(0x30 if 0x30 <= i <= 0x39 else (0x2D if i == 0x2D else 0x20) for i in range(256))
_TWENTY_ZEROS = b"0" * 20
_MINUS_NINETEEN_ZEROS = b"-" + b"0" * 19
_PARSER_POSITION = re.compile(r": line \d+ column \d+ \(char (\d+)\)$")


def parse_line(raw: bytes) -> dict[str, Any]:
    """Parse one line of JSON into a dict, or raise :class:`RecordError` with the reason.

    orjson turns integers beyond 64 bits into floats; lines that may hold one go through
    the stdlib parser, which keeps them exact.
    """
    shape = raw.translate(_DIGITS_TO_ZERO)
    if _TWENTY_ZEROS not in shape and _MINUS_NINETEEN_ZEROS not in shape:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RecordError(f"malformed JSON: {_reason(exc)}") from None
    else:
        try:
            obj = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_finite_float)
        except UnicodeDecodeError:
            raise RecordError("malformed JSON: invalid UTF-8") from None
        except ValueError as exc:
            raise RecordError(f"malformed JSON: {_reason(exc)}") from None
        except RecursionError:
            raise RecordError("malformed JSON: nested too deeply") from None
    if type(obj) is not dict:
        raise RecordError(f"not a JSON object but {_json_type(obj)}")
    return obj


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (math.inf, -math.inf):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


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
            raise RecordError(f"missing field {name!r}" if name not in d else f"field {name!r} must be an integer, not null")
        return default
    if type(v) is not int:
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
            raise RecordError(f"missing field {name!r}" if name not in d else f"field {name!r} must be an object, not null")
        return None
    if type(v) is not dict:
        raise RecordError(f"field {name!r} must be an object, not {_json_type(v)}")
    try:
        return orjson.dumps(v).decode()
    except TypeError:  # integers beyond 64 bits
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


_dumps = orjson.dumps
_OP_SCN_XID = operator.itemgetter("op", "scn", "xid")
_OWNER_TABLE_RID = operator.itemgetter("owner", "table", "rid")


def validate(d: dict[str, Any]) -> tuple[int, int, int, str | None, list | None]:
    """Check a parsed record against the contract.

    Returns ``(code, scn, sub, xid, payload)`` where payload is the tail of the queue
    encoding (after ``[code, scn, sub, seq, line]``), or ``None`` for ``lwn``.

    The common, valid records take an inlined path; anything unusual goes through
    :func:`_validate_checked`, which gives the reason when a record is invalid.
    """
    get = d.get
    try:
        op, scn, xid = _OP_SCN_XID(d)
    except KeyError:
        return _validate_checked(d)
    sub = get("sub", 0)
    tm = get("tm")
    if (
        type(scn) is int
        and 0 <= scn <= MAX_SCN
        and type(sub) is int
        and 0 <= sub <= INT64_MAX
        and type(xid) is str
        and xid
        and (tm is None or (type(tm) is int and INT64_MIN <= tm <= INT64_MAX))
    ):
        if op == "insert" or op == "update" or op == "delete":
            try:
                owner, table, rid = _OWNER_TABLE_RID(d)
            except KeyError:
                return _validate_checked(d)
            obj, before, after = get("obj"), get("before"), get("after")
            if (
                type(owner) is str
                and type(table) is str
                and type(rid) is str
                and (obj is None or (type(obj) is int and INT64_MIN <= obj <= INT64_MAX))
                and get("rollback") is None
                and (before is None if op == "insert" else type(before) is dict)
                and (after is None if op == "delete" else type(after) is dict)
            ):
                try:
                    return (
                        OP_CODES[op],
                        scn,
                        sub,
                        xid,
                        [
                            tm,
                            owner,
                            table,
                            obj,
                            rid,
                            None if before is None else _dumps(before).decode(),
                            None if after is None else _dumps(after).decode(),
                            None,
                        ],
                    )
                except TypeError:
                    pass  # integers beyond 64 bits: the checked path serialises them
        elif op == "begin" or op == "commit" or op == "rollback":
            return OP_CODES[op], scn, sub, xid, [tm]
    return _validate_checked(d)


def _validate_checked(d: dict[str, Any]) -> tuple[int, int, int, str | None, list | None]:
    """:func:`validate` for every record, with the reason when one is invalid."""
    op = d.get("op")
    code = OP_CODES.get(op) if type(op) is str else None
    if code is None:
        if "op" not in d:
            raise RecordError("missing field 'op'")
        raise RecordError(f"unknown op {op!r} (expected one of {', '.join(OP_CODES)})")
    scn = _int(d, "scn", 0, MAX_SCN)
    sub = _int(d, "sub", 0, INT64_MAX, 0)
    if code == LWN:
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
            return code | COMPENSATION, scn, sub, xid, [rid]
        before = _object_text(d, "before", code != INSERT)
        after = _object_text(d, "after", code != DELETE)
        return code, scn, sub, xid, [tm, owner, table, obj, rid, before, after, None]
    if code == DDL:
        owner = _str(d, "owner")
        table = _str(d, "table")
        sql = _str(d, "sql")
        obj = _int(d, "obj", INT64_MIN, INT64_MAX, None)
        rid = _str(d, "rid") if d.get("rid") is not None else None
        before = _object_text(d, "before", False)
        after = _object_text(d, "after", False)
        return code, scn, sub, xid, [tm, owner, table, obj, rid, before, after, sql]
    return code, scn, sub, xid, [tm]
