"""A PostgreSQL source (a throwaway server) with a mixed workload: keys that change,
deletes, a truncate, ADD/DROP COLUMN, numeric, timestamptz, bytea, jsonb, arrays, NULLs,
unchanged TOASTed values, a table without a key (REPLICA IDENTITY FULL) holding equal
rows; ``run`` killed (SIGKILL) on the way, ``mirror`` following it and killed too, then
``mirror --until-caught-up``: every mirror table, loaded back into the database, equals its source
table, compared by the database (``EXCEPT ALL`` both ways)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg2.extras
import pytest
from deltalake import DeltaTable

from tests.sources.postgres.conftest import ROOT, pg_cluster, pg_db, start_service, wait_streaming  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCHEMA = """
CREATE TABLE orders (id int PRIMARY KEY, total numeric(12,2), placed timestamptz, receipt bytea, details jsonb,
                     tags int[], note text, big text);
ALTER TABLE orders ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE lines (order_id int, line int, qty bigint NOT NULL, price double precision, PRIMARY KEY (order_id, line));
CREATE TABLE bag (a int, b text);
ALTER TABLE bag REPLICA IDENTITY FULL;
INSERT INTO orders SELECT g, g * 1.25, '2024-06-01 10:00:00+02'::timestamptz + g * interval '1 hour',
                          decode(lpad(to_hex(g), 4, '0'), 'hex'), jsonb_build_object('n', g, 'x', 2.50),
                          ARRAY[g, g + 1], 'seed', repeat(md5(g::text), 100) FROM generate_series(1, 40) g;
INSERT INTO lines SELECT g % 10 + 1, g, g * 3, g / 7.0 FROM generate_series(1, 30) g;
INSERT INTO bag VALUES (1, 'x'), (1, 'x'), (2, NULL);
"""

WORK = [
    "INSERT INTO orders VALUES (100, 99999.99, '2024-12-31 23:59:59.123456+00', '\\x00ff', '{\"a\": [1, null]}', "
    "'{}', NULL, NULL)",
    "UPDATE orders SET total = total + 1 WHERE id <= 10",  # big is TOASTed and unchanged: not sent
    "UPDATE orders SET id = id + 1000 WHERE id IN (11, 12)",  # the key changes
    "DELETE FROM orders WHERE id IN (13, 14, 15)",
    "UPDATE orders SET placed = NULL, receipt = NULL, details = '[]', tags = NULL WHERE id = 16",
    "BEGIN; INSERT INTO lines VALUES (50, 1, 1, 0.5); UPDATE lines SET line = 2 WHERE order_id = 50; "
    "DELETE FROM lines WHERE order_id = 2; COMMIT",
    "TRUNCATE lines",
    "INSERT INTO lines SELECT 7, g, g, NULL FROM generate_series(1, 5) g",
    "ALTER TABLE orders ADD COLUMN extra text",
    "UPDATE orders SET extra = 'e' || id WHERE id % 3 = 0",
    "INSERT INTO orders (id, total, extra) VALUES (200, 0, 'new')",
    "ALTER TABLE orders DROP COLUMN note",
    "UPDATE orders SET total = 7 WHERE id IN (17, 18)",
    "INSERT INTO bag VALUES (1, 'x'), (3, 'y')",
    "DELETE FROM bag WHERE ctid = (SELECT min(ctid) FROM bag WHERE a = 1)",
    "UPDATE bag SET b = 'z' WHERE a = 2",
    "BEGIN; UPDATE orders SET total = total * 2 WHERE id BETWEEN 20 AND 30; SAVEPOINT s; "
    "DELETE FROM orders WHERE id = 20; ROLLBACK TO s; COMMIT",
    "BEGIN; DELETE FROM orders WHERE id = 21; ROLLBACK",
]
TABLES = ("orders", "lines", "bag")


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(120)


def _wait_confirmed(db, timeout: float = 120.0) -> None:
    (end,) = db.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")[0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = db.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots")
        if rows and rows[0][0] >= end:
            return
        time.sleep(0.1)
    raise AssertionError("the slot was not confirmed up to the end of the workload")


def _mirror(tmp, *extra: str, follow: bool = False) -> subprocess.Popen:
    out = open(tmp / "mirror.log", "a") if follow else subprocess.PIPE  # a follower's log: a file, never a full pipe
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "olr_buffer.cli",
                "mirror",
                str(tmp / "cf"),
                "--target",
                str(tmp / "mirror"),
                "--batch-rows",
                "5",
                "--poll-interval",
                "0.05",
                "--history",
                *extra,
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
            stdout=out,
            stderr=subprocess.STDOUT if follow else subprocess.PIPE,
            text=True,
        )
    finally:
        if follow:
            out.close()


def _load_back(db, tmp) -> None:
    """Each mirror table into a shadow table of the source's columns and types."""
    conn = db.connect()
    with conn.cursor() as cur:
        for table in TABLES:
            cur.execute(f"CREATE TABLE shadow_{table} (LIKE {table})")
            cur.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum",
                (table,),
            )
            columns = [r[0] for r in cur.fetchall()]
            rows = DeltaTable(str(tmp / "mirror" / "public" / table)).to_pyarrow_table().to_pylist()
            psycopg2.extras.execute_values(
                cur,
                f"INSERT INTO shadow_{table} ({', '.join(columns)}) VALUES %s",
                [tuple(r[c] for c in columns) for r in rows],
            )
    conn.close()


