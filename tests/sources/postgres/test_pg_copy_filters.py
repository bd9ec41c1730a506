"""A PostgreSQL 15 publication with a column list and a row filter: the initial copy takes
what the stream sends (the listed columns, the rows the filter keeps), as PostgreSQL's
own table synchronization does; the changefeed rebuilds the filtered table exactly."""

from __future__ import annotations

import json
import time

import pytest

from tests.contract_model import load_changefeed
from tests.sources.postgres.conftest import start_service, wait_streaming
from tests.sources.postgres.test_pg_source import service_log, stop
from tests.sources.postgres.workload import changefeed_state

pytestmark = pytest.mark.e2e


def _filtered_table(db) -> dict[str, dict]:
    """rid -> image of the rows the publication keeps: id, a where a > 10."""
    rows = db.execute("SELECT json_build_object('id', id, 'a', a)::text FROM f WHERE a > 10")
    return {json.dumps({"id": r["id"]}, separators=(",", ":")): r for r in (json.loads(t) for (t,) in rows)}


def test_column_list_and_row_filter_hold_for_the_copy_and_the_stream(pg_db, tmp_path):
    pg_db.execute("CREATE TABLE f (id int PRIMARY KEY, a int NOT NULL, secret text)")
    pg_db.execute("INSERT INTO f SELECT g, g, 'hidden ' || g FROM generate_series(1, 40) g")
    # a row filter on a column of the replica identity, so that updates and deletes are published
    pg_db.execute("CREATE UNIQUE INDEX f_id_a ON f (id, a)")
    pg_db.execute("ALTER TABLE f REPLICA IDENTITY USING INDEX f_id_a")
    pg_db.execute("DROP PUBLICATION olr_buffer")
    pg_db.execute("CREATE PUBLICATION olr_buffer FOR TABLE f (id, a) WHERE (a > 10)")
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc)
        with pg_db.connect(autocommit=False) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO f VALUES (41, 5, 'filtered out'), (42, 50, 'kept')")
            cur.execute("UPDATE f SET a = 3 WHERE id = 15")  # leaves the filter: a delete
            cur.execute("UPDATE f SET a = 30 WHERE id = 2")  # enters it: an insert
            cur.execute("UPDATE f SET a = a + 100 WHERE id = 20")  # stays in it: an update
            cur.execute("DELETE FROM f WHERE id IN (1, 25)")  # 1 was never in it
            cur.execute("SELECT txid_current()")
            (xid,) = cur.fetchone()
        conn.close()
        deadline = time.monotonic() + 60
        while not any(r["xid"] == str(xid) for r in _changefeed(tmp_path)):
            assert time.monotonic() < deadline, "the transaction was not published:\n" + service_log(tmp_path)
            time.sleep(0.2)
    finally:
        assert stop(svc) == 0, service_log(tmp_path)
    rows = load_changefeed(tmp_path / "cf")
    copied = [r for r in rows if r["op"] == "r"]
    assert sorted(r["after"]["id"] for r in copied) == list(range(11, 41))  # the filter held for the copy
    assert all(set(r["after"]) == {"id", "a"} for r in copied)  # the column list too: no "secret"
    assert all("secret" not in (r["before"] or {}) and "secret" not in (r["after"] or {}) for r in rows)
    assert changefeed_state(rows)["f"] == _filtered_table(pg_db)


def _changefeed(tmp_path) -> list[dict]:
    try:
        return load_changefeed(tmp_path / "cf")
    except FileNotFoundError:
        return []
