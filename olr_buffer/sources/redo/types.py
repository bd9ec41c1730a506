"""Oracle column types, as a ``ddl`` record's ``columns`` states them, and the Spark type
each one's values read as (docs/spark.md, "Types"). Spark's own Oracle dialect is the
guide: ``NUMBER`` without a precision is ``decimal(38,10)``, ``DATE`` a timestamp."""

from __future__ import annotations

import re

MAX_PRECISION = 38
UNCONSTRAINED_NUMBER = "decimal(38,10)"

_NUMBER = re.compile(r"(?:NUMBER|NUMERIC|DECIMAL|DEC)\s*(?:\(\s*(\d+|\*)\s*(?:,\s*(-?\d+)\s*)?\))?")
_TIMESTAMP = re.compile(r"TIMESTAMP\s*(?:\(\s*\d+\s*\))?\s*(WITH\s+(?:LOCAL\s+)?TIME\s+ZONE)?")
_BINARY = ("RAW", "LONG RAW", "BLOB")


def spark_type(oracle: str) -> str:
    """The Spark type of an Oracle column type (``NUMBER(12,2)``, ``VARCHAR2(30 CHAR)``,
    ``TIMESTAMP(6) WITH TIME ZONE`` ...); a type it does not know reads as ``string``."""
    text = " ".join(oracle.upper().split())
    number = _NUMBER.fullmatch(text)
    if number:
        precision, scale = number.group(1), number.group(2)
        if precision is None:
            return UNCONSTRAINED_NUMBER
        s = int(scale) if scale is not None else 0
        if precision == "*":
            return (
                f"decimal({MAX_PRECISION},{max(0, min(s, MAX_PRECISION))})"
                if scale is not None
                else UNCONSTRAINED_NUMBER
            )
        p = int(precision)
        if s < 0:  # rounded to tens, hundreds ...: p - s digits before the point
            return f"decimal({min(p - s, MAX_PRECISION)},0)"
        digits = min(max(p, s), MAX_PRECISION)  # a scale above the precision: leading zeros after the point
        return f"decimal({digits},{min(s, digits)})"
    if text in ("INTEGER", "INT", "SMALLINT"):
        return f"decimal({MAX_PRECISION},0)"
    if text in ("BINARY_FLOAT",):
        return "float"
    if text.startswith(("FLOAT", "BINARY_DOUBLE", "REAL", "DOUBLE PRECISION")):
        return "double"
    if text in ("BOOLEAN", "BOOL"):
        return "boolean"
    if text == "DATE":
        return "timestamp_ntz"  # an Oracle DATE has a time of day, and no time zone
    timestamp = _TIMESTAMP.fullmatch(text)
    if timestamp:
        return "timestamp" if timestamp.group(1) else "timestamp_ntz"
    if text.split("(")[0].strip() in _BINARY:
        return "binary"
    return "string"  # VARCHAR2, CHAR, CLOB, ROWID, INTERVAL, XMLTYPE, JSON, object types ...: their text
