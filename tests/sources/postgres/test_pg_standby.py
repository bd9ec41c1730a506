"""``run --standby`` on a PostgreSQL source: two services, each with its own queue, on one
changefeed on S3; the active one is SIGKILLed; the standby takes the changefeed over and
then the slot (only one connection can stream it: it waits until the server lets the
dead one's go) and streams from the slot's confirmed position. Every transaction exactly
once, in order."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.test_changefeed_s3 import plain_rows, wait_published
from tests.test_standby import TAKEN_OVER, WAITING, standby, wait_more

pytestmark = pytest.mark.e2e

N = 240


def insert(db, n: int, stop: threading.Event) -> None:
    """``n`` transactions of one row each, ``id`` 0..n-1 in commit order."""
    conn = db.connect()
    with conn.cursor() as cur:
        for i in range(n):
            if stop.is_set():
                break
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, f"row {i}"))
            time.sleep(0.02)
    conn.close()


def test_a_postgres_standby_takes_over_the_changefeed_and_the_slot(pg_db, tmp_path, s3_uri):
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    source = (pg_db.uri, "--no-initial-copy")
    a = standby(source[0], tmp_path / "qa", s3_uri, *source[1:])
    b = None
    stop = threading.Event()
    inserter = threading.Thread(target=insert, args=(pg_db, N, stop))
    try:
        a.wait_line("active now, lease generation 1")
        a.wait_line("streaming slot")
        b = standby(source[0], tmp_path / "qb", s3_uri, *source[1:])
        assert int(b.wait_line(WAITING).group(2)) == a.proc.pid
        inserter.start()
        wait_more(s3_uri, 10)
        a.stop(signal.SIGKILL)
        assert int(b.wait_line(TAKEN_OVER, timeout=120).group(1)) == 2
        b.wait_line("streaming slot", timeout=120)
        assert inserter.is_alive(), "the transactions were all made before the take-over"
        a = standby(source[0], tmp_path / "qa", s3_uri, *source[1:])
        assert int(a.wait_line(WAITING).group(2)) == b.proc.pid
        inserter.join(120)
        wait_published(s3_uri, N, timeout=180)
        assert a.stop() == 0, "\n".join(a.lines[-30:])
        assert b.stop() == 0, "\n".join(b.lines[-30:])
    finally:
        stop.set()
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.stop(signal.SIGKILL)
    rows = plain_rows(s3_uri)
    assert [r["tx_seq"] for r in rows] == list(range(N))
    assert [r["after"]["id"] for r in rows] == list(range(N))
    assert {r["op"] for r in rows} == {"c"}
