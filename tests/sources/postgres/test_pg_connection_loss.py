"""A lost connection is always retried, whatever psycopg2 raises for it; a definite answer
of the server still ends the run.

After a server dies, the first query on a connection that was idle fails with a plain
``psycopg2.DatabaseError`` ("server closed the connection unexpectedly"), no SQLSTATE, on a
connection that still looks open (libpq finds the socket closed when it sends, and marks
the connection bad only at its next read). The reader met it looking up the key of a
relation first seen (a new table, a changed one) on its catalog connection, when the
server was restarted under it."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import psycopg2
import pytest

from olr_buffer.sources.postgres import connection
from olr_buffer.sources.postgres.connection import ConnectionLostError, PostgresError, Server
from olr_buffer.sources.postgres.reader import PostgresReader
from olr_buffer.testing import MemoryQueue
from tests.contract_model import load_changefeed
from tests.processes import reader_processes
from tests.sources.postgres.conftest import start_service, wait_streaming
from tests.sources.postgres.test_pg_source import service_log, stop
from tests.sources.postgres.test_reader_stream import published
from tests.sources.postgres.workload import changefeed_state

pytestmark = pytest.mark.e2e


def immediate_stop(cluster) -> None:
    """The server killed (as a crash would): every server process gone when it returns."""
    cluster.ctl("-w", "-t", "30", "-m", "immediate", "stop")


def test_a_query_after_the_server_died_is_a_lost_connection_and_a_definite_error_is_not(pg_db, pg_cluster):
    server = Server(pg_db.uri)
    conn = server.connect()
    with conn.cursor() as cur:
        with pytest.raises(psycopg2.Error) as definite:
            cur.execute("SELECT * FROM no_such_table")
    assert definite.value.pgcode == "42P01" and not connection.broken(conn)
    err = server.error(definite.value, "doing", conn)
    assert type(err) is PostgresError and "no_such_table" in str(err)
    try:
        immediate_stop(pg_cluster)
        with pytest.raises(psycopg2.Error) as gone:
            conn.cursor().execute("SELECT 1")
        assert connection.broken(conn), "the connection's socket is closed"
        assert isinstance(server.error(gone.value, "doing", conn), ConnectionLostError), repr(gone.value)
        # at a connect too: the server not there is a retry (the run's start says it once)
        with pytest.raises(ConnectionLostError, match="cannot reach the server"):
            server.connect()
    finally:
        conn.close()
        if pg_cluster.ctl("status", check=False).returncode != 0:
            pg_cluster.start()


def test_the_server_dying_before_the_key_look_up_of_a_new_table_is_retried(pg_db, pg_cluster):
    """Deterministic: the server is killed when the reader receives the first Relation
    message of a table created while it streams, before it looks the table's key up in the
    catalog (on the connection it opened at the start of the session, idle since)."""
    pg_db.execute("CREATE TABLE early (id int PRIMARY KEY, v text)")
    killed = threading.Event()

    class Reader(PostgresReader):
        def _relation(self, txn, msg):
            if msg.name == "late" and not killed.is_set():
                immediate_stop(pg_cluster)
                killed.set()
            super()._relation(txn, msg)

    queue = MemoryQueue()
    stop_reader = threading.Event()
    reader = Reader(queue, pg_db.uri, initial_copy=False, stop=stop_reader)
    reader.prepare()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            reader.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not reader.reads:  # streaming
            assert time.monotonic() < deadline and not errors, errors
            time.sleep(0.05)
        assert reader._sql is not None and not reader._sql.closed  # the session's catalog connection
        pg_db.execute("INSERT INTO early VALUES (1, 'a')")
        pg_db.execute("CREATE TABLE late (id int PRIMARY KEY, v text)")
        pg_db.execute("INSERT INTO late VALUES (1, 'b')")
        assert killed.wait(60), "the reader did not receive the new table's relation"
        pg_cluster.start()
        deadline = time.monotonic() + 90
        while not any(r["table"] == "late" for r in published(queue)):
            assert not errors, f"the run ended: {errors[0]!r}"
            assert time.monotonic() < deadline, "the row of the new table did not arrive after the restart"
            time.sleep(0.2)
    finally:
        stop_reader.set()
        thread.join(60)
        if pg_cluster.ctl("status", check=False).returncode != 0:
            pg_cluster.start()
    assert not errors, errors
    assert reader.reconnects >= 1
    rows = published(queue)
    assert sorted((r["table"], r["rid"]) for r in rows) == [("early", '{"id":1}'), ("late", '{"id":1}')]


def test_the_server_dying_during_the_initial_copy_is_retried(pg_db, pg_cluster):
    """Deterministic: the server is killed between two tables of the initial copy (its
    connection idle in its snapshot's transaction): the reader retries, and copies again
    from a new slot, whole and once."""
    for t in ("a", "b"):
        pg_db.execute(f"CREATE TABLE {t} (id int PRIMARY KEY)")
        pg_db.execute(f"INSERT INTO {t} SELECT generate_series(1, 3)")
    killed = threading.Event()

    class Reader(PostgresReader):
        def _copy_table(self, conn, oid, schema, name, *args):
            if name == "b" and not killed.is_set():
                immediate_stop(pg_cluster)
                killed.set()
            return super()._copy_table(conn, oid, schema, name, *args)

    queue = MemoryQueue()
    stop_reader = threading.Event()
    reader = Reader(queue, pg_db.uri, stop=stop_reader)
    reader.prepare()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            reader.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert killed.wait(60), "the copy did not reach the second table"
        pg_cluster.start()
        deadline = time.monotonic() + 90
        while reader.copy != "done":
            assert not errors, f"the run ended: {errors[0]!r}"
            assert time.monotonic() < deadline, "the copy was not done after the restart"
            time.sleep(0.2)
    finally:
        stop_reader.set()
        thread.join(60)
        if pg_cluster.ctl("status", check=False).returncode != 0:
            pg_cluster.start()
    assert not errors, errors
    rows = published(queue)
    assert sorted((r["table"], r["rid"]) for r in rows) == [(t, f'{{"id":{i}}}') for t in "ab" for i in (1, 2, 3)]
    assert len(pg_db.execute("SELECT 1 FROM pg_replication_slots")) == 1


@pytest.mark.slow
def test_immediate_restarts_under_load_keep_the_run_going_exactly_once(pg_db, pg_cluster, tmp_path):
    """``pg_ctl restart -m immediate`` again and again while rows stream, `run` in its
    reader process: each time the reader still has rows to decode that were sent before
    the server died, and a table changed after them (a new Relation message, whose key the
    reader looks up on its catalog connection, idle since its last look-up). It is made
    sure of by stopping the reader process (SIGSTOP) from just before the transaction until
    the server has restarted, as a busy machine may. `run` retries every time, and the
    changefeed holds every row the database holds, each once."""
    tables = [f"w{i}" for i in range(3)]
    for t in ["items", *tables]:
        pg_db.execute(f"CREATE TABLE {t} (id bigserial PRIMARY KEY, v text)")
    done, gate = threading.Event(), threading.Lock()
    rng = random.Random(29)

    def insert() -> None:  # the load: 1 to 1000 rows (those are streamed), but not while `gate` is held
        conn = None
        while not done.is_set():
            try:
                if conn is None or conn.closed:
                    conn = pg_db.connect()
                with gate, conn.cursor() as cur:
                    cur.execute(
                        "INSERT INTO items (v) SELECT md5(g::text) FROM generate_series(1, %s) g",
                        (rng.choice([1, 10, 1000]),),
                    )
                time.sleep(0.05)
            except psycopg2.Error:  # the server restarting
                conn = None
                time.sleep(0.05)

    types = dict.fromkeys(tables, "text")

    def change(table: str, rows: int = 0) -> str:
        """``rows`` rows, then the type of a column of ``table`` changes and a row follows:
        the end of the transaction's WAL."""
        types[table] = "varchar" if types[table] == "text" else "text"
        return pg_db.execute(
            f"INSERT INTO items (v) SELECT md5(g::text) FROM generate_series(1, {rows}) g; "
            f"ALTER TABLE {table} ALTER COLUMN v TYPE {types[table]}; INSERT INTO {table} (v) VALUES ('x'); "
            "SELECT pg_current_wal_insert_lsn()::text"
        )[0][0]

    def wait_for(sql: str, lsn: str) -> None:
        deadline = time.monotonic() + 60
        while not pg_db.execute(
            f"SELECT coalesce(bool_or({sql} >= '{lsn}'::pg_lsn), false) FROM "
            "pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid"
        )[0][0]:
            assert svc.poll() is None and time.monotonic() < deadline, service_log(tmp_path)[-3000:]
            time.sleep(0.05)

    load = threading.Thread(target=insert, daemon=True)
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc)
        for t in tables:  # each seen in the stream once: a change after this is a new Relation message
            wait_for("s.confirmed_flush_lsn", change(t))
        load.start()
        for i in range(8):
            (reader,) = reader_processes(svc.pid)
            with gate:  # no other transaction: the socket's buffer holds this one whole
                # a look-up of this session: the reader's catalog connection is open (then
                # idle), and the reader has decoded everything before
                wait_for("s.confirmed_flush_lsn", change(tables[i % 3]))
                os.kill(reader, signal.SIGSTOP)
                try:
                    wait_for("r.sent_lsn", change(tables[(i + 1) % 3], rows=200))  # in the reader's socket
                    pg_cluster.ctl(
                        "-l", str(pg_cluster.base / "server.log"), "-w", "-t", "30", "-m", "immediate", "restart"
                    )
                finally:
                    os.kill(reader, signal.SIGCONT)
            wait_streaming(tmp_path, svc, timeout=90, after=i + 1)  # fails if the run ended
        done.set()
        load.join(60)
        want = {t: {f'{{"id":{i}}}' for (i,) in pg_db.execute(f"SELECT id FROM {t}")} for t in ["items", *tables]}
        deadline = time.monotonic() + 120
        while True:
            assert svc.poll() is None, f"run ended:\n{service_log(tmp_path)[-3000:]}"
            try:
                rows = load_changefeed(tmp_path / "cf")
            except FileNotFoundError:
                rows = []
            got = changefeed_state(rows)  # an insert of a row already there fails here
            if all(set(got.get(t, {})) == want[t] for t in want):
                break
            assert time.monotonic() < deadline, {
                t: (f"{len(want[t] - set(got.get(t, {})))} missing", f"{len(set(got.get(t, {})) - want[t])} extra")
                for t in want
            }
            time.sleep(0.5)
    finally:
        done.set()
        assert stop(svc) == 0, service_log(tmp_path)[-3000:]
    # every restart was a reconnection; the words of the loss depend on where the reader was
    # when the server went (on a loaded machine not always in the look-up this is about)
    text = service_log(tmp_path)
    assert text.count("reconnecting in") >= 8, text[-3000:]
    assert "replication: server closed the connection unexpectedly" in text, text[-3000:]
    tx_seqs: dict[str, set] = {}
    for r in rows:
        tx_seqs.setdefault(r["xid"], set()).add(r["tx_seq"])
    assert all(len(s) == 1 for s in tx_seqs.values()), "a transaction published twice"
