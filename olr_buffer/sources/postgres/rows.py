"""From pgoutput tuples to changefeed rows: the value mapping and the row shapes.

Values (text form from the server, see docs/postgresql.md): NULL is ``null``; ``boolean``
is ``true``/``false``; ``smallint``, ``integer``, ``bigint``, ``oid`` are JSON numbers;
``real``, ``double precision``, ``numeric`` are JSON numbers with exactly the server's
digits (``NaN`` and infinities as strings); ``json`` and ``jsonb`` are embedded as JSON
values; every other type is a JSON string holding the server's text form.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import orjson

from ...changes import NIL, STR_HEADERS, encode_record, row_middle, str_header
from .compiled import TUPLESCAN
from .protocol import UNCHANGED, Column, PgoutputError

_LENGTH = struct.Struct("!i").unpack_from
# an XLogData frame of an Insert: data start, WAL end, (send time, 'I'), [xid in a stream block,]
# relation OID, tuple tag
_INSERT_FRAME = struct.Struct("!QQ9xIB").unpack_from
_STREAM_INSERT_FRAME = struct.Struct("!QQ9xIIB").unpack_from
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
    """What the rows of one relation need: names, types, the key (``rid``) columns, and the
    version and text of its schema document (none: rows name no version)."""

    oid: int
    schema: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[int, ...] | None  # column positions in key order; None: no rid
    version: str | None = None
    document: str | None = None

    def __post_init__(self) -> None:  # noqa: D105
        self._names = [orjson.dumps(c.name) + b":" for c in self.columns]
        self._categories = [_category(c.type_oid) for c in self.columns]
        keys = frozenset(self.key or ())
        self._cols = [(n, c, i in keys) for i, (n, c) in enumerate(zip(self._names, self._categories))]
        #: ``(rid, obj)`` of the TupleData at ``pos``, which ends ``data``, as UTF-8 JSON
        #: text (see :meth:`_first_image_bytes`)
        self.image_bytes: Callable[[bytes, int], tuple[bytes | None, bytes] | None] = self._first_image_bytes
        self.insert_record: Callable[[bytes, int, bytes, int, bytes, bytes], bytes | None] = self._first_insert_record
        #: the records of a run of inserts (see :func:`python_insert_run`)
        self.insert_run: Callable[..., tuple[int, int, int, int]] = self._first_insert_run
        # the constant parts of an insert's encoded record (:meth:`insert_record`): after its
        # head and LSN, ``middle``; after its images ``tail`` (sql, and the schema version
        # alone) or ``tail_document`` (and the document: the table's first row in a transaction)
        self.middle = row_middle(self.schema, self.name, self.oid)
        if self.version is None:
            self.tail = self.tail_document = NIL
        else:
            self.tail = NIL + encode_record(self.version)
            self.tail_document = self.tail + encode_record(self.document)

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
        """:meth:`image_bytes` as text: the same as :meth:`rid` and :meth:`obj` give."""
        got = self.image_bytes(data, pos)
        if got is None:
            return None
        rid, obj = got
        return None if rid is None else rid.decode(), obj.decode()

    def _first_image_bytes(self, data: bytes, pos: int) -> tuple[bytes | None, bytes] | None:
        """``(rid, obj)`` of the TupleData at ``pos``, which ends ``data``, read and turned
        into JSON (valid UTF-8) in one pass: the hot path of inserts, the text of
        :meth:`rid` and :meth:`obj`. None for anything out of the ordinary (another column
        count than the relation's, a binary or unchanged value, a malformed or non-UTF-8
        tuple): the general path then decodes it, or raises the precise error.

        The function is made for the table's columns on the first call: compiled
        (``tuplescan.Images``) where it is built, else :func:`_images_function`, the
        reference."""
        if TUPLESCAN is not None:
            self.image_bytes = fn = TUPLESCAN.Images(self._names, self._categories, self.key)
            self.insert_record = fn.record
            self.insert_run = fn.run
        else:
            self.image_bytes = fn = _images_function(self._names, self._categories, self.key)
            self.insert_record = partial(python_insert_record, fn)
            self.insert_run = partial(python_insert_run, self.insert_record)
        return fn(data, pos)

    def _first_insert_record(
        self, data: bytes, pos: int, head: bytes, lsn: int, middle: bytes, tail: bytes
    ) -> bytes | None:
        """The encoded record of the insert whose TupleData is at ``pos``, which ends
        ``data`` (see :func:`python_insert_record`), or None as :meth:`image_bytes`: the
        compiled step's ``record`` where it is built, in one piece."""
        self._first_image_bytes(b"", 0)  # makes both
        return self.insert_record(data, pos, head, lsn, middle, tail)

    def _first_insert_run(self, *args) -> tuple[int, int, int, int]:
        """:func:`python_insert_run` of this table: the compiled step's ``run`` where it
        is built, else the reference."""
        self._first_image_bytes(b"", 0)  # makes all three
        return self.insert_run(*args)

    def reference_image_bytes(self) -> Callable[[bytes, int], tuple[bytes | None, bytes] | None]:
        """The pure-Python :meth:`image_bytes` of this table, even where the compiled one
        is built: the reference the tests hold the compiled step to."""
        return _images_function(self._names, self._categories, self.key)

    def flagged(self) -> tuple[int, ...]:
        return tuple(i for i, c in enumerate(self.columns) if c.key)


