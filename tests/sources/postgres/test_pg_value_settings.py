"""Values do not depend on the database's settings: every connection of the source sets
the text forms (ISO dates, UTC, full float digits, hex bytea, UTF-8), for the initial
copy and the stream alike, whatever ``ALTER DATABASE ... SET`` says."""

from __future__ import annotations

import json
import time

import psycopg2
import pyarrow.parquet as pq
import pytest

from tests.contract_model import changefeed_files
from tests.sources.postgres.conftest import start_service, wait_streaming
from tests.sources.postgres.test_pg_source import service_log, stop

pytestmark = pytest.mark.e2e

# every setting that changes a value's text form, set the other way than the source needs
DATABASE_SETTINGS = {
    "datestyle": "SQL, DMY",
    "timezone": "Asia/Kolkata",
    "extra_float_digits": "-3",
    "intervalstyle": "sql_standard",
    "bytea_output": "escape",
    "client_encoding": "LATIN1",
}
ROW = (
    "'2026-01-02 03:04:05.678+00', '2026-01-02', '2026-01-02 03:04:05.678', '1 day 02:03:04', "
    "0.1234567890123456, 0.1234567, 0.1234567, '\\xdeadbeef', 'café ☕', 'public.v', 1234.56"
)
# as the changefeed carries them: the JSON text of each value
EXPECTED = {
    "ts": '"2026-01-02 03:04:05.678+00"',
    "d": '"2026-01-02"',
    "t": '"2026-01-02 03:04:05.678"',
    "iv": '"1 day 02:03:04"',
    "f8": "0.1234567890123456",
    "f4": "0.1234567",
    "n": "0.1234567",
    "b": '"\\\\xdeadbeef"',
    "s": '"café ☕"',
    "rc": '"public.v"',
}


class _Raw(str):
    """A JSON number kept as its text."""


def _text(v) -> str:
    return str(v) if isinstance(v, _Raw) else json.dumps(v, ensure_ascii=False)


def _after(row: dict) -> dict[str, str]:
    doc = json.loads(row["after"], parse_float=_Raw, parse_int=_Raw)
    return {k: _text(v) for k, v in doc.items()}


def test_values_are_iso_utc_and_full_digits_whatever_the_database_settings(pg_db, tmp_path):
    for name, value in DATABASE_SETTINGS.items():
        pg_db.execute(f"ALTER DATABASE {pg_db.name} SET {name} = '{value}'")
    conn = psycopg2.connect(dbname=pg_db.name, host=str(pg_db.cluster.sock), user="postgres", client_encoding="UTF8")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE v (id int PRIMARY KEY, ts timestamptz, d date, t timestamp, iv interval, "
            "f8 float8, f4 real, n numeric, b bytea, s text, rc regclass, m money)"
        )
        cur.execute("ALTER TABLE v REPLICA IDENTITY FULL")  # updates carry a before image: the other path
        cur.execute(f"INSERT INTO v VALUES (1, {ROW})")  # before the slot: the initial copy
        cur.execute("SHOW datestyle")
        assert cur.fetchone()[0] == "ISO, DMY"  # psycopg2's own; the database's is SQL
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc)
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO v VALUES (2, {ROW})")  # streamed
            cur.execute("UPDATE v SET m = m WHERE id = 2")
        deadline = time.monotonic() + 60
        while len([r for r in _changefeed(tmp_path) if r["table"] == "v"]) < 3:
            assert time.monotonic() < deadline, "not published:\n" + service_log(tmp_path)
            time.sleep(0.2)
    finally:
        conn.close()
        assert stop(svc) == 0, service_log(tmp_path)
    rows = [r for r in _changefeed(tmp_path) if r["table"] == "v"]
    assert [r["op"] for r in rows] == ["r", "c", "u"], rows
    images = [_after(r) for r in rows] + [_after({"after": rows[2]["before"]})]
    for image in images:
        assert {k: image[k] for k in EXPECTED} == EXPECTED, image
    # money follows the database's lc_monetary (its currency): the same in the copy and the stream
    assert len({image["m"] for image in images}) == 1 and "1,234.56" in images[0]["m"]


def _changefeed(tmp_path) -> list[dict]:
    try:
        rows = []
        for path in changefeed_files(tmp_path / "cf"):
            rows.extend(pq.read_table(path).to_pylist())
        return sorted(rows, key=lambda r: (r["tx_seq"], r["op_seq"]))
    except FileNotFoundError:
        return []
