"""Rows as columns: the rows among encoded records, or rows as lists, as the Arrow columns
of their fields (the layout: :mod:`olr_buffer.changes`).

The changefeed's writer turns rows into columns; reading a committed transaction back
can hand it those columns directly: :func:`row_columns` takes ``count`` consecutive
encoded records (a span of a queue block, or several joined) in one call of the compiled
step (``recscan.pyx``), without a Python object a value. Its pure-Python reference,
:func:`python_row_columns` (records decoded to lists, then :func:`rows_to_columns`), runs
where the step was not built or ``OLR_BUFFER_PURE_PYTHON=1`` is set; the tests hold the
two to the same columns, or the same refusal, on any input.

A refusal (None) means "read these as records": a record that is not as the record
format says, a row field of another type than its column's, an integer past int64, a
string that is not strict UTF-8, a map or an extension type anywhere (no record holds
one), data that is not ``count`` whole records. The record
path (:func:`~.payloads.decode_records`) then reads them and raises its own error where
there is one, so nothing is read differently through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, compress, zip_longest

import msgspec
import pyarrow as pa

from ..compiled import PURE_PYTHON_ENV as PURE_PYTHON_ENV  # the variable that turns the step off, named here too
from ..compiled import load_compiled
from ..errors import OlrBufferError
from .codes import ROW_CODES, ROW_FIELDS
from .payloads import decode_records, encode_record

#: the columns of a row, by name, in order: its fields but ``sequence`` and ``line``
ROW_COLUMNS = tuple(f for f in ROW_FIELDS if f not in ("sequence", "line"))
_I64, _STR = pa.int64(), pa.string()
#: their Arrow types
ROW_SCHEMA = pa.schema(
    [
        ("code", pa.int8()),
        ("scn", _I64),
        ("sub", _I64),
        ("tm", _I64),
        ("owner", _STR),
        ("table", _STR),
        ("obj", _I64),
        ("rid", _STR),
        ("before", _STR),
        ("after", _STR),
        ("sql", _STR),
        ("schema_version", _STR),
        ("schema_document", _STR),
    ]
)
assert tuple(ROW_SCHEMA.names) == ROW_COLUMNS
_FIELD_INDEX = tuple(ROW_FIELDS.index(name) for name in ROW_COLUMNS)
_INT_FIELDS = frozenset(i for i, f in zip(_FIELD_INDEX, ROW_SCHEMA) if pa.types.is_integer(f.type))
_MIN_FIELDS, _MAX_FIELDS = ROW_FIELDS.index("sql") + 1, len(ROW_FIELDS)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class RowFieldsError(OlrBufferError):
    """Rows with more fields than this version's record format has."""


@dataclass(frozen=True, slots=True)
class RowColumns:
    """The rows among ``count`` records: ``batch`` (one row a row, :data:`ROW_SCHEMA`);
    ``flags``, a byte a record: 1 where it is a row (the batch's next row); ``starts``,
    where each record starts in the data, and its end (``count + 1`` of them), or None
    where they are not known (the reference, on records not encoded as
    :func:`~.payloads.encode_record` encodes them)."""

    batch: pa.RecordBatch
    flags: bytes
    starts: Sequence[int] | None


#: the compiled module, or None; and the read-back step in words (``olr-buffer --version``)
RECSCAN, READ_BACK_STEP = load_compiled(f"{__package__}.recscan", "read-back step")


def rows_to_columns(rows: list[list]) -> pa.RecordBatch:
    """Row records (lists) as columns (:data:`ROW_SCHEMA`); the optional fields of a row
    that ends before them are null. :class:`RowFieldsError` if a row has more fields than
    the format has."""
    fields = list(zip_longest(*rows))
    if len(fields) > len(ROW_FIELDS):
        raise RowFieldsError(f"a row has {len(fields)} fields; this olr-buffer knows {len(ROW_FIELDS)}")
    n = len(rows)
    arrays = []
    for i, field in zip(_FIELD_INDEX, ROW_SCHEMA):
        arrays.append(pa.array(fields[i], field.type) if i < len(fields) else pa.nulls(n, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=ROW_SCHEMA)


_PLAIN = frozenset((type(None), bool, int, float, str, bytes))


def _plain(values: list) -> bool:
    """Whether ``values`` holds, at any depth, only what a record may: no map, no
    extension type (the compiled step refuses them, as a record never holds one)."""
    for v in values:
        t = type(v)
        if t is list:
            if not _plain(v):
                return False
        elif t not in _PLAIN:
            return False
    return True


def _takes(rec: object) -> bool:
    """Whether the record path's record ``rec`` is one :func:`row_columns` takes."""
    if type(rec) is not list or len(rec) < 5 or type(rec[0]) is not int or not _INT64_MIN <= rec[0] <= _INT64_MAX:
        return False
    if rec[0] not in ROW_CODES:
        return _plain(rec)
    if not _MIN_FIELDS <= len(rec) <= _MAX_FIELDS:
        return False
    if not _plain(rec):  # (sequence and line: any plain value)
        return False
    for i in _FIELD_INDEX[1:]:
        if i >= len(rec) or (v := rec[i]) is None:
            continue
        if i in _INT_FIELDS:
            if type(v) is not int or not _INT64_MIN <= v <= _INT64_MAX:
                return False
        elif type(v) is not str:
            return False
    return True


def python_row_columns(data: bytes | memoryview, count: int) -> RowColumns | None:
    """The reference of :func:`row_columns`: the records decoded, then the rows' columns."""
    try:
        recs = decode_records(data, count)
    except (msgspec.DecodeError, ValueError, OverflowError):
        return None
    if not all(map(_takes, recs)):
        return None
    flags = bytes(type(r[0]) is int and r[0] in ROW_CODES for r in recs)
    encoded = [encode_record(r) for r in recs]
    starts = list(accumulate(map(len, encoded), initial=0)) if b"".join(encoded) == data else None
    return RowColumns(rows_to_columns(list(compress(recs, flags))), flags, starts)


def _from_buffers(rows: int, columns: list[tuple]) -> pa.RecordBatch:
    arrays = []
    for field, (nulls, valid, offsets, values) in zip(ROW_SCHEMA, columns):
        bufs = [pa.py_buffer(valid) if valid is not None else None]
        if offsets is not None:
            bufs.append(pa.py_buffer(offsets))
        bufs.append(pa.py_buffer(values))
        arrays.append(pa.Array.from_buffers(field.type, rows, bufs, null_count=nulls))
    return pa.RecordBatch.from_arrays(arrays, schema=ROW_SCHEMA)


def row_columns(data: bytes | memoryview, count: int) -> RowColumns | None:
    """The rows among the ``count`` encoded records in ``data``, as columns, or None: read
    them as records (see the module's docstring)."""
    if RECSCAN is None:
        return python_row_columns(data, count)
    out = RECSCAN.scan(data, count)
    if out is None:
        return None
    rows, flags, starts, columns = out
    return RowColumns(_from_buffers(rows, columns), flags, memoryview(starts).cast("q"))
