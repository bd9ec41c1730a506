"""Set-up problems: one line naming the cause and what to do, non-zero exit, never the password."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.sources.postgres.conftest import ROOT, run_cmd, start_service, wait_streaming

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

PASSWORD = "Sup3r-s3cret-pw"


def run_once(db, tmp, *extra, uri=None) -> subprocess.CompletedProcess:
    return subprocess.run(run_cmd(db, tmp, *extra, uri=uri), capture_output=True, text=True, timeout=60, cwd=ROOT)


def assert_clean_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert PASSWORD not in out, out
    errors = [line for line in proc.stderr.splitlines() if line.startswith("olr-buffer: error:")]
    assert len(errors) == 1 and "Traceback" not in out, out
    for w in words:
        assert w in errors[0], errors[0]
    return errors[0]


def uri(db, user="postgres", database=None) -> str:
    return db.cluster.dsn(database or db.name, user=user, password=PASSWORD)


def test_missing_publication(pg_db, tmp_path):
    proc = run_once(pg_db, tmp_path, "--publication", "nope", uri=uri(pg_db))
    assert_clean_error(proc, "publication 'nope' does not exist", "CREATE PUBLICATION")


def test_role_without_replication(pg_db, tmp_path):
    pg_db.execute("DO $$ BEGIN CREATE ROLE plain LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    proc = run_once(pg_db, tmp_path, uri=uri(pg_db, user="plain"))
    assert_clean_error(proc, "REPLICATION")


def test_slot_of_another_plugin(pg_db, tmp_path):
    pg_db.execute("SELECT pg_create_logical_replication_slot('olr_buffer', 'test_decoding')")
    proc = run_once(pg_db, tmp_path, uri=uri(pg_db))
    assert_clean_error(proc, "plugin 'test_decoding'", "--slot")


def test_server_unreachable(pg_db, tmp_path):
    proc = run_once(pg_db, tmp_path, uri=f"postgresql://postgres:{PASSWORD}@/{pg_db.name}?host={tmp_path}")
    assert_clean_error(proc, "cannot reach the server")


def test_slot_held_by_another_connection(pg_db, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = start_service(pg_db, tmp_path / "a", uri=uri(pg_db))
    try:
        wait_streaming(tmp_path / "a", first)
        proc = run_once(pg_db, tmp_path / "b", uri=uri(pg_db))
        assert_clean_error(proc, "in use by another connection")
    finally:
        first.terminate()
        first.wait(30)
    log = (tmp_path / "a" / "service.log").read_text()
    assert PASSWORD not in log and ":***@" in log
    status = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "status", "--queue", str(tmp_path / "a" / "q")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert status.returncode == 0 and "postgresql postgresql://postgres:***@" in status.stdout, status.stdout
    assert PASSWORD not in status.stdout + status.stderr


def test_wal_level_is_checked():
    """wal_level is a server-wide setting (the session's cluster has 'logical'): the check
    itself, on a connection that reports another level."""
    from olr_buffer.sources.postgres.connection import PostgresError, Server, check_setup

    class Cursor:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def execute(self, sql, params=None):
            pass

        def fetchone(self):
            return ("replica",)

    class Conn:
        def cursor(self):
            return Cursor()

    with pytest.raises(PostgresError, match="wal_level is 'replica'.*wal_level = logical") as info:
        check_setup(Server(f"postgresql://u:{PASSWORD}@h/db"), Conn(), "s", "p")
    assert PASSWORD not in str(info.value)


def test_a_changefeed_takes_no_second_source(pg_db, tmp_path):
    """A changefeed written from one slot is refused to a new queue on another slot, and
    adoption (the recovery of a lost queue) needs the same source; no slot is created."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    pg_db.execute("INSERT INTO t VALUES (1, 'a')")
    first = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, first)
    finally:
        first.terminate()
        first.wait(30)
    assert first.returncode == 0
    other_queue = ("--queue", str(tmp_path / "q2"), "--slot", "other")  # the last --queue wins
    proc = run_once(pg_db, tmp_path, *other_queue)
    line = assert_clean_error(proc, f"{tmp_path / 'cf'}: changefeed was written by queue")
    assert ":olr_buffer" in line and ":other" in line, line
    proc = run_once(pg_db, tmp_path, *other_queue, "--adopt-changefeed")
    assert_clean_error(proc, "changefeed was written from source postgresql:", "adopted only from the same source")
    assert pg_db.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_name = 'other'") == []


