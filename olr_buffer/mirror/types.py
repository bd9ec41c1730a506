"""A mirror table's column types and values, from the changefeed's schema documents.

A schema document gives each column the Spark type its values read as (its ``spark``
field, decided by the source: docs/spark.md, "Types", has the mappings); a mirror column
has the Arrow type of that Spark type, the one Delta stores it as:

=================  =========================  ==========================================
Spark              Arrow (Delta)              values (JSON, as the changefeed holds them)
=================  =========================  ==========================================
boolean            bool                       ``true``/``false``
tinyint ... bigint int8 ... int64             integers, or strings of plain digits
float, double      float32, float64           numbers; ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
decimal(p,s)       decimal128(p,s)            numbers or strings of plain digits, exact
date               date32                     ``YYYY-MM-DD``
timestamp          timestamp(us, UTC)         ISO text with a zone (``Z``, ``+HH[:MM]``, `` Region/City``);
                                              or nanoseconds since the epoch
timestamp_ntz      timestamp(us)              ISO text without a zone; or nanoseconds since the epoch
binary             binary                     hex (``\\x`` before it allowed)
array<T>           list<T>                    PostgreSQL's text form ``{1,2,NULL}``
string             string                     text; an embedded JSON value as its JSON text
=================  =========================  ==========================================

The rules are :func:`olr_buffer.spark.typed`'s, the text forms the same
(:mod:`olr_buffer.value_forms`): a value that does not fit its type (more
digits than its decimal holds, nanoseconds, a number beyond its integer type, text where
a number belongs) is an error naming the row and the column, never a null or a rounded
value.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pyarrow as pa

from .. import value_forms as forms

_DECIMAL = re.compile(r"decimal\((\d+),\s*(-?\d+)\)")
_ARRAY_TYPE = re.compile(r"array<(.+)>")
# the forms a value's text may take: value_forms's, which spark.typed checks too
_INTEGER_TEXT = re.compile(forms.INTEGER)
_FLOAT_TEXT = re.compile(forms.FLOAT)
_BOOLEAN_TEXT = re.compile(forms.BOOLEAN)
_DATE_TEXT = re.compile(forms.DATE)
_TIMESTAMP_TEXT = re.compile(forms.TIMESTAMP)
_TIMESTAMP_NTZ_TEXT = re.compile(forms.TIMESTAMP_NTZ)
_NANOS_TEXT = re.compile(forms.NANOS)
_HEX_TEXT = re.compile(forms.HEX)
_ARRAY_TEXT = re.compile(forms.ARRAY)
_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")  # plain digits (the type's figures: below)
_FRACTION = re.compile(r"\.([0-9]+)")
_INT_RANGES = {8: 1 << 7, 16: 1 << 15, 32: 1 << 31, 64: 1 << 63}
_FLOAT_WORDS = {
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
    "inf": float("inf"),
    "-inf": float("-inf"),
}
_SIMPLE = {
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class Misfit(ValueError):
    """A value that does not fit its column's type (its message says why)."""


def arrow_type(spark: str) -> pa.DataType:
    """The Arrow type of a schema document's Spark type name; ``string`` for one this
    does not know (its values are kept as their text)."""
    name = spark.strip().lower()
    if name in _SIMPLE:
        return _SIMPLE[name]
    m = _DECIMAL.fullmatch(name)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        return pa.decimal128(precision, scale)
    m = _ARRAY_TYPE.fullmatch(name)
    if m:
        return pa.list_(arrow_type(m.group(1)))
    return pa.string()


