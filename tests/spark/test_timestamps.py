"""``c_ts`` and ``ts``: ``c_tm``/``tm`` as Parquet TIMESTAMP(MICROS, UTC), after the
contract's columns; a changefeed whose older files lack them still reads, streams and
compacts, with the same values derived."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from olr_buffer.sinks.parquet import ARROW_SCHEMA, ChangefeedWriter
from olr_buffer.sinks.parquet.compaction import compact
from olr_buffer.sinks.parquet.schema import nanos_to_timestamp
from tests.contract_model import CHANGEFEED_COLUMNS, assert_changefeed_equal, check_changefeed_layout, load_changefeed
from tests.sinks.parquet.workload import OWNER, TABLE, part_files

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def as_utc(nanos: int | None) -> datetime | None:
    return None if nanos is None else EPOCH + timedelta(microseconds=nanos // 1000)


def strip_timestamps(cf: Path, every: int = 2) -> list[str]:
    """Rewrite every ``every``-th file as a writer before ``c_ts``/``ts`` wrote it (same
    rows, same footer metadata); the names rewritten."""
    names = part_files(cf)[::every]
    for name in names:
        path = cf / name
        pf = pq.ParquetFile(path)
        meta = pf.metadata.metadata
        table = pf.read().drop_columns(["c_ts", "ts"])
        table = table.replace_schema_metadata({k: v for k, v in meta.items() if k.startswith(b"olr_buffer")})
        pq.write_table(table, path)
    return names


def test_columns_follow_the_contract_and_hold_micros_utc(workload):
    assert ARROW_SCHEMA.names[: len(CHANGEFEED_COLUMNS)] == list(CHANGEFEED_COLUMNS)
    assert ARROW_SCHEMA.names[len(CHANGEFEED_COLUMNS) :] == ["c_ts", "ts", "schema_version"]
    first = workload.changefeed / part_files(workload.changefeed)[0]
    parquet_type = pq.ParquetFile(first).schema.column(ARROW_SCHEMA.get_field_index("c_ts")).logical_type
    logical = json.loads(parquet_type.to_json())
    assert (logical["Type"], logical["isAdjustedToUTC"], logical["timeUnit"]) == ("Timestamp", True, "microseconds")
    rows = load_changefeed(workload.changefeed)
    for r in rows:
        assert r["c_ts"] == as_utc(r["c_tm"]), (r["tx_seq"], r["op_seq"])
        assert r["ts"] == as_utc(r["tm"]), (r["tx_seq"], r["op_seq"])
    assert sum(r["c_ts"] is not None for r in rows) > 100


def test_nanos_round_down_to_the_microsecond():
    got = nanos_to_timestamp(pa.array([0, 1999, -1, -1000, -1001, None, 1_717_200_000_070_123_456], pa.int64()))
    want = [as_utc(n) for n in (0, 1999, -1, -1000, -1001)] + [None, as_utc(1_717_200_000_070_123_456)]
    assert got.to_pylist() == want
    assert got.to_pylist()[2] == EPOCH - timedelta(microseconds=1)


def test_compact_fills_the_columns_of_older_files(workload, tmp_path):
    copied = workload.copy(tmp_path)
    stripped = strip_timestamps(copied.changefeed)
    assert len(stripped) >= 3
    out = tmp_path / "out"
    result = compact(str(copied.changefeed), output=str(out), target_rows=450, durable=False)
    assert result.files_merged > 0
    check_changefeed_layout(out)
    for name in part_files(out):
        if pq.read_metadata(out / name).metadata.get(b"olr_buffer.compacted_files"):
            assert pq.read_schema(out / name).names == ARROW_SCHEMA.names, name
    rows = load_changefeed(out)
    assert_changefeed_equal(rows, workload.expected.rows)
    assert all(r["c_ts"] == as_utc(r["c_tm"]) for r in rows if "c_ts" in r)
    # the writer continues after a changefeed of mixed files
    writer = ChangefeedWriter(str(copied.changefeed))
    assert writer.next_tx_seq == workload.expected.committed
    writer.close()


@pytest.mark.spark
def test_helpers_derive_the_columns_for_older_files(spark, workload, tmp_path):
    from pyspark.sql import functions as F

    from olr_buffer.spark import read_changefeed, snapshot, stream_changefeed, table_changes

    copied = workload.copy(tmp_path)
    strip_timestamps(copied.changefeed)
    cf = str(copied.changefeed)
    df = read_changefeed(spark, cf)
    assert df.columns[-3:] == ["c_ts", "ts", "schema_version"]
    expected = {(r["tx_seq"], r["op_seq"]): (r["c_tm"], r["tm"]) for r in workload.expected.rows}
    got = {
        (r.tx_seq, r.op_seq): (r.c_ts, r.ts)
        for r in df.select(
            "tx_seq",
            "op_seq",
            F.date_format("c_ts", "yyyy-MM-dd HH:mm:ss.SSSSSS").alias("c_ts"),
            F.date_format("ts", "yyyy-MM-dd HH:mm:ss.SSSSSS").alias("ts"),
        ).collect()
    }

    def text(nanos):
        return None if nanos is None else as_utc(nanos).strftime("%Y-%m-%d %H:%M:%S.%f")

    assert got == {k: (text(c), text(t)) for k, (c, t) in expected.items()}

    out = tmp_path / "stream-out"
    query = (
        stream_changefeed(spark, cf)
        .select("tx_seq", "op_seq", "c_ts")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout=300)
    streamed = spark.read.parquet(str(out))
    assert streamed.count() == len(workload.expected.rows)
    assert streamed.where("c_ts IS NULL").count() == sum(r["c_tm"] is None for r in workload.expected.rows)

    changes = table_changes(spark, cf, OWNER, TABLE, "ORDER_ID BIGINT")
    assert changes.where("c_ts IS NULL").count() == 0
    assert snapshot(spark, read_changefeed(spark, cf), OWNER, TABLE).count() > 0
