"""The changefeed of a real PostgreSQL source, read by a real Spark: ``snapshot`` is what
the server holds, TRUNCATE included (issue 29)."""

from __future__ import annotations

import time

import pytest

from olr_buffer.sinks.parquet import ChangefeedReadError
from olr_buffer.spark import snapshot, table_changes
from tests.contract_model import load_changefeed
from tests.sources.postgres.conftest import start_service, wait_streaming
from tests.sources.postgres.test_pg_source import service_log, stop

pytestmark = [pytest.mark.e2e, pytest.mark.spark]


def test_snapshot_after_a_truncate_is_what_the_server_holds(pg_db, tmp_path, spark):
    pg_db.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
    pg_db.execute("INSERT INTO items VALUES (100, 'copied')")  # in the initial copy
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc)
        pg_db.execute("INSERT INTO items VALUES (1, 'a'), (2, 'b')")
        pg_db.execute("TRUNCATE items")
        with pg_db.connect(autocommit=False) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO items VALUES (3, 'c')")
            cur.execute("SELECT txid_current()")
            (xid,) = cur.fetchone()
        conn.close()
        deadline = time.monotonic() + 60
        while not any(
            r["xid"] == str(xid) for r in (load_changefeed(tmp_path / "cf") if (tmp_path / "cf").is_dir() else [])
        ):
            assert time.monotonic() < deadline, "the last transaction was not published:\n" + service_log(tmp_path)
            time.sleep(0.2)
    finally:
        assert stop(svc) == 0, service_log(tmp_path)
    cf = str(tmp_path / "cf")
    assert [r["op"] for r in load_changefeed(cf)] == ["r", "c", "c", "t", "c"]
    server = sorted(pg_db.execute("SELECT id, v FROM items"))
    assert server == [(3, "c")]
    got = snapshot(spark, cf, "public", "items", "id INT, v STRING", key="id").collect()
    assert sorted((r.id, r.v) for r in got) == server
    assert [r.rid for r in snapshot(spark, cf, "public", "items").collect()] == ['{"id":3}']
    with pytest.raises(ChangefeedReadError, match=r"public\.items was truncated at tx_seq 2 \(op_seq 0\)"):
        table_changes(spark, cf, "public", "items", "id INT, v STRING", change_data_feed=True)


def wait_published(tmp_path, xid) -> None:
    deadline = time.monotonic() + 60
    while not any(
        r["xid"] == str(xid) for r in (load_changefeed(tmp_path / "cf") if (tmp_path / "cf").is_dir() else [])
    ):
        assert time.monotonic() < deadline, f"transaction {xid} was not published:\n" + service_log(tmp_path)
        time.sleep(0.2)


def last_xid(pg_db, *statements: str) -> int:
    with pg_db.connect(autocommit=False) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
        cur.execute("SELECT txid_current()")
        (xid,) = cur.fetchone()
    conn.close()
    return xid


