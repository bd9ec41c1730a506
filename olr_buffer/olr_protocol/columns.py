"""A table's columns as OpenLogReplicator's messages carry them: ``schema.columns``, the
array its JSON writer adds to a row's ``schema`` with the format option ``"schema": 1``
(with a table's first row) or ``3`` (with every row), made here from the changefeed's
schema documents (docs/formats.md, "Schema documents") for ``serve``.

OpenLogReplicator writes each column as ``{"name", "type", ...,"nullable"}``, with the
type's figures between, as its dictionary (``SYS.COL$``) has them, ``-1`` where it has
none:

* ``number``: ``precision`` and ``scale`` (``NUMBER`` is -1/-1, ``NUMBER(10)`` 10/0,
  ``NUMBER(*,2)`` -1/2, ``FLOAT(p)`` p/-1: a ``FLOAT`` is a ``NUMBER`` with a binary
  precision and no scale);
* ``varchar2``, ``char``, ``raw``, ``urowid``: ``length``;
* ``timestamp`` (11), ``timestamp with time zone`` (13), ``timestamp with local time
  zone`` (11), ``interval year to month`` (5), ``interval day to second`` (11):
  ``length``, Oracle's data length of the type;
* ``date``, ``binary_float``, ``binary_double``, ``clob``, ``blob``, ``long``,
  ``long raw``: nothing more; every other type is ``unknown``.

A document of an Oracle source (``redo``, ``olr``) states Oracle's types
(``NUMBER(12,2)``, ``VARCHAR2(30 CHAR)``, ``TIMESTAMP(6) WITH TIME ZONE``): each becomes
OpenLogReplicator's name and figures (:func:`oracle_column`; ``NVARCHAR2``, ``NCHAR`` and
``NCLOB`` the names OpenLogReplicator gives them too, ``varchar2``, ``char``, ``clob``;
``length`` the number the type states, whatever its unit). A PostgreSQL document's types
have no Oracle name: they go as PostgreSQL states them (``numeric(12,2)``, ``timestamp
with time zone``, ``uuid``), with ``precision``/``scale`` of a ``numeric`` and ``length``
of a ``character varying(n)`` or ``character(n)`` (:func:`postgresql_column`), since
naming them after Oracle's types would make a receiver read PostgreSQL's values in the
forms it expects of Oracle's (a ``date`` as nanoseconds since the epoch). A ``nullable``
the document does not know is ``true``.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

NAME, TYPE, LENGTH, PRECISION, SCALE, NULLABLE = "name", "type", "length", "precision", "scale", "nullable"

_NUMBER = re.compile(r"(?:NUMBER|NUMERIC|DECIMAL|DEC)(?:\((\d+|\*)(?:,(-?\d+))?\))?")
_FLOAT = re.compile(r"FLOAT(?:\((\d+)\))?")
_VARYING = re.compile(r"(?:N?VARCHAR2?|(?:NATIONAL )?(?:CHAR|CHARACTER|NCHAR) VARYING)\((\d+)(?: ?(?:BYTE|CHAR))?\)")
_CHAR = re.compile(r"(?:NATIONAL )?(?:CHAR|CHARACTER|NCHAR)(?:\((\d+)(?: ?(?:BYTE|CHAR))?\))?")
_TIMESTAMP = re.compile(r"TIMESTAMP(?:\(\d+\))?( WITH(?: (LOCAL))? TIME ZONE)?")
_INTERVAL = re.compile(r"INTERVAL (YEAR|DAY)(?:\(\d+\))? TO (?:MONTH|SECOND(?:\(\d+\))?)")
_SIZED = re.compile(r"(RAW|UROWID)(?:\((\d+)\))?")
_PLAIN = {
    "DATE": "date",
    "BINARY_FLOAT": "binary_float",
    "BINARY_DOUBLE": "binary_double",
    "CLOB": "clob",
    "NCLOB": "clob",
    "BLOB": "blob",
    "LONG": "long",
    "LONG RAW": "long raw",
}
_INTEGER = ("INTEGER", "INT", "SMALLINT")
_FLOATS = {"REAL": 63, "DOUBLE PRECISION": 126}
_INSIDE = re.compile(r"\s*([(,])\s*|\s*(?=\))")
UROWID_LENGTH = 4000  # UROWID without a size

_PG_NUMERIC = re.compile(r"numeric(?:\((\d+),(-?\d+)\))?")
_PG_CHARACTER = re.compile(r"(?:character varying|character|bit varying|bit)\((\d+)\)")


def oracle_column(name: str, type_text: str, nullable: bool | None) -> dict[str, Any]:
    """OpenLogReplicator's column of an Oracle column of type ``type_text``."""
    text = _INSIDE.sub(r"\1", " ".join(type_text.upper().split()))  # no space in "(10,2)" nor before it
    col: dict[str, Any] = {NAME: name}
    m = _NUMBER.fullmatch(text)
    if m is not None:
        precision, scale = m.group(1), m.group(2)
        if precision is None:
            col.update({TYPE: "number", PRECISION: -1, SCALE: -1})
        else:
            col.update(
                {
                    TYPE: "number",
                    PRECISION: -1 if precision == "*" else int(precision),
                    SCALE: int(scale) if scale is not None else (-1 if precision == "*" else 0),
                }
            )
    elif text in _INTEGER:
        col.update({TYPE: "number", PRECISION: -1, SCALE: 0})
    elif (m := _FLOAT.fullmatch(text)) is not None or text in _FLOATS:
        precision = _FLOATS[text] if m is None else int(m.group(1) or 126)
        col.update({TYPE: "number", PRECISION: precision, SCALE: -1})
    elif text in _PLAIN:
        col[TYPE] = _PLAIN[text]
    elif (m := _VARYING.fullmatch(text)) is not None:
        col.update({TYPE: "varchar2", LENGTH: int(m.group(1))})
    elif (m := _CHAR.fullmatch(text)) is not None:
        col.update({TYPE: "char", LENGTH: int(m.group(1) or 1)})
    elif (m := _TIMESTAMP.fullmatch(text)) is not None:
        if m.group(1) is None:
            col.update({TYPE: "timestamp", LENGTH: 11})
        elif m.group(2) is None:
            col.update({TYPE: "timestamp with time zone", LENGTH: 13})
        else:
            col.update({TYPE: "timestamp with local time zone", LENGTH: 11})
    elif (m := _INTERVAL.fullmatch(text)) is not None:
        if m.group(1) == "YEAR":
            col.update({TYPE: "interval year to month", LENGTH: 5})
        else:
            col.update({TYPE: "interval day to second", LENGTH: 11})
    elif (m := _SIZED.fullmatch(text)) is not None:
        default = UROWID_LENGTH if m.group(1) == "UROWID" else 0
        col.update({TYPE: m.group(1).lower(), LENGTH: int(m.group(2)) if m.group(2) else default})
    else:
        col[TYPE] = "unknown"  # ROWID, XMLTYPE, JSON, BFILE, object types ...: as OpenLogReplicator says
    col[NULLABLE] = nullable is not False
    return col


def postgresql_column(name: str, type_text: str, nullable: bool | None) -> dict[str, Any]:
    """A PostgreSQL column as a column of OpenLogReplicator's form: its type as PostgreSQL
    states it, with the figures of a ``numeric`` or a sized character type."""
    col: dict[str, Any] = {NAME: name, TYPE: type_text}
    m = _PG_NUMERIC.fullmatch(type_text)
    if m is not None:
        col[PRECISION] = int(m.group(1)) if m.group(1) else -1
        col[SCALE] = int(m.group(2)) if m.group(2) else -1
    elif (m := _PG_CHARACTER.fullmatch(type_text)) is not None:
        col[LENGTH] = int(m.group(1))
    col[NULLABLE] = nullable is not False
    return col


def schema_columns(document: dict) -> list[dict[str, Any]]:
    """``schema.columns`` of a schema document (parsed JSON)."""
    make = postgresql_column if document.get("source") == "postgresql" else oracle_column
    return [make(c["name"], c["type"], c.get("nullable")) for c in document["columns"]]


def columns_text(document: bytes | str) -> str:
    """The JSON text of ``schema.columns`` of a schema document's text."""
    return orjson.dumps(schema_columns(orjson.loads(document))).decode()