def test_publication_dropped_while_streaming_stops_the_service(pg_db, tmp_path):
    """A definite error of the walsender (SQLSTATE class 42) ends the run with one line:
    reconnecting would fail the same way, each time after the server decoded again from
    the slot's position (it reconnected every ~12 s, for ever, at a backoff of 1 s)."""
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    pg_db.execute("CREATE PUBLICATION p2 FOR TABLE t")
    proc = start_service(pg_db, tmp_path, "--publication", "p2")
    try:
        wait_streaming(tmp_path, proc)
        pg_db.execute("DROP PUBLICATION p2")
        pg_db.execute("INSERT INTO t VALUES (1, 'x')")
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = (tmp_path / "service.log").read_text()
    assert code == 1, log
    errors = [line for line in log.splitlines() if line.startswith("olr-buffer: error:")]
    assert len(errors) == 1 and 'publication "p2" does not exist' in errors[0], log
    assert "slot keeps its position" in errors[0] and "Traceback" not in log, log


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_to_the_whole_process_group_is_a_clean_stop(pg_db, tmp_path, sig):
    """systemd's stop and a terminal's Ctrl-C signal the reader process and its fork server
    too: still a clean stop, exit 0 (it was 'the PostgreSQL reader process died', exit 1)."""
    import os
    import signal

    with open(tmp_path / "service.log", "ab") as log:
        proc = subprocess.Popen(
            run_cmd(pg_db, tmp_path), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
    try:
        wait_streaming(tmp_path, proc)
        os.killpg(proc.pid, getattr(signal, sig))
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log_text = (tmp_path / "service.log").read_text()
    assert code == 0 and "stopped cleanly" in log_text and "Traceback" not in log_text, log_text


def test_a_slot_the_server_invalidated_stops_the_run_with_one_line(tmp_path):
    """A slot whose WAL the server removed (max_slot_wal_keep_size) can never stream again:
    the changes in that WAL are gone. The run stops with one line that says so, instead of
    retrying a connection that would fail the same way for ever."""
    from tests.sources.postgres.cluster import create_cluster
    from tests.sources.postgres.conftest import Database

    cluster = create_cluster("max_slot_wal_keep_size = 1MB\nwal_keep_size = 0\n")
    try:
        admin = cluster.connect()
        with admin.cursor() as cur:
            cur.execute("CREATE DATABASE lost")
        admin.close()
        db = Database(cluster, "lost")
        db.execute("CREATE PUBLICATION olr_buffer FOR ALL TABLES")
        db.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        service = start_service(db, tmp_path)
        try:
            wait_streaming(tmp_path, service)
        finally:
            service.terminate()
            assert service.wait(60) == 0
        # WAL the stopped slot still needs, beyond max_slot_wal_keep_size, then a checkpoint
        for i in range(6):
            db.execute("INSERT INTO t SELECT g + %s, repeat('x', 200) FROM generate_series(1, 5000) g", (i * 5000,))
            db.execute("SELECT pg_switch_wal()")
        db.execute("CHECKPOINT")
        assert db.execute("SELECT wal_status FROM pg_replication_slots")[0][0] == "lost"
        # streaming from it is the server's definite answer (55000), not a lost connection
        # (a run whose slot is invalidated while it runs meets it at its reconnect)
        import psycopg2.extras

        from olr_buffer.sources.postgres.connection import Server

        conn = psycopg2.connect(db.uri, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        try:
            with pytest.raises(psycopg2.Error) as refused:
                conn.cursor().start_replication(
                    slot_name="olr_buffer", options={"proto_version": "1", "publication_names": "olr_buffer"}
                )
            assert refused.value.pgcode == "55000", refused.value
            assert "invalidated" in str(Server(db.uri).error(refused.value, "streaming", conn))
            assert type(Server(db.uri).error(refused.value, "streaming", conn)).__name__ == "PostgresError"
        finally:
            conn.close()
        proc = run_once(db, tmp_path)
        line = assert_clean_error(proc, "olr_buffer", "invalidated")
        assert proc.returncode == 1, line
    finally:
        cluster.remove()
