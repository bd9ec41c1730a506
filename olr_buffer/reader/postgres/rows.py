"""From pgoutput tuples to changefeed rows: the value mapping and the row shapes.

Values (text form from the server, see docs/postgresql.md): NULL is ``null``; ``boolean``
is ``true``/``false``; ``smallint``, ``integer``, ``bigint``, ``oid`` are JSON numbers;
``real``, ``double precision``, ``numeric`` are JSON numbers with exactly the server's
digits (``NaN`` and infinities as strings); ``json`` and ``jsonb`` are embedded as JSON
values; every other type is a JSON string holding the server's text form.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import orjson

from .protocol import UNCHANGED, Column, PgoutputError

_LENGTH = struct.Struct("!i").unpack_from
_dumps = orjson.dumps

BOOL, INT8, INT2, INT4, OID, JSON, FLOAT4, FLOAT8, NUMERIC, JSONB = 16, 20, 21, 23, 26, 114, 700, 701, 1700, 3802
_INTEGERS = frozenset((INT8, INT2, INT4, OID))
_FLOATS = frozenset((FLOAT4, FLOAT8, NUMERIC))
_NOT_NUMBERS = frozenset((b"NaN", b"Infinity", b"-Infinity"))


_RAW, _NUMBER, _BOOL, _STRING = 0, 1, 2, 3  # how a column's text form becomes JSON


def _category(type_oid: int) -> int:
    if type_oid in _INTEGERS or type_oid == JSON or type_oid == JSONB:
        return _RAW
    if type_oid in _FLOATS:
        return _NUMBER
    return _BOOL if type_oid == BOOL else _STRING


def _json(category: int, raw: bytes) -> bytes:
    if category == _STRING:
        try:
            return orjson.dumps(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise PgoutputError("a column value is not valid UTF-8") from None
    if category == _RAW:
        return raw
    if category == _NUMBER:
        return b'"' + raw + b'"' if raw in _NOT_NUMBERS else raw
    return b"true" if raw in (b"t", b"true") else b"false"  # pgoutput sends t/f, ::text true/false


def value_json(type_oid: int, raw: bytes | None) -> bytes:
    """One column's value, as JSON text."""
    return b"null" if raw is None else _json(_category(type_oid), raw)


@dataclass
class Table:
    """What the rows of one relation need: names, types, and the key (``rid``) columns."""

    oid: int
    schema: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[int, ...] | None  # column positions in key order; None: no rid

    def __post_init__(self) -> None:
        self._names = [orjson.dumps(c.name) + b":" for c in self.columns]
        self._categories = [_category(c.type_oid) for c in self.columns]
        keys = frozenset(self.key or ())
        self._cols = [(n, c, i in keys) for i, (n, c) in enumerate(zip(self._names, self._categories))]

    def obj(self, values: tuple, fallback: tuple | None = None, only: tuple[int, ...] | None = None) -> str:
        """The JSON object of a tuple; unchanged TOASTed values are taken from ``fallback``
        (the old row) or left out; ``only``: just these column positions."""
        parts = []
        names, cats = self._names, self._categories
        n = min(len(values), len(names))
        for i in range(n) if only is None else only:
            if i >= n:
                continue
            v = values[i]
            if v is UNCHANGED:
                if fallback is None or i >= len(fallback) or fallback[i] is UNCHANGED:
                    continue
                v = fallback[i]
            if v is None:
                parts.append(names[i] + b"null")
            elif cats[i] == _RAW:
                parts.append(names[i] + v)
            else:
                parts.append(names[i] + _json(cats[i], v))
        return (b"{" + b",".join(parts) + b"}").decode()

    def rid(self, values: tuple) -> str | None:
        """The key as JSON text, or None (no key, or a key column that is not in ``values``)."""
        if self.key is None:
            return None
        parts = []
        for i in self.key:
            if i >= len(values) or values[i] is None or values[i] is UNCHANGED:
                return None
            parts.append(self._names[i] + _json(self._categories[i], values[i]))
        return (b"{" + b",".join(parts) + b"}").decode()

    def images(self, data: bytes, pos: int) -> tuple[str | None, str] | None:
        """``(rid, obj)`` of the TupleData at ``pos``, which ends ``data``, read and turned
        into JSON in one pass: the hot path of inserts, the same text as :meth:`rid` and
        :meth:`obj` give. None for anything out of the ordinary (another column count than
        the relation's, a binary or unchanged value, a malformed or non-UTF-8 tuple): the
        general path then decodes it, or raises the precise error."""
        try:
            if ((data[pos] << 8) | data[pos + 1]) != len(self._cols):
                return None
            pos += 2
            parts: list[bytes] = []
            append = parts.append
            null_key = False
            for name, cat, is_key in self._cols:
                k = data[pos]  # past the end: IndexError
                if k == 0x74:  # t
                    (length,) = _LENGTH(data, pos + 1)  # past the end: struct.error
                    if length < 0:
                        return None
                    pos += 5
                    end = pos + length  # past the end: the next column or the final check
                    if cat == _RAW:
                        append(name + data[pos:end])
                    elif cat == _STRING:
                        append(name + _dumps(data[pos:end].decode("utf-8")))
                    else:
                        append(name + _json(cat, data[pos:end]))
                    pos = end
                elif k == 0x6E:  # n
                    append(name + b"null")
                    null_key = null_key or is_key
                    pos += 1
                else:
                    return None
            if pos != len(data):
                return None
            obj = (b"{" + b",".join(parts) + b"}").decode()
        except (IndexError, struct.error, UnicodeDecodeError):
            return None
        key = self.key
        if key is None or null_key:
            return None, obj
        if key == (0,):
            return "{" + parts[0].decode() + "}", obj
        return (b"{" + b",".join([parts[i] for i in key]) + b"}").decode(), obj

    def flagged(self) -> tuple[int, ...]:
        return tuple(i for i, c in enumerate(self.columns) if c.key)
