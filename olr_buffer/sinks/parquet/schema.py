"""The changefeed's columns (contract §2) as an Arrow schema, and file naming."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: Parquet TIMESTAMP(MICROS, isAdjustedToUTC=true): Spark's ``TimestampType``.
TIMESTAMP = pa.timestamp("us", tz="UTC")

ARROW_SCHEMA = pa.schema(
    [
        pa.field("tx_seq", pa.int64(), nullable=False),
        pa.field("op_seq", pa.int64(), nullable=False),
        pa.field("c_scn", pa.int64(), nullable=False),
        pa.field("c_tm", pa.int64()),
        pa.field("xid", pa.string(), nullable=False),
        pa.field("op", pa.string(), nullable=False),
        pa.field("scn", pa.int64(), nullable=False),
        pa.field("sub", pa.int64(), nullable=False),
        pa.field("tm", pa.int64()),
        pa.field("thread", pa.int32(), nullable=False),
        pa.field("owner", pa.string(), nullable=False),
        pa.field("table", pa.string(), nullable=False),
        pa.field("obj", pa.int64()),
        pa.field("rid", pa.string()),
        pa.field("before", pa.string()),
        pa.field("after", pa.string()),
        pa.field("sql", pa.string()),
        # After the contract's columns: c_tm and tm as Spark timestamps (microseconds),
        pa.field("c_ts", TIMESTAMP),
        pa.field("ts", TIMESTAMP),
        # and the version of the table's schema document the row was written under
        # (null: none known), in _olr_buffer/schemas/<version>.json
        pa.field("schema_version", pa.string()),
    ]
)
COLUMNS = ARROW_SCHEMA.names
#: The timestamp columns and the nanosecond column each is derived from. Files written
#: before they existed lack them: readers derive them (``with_timestamps``).
DERIVED_TIMESTAMPS = {"c_ts": "c_tm", "ts": "tm"}
# Parquet dictionary encoding only where values repeat (per transaction, per table, small
# sets). Row images, row ids and SCNs are mostly distinct: trying a dictionary on them
# and falling back costs writer time for nothing, and makes files larger
# (bench/log/2026-11-performance-history.md).
DICTIONARY_COLUMNS = [
    "tx_seq",
    "c_scn",
    "c_tm",
    "xid",
    "op",
    "sub",
    "thread",
    "owner",
    "table",
    "obj",
    "schema_version",
]


def nanos_to_timestamp(nanos: pa.Array) -> pa.Array:
    """int64 nanoseconds since the epoch -> ``TIMESTAMP``, rounded down to the microsecond."""
    whole = pc.divide(nanos, 1000)  # integer division rounds towards zero: floor it
    above = pc.cast(pc.greater(pc.multiply(whole, 1000), nanos), pa.int64())
    return pc.subtract(whole, above).cast(TIMESTAMP)


def with_timestamps(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with every column of ``ARROW_SCHEMA``: a batch of a file written before
    ``c_ts``/``ts`` existed gets them from ``c_tm``/``tm``, one written before
    ``schema_version`` existed gets it null."""
    names = batch.schema.names
    arrays = [
        batch.column(name)
        if name in names
        else nanos_to_timestamp(batch.column(DERIVED_TIMESTAMPS[name]))
        if name in DERIVED_TIMESTAMPS
        else pa.nulls(batch.num_rows, ARROW_SCHEMA.field(name).type)
        for name in ARROW_SCHEMA.names
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def parquet_writer(path: str, compression: str) -> pq.ParquetWriter:
    """A Parquet writer for changefeed files (the same settings everywhere): every page
    carries a CRC32 of its bytes, which readers that ask for it verify (the writer does
    for the newest file when it opens, compaction for every file it reads)."""
    return pq.ParquetWriter(
        path, ARROW_SCHEMA, compression=compression, use_dictionary=DICTIONARY_COLUMNS, write_page_checksum=True
    )


_PART = re.compile(r"^part-([0-9]{20})-([0-9]{20})\.parquet$")

# Key-value metadata in every file's footer.
META_FIRST = b"olr_buffer.first_tx_seq"
META_LAST = b"olr_buffer.last_tx_seq"
META_LAST_COMMIT = b"olr_buffer.last_commit"  # "scn,thread,sequence,line" of the last transaction
META_ROWS = b"olr_buffer.rows"


def part_name(first: int, last: int) -> str:
    return f"part-{first:020d}-{last:020d}.parquet"


def parse_part_name(name: str) -> tuple[int, int] | None:
    m = _PART.match(name)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2))
