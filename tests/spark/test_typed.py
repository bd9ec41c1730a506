"""``typed`` (and ``table_changes``/``snapshot`` without a schema) read a table by its
schema document: the types its source stated, every value exact or an error naming the
row and the column, never a silent null."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from olr_buffer.changes import DELETE, INSERT, UPDATE, Commit, CommitKey, SchemaColumn, schema_document, schema_fields
from olr_buffer.sinks.parquet import ChangefeedReadError, ChangefeedWriter

pytestmark = pytest.mark.spark

COLUMNS = [  # name, source type, Spark type
    ("id", "integer", "int"),
    ("big", "numeric(38,9)", "decimal(38,9)"),
    ("price", "numeric(5,2)", "decimal(5,2)"),
    ("plain", "numeric", "decimal(38,18)"),
    ("r", "real", "float"),
    ("d", "double precision", "double"),
    ("flag", "boolean", "boolean"),
    ("day", "date", "date"),
    ("at", "timestamp with time zone", "timestamp"),
    ("local", "timestamp without time zone", "timestamp_ntz"),
    ("raw", "bytea", "binary"),
    ("doc", "jsonb", "string"),
    ("tags", "integer[]", "array<int>"),
    ("prices", "numeric(6,2)[]", "array<decimal(6,2)>"),
    ("n", "bigint", "bigint"),
    ("u", "uuid", "string"),
]
VALUES = {  # column -> its value in the row of every type (JSON text, as the PostgreSQL source writes it)
    "id": "1",
    "big": "12345678901234567890123456789.123456789",
    "price": "999.99",
    "plain": "-0.000000000000000001",
    "r": "1.5",
    "d": '"NaN"',
    "flag": "true",
    "day": '"2024-02-29"',
    "at": '"2024-06-01 12:34:56.789012+05:30"',
    "local": '"2024-06-01 12:34:56.5"',
    "raw": '"\\\\x00ff10"',
    "doc": '{"k":[1,2.50],"a":null}',
    "tags": '"{1,NULL,-3}"',
    "prices": '"{}"',
    "n": "-9223372036854775808",
    "u": '"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"',
}


def image(values: dict) -> str:
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in values.items()) + "}"


GOOD = image(VALUES)
# column -> a value (JSON) that does not fit it
BAD = {
    "big": "1234567890123456789012345678901.1",  # 31 digits before the point: decimal(38,9) holds 29
    "price": "1.005",  # a third decimal: would be rounded
    "plain": "0.0000000000000000001",  # 19 decimals: decimal(38,18) holds 18
    "id": "2147483648",
    "n": "1e3",  # an exponent: not exact digits
    "r": "1e39",  # beyond a float
    "flag": '"yes"',
    "day": '"2024-02-30"',
    "at": '"2024-06-01 12:34:56"',  # no time zone
    "local": '"2024-06-01 12:34:56.1234567"',  # nanoseconds
    "raw": '"\\\\x0g"',
    "tags": '"{{1,2},{3,4}}"',
    "prices": '"{1.234}"',
    "d": '"fast"',
}


def document(columns=COLUMNS, table="t"):
    return schema_document(
        "postgresql", "public", table, [SchemaColumn(n, t, n != "id", s) for n, t, s in columns], ["id"]
    )


def row(code, table, version, doc, rid, before, after):
    return [code, 1, 0, 0, 0, None, "public", table, 7, rid, before, after, None, *schema_fields(version, doc)]


@pytest.fixture(scope="module")
def cf(tmp_path_factory) -> str:
    """Table t: a row of every type, an update without a before image; then a column
    added (a second version). Tables bad_<column>: a good row, then one whose <column>
    does not fit."""
    path = tmp_path_factory.mktemp("typed") / "cf"
    w = ChangefeedWriter(path, durable=False)
    n = iter(range(1000))

    def tx(*rows):
        k = next(n)
        w.write_transaction(Commit(f"x{k}", CommitKey(100 + k, 1, 0, 0), None), [(1, list(rows))])

    v1, doc1 = document()
    tx(row(INSERT, "t", v1, doc1, '{"id":1}', None, GOOD))
    tx(row(UPDATE, "t", v1, doc1, '{"id":1}', None, GOOD.replace('"price":999.99', '"price":5')))
    v2, doc2 = document(COLUMNS + [("note", "text", "string")])
    tx(
        row(INSERT, "t", v2, doc2, '{"id":2}', None, '{"id":2,"note":"added"}'),
        row(DELETE, "t", v2, None, '{"id":2}', '{"id":2}', None),
    )
    for column, value in BAD.items():
        v, doc = document(table=f"bad_{column}")
        text = image({**VALUES, column: value})
        tx(
            row(INSERT, f"bad_{column}", v, doc, '{"id":1}', None, GOOD),
            row(UPDATE, f"bad_{column}", v, None, '{"id":1}', GOOD, text),
        )
    w.close()
    return str(path)


def test_every_type_comes_out_exact(spark, cf):
    from olr_buffer.spark import typed

    df = typed(spark, cf, "public", "t", version=document()[0])
    types = {f.name: f.dataType.simpleString() for f in df.schema["after"].dataType.fields}
    assert types == {n: s for n, _, s in COLUMNS}
    first = df.where("tx_seq = 0").first().after.asDict()
    assert first == {
        "id": 1,
        "big": Decimal("12345678901234567890123456789.123456789"),
        "price": Decimal("999.99"),
        "plain": Decimal("-0.000000000000000001"),
        "r": 1.5,
        "d": first["d"],
        "flag": True,
        "day": dt.date(2024, 2, 29),
        "at": dt.datetime(2024, 6, 1, 7, 4, 56, 789012),  # the session's time zone is UTC
        "local": dt.datetime(2024, 6, 1, 12, 34, 56, 500000),
        "raw": bytearray(b"\x00\xff\x10"),
        "doc": '{"a":null,"k":[1,2.5]}',
        "tags": [1, None, -3],
        "prices": [],
        "n": -9223372036854775808,
        "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    }
    assert first["d"] != first["d"]  # NaN


def test_the_latest_version_reads_every_row(spark, cf):
    from olr_buffer.spark import table_schema, typed

    df = typed(spark, cf, "public", "t")
    assert df.schema["after"].dataType.fieldNames()[-1] == "note"
    got = {
        (r.tx_seq, r.op): (
            r.after.id if r.after else None,
            r.after.note if r.after else None,
            r.after.price if r.after else None,
        )
        for r in df.collect()
    }
    assert got == {
        (0, "c"): (1, None, Decimal("999.99")),
        (1, "u"): (1, None, Decimal("5.00")),
        (2, "c"): (2, "added", None),
        (2, "d"): (None, None, None),
    }
    document_, struct = table_schema(spark, cf, "public", "t")
    assert document_["columns"][-1] == {"name": "note", "type": "text", "nullable": True, "spark": "string"}
    assert struct == df.schema["after"].dataType
    as_text = typed(spark, cf, "public", "t", types={"big": "string"}).where("tx_seq = 0").first()
    assert as_text.after.big == "12345678901234567890123456789.123456789"


def test_every_value_that_does_not_fit_is_an_error_and_every_one_that_does_is_not(spark):
    """The checks of each type, in one query: an image per case, with the value of the row
    of every type or a value that does not fit, alone."""
    from pyspark.sql.types import DataType

    from olr_buffer.spark_sink.tables import _checked_images

    cases = [(c, VALUES[c], False) for c in VALUES] + [(c, v, True) for c, v in BAD.items()]
    cases += [
        ("price", "5", False),
        ("price", "-0.10", False),
        ("price", '"12.5"', False),
        ("id", "-7", False),
        ("at", '"2024-06-01T12:34:56Z"', False),
        ("at", '"2024-06-01 12:34:56-07"', False),
        ("at", '"2024-06-01 12:34:56.1234560+00"', False),
        ("local", '"2024-06-01"', False),
        ("n", "null", False),
        ("big", '"NaN"', True),
        ("price", "99.5e1", True),
        ("tags", '"{1,x}"', True),
        ("day", '"2024-06-01 00:00:00"', True),
        ("at", '"infinity"', True),
        # nanoseconds since the epoch (OpenLogReplicator's form), in whole microseconds
        ("local", "1717243496500000000", False),
        ("at", '"1717243496000000000"', False),
        ("at", "-1000", False),
        ("local", "1717243496123456789", True),
        ("at", "99999999999999999999", True),
        ("day", "0", True),
    ]
    types = {n: s for n, _, s in COLUMNS}
    fields = [(n, DataType.fromDDL(s)) for n, _, s in COLUMNS]
    df = spark.createDataFrame(
        [(k, 0, None, image({c: v}), None) for k, (c, v, _) in enumerate(cases)],
        "tx_seq long, op_seq long, before string, after string, rid string",
    )
    got = dict(_checked_images(df, fields).select("tx_seq", "_misfit").collect())
    for k, (column, value, bad) in enumerate(cases):
        if bad:
            assert (
                got[k] is not None
                and got[k].startswith(f'after column "{column}" = \'')
                and got[k].endswith(f"' does not fit {types[column]}")
            ), (column, value, got[k])
        else:
            assert got[k] is None, (column, value, got[k])


def test_a_value_that_does_not_fit_fails_the_query_naming_the_row_and_column(spark, cf):
    from pyspark.errors import PySparkException

    from olr_buffer.spark import typed

    for column in ("big", "at"):
        df = typed(spark, cf, "public", f"bad_{column}", version=document(table=f"bad_{column}")[0])
        with pytest.raises(PySparkException) as info:
            df.select("tx_seq").collect()  # whatever the query reads, every row is checked
        message = str(info.value)
        tx_seq = 3 + list(BAD).index(column)
        assert "USER_RAISED_EXCEPTION" in message
        assert (
            f'public.bad_{column}: tx_seq {tx_seq}, op_seq 1: after column "{column}" = '
            f"'{json.loads(BAD[column]) if BAD[column].startswith(chr(34)) else BAD[column]}' does not fit "
        ) in message, message
    assert typed(spark, cf, "public", "bad_big", types={"big": "string"}).count() == 2


def test_table_changes_and_snapshot_use_the_documents(spark, cf):
    from olr_buffer.spark import snapshot, table_changes

    changes = table_changes(spark, cf, "public", "t")
    assert changes.schema["after"].dataType.fieldNames()[-1] == "note"
    state = snapshot(spark, cf, "public", "t").collect()
    assert [(r.rid, r.id, r.price, r.note) for r in state] == [('{"id":1}', 1, Decimal("5.00"), None)]
    by_key = snapshot(spark, cf, "public", "t", key="id").collect()
    assert [(r.id, r.big) for r in by_key] == [(1, Decimal("12345678901234567890123456789.123456789"))]


def test_an_update_without_before_has_its_key_as_pre_image(spark, cf):
    """PostgreSQL's default replica identity sends no old row for an update that keeps
    the key: the change-data-feed view gives the key columns from ``rid``, the rest null."""
    from olr_buffer.spark import table_changes, typed

    for df in (
        typed(spark, cf, "public", "t", change_data_feed=True),
        table_changes(spark, cf, "public", "t", "id INT, price DECIMAL(5,2)", change_data_feed=True),
    ):
        pre = df.where("_change_type = 'update_preimage'").collect()
        assert [(r.id, r.price) for r in pre] == [(1, None)]


def test_a_dataframe_source_takes_the_documents_of_its_changefeed(spark, cf):
    from olr_buffer.spark import read_changefeed, typed

    batch = read_changefeed(spark, cf).where("tx_seq = 0")
    with pytest.raises(ChangefeedReadError, match="needs the changefeed's directory"):
        typed(spark, batch, "public", "t")
    got = typed(spark, batch, "public", "t", changefeed=cf).first()
    assert got.after.note is None and got.after.big == Decimal("12345678901234567890123456789.123456789")


def test_a_table_whose_rows_name_no_version_says_so(spark, workload):
    from olr_buffer.spark import typed

    with pytest.raises(ChangefeedReadError, match=r"no row of SALES\.ORDERS names a schema version"):
        typed(spark, str(workload.changefeed), "SALES", "ORDERS")


def test_a_stream_reads_typed_rows(spark, cf, tmp_path):
    from olr_buffer.spark import stream_changefeed, typed

    stream = typed(spark, stream_changefeed(spark, cf), "public", "t", changefeed=cf)
    query = (
        stream.select("tx_seq", "op", "after.big", "after.note")
        .writeStream.format("memory")
        .queryName("typed_stream")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    got = sorted((r.tx_seq, r.op, r.big, r.note) for r in spark.table("typed_stream").collect())
    assert got == [
        (0, "c", Decimal("12345678901234567890123456789.123456789"), None),
        (1, "u", Decimal("12345678901234567890123456789.123456789"), None),
        (2, "c", None, "added"),
        (2, "d", None, None),
    ]


def test_a_column_renamed_or_dropped_and_added_is_refused_unless_a_version_is_given(spark, tmp_path):
    """PostgreSQL's Relation message names a renamed column anew, and nothing in the
    documents (or in a redo or OpenLogReplicator schema) says it is the same column: read
    by the last version, the earlier rows' values would be null. Refused, naming both
    versions and the column; an explicit version reads as asked."""
    from olr_buffer.spark import snapshot, table_changes, table_schema, typed

    path = tmp_path / "cf"
    w = ChangefeedWriter(path, durable=False)
    v1, doc1 = document([("id", "integer", "int"), ("qty", "integer", "int")], table="r")
    v2, doc2 = document([("id", "integer", "int"), ("amount", "integer", "int")], table="r")  # RENAME qty TO amount
    for k, (v, doc, after) in enumerate(
        [(v1, doc1, '{"id":1,"qty":5}'), (v1, None, '{"id":2,"qty":6}'), (v2, doc2, '{"id":3,"amount":7}')]
    ):
        w.write_transaction(
            Commit(f"x{k}", CommitKey(100 + k, 1, 0, 0), None),
            [(1, [row(INSERT, "r", v, doc, f'{{"id":{k + 1}}}', None, after)])],
        )
    w.close()
    cf = str(path)
    want = (
        f"{cf}: public.r: column qty of schema version {v1} (rows of tx_seq 0..1) is not in version {v2}, the "
        "table's last, which has amount instead: renamed, or dropped and added (the schema documents cannot "
        f"tell); read by {v2}, those rows would have amount null and qty gone (hint: read those rows by their "
        f"own version (version='{v1}', ending_tx_seq=1) and the later ones by {v2} (version='{v2}', "
        f"starting_tx_seq=2); or give version='{v2}' to read every row by it"
    )
    for read in (
        lambda: typed(spark, cf, "public", "r"),
        lambda: table_changes(spark, cf, "public", "r"),
        lambda: snapshot(spark, cf, "public", "r", key="id"),
    ):
        with pytest.raises(ChangefeedReadError) as info:
            read()
        assert str(info.value).startswith(want), str(info.value)
    # as the hint says: each part by its own version
    old = typed(spark, cf, "public", "r", version=v1, ending_tx_seq=1)
    new = typed(spark, cf, "public", "r", version=v2, starting_tx_seq=2)
    assert [(r.after.id, r.after.qty) for r in old.orderBy("tx_seq").collect()] == [(1, 5), (2, 6)]
    assert [(r.after.id, r.after.amount) for r in new.collect()] == [(3, 7)]
    assert typed(spark, cf, "public", "r", starting_tx_seq=2).count() == 1  # the range holds one version
    # every row by the last version, as asked: the earlier rows have no amount
    every = typed(spark, cf, "public", "r", version=v2).orderBy("tx_seq").collect()
    assert [(r.after.id, r.after.amount) for r in every] == [(1, None), (2, None), (3, 7)]
    assert table_schema(spark, cf, "public", "r")[0]["columns"][1]["name"] == "amount"


def test_a_redo_table_with_ddl_columns_comes_out_typed(spark, tmp_path):
    """Redo files: a ddl record's columns type the table's rows, written by any thread
    after it; Oracle NUMBER, DATE, TIMESTAMP WITH TIME ZONE and RAW read exactly."""
    from olr_buffer.runtime import replay
    from olr_buffer.spark import snapshot, typed

    columns = [
        {"name": "ID", "type": "NUMBER(10)", "nullable": False, "key": True},
        {"name": "TOTAL", "type": "NUMBER(12,2)"},
        {"name": "RATE", "type": "NUMBER"},
        {"name": "CREATED", "type": "DATE"},
        {"name": "AT", "type": "TIMESTAMP(6) WITH TIME ZONE"},
        {"name": "TAG", "type": "RAW(4)"},
        {"name": "NOTE", "type": "VARCHAR2(20 CHAR)"},
    ]
    inp = tmp_path / "in"
    inp.mkdir()
    ddl = {
        "op": "ddl",
        "scn": 11,
        "xid": "a",
        "owner": "SALES",
        "table": "ORDERS",
        "sql": "CREATE TABLE ...",
        "columns": columns,
    }
    row = {
        "op": "insert",
        "scn": 21,
        "xid": "b",
        "owner": "SALES",
        "table": "ORDERS",
        "rid": "AAAR1",
        "after": {
            "ID": 7,
            "TOTAL": "1234567890.50",
            "RATE": 0.125,
            "CREATED": "2024-07-23 11:43:19",
            "AT": "2024-07-23T11:43:19.123456+02:00",
            "TAG": "DEADBEEF",
            "NOTE": "ünïcode",
        },
    }
    (inp / "redo_1_1.jsonl").write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"op": "begin", "scn": 10, "xid": "a"},
                ddl,
                {"op": "commit", "scn": 12, "xid": "a"},
                {"op": "lwn", "scn": 30},
            ]
        )
        + "\n"
    )
    (inp / "redo_2_1.jsonl").write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"op": "begin", "scn": 20, "xid": "b"},
                row,
                {"op": "commit", "scn": 22, "xid": "b"},
                {"op": "lwn", "scn": 30},
            ]
        )
        + "\n"
    )
    replay(str(inp), str(tmp_path / "q"), str(tmp_path / "cf"))
    df = typed(spark, str(tmp_path / "cf"), "SALES", "ORDERS")
    assert {f.name: f.dataType.simpleString() for f in df.schema["after"].dataType.fields} == {
        "ID": "decimal(10,0)",
        "TOTAL": "decimal(12,2)",
        "RATE": "decimal(38,10)",
        "CREATED": "timestamp_ntz",
        "AT": "timestamp",
        "TAG": "binary",
        "NOTE": "string",
    }
    (got,) = [r.after for r in df.where("op = 'c'").collect()]
    assert got.asDict() == {
        "ID": Decimal(7),
        "TOTAL": Decimal("1234567890.50"),
        "RATE": Decimal("0.125"),
        "CREATED": dt.datetime(2024, 7, 23, 11, 43, 19),
        "AT": dt.datetime(2024, 7, 23, 9, 43, 19, 123456),
        "TAG": bytearray(b"\xde\xad\xbe\xef"),
        "NOTE": "ünïcode",
    }
    assert [r.ID for r in snapshot(spark, str(tmp_path / "cf"), "SALES", "ORDERS", key="ID").collect()] == [7]