def same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether two Arrow types are the same column type (``large_string`` is ``string``:
    Delta does not tell them apart)."""
    return _plain(a) == _plain(b)


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_plain(t.value_type))
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit, tz="UTC")
    return t


def converter(t: pa.DataType) -> Callable[[Any], Any]:
    """:func:`value` for the type ``t``, with the common cases quicker."""
    if pa.types.is_string(t):
        return lambda v: v if v is None or type(v) is str else json_text(v)
    if pa.types.is_decimal(t):
        precision, scale = t.precision, t.scale
        return lambda v: None if v is None else _decimal(v, precision, scale)
    if pa.types.is_integer(t):
        bound = _INT_RANGES[t.bit_width]
        return lambda v: v if type(v) is int and -bound <= v < bound else value(v, t)
    return lambda v: value(v, t)


def value(v: Any, t: pa.DataType) -> Any:
    """The Python value of the JSON value ``v`` (as ``json.loads(..., parse_float=Decimal)``
    reads it) in a column of type ``t``; raises :class:`Misfit`."""
    if v is None:
        return None
    if pa.types.is_string(t):
        return v if isinstance(v, str) else json_text(v)
    if pa.types.is_boolean(t):
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and _BOOLEAN_TEXT.match(v):
            return v.lower() in ("true", "t")
        raise Misfit("not a boolean")
    if pa.types.is_integer(t):
        n = _integer(v)
        bound = _INT_RANGES[t.bit_width]
        if not -bound <= n < bound:
            raise Misfit("beyond the integer type")
        return n
    if pa.types.is_decimal(t):
        return _decimal(v, t.precision, t.scale)
    if pa.types.is_floating(t):
        if isinstance(v, str) and v in _FLOAT_WORDS:
            return _FLOAT_WORDS[v]
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, decimal.Decimal, str))
            or isinstance(v, str)
            and not _FLOAT_TEXT.match(v)
        ):
            raise Misfit("not a number")
        f = float(v)
        if t.bit_width == 32 and abs(f) != float("inf") and abs(f) > 3.4028234663852886e38:
            raise Misfit("beyond a float")
        return f
    if pa.types.is_date(t):
        if not isinstance(v, str) or not _DATE_TEXT.match(v):
            raise Misfit("not a date (YYYY-MM-DD)")
        try:
            return dt.date.fromisoformat(v)
        except ValueError:
            raise Misfit("not a date") from None
    if pa.types.is_timestamp(t):
        return _timestamp(v, t.tz is not None)
    if pa.types.is_binary(t):
        if not isinstance(v, str):
            raise Misfit("not hex text")
        if not _HEX_TEXT.match(v):
            raise Misfit("not hex text")
        return bytes.fromhex(v[2:] if v.startswith("\\x") else v)
    if pa.types.is_list(t):
        if isinstance(v, list):
            items = v
        elif isinstance(v, str) and _ARRAY_TEXT.match(v):
            inner = v[1:-1]
            items = [None if x == "NULL" else x for x in inner.split(",")] if inner else []
        else:
            raise Misfit("not an array ({…})")
        return [value(x, t.value_type) for x in items]
    raise Misfit(f"no reading for {t}")


def _integer(v: Any) -> int:
    if isinstance(v, bool):
        raise Misfit("not an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, decimal.Decimal):
        if v != v.to_integral_value():
            raise Misfit("not an integer")
        return int(v)
    if isinstance(v, str) and _INTEGER_TEXT.match(v):
        return int(v)
    raise Misfit("not an integer")


def _decimal(v: Any, precision: int, scale: int) -> decimal.Decimal:
    if isinstance(v, bool):
        raise Misfit("not a number")
    if isinstance(v, int):
        d = decimal.Decimal(v)
    elif isinstance(v, decimal.Decimal):
        d = v
    elif isinstance(v, str) and _DECIMAL_TEXT.fullmatch(v.strip()):
        d = decimal.Decimal(v.strip())
    else:
        raise Misfit("not a number of plain digits")
    _, digits, exponent = d.as_tuple()
    if not isinstance(exponent, int):  # "n", "N", "F": a NaN or an infinity
        raise Misfit("not a finite number")
    n = len(digits)
    while exponent < -scale and n > 1 and digits[n - 1] == 0:  # trailing zeros after the point
        n -= 1
        exponent += 1
    if exponent < -scale and any(digits[:n]):
        raise Misfit("more digits after the point than the scale")
    if any(digits[:n]) and n + exponent > precision - scale:
        raise Misfit("more digits before the point than the type holds")
    return d


def _timestamp(v: Any, zoned: bool) -> dt.datetime:
    if isinstance(v, int) and not isinstance(v, bool) or isinstance(v, str) and _NANOS_TEXT.match(v):
        nanos = int(v)
        if nanos % 1000:
            raise Misfit("nanoseconds (a timestamp holds microseconds)")
        instant = _EPOCH + dt.timedelta(microseconds=nanos // 1000)
        return instant if zoned else instant.replace(tzinfo=None)
    if not isinstance(v, str) or not (_TIMESTAMP_TEXT if zoned else _TIMESTAMP_NTZ_TEXT).match(v):
        raise Misfit("not a timestamp" + (" with a time zone" if zoned else " without a time zone"))
    text, region = v, None
    if zoned and " " in v[11:]:  # a zone's name: "2024-06-01 10:00:00 Europe/Warsaw"
        text, _, region = v.rpartition(" ")
    text = _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), text)  # beyond the microsecond: zeros
    try:
        stamp = dt.datetime.fromisoformat(text)
        if region is not None:
            stamp = stamp.replace(tzinfo=ZoneInfo(region))
    except (ValueError, ZoneInfoNotFoundError):
        raise Misfit("not a timestamp") from None
    return stamp.astimezone(dt.UTC) if zoned else stamp


def json_text(v: Any) -> str:
    """The JSON text of an embedded JSON value (a ``json``/``jsonb`` column): no spaces,
    object keys sorted, numbers with the digits the source sent."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        import json

        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (int, decimal.Decimal)):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ",".join(json_text(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(json_text(k) + ":" + json_text(v[k]) for k in sorted(v)) + "}"
    raise Misfit(f"not a JSON value: {type(v).__name__}")
