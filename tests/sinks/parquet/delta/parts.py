"""Part files for the Delta tests: rows of the changefeed's schema for a range of
transactions, written with the changefeed's own Parquet settings and published to a store
as the writer publishes them (a local file, then a create that never overwrites)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa

from olr_buffer.sinks.parquet.delta import PartFile
from olr_buffer.sinks.parquet.schema import ARROW_SCHEMA, nanos_to_timestamp, parquet_writer, part_name
from olr_buffer.store import Store

ROWS_PER_TX = 3
BASE_TM = 1_700_000_000_123_456_789  # ns: not a whole microsecond


def rows(first: int, last: int) -> pa.Table:
    """``ROWS_PER_TX`` rows for each transaction of ``first..last``."""
    tx = [t for t in range(first, last + 1) for _ in range(ROWS_PER_TX)]
    op_seq = [i % ROWS_PER_TX for i in range(len(tx))]
    c_tm = pa.array([BASE_TM + t * 1_000_000_007 for t in tx], pa.int64())
    tm = pa.array([BASE_TM + t * 1_000_000_007 - 500 + o for t, o in zip(tx, op_seq)], pa.int64())
    n = len(tx)
    columns = {
        "tx_seq": pa.array(tx, pa.int64()),
        "op_seq": pa.array(op_seq, pa.int64()),
        "c_scn": pa.array([1000 + 10 * t for t in tx], pa.int64()),
        "c_tm": c_tm,
        "xid": pa.array([f"0x0001.00{t % 10}.{t:08x}" for t in tx], pa.string()),
        "op": pa.array(["c", "u", "d"][:ROWS_PER_TX] * (n // ROWS_PER_TX), pa.string()),
        "scn": pa.array([1000 + 10 * t - (ROWS_PER_TX - o) for t, o in zip(tx, op_seq)], pa.int64()),
        "sub": pa.array([0] * n, pa.int64()),
        "tm": tm,
        "thread": pa.array([1 + t % 2 for t in tx], pa.int32()),
        "owner": pa.array(["SALES"] * n, pa.string()),
        "table": pa.array(["ORDERS"] * n, pa.string()),
        "obj": pa.array([73215] * n, pa.int64()),
        "rid": pa.array([f"AAAR9/AAHAAAA{t:05d}" for t in tx], pa.string()),
        "before": pa.array(
            [None if o == 0 else orjson.dumps({"ID": t, "NOTE": "x" * 40}).decode() for t, o in zip(tx, op_seq)],
            pa.string(),
        ),
        "after": pa.array(
            [None if o == 2 else orjson.dumps({"ID": t, "NOTE": "y" * 40}).decode() for t, o in zip(tx, op_seq)],
            pa.string(),
        ),
        "sql": pa.array([None] * n, pa.string()),
        "c_ts": nanos_to_timestamp(c_tm),
        "ts": nanos_to_timestamp(tm),
        "schema_version": pa.array([None] * n, pa.string()),
    }
    return pa.table(columns, schema=ARROW_SCHEMA)


def write_local(path: Path, table: pa.Table) -> None:
    writer = parquet_writer(str(path), "zstd")
    writer.write_table(table, row_group_size=4)  # several row groups: their statistics are merged
    writer.close()


def publish(store: Store, tmp: Path, first: int, last: int, *, name: str | None = None) -> PartFile:
    """Write and publish the part file of ``first..last``; its PartFile, as the writer
    makes it from the local file before the upload."""
    name = name or part_name(first, last)
    local = tmp / f".tmp-{name}"
    write_local(local, rows(first, last))
    part = PartFile.from_local(local, name, first, last)
    store.create_from_file(name, local)
    local.unlink()
    return part


def publish_merged(store: Store, tmp: Path, first: int, last: int, name: str) -> PartFile:
    return publish(store, tmp, first, last, name=name)
