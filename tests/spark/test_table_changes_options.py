"""table_changes' tx_seq bounds and Delta change-data-feed view, schema inference, and the
clear errors for an unknown table and a stream given to snapshot, against the contract
model's rows of the same workload."""

from __future__ import annotations

import pytest

from olr_buffer.sinks.parquet.errors import ChangefeedReadError, UnknownTableError
from olr_buffer.spark import (
    CDF_COLUMNS,
    ddl_columns_of,
    infer_schema,
    read_changefeed,
    snapshot,
    stream_changefeed,
    table_changes,
)
from tests.sinks.parquet.workload import ORDERS_DDL, OWNER, TABLE

FIELDS = [c.split()[0] for c in ORDERS_DDL.split(", ")]


def _table_rows(workload):
    return [r for r in workload.expected.rows if (r["owner"], r["table"]) == (OWNER, TABLE)]


def test_ddl_columns_of_oracle_create_and_alter():
    from pyspark.sql.types import DecimalType, DoubleType, LongType, StringType

    columns = ddl_columns_of(
        [
            "CREATE TABLE SALES.ORDERS (ORDER_ID NUMBER(12) NOT NULL, TOTAL NUMBER(10,2), BIG NUMBER(30), "
            "NOTE VARCHAR2(400 CHAR), CREATED DATE, AMOUNT NUMBER, RATE BINARY_DOUBLE, "
            "CONSTRAINT ORDERS_PK PRIMARY KEY (ORDER_ID))",
            "ALTER TABLE SALES.ORDERS MODIFY (NOTE VARCHAR2(800))",
            "ALTER TABLE SALES.ORDERS ADD (EXTRA_1 VARCHAR2(40), QTY NUMBER(5,0))",
            "COMMENT ON TABLE SALES.ORDERS IS 'x'",
            None,
        ]
    )
    assert columns == {
        "ORDER_ID": LongType(),
        "TOTAL": DecimalType(10, 2),
        "BIG": DecimalType(30, 0),
        "NOTE": StringType(),
        "CREATED": StringType(),
        "AMOUNT": None,
        "RATE": DoubleType(),
        "EXTRA_1": StringType(),
        "QTY": LongType(),
    }
    # a later CREATE TABLE (the table dropped and created again) starts afresh
    assert list(ddl_columns_of(["CREATE TABLE T (A NUMBER(3))", "CREATE TABLE T (B VARCHAR2(3))"])) == ["B"]


pytestmark_spark = pytest.mark.spark


@pytestmark_spark
def test_bounds_keep_the_transactions_between_both_included(spark, workload):
    rows = _table_rows(workload)
    seqs = sorted({r["tx_seq"] for r in rows})
    lo, hi = seqs[len(seqs) // 4], seqs[len(seqs) // 2]
    df = table_changes(spark, str(workload.changefeed), OWNER, TABLE, ORDERS_DDL, starting_tx_seq=lo, ending_tx_seq=hi)
    got = sorted((r.tx_seq, r.op_seq) for r in df.select("tx_seq", "op_seq").collect())
    assert got == sorted((r["tx_seq"], r["op_seq"]) for r in rows if lo <= r["tx_seq"] <= hi)
    assert got[0][0] == lo and got[-1][0] == hi
    only_start = table_changes(spark, str(workload.changefeed), OWNER, TABLE, ORDERS_DDL, starting_tx_seq=hi)
    assert only_start.count() == sum(r["tx_seq"] >= hi for r in rows)


@pytestmark_spark
def test_change_data_feed_view_is_deltas(spark, workload):
    df = table_changes(spark, str(workload.changefeed), OWNER, TABLE, ORDERS_DDL, change_data_feed=True)
    assert df.columns == FIELDS + list(CDF_COLUMNS)
    assert df.schema["_commit_timestamp"].dataType.simpleString() == "timestamp"
    got = sorted(
        (r._commit_version, r._op_seq, r._change_type, r.ORDER_ID, r.STATUS)
        for r in df.select("_commit_version", "_op_seq", "_change_type", "ORDER_ID", "STATUS").collect()
    )
    want = []
    for r in _table_rows(workload):
        images = {
            "c": [("insert", r["after"])],
            "u": [("update_preimage", r["before"]), ("update_postimage", r["after"])],
            "d": [("delete", r["before"])],
        }.get(r["op"], [])
        for kind, image in images:
            want.append((r["tx_seq"], r["op_seq"], kind, image.get("ORDER_ID"), image.get("STATUS")))
    assert got == sorted(want)
    assert {w[2] for w in want} == {"insert", "update_preimage", "update_postimage", "delete"}
    assert any(r["op"] == "ddl" for r in _table_rows(workload))  # ddl rows exist and are left out


@pytestmark_spark
def test_infer_schema_from_images_and_ddl(spark, workload):
    struct = infer_schema(spark, str(workload.changefeed), OWNER, TABLE)
    types = {f.name: f.dataType.simpleString() for f in struct.fields}
    assert list(types)[: len(FIELDS)] == FIELDS  # the images' own order
    assert types["ORDER_ID"] == "bigint" and types["TOTAL"] == "double" and types["CUSTOMER"] == "string"
    assert types["NOTE"] == "string"  # the DDL rows say VARCHAR2(400)
    inferred = table_changes(spark, str(workload.changefeed), OWNER, TABLE)
    given = table_changes(spark, str(workload.changefeed), OWNER, TABLE, ORDERS_DDL)

    def pick(df):
        return sorted(
            (r.tx_seq, r.op_seq, r.ORDER_ID, r.TOTAL, r.STATUS)
            for r in df.select("tx_seq", "op_seq", "after.ORDER_ID", "after.TOTAL", "after.STATUS").collect()
        )

    assert pick(inferred) == pick(given)
    hr = infer_schema(spark, str(workload.changefeed), "HR", "EMPLOYEES")
    assert "EXTRA_3" in hr.fieldNames()  # from ALTER TABLE ... ADD, whatever the images hold


@pytestmark_spark
def test_a_table_name_that_matches_nothing_says_so(spark, workload):
    cf = str(workload.changefeed)
    with pytest.raises(UnknownTableError) as err:
        table_changes(spark, cf, "sales", "orders", ORDERS_DDL)
    assert "no row of sales.orders" in str(err.value) and "did you mean SALES.ORDERS" in str(err.value)
    with pytest.raises(UnknownTableError) as err:
        snapshot(spark, cf, "SALES", "NO_SUCH_TABLE")
    assert "HR.EMPLOYEES" in str(err.value) and "SALES.ORDERS" in str(err.value)
    assert table_changes(spark, cf, "SALES", "NO_SUCH_TABLE", ORDERS_DDL, missing_ok=True).count() == 0
    # a DataFrame (a micro-batch) may hold none of the table's rows: no error
    assert snapshot(spark, read_changefeed(spark, cf).where("tx_seq < 0"), OWNER, TABLE).count() == 0


@pytestmark_spark
def test_snapshot_of_a_stream_is_a_clear_error(spark, workload):
    stream = stream_changefeed(spark, str(workload.changefeed))
    with pytest.raises(ChangefeedReadError, match="snapshot needs a batch DataFrame.*foreachBatch"):
        snapshot(spark, stream, OWNER, TABLE)
    with pytest.raises(ChangefeedReadError, match="infer_schema needs a batch source"):
        table_changes(spark, stream, OWNER, TABLE)
