"""OpenLogReplicator's column types (shared by its two sources: ``olr`` and ``olr_file``),
as its messages give them (``schema.columns``: each
column's ``name``, ``type`` and the figures of Oracle's dictionary, ``-1`` where it has
none, and ``nullable``), the Oracle type each is, and the Spark type its values read as
(docs/spark.md, "Types"): the schema documents of a changefeed filled from an
OpenLogReplicator hold both.

The Oracle type is written in Oracle's own words (``NUMBER(12,2)``, ``VARCHAR2(40)``,
``TIMESTAMP WITH TIME ZONE``), from what OpenLogReplicator says of it: a ``number`` with a
precision and no scale is a ``FLOAT(p)``; a timestamp's fractional digits and a
character type's length semantics are not in the messages. The Spark types follow Spark's
own Oracle dialect, as the redo source's do (``NUMBER`` without a precision is
``decimal(38,10)``, ``DATE`` a ``timestamp_ntz``), for the values in the forms
OpenLogReplicator writes them: numbers as JSON numbers, ``RAW`` as hex, dates and
timestamps as nanoseconds since the epoch (or ISO text); ``TIMESTAMP WITH TIME ZONE``
reads as ``string``, since OpenLogReplicator writes its values with the zone's name
(``1712345678123456789,Europe/Warsaw``), which no Spark timestamp reads.

Also what ``status`` shows alike for both: a position, and the transaction open in the queue.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..changes import SchemaColumn, schema_document

MAX_PRECISION = 38
UNCONSTRAINED_NUMBER = "decimal(38,10)"

# OpenLogReplicator's name -> (Oracle's, Spark type), for the types with no figures that matter
_PLAIN: dict[str, tuple[str, str]] = {
    "binary_float": ("BINARY_FLOAT", "float"),
    "binary_double": ("BINARY_DOUBLE", "double"),
    "date": ("DATE", "timestamp_ntz"),  # an Oracle DATE has a time of day, and no time zone
    "timestamp": ("TIMESTAMP", "timestamp_ntz"),
    "timestamp with local time zone": ("TIMESTAMP WITH LOCAL TIME ZONE", "timestamp"),
    "timestamp with time zone": ("TIMESTAMP WITH TIME ZONE", "string"),
    "interval year to month": ("INTERVAL YEAR TO MONTH", "string"),
    "interval day to second": ("INTERVAL DAY TO SECOND", "string"),
    "long raw": ("LONG RAW", "binary"),
    "blob": ("BLOB", "binary"),
    "clob": ("CLOB", "string"),
    "long": ("LONG", "string"),
    "boolean": ("BOOLEAN", "boolean"),
}
# ... and those with a length
_SIZED: dict[str, tuple[str, str]] = {
    "varchar2": ("VARCHAR2", "string"),
    "char": ("CHAR", "string"),
    "raw": ("RAW", "binary"),
    "urowid": ("UROWID", "string"),
}


class ColumnsError(ValueError):
    """``schema.columns`` that are not OpenLogReplicator's: the message is the reason."""


def column_type(column: dict[str, Any]) -> tuple[str, str]:
    """``(Oracle type, Spark type)`` of one of OpenLogReplicator's columns."""
    name = column["type"]
    if name == "number":
        return _number(_figure(column, "precision"), _figure(column, "scale"))
    if name in _PLAIN:
        return _PLAIN[name]
    if name in _SIZED:
        oracle, spark = _SIZED[name]
        length = _figure(column, "length")
        return (f"{oracle}({length})" if length > 0 else oracle), spark
    return name.upper(), "string"  # unknown, and types this version does not name: their text


