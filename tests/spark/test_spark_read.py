"""A real Spark reads the real changefeed: the contract's columns, types and every row."""

from __future__ import annotations

import json

import pytest

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.spark import read_changefeed
from tests.contract_model import assert_changefeed_equal, expected_changefeed

pytestmark = pytest.mark.spark

CONTRACT_TYPES = {
    "tx_seq": "bigint",
    "op_seq": "bigint",
    "c_scn": "bigint",
    "c_tm": "bigint",
    "xid": "string",
    "op": "string",
    "scn": "bigint",
    "sub": "bigint",
    "tm": "bigint",
    "thread": "int",
    "owner": "string",
    "table": "string",
    "obj": "bigint",
    "rid": "string",
    "before": "string",
    "after": "string",
    "sql": "string",
    "c_ts": "timestamp",
    "ts": "timestamp",
    "schema_version": "string",
}


@pytest.fixture(scope="module")
def changefeed(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark")
    simulate(root / "in", threads=3, transactions=400, seed=7, records_per_file=400)
    # several files, so that Spark reads a multi-file changefeed
    replay(str(root / "in"), str(root / "q"), str(root / "cf"), PipelineOptions(file_rows=700))
    return root


def _rows(df) -> list[dict]:
    rows = [r.asDict() for r in df.orderBy("tx_seq", "op_seq").collect()]
    for r in rows:
        for col in ("before", "after"):
            r[col] = json.loads(r[col]) if r[col] is not None else None
    return rows


def test_spark_read_parquet_has_contract_types_and_every_row(spark, changefeed):
    df = spark.read.parquet(str(changefeed / "cf"))
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == list(CONTRACT_TYPES.items())
    expected = expected_changefeed(changefeed / "in")
    assert df.count() == len(expected.rows) > 0
    assert_changefeed_equal(_rows(df), expected.rows)
    assert df.select("tx_seq").distinct().count() == expected.committed


def test_read_changefeed_helper_gives_the_same(spark, changefeed):
    df = read_changefeed(spark, str(changefeed / "cf"))
    assert dict((f.name, f.dataType.simpleString()) for f in df.schema.fields) == CONTRACT_TYPES
    assert_changefeed_equal(_rows(df), expected_changefeed(changefeed / "in").rows)


def test_changefeed_schema_is_the_contract():
    from olr_buffer.sinks.parquet import ARROW_SCHEMA
    from olr_buffer.spark import CHANGEFEED_SCHEMA, changefeed_schema

    assert CHANGEFEED_SCHEMA == changefeed_schema()
    assert [(f.name, f.dataType.simpleString()) for f in CHANGEFEED_SCHEMA.fields] == list(CONTRACT_TYPES.items())
    assert [f.nullable for f in CHANGEFEED_SCHEMA.fields] == [f.nullable for f in ARROW_SCHEMA]


def test_read_changefeed_reads_only_part_files(spark, changefeed, tmp_path):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    cf = tmp_path / "cf"
    shutil.copytree(changefeed / "cf", cf)
    pq.write_table(pa.table({"x": [1, 2, 3]}), cf / "notes.parquet")  # someone else's file
    (cf / ".tmp-part-00000000000000009999-123.parquet").write_bytes(b"PAR1 half-written")
    (cf / "README.txt").write_text("not data")
    assert read_changefeed(spark, str(cf)).count() == len(expected_changefeed(changefeed / "in").rows)


def test_spark_verifies_page_checksums_when_told_to(spark, changefeed, tmp_path):
    """docs/spark.md: the changefeed's pages carry checksums that Spark (parquet-mr)
    verifies with ``parquet.page.verify-checksum.enabled``."""
    import shutil

    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    from tests.fault_helpers import flip_a_data_byte

    cf = tmp_path / "cf"
    shutil.copytree(changefeed / "cf", cf)
    damaged = sorted(cf.glob("part-*.parquet"))[-1]
    flip_a_data_byte(damaged, "rid")
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # what spark.hadoop.* sets at session build
    conf.set("parquet.page.verify-checksum.enabled", "true")
    try:
        with pytest.raises((Py4JJavaError, PySparkException), match="CRC checksum verification failed"):
            read_changefeed(spark, str(cf)).select("rid").collect()
    finally:
        conf.unset("parquet.page.verify-checksum.enabled")
