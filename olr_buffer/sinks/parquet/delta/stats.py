"""Delta file statistics (the ``stats`` of an add action) from a Parquet footer.

Delta readers skip files with them (Spark's data skipping, deltalake's and DuckDB's
pruning): ``numRecords``, and per column ``nullCount``, ``minValues`` and ``maxValues``.
A file committed as it is (no rewrite) gets them from the statistics Parquet keeps per
row group, merged here; nothing reads the rows.

- integers: as they are;
- timestamps: ISO 8601 in milliseconds (as Spark and delta-rs write them), the minimum
  rounded down and the maximum rounded up, so that both stay bounds of the values;
- strings: only when both bounds have at most ``STRING_PREFIX`` characters (Spark's
  default prefix length): longer ones (row images, DDL text) are left out rather than cut;
- a column some row group has no statistics for: no bounds (readers then read the file).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

STRING_PREFIX = 32
_UNIT_PER_MS = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}


def delta_stats(meta: pq.FileMetaData) -> str:
    """The Delta ``stats`` JSON of the Parquet file whose footer is ``meta``."""
    schema = meta.schema.to_arrow_schema()
    stats: dict = {"numRecords": meta.num_rows}
    if meta.num_columns != len(schema) or any(pa.types.is_nested(f.type) for f in schema):
        return orjson.dumps(stats).decode()  # one leaf column per field is all this maps
    mins, maxs, nulls = {}, {}, {}
    for i, field in enumerate(schema):
        null_count: int | None
        null_count, low, high, bounded = 0, None, None, True
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            if group.num_rows == 0:
                continue
            column = group.column(i)
            s = column.statistics
            if s is None or not s.has_null_count:
                null_count = None
                bounded = False
                break
            null_count += s.null_count
            if s.has_min_max:
                low = s.min_raw if low is None else min(low, s.min_raw)
                high = s.max_raw if high is None else max(high, s.max_raw)
            elif s.null_count < column.num_values:
                bounded = False  # values but no bounds
        if null_count is not None:
            nulls[field.name] = null_count
        if bounded and low is not None:
            pair = _json_bounds(field.type, low, high)
            if pair is not None:
                mins[field.name], maxs[field.name] = pair
    stats.update(minValues=mins, maxValues=maxs, nullCount=nulls)
    return orjson.dumps(stats).decode()


def _json_bounds(type_: pa.DataType, low, high):
    """(min, max) as Delta's stats JSON holds them, or None to leave the column out."""
    if pa.types.is_integer(type_):
        return int(low), int(high)
    if pa.types.is_floating(type_):
        if all(math.isfinite(v) for v in (low, high)):
            return float(low), float(high)
        return None
    if pa.types.is_timestamp(type_):
        per_ms = _UNIT_PER_MS.get(type_.unit)
        if per_ms is None:  # seconds
            return _iso_ms(low * 1000), _iso_ms(high * 1000)
        return _iso_ms(low // per_ms), _iso_ms(-(-high // per_ms))
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        lo, hi = _text(low), _text(high)
        if lo is None or hi is None or len(lo) > STRING_PREFIX or len(hi) > STRING_PREFIX:
            return None
        return lo, hi
    return None


def _text(value) -> str | None:
    if isinstance(value, str):
        return value
    try:
        return bytes(value).decode("utf-8")
    except (TypeError, UnicodeDecodeError):
        return None


def _iso_ms(ms: int) -> str:
    whole, frac = divmod(ms, 1000)
    t = datetime.fromtimestamp(whole, UTC)
    return f"{t:%Y-%m-%dT%H:%M:%S}.{frac:03d}Z"