def _number(precision: int, scale: int) -> tuple[str, str]:
    if precision <= 0:
        if scale == -1:
            return "NUMBER", UNCONSTRAINED_NUMBER
        return f"NUMBER(*,{scale})", f"decimal({MAX_PRECISION},{max(0, min(scale, MAX_PRECISION))})"
    if scale == -1:  # the dictionary's FLOAT(p): a binary precision, no scale
        return f"FLOAT({precision})", "double"
    oracle = f"NUMBER({precision})" if scale == 0 else f"NUMBER({precision},{scale})"
    if scale < 0:  # rounded to tens, hundreds ...: precision - scale digits before the point
        return oracle, f"decimal({min(precision - scale, MAX_PRECISION)},0)"
    digits = min(max(precision, scale), MAX_PRECISION)  # a scale above the precision: leading zeros
    return oracle, f"decimal({digits},{min(scale, digits)})"


def _figure(column: dict[str, Any], key: str) -> int:
    value = column.get(key, -1)
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, int):
        raise ColumnsError(f"column {column['name']!r}: {key!r} is not an integer: {value!r}")
    return value


def schema_columns(text: str) -> list[SchemaColumn]:
    """The columns of a schema document from ``schema.columns`` (its JSON text), or
    :class:`ColumnsError` naming what is wrong."""
    try:
        columns = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ColumnsError(f"schema.columns is not JSON ({exc})") from None
    if not isinstance(columns, list) or not columns:
        raise ColumnsError("schema.columns is not a non-empty array")
    out: list[SchemaColumn] = []
    seen: set[str] = set()
    for i, column in enumerate(columns, 1):
        if not isinstance(column, dict):
            raise ColumnsError(f"schema.columns item {i} is not an object")
        name, type_ = column.get("name"), column.get("type")
        if not isinstance(name, str) or not name:
            raise ColumnsError(f"schema.columns item {i}: 'name' is not a non-empty string")
        if name in seen:
            raise ColumnsError(f"schema.columns item {i}: column {name!r} twice")
        if not isinstance(type_, str) or not type_:
            raise ColumnsError(f"schema.columns item {i} ({name}): 'type' is not a non-empty string")
        nullable = column.get("nullable")
        if nullable is not None and not isinstance(nullable, bool):
            raise ColumnsError(f"schema.columns item {i} ({name}): 'nullable' is not a boolean")
        seen.add(name)
        oracle, spark = column_type(column)
        out.append(SchemaColumn(name, oracle, nullable, spark))
    return out


class SchemaDocuments:
    """The tables' schema documents (:func:`~olr_buffer.changes.schema_document`) from the
    columns OpenLogReplicator last gave each (``schema.columns``, as JSON text), made once
    per table and columns, for both of its sources."""

    LIMIT = 10_000  # tables whose documents are kept at most (then it starts again)

    def __init__(self) -> None:
        self._known: dict[tuple, tuple[str, str, str]] = {}  # (owner, table) -> (columns, version, document)

    def of(self, owner: str, table: str, text: str) -> tuple[str, str]:
        """``(version, document)`` of ``table`` with the columns ``text``; a
        :class:`ColumnsError` if they are not columns OpenLogReplicator writes."""
        known = self._known.get((owner, table))
        if known is None or known[0] != text:
            version, document = schema_document("olr", owner, table, schema_columns(text))
            if len(self._known) > self.LIMIT:
                self._known.clear()
            known = self._known[(owner, table)] = (text, version, document)
        return known[1], known[2]


def position_doc(p: tuple[int, int] | None) -> dict | None:
    """A position in OpenLogReplicator's stream, ``(c_scn, c_idx)``, as ``status`` shows it."""
    return None if p is None else {"c_scn": p[0], "c_idx": p[1]}


def open_transaction_doc(open_tx) -> dict | None:
    """The transaction whose records are in the queue without its commit (an OLR source's
    ``OpenTransaction``: ``xid``, ``first``, ``rows``), as ``status`` shows it."""
    return None if open_tx is None else {"xid": open_tx.xid, "first": position_doc(open_tx.first), "rows": open_tx.rows}


def open_transaction_text(doc: dict | None) -> str:
    """What ``status`` says of an :func:`open_transaction_doc` (nothing for none)."""
    if doc is None:
        return ""
    return f"; transaction {doc['xid']} in the queue without its commit yet ({doc['rows']:,} row(s))"