def python_insert_record(
    image_bytes: Callable[[bytes, int], tuple[bytes | None, bytes] | None],
    data: bytes,
    pos: int,
    head: bytes,
    lsn: int,
    middle: bytes,
    tail: bytes,
) -> bytes | None:
    """An insert's encoded record from its parts (:func:`~olr_buffer.changes.row_head`):
    ``head``, the LSN, ``middle``, the rid (or nil), nil (``before``), the ``after``
    image, ``tail``; None where ``image_bytes`` is None. The reference of the compiled
    ``Images.record``."""
    got = image_bytes(data, pos)
    if got is None:
        return None
    rid, obj = got
    n = len(obj)
    return b"".join(
        (
            head,
            encode_record(lsn),
            middle,
            NIL if rid is None else (STR_HEADERS[len(rid)] if len(rid) < 256 else str_header(len(rid))) + rid,
            NIL,
            STR_HEADERS[n] if n < 256 else str_header(n),
            obj,
            tail,
        )
    )


def python_insert_run(
    insert_record: Callable[[bytes, int, bytes, int, bytes, bytes], bytes | None],
    batch: list[bytes],
    i: int,
    in_stream: bool,
    relation: int,
    sub: int,
    head: bytes,
    middle: bytes,
    tail: bytes,
    out: list[bytes],
    room: int,
    room_bytes: int,
) -> tuple[int, int, int, int]:
    """The records of the run of inserts that starts at ``batch[i]``, appended to ``out``:
    XLogData frames of pgoutput Insert messages (in a stream block when ``in_stream``, of
    subtransaction ``sub``) of ``relation``, each one's record as ``insert_record`` makes
    it (:meth:`Table.insert_record`; its LSN the frame's data start). Stops before anything
    else (another message, relation or subtransaction, a tuple ``insert_record`` refuses),
    and after the row that fills ``room`` records or ``room_bytes`` bytes. Returns where it
    stopped, the bytes appended, the highest data start and WAL end (0 if none). The
    reference of the compiled ``Images.run``: the reader's loop over a run of inserts."""
    k, end, nbytes, top_start, top_end = i, len(batch), 0, 0, 0
    while k < end:
        data = batch[k]
        if type(data) is not bytes or len(data) <= 35 or data[0] != 0x77 or data[25] != 0x49:  # w, I
            break
        if in_stream:
            start, wal_end, sub_, rel, tag = _STREAM_INSERT_FRAME(data, 1)
            if sub_ != sub or rel != relation or tag != 0x4E:  # N
                break
            rec = insert_record(data, 35, head, start, middle, tail)
        else:
            start, wal_end, rel, tag = _INSERT_FRAME(data, 1)
            if rel != relation or tag != 0x4E:
                break
            rec = insert_record(data, 31, head, start, middle, tail)
        if rec is None:
            break
        out.append(rec)
        nbytes += len(rec)
        if start > top_start:
            top_start = start
        if wal_end > top_end:
            top_end = wal_end
        k += 1
        if k - i >= room or nbytes >= room_bytes:
            break
    return k, nbytes, top_start, top_end


