"""The two ways of reading the replication stream against a real server: from the socket
(a plain connection: unix socket, TCP without SSL) and through libpq (SSL, or
``socket_reads=False``) give the same records; an SSL connection is read through libpq."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from olr_buffer.sources.postgres.reader import PostgresReader
from olr_buffer.testing import MemoryQueue
from tests.sources.postgres.cluster import create_cluster
from tests.sources.postgres.test_reader_stream import published

pytestmark = pytest.mark.e2e

BIG = 40_000  # md5s: a 1.3 MB value, longer than a socket read, sent whole (random: not compressed)


def load(execute) -> int:
    """A backlog on the slots made before it; returns the rows it changed."""
    execute("CREATE TABLE t (id int PRIMARY KEY, v text, j jsonb, n numeric, b boolean)")
    for i in range(200):
        execute(
            f"INSERT INTO t SELECT g, 'v' || g, '{{\"a\": 1}}', g / 7.0, g % 2 = 0 "
            f"FROM generate_series({i * 10}, {i * 10 + 9}) g"
        )
    execute("INSERT INTO t SELECT g, repeat('x', 50) FROM generate_series(10000, 14999) g")  # streamed
    execute(f"INSERT INTO t (id, v) SELECT 20000, string_agg(md5(g::text), '') FROM generate_series(1, {BIG}) g")
    execute("UPDATE t SET v = 'u' WHERE id < 5")
    execute("DELETE FROM t WHERE id BETWEEN 5 AND 9")
    return 2000 + 5000 + 1 + 5 + 5


def read(uri: str, slot: str, rows: int, **options) -> tuple[list[dict], PostgresReader]:
    queue = MemoryQueue()
    stop = threading.Event()
    reader = PostgresReader(queue, uri, slot=slot, initial_copy=False, stop=stop, **options)
    reader.prepare()
    thread = threading.Thread(target=reader.run, daemon=True)
    thread.start()
    try:
        got: list[dict] = []
        for _ in range(600):
            got = published(queue)
            if len(got) >= rows:
                break
            stop.wait(0.1)
    finally:
        stop.set()
        thread.join(30)
    return got, reader


def test_socket_and_libpq_reads_give_the_same_records(pg_db):
    for slot in ("by_socket", "by_libpq"):
        pg_db.execute(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
    rows = load(pg_db.execute)
    by_socket, r1 = read(pg_db.uri, "by_socket", rows)
    by_libpq, r2 = read(pg_db.uri, "by_libpq", rows, socket_reads=False)
    assert (r1.reads, r2.reads) == ("socket", "libpq")
    assert len(by_socket) == rows
    assert by_socket == by_libpq
    big = [r for r in by_socket if r["rid"] == '{"id":20000}']
    assert len(big) == 1 and len(big[0]["after"]["v"]) == 32 * BIG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ssl_cluster():
    """A cluster of its own that also listens on TCP, with SSL (a self-signed certificate)."""
    certs = Path(tempfile.mkdtemp(prefix="olr-pg-ssl-"))
    subprocess.run(
        [
            "openssl",
            "req",
            "-new",
            "-x509",
            "-days",
            "2",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-out",
            str(certs / "server.crt"),
            "-keyout",
            str(certs / "server.key"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    os.chmod(certs / "server.key", 0o600)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        for path in (certs, certs / "server.crt", certs / "server.key"):
            os.chown(path, pw.pw_uid, pw.pw_gid)
    port = _free_port()
    cluster = create_cluster(
        f"listen_addresses = '127.0.0.1'\nport = {port}\nssl = on\n"
        f"ssl_cert_file = '{certs / 'server.crt'}'\nssl_key_file = '{certs / 'server.key'}'\n"
    )
    try:
        yield cluster, port
    finally:
        cluster.remove()
        shutil.rmtree(certs, ignore_errors=True)


def test_ssl_connection_is_read_through_libpq(ssl_cluster):
    import psycopg2

    cluster, port = ssl_cluster
    admin = psycopg2.connect(dbname="postgres", host=str(cluster.sock), port=port, user="postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE ssl")
    admin.close()
    db = psycopg2.connect(dbname="ssl", host=str(cluster.sock), port=port, user="postgres")
    db.autocommit = True

    def execute(statement):
        with db.cursor() as cur:
            cur.execute(statement)

    execute("CREATE PUBLICATION olr_buffer FOR ALL TABLES")
    for slot in ("over_ssl", "over_tcp"):
        execute(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
    rows = load(execute)
    db.close()
    over_ssl, r1 = read(f"postgresql://postgres@127.0.0.1:{port}/ssl?sslmode=require", "over_ssl", rows)
    over_tcp, r2 = read(f"postgresql://postgres@127.0.0.1:{port}/ssl?sslmode=disable", "over_tcp", rows)
    assert (r1.reads, r2.reads) == ("libpq", "socket")
    assert len(over_ssl) == rows
    assert over_ssl == over_tcp
