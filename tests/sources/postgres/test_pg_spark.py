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
        while not any(r["xid"] == str(xid) for r in (load_changefeed(tmp_path / "cf") if (tmp_path / "cf").is_dir()
                                                    else [])):
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