def test_postgres_mirror_equals_the_source(pg_db, tmp_path):
    with pg_db.connect() as conn, conn.cursor() as cur:
        cur.execute(SCHEMA)
    conn.close()
    svc = start_service(pg_db, tmp_path)
    follower = None
    try:
        wait_streaming(tmp_path, svc)
        for i, sql in enumerate(WORK):
            pg_db.execute(sql)
            _wait_confirmed(pg_db)  # published: each statement in files of its own, so in batches of its own
            if i == 2:  # the mirror follows the changefeed while run publishes
                follower = _mirror(tmp_path, follow=True)
            if i == len(WORK) // 2:
                svc.kill()  # SIGKILL, mid-workload
                svc.wait(60)
                svc = start_service(pg_db, tmp_path)
                wait_streaming(tmp_path, svc, after=1)
            if i == 2 * len(WORK) // 3:
                follower.kill()  # SIGKILL, wherever it is
                follower.wait(60)
                follower = _mirror(tmp_path, follow=True)
        _wait_confirmed(pg_db)
    finally:
        assert _stop(svc) == 0, (tmp_path / "service.log").read_text(errors="replace")
        if follower is not None:
            assert _stop(follower) == 0, (tmp_path / "mirror.log").read_text()
    # then to the end, once
    proc = _mirror(tmp_path, "--until-caught-up")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    _load_back(pg_db, tmp_path)
    for table in TABLES:
        for a, b in ((table, f"shadow_{table}"), (f"shadow_{table}", table)):
            (n,) = pg_db.execute(f"SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b}) d")[0]
            assert n == 0, (
                f"{a} EXCEPT ALL {b}: {n} row(s) "
                + repr(pg_db.execute(f"SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b} LIMIT 3"))[:3000]
            )
    assert pg_db.execute("SELECT count(*) FROM shadow_bag")[0][0] == 4  # equal rows are kept as many times
    names = DeltaTable(str(tmp_path / "mirror" / "public" / "orders")).schema().to_arrow().names
    assert "extra" in names and "note" in names  # added; dropped (kept, null where written since)

    # --history: the open versions are the mirror's rows; a key's versions do not overlap;
    # the truncate closed every version of lines before it
    for table, key in (("orders", ["id"]), ("lines", ["order_id", "line"])):
        history = DeltaTable(str(tmp_path / "mirror" / "public" / f"{table}__history")).to_pyarrow_table().to_pylist()
        rows = DeltaTable(str(tmp_path / "mirror" / "public" / table)).to_pyarrow_table().to_pylist()
        assert sorted(
            repr({c: v[c] for c in v if not c.startswith("valid_")}) for v in history if v["valid_to_tx_seq"] is None
        ) == sorted(repr({c: r[c] for c in r if c != "tx_seq"}) for r in rows), table
        by_key: dict = {}
        for v in history:
            by_key.setdefault(tuple(v[k] for k in key), []).append(v)
        for vs in by_key.values():
            vs.sort(key=lambda v: v["valid_from_tx_seq"])
            for a, b in zip(vs, vs[1:]):
                assert a["valid_from_tx_seq"] < a["valid_to_tx_seq"] <= b["valid_from_tx_seq"]
    lines = DeltaTable(str(tmp_path / "mirror" / "public" / "lines__history")).to_pyarrow_table().to_pylist()
    truncated = {
        v["valid_to_tx_seq"]
        for v in lines
        if v["valid_from_tx_seq"] < min(r["valid_from_tx_seq"] for r in lines if r["valid_to_tx_seq"] is None)
    }
    assert len(truncated - {None}) >= 1 and None not in truncated