_ROW = """\
def images(data, pos):
    try:
        if data[pos] != {hi} or data[pos + 1] != {lo}:
            return None
        pos += 2
{columns}
        if pos != len(data):
            return None
        obj = join(({obj}))
    except (IndexError, struct_error, UnicodeDecodeError):
        return None
{rid}
"""

_COLUMN = """\
        k = data[pos]
        if k == 116:  # t
            (length,) = unpack(data, pos + 1)
            if length < 0:
                return None
            pos += 5
            end = pos + length
{value}
            pos = end
        elif k == 110:  # n
            v{i} = b"null"{null_key}
            pos += 1
        else:
            return None
"""

# a value taken as it is must be valid UTF-8 (the text of a number is ASCII: one C call)
_VALUES = {
    _RAW: "            v{i} = data[pos:end]\n            if not v{i}.isascii():\n                v{i}.decode()",
    _STRING: "            v{i} = dumps(data[pos:end].decode())",
    _NUMBER: (
        "            v{i} = data[pos:end]\n"
        "            if v{i} in NOT_NUMBERS:\n"
        "                v{i} = b'\"' + v{i} + b'\"'\n"
        "            elif not v{i}.isascii():\n"
        "                v{i}.decode()"
    ),
    _BOOL: '            v{i} = b"true" if data[pos:end] in TRUE else b"false"',
}


def _images_function(names: list[bytes], categories: list[int], key: tuple[int, ...] | None):
    """:meth:`Table.image_bytes` for one table: the loop over its columns unrolled, with the
    JSON of each column's name and its value mapping fixed (a third of the time of a
    loop that looks them up). Names are constants of the function's namespace (``P0``,
    ``K0``...), never part of its source."""
    ns: dict = {
        "unpack": _LENGTH,
        "dumps": _dumps,
        "join": b"".join,
        "struct_error": struct.error,
        "NOT_NUMBERS": _NOT_NUMBERS,
        "TRUE": frozenset((b"t", b"true")),
    }
    keys = set(key or ())
    columns = []
    obj = []
    for i, (name, cat) in enumerate(zip(names, categories)):
        ns[f"P{i}"] = (b"{" if i == 0 else b",") + name
        obj += [f"P{i}", f"v{i}"]
        null_key = "\n            null_key = True" if i in keys else ""
        columns.append(_COLUMN.format(i=i, value=_VALUES[cat].format(i=i), null_key=null_key))
    ns["END"] = b"}"
    obj = obj + ["END"] if names else ["START", "END"]
    ns["START"] = b"{"
    if key is None:
        rid = "    return None, obj"
    else:
        parts = []
        for j, i in enumerate(key):
            ns[f"K{j}"] = (b"{" if j == 0 else b",") + names[i]
            parts += [f"K{j}", f"v{i}"]
        rid = (
            f"    if null_key:\n        return None, obj\n    return join(({', '.join(parts or ['START'])}, END)), obj"
        )
    columns_src = "".join(columns)
    if key is not None:
        columns_src = "        null_key = False\n" + columns_src
    source = _ROW.format(
        hi=len(names) >> 8, lo=len(names) & 0xFF, columns=columns_src, obj=", ".join(obj) + ",", rid=rid
    )
    exec(compile(source, "<Table.image_bytes>", "exec"), ns)  # noqa: S102 - our own template, constants by name
    return ns["images"]
