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

from tests.test_changefeed_s3 import manifest_next, plain_rows, wait_published
from tests.test_standby import TAKEN_OVER, WAITING, fenced, standby, wait_more

pytestmark = pytest.mark.e2e


def insert(db, stop: threading.Event, made: list[int]) -> None:
    """Transactions of one row each, ``id`` 0, 1, ... in commit order, until ``stop``;
    ``made[0]``: how many so far."""
    conn = db.connect()
    with conn.cursor() as cur:
        while not stop.is_set():
            cur.execute("INSERT INTO t VALUES (%s, %s)", (made[0], f"row {made[0]}"))
            made[0] += 1
            time.sleep(0.05)
    conn.close()


def wait_made(made: list[int], more_than: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while made[0] <= more_than:
        assert time.monotonic() < deadline, f"{made[0]} transactions made, not more than {more_than}"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_postgres_standby_takes_over_the_changefeed_and_the_slot(pg_db, tmp_path, s3_uri, how):
    """``kill``: SIGKILL (the server sees the connection go at once); ``stop``: SIGSTOP
    past the lease (the server keeps its connection, and the slot, until
    ``wal_sender_timeout``, 2 s here, given in the URI), then SIGCONT: it stops with one
    line."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    source = (pg_db.uri + "&options=-c%20wal_sender_timeout%3D2s", "--no-initial-copy")
    a = standby(source[0], tmp_path / "qa", s3_uri, *source[1:])
    b = None
    stop = threading.Event()
    made = [0]
    inserter = threading.Thread(target=insert, args=(pg_db, stop, made))
    try:
        a.wait_line("active now, lease generation 1")
        a.wait_line("streaming slot")
        b = standby(source[0], tmp_path / "qb", s3_uri, *source[1:])
        assert int(b.wait_line(WAITING).group(2)) == a.proc.pid
        inserter.start()
        wait_more(s3_uri, 10)
        if how == "kill":
            a.stop(signal.SIGKILL)
        else:
            a.proc.send_signal(signal.SIGSTOP)
        assert int(b.wait_line(TAKEN_OVER, timeout=120).group(1)) == 2
        b.wait_line("streaming slot", timeout=120)
        wait_made(made, made[0] + 20)  # transactions made while the standby streams
        if how == "stop":
            wait_more(s3_uri, manifest_next(s3_uri))
            a.proc.send_signal(signal.SIGCONT)
            fenced(a)
        a = standby(source[0], tmp_path / "qa", s3_uri, *source[1:])
        assert int(a.wait_line(WAITING).group(2)) == b.proc.pid
        wait_made(made, made[0] + 20)  # and after the old one stands by
        stop.set()
        inserter.join(120)
        n = made[0]
        wait_published(s3_uri, n, timeout=180)
        assert a.stop() == 0, "\n".join(a.lines[-30:])
        assert b.stop() == 0, "\n".join(b.lines[-30:])
    finally:
        stop.set()
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
                s.stop(signal.SIGKILL)
    rows = plain_rows(s3_uri)
    assert [r["tx_seq"] for r in rows] == list(range(n))
    assert [r["after"]["id"] for r in rows] == list(range(n))
    assert {r["op"] for r in rows} == {"c"}