def test_a_new_users_table_comes_out_of_typed_with_its_types_and_exact_values(pg_db, tmp_path, spark):
    """numeric, timestamptz, bytea, jsonb, uuid (and more), from the initial copy and the
    stream, through an ALTER TABLE: typed() gives the server's types and values, exactly;
    snapshot() the server's table; the update's pre-image its key; a value that does not
    fit its type fails the query naming the row."""
    import datetime as dt
    import json
    from decimal import Decimal

    from pyspark.errors import PySparkException
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DateType,
        DecimalType,
        IntegerType,
        LongType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    from olr_buffer.spark import typed

    pg_db.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric(38,9) NOT NULL, price numeric, "
        "at timestamptz, payload bytea, doc jsonb, ref uuid, tags int[], day date, local timestamp, "
        "note text)"
    )
    pg_db.execute("CREATE TABLE odd (id int PRIMARY KEY, v numeric)")
    pg_db.execute(
        "INSERT INTO orders VALUES (1, 12345678901234567890123456789.123456789, 0.1, "
        "'2024-06-01 12:34:56.789012+05:30', '\\x00ff10', '{\"b\": [1, 2.50], \"a\": null}', "
        "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,NULL,3}', '2024-02-29', '2024-06-01 12:00:00.5', "
        "'copied')"
    )  # in the initial copy
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc)
        pg_db.execute(
            "INSERT INTO orders VALUES (2, -0.000000001, 98765432109876543210.123456789012345678, "
            "'1999-12-31 23:59:59-08', decode(repeat('ab', 300), 'hex'), '{\"n\": 12345678901234567890}', "
            "gen_random_uuid(), '{}', '1970-01-01', '2000-01-01 00:00:00', 'streamed ünïcode')"
        )
        pg_db.execute("UPDATE orders SET amount = 1.5, note = 'updated' WHERE id = 1")
        pg_db.execute("INSERT INTO odd VALUES (1, 1), (2, 0.0000000000000000000001)")
        xid = last_xid(
            pg_db,
            "ALTER TABLE orders ADD COLUMN extra numeric(5,2)",
            "INSERT INTO orders VALUES (3, 3, NULL, NULL, NULL, 'null', NULL, NULL, NULL, NULL, NULL, 123.45)",
        )
        wait_published(tmp_path, xid)
    finally:
        assert stop(svc) == 0, service_log(tmp_path)
    cf = str(tmp_path / "cf")
    rows = [r for r in load_changefeed(cf) if r["table"] == "orders"]
    versions = [r["schema_version"] for r in rows]
    assert all(versions) and len(set(versions)) == 2 and versions[0] == versions[1]  # copy and stream agree
    assert sorted(p.stem for p in (tmp_path / "cf" / "_olr_buffer" / "schemas").iterdir()) == sorted(
        set(versions) | {r["schema_version"] for r in load_changefeed(cf) if r["table"] == "odd"}
    )

    df = typed(spark, cf, "public", "orders")
    types = {f.name: f.dataType for f in df.schema["after"].dataType.fields}
    assert types == {
        "id": LongType(),
        "amount": DecimalType(38, 9),
        "price": DecimalType(38, 18),
        "at": TimestampType(),
        "payload": BinaryType(),
        "doc": StringType(),
        "ref": StringType(),
        "tags": ArrayType(IntegerType()),
        "day": DateType(),
        "local": TimestampNTZType(),
        "note": StringType(),
        "extra": DecimalType(5, 2),
    }

    server = {
        r[0]: r
        for r in pg_db.execute(
            "SELECT id, amount, price, at, payload, doc, ref::text, tags, day, local, note, extra FROM orders"
        )
    }
    got = {r.id: r for r in snapshot(spark, cf, "public", "orders", key="id").collect()}
    assert sorted(got) == sorted(server) == [1, 2, 3]
    utc = dt.UTC
    for key, s in server.items():
        g = got[key]
        assert (g.amount, g.price, g.extra) == (s[1], s[2], s[11]) and isinstance(g.amount, Decimal)
        assert g.at == (s[3].astimezone(utc).replace(tzinfo=None) if s[3] else None)  # the session's zone is UTC
        assert (bytes(g.payload) if g.payload is not None else None) == (bytes(s[4]) if s[4] is not None else None)
        assert (json.loads(g.doc) if g.doc is not None else None) == s[5]
        assert (g.ref, g.tags, g.day, g.local, g.note) == (s[6], s[7], s[8], s[9], s[10])
    assert got[2].price == Decimal("98765432109876543210.123456789012345678")
    assert json.loads(got[2].doc) == {"n": 12345678901234567890}

    # the update (default replica identity: no old row) has its key as pre-image
    cdf = typed(spark, cf, "public", "orders", change_data_feed=True)
    pre = cdf.where("_change_type = 'update_preimage'").collect()
    assert [(r.id, r.amount, r.note) for r in pre] == [(1, None, None)]
    post = cdf.where("_change_type = 'update_postimage'").collect()
    assert [(r.id, r.amount, r.note) for r in post] == [(1, Decimal("1.500000000"), "updated")]

    with pytest.raises(PySparkException) as info:
        typed(spark, cf, "public", "odd").collect()
    odd = [r for r in load_changefeed(cf) if r["table"] == "odd"][1]
    assert (
        f'public.odd: tx_seq {odd["tx_seq"]}, op_seq {odd["op_seq"]}: after column "v" = '
        "'0.0000000000000000000001' does not fit decimal(38,18)"
    ) in str(info.value)
    assert (
        typed(spark, cf, "public", "odd", types={"v": "string"}).where("after.id = 2").first().after.v
        == "0.0000000000000000000001"
    )
