"""The tests of the PostgreSQL source against a real server.

One throwaway cluster per test session (:mod:`tests.sources.postgres.cluster`), one database per
test. Without the server binaries the tests fail (they are required, see the README),
they are not skipped.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

from tests.processes import start_stream_run, stream_run_args
from tests.sources.postgres.cluster import Cluster, MissingServerError, create_cluster

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def pg_cluster():
    try:
        cluster = create_cluster()
    except MissingServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # an interrupted run stops the server too
        cluster.stop()
        signal.signal(signal.SIGTERM, previous)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield cluster
    finally:
        signal.signal(signal.SIGTERM, previous)
        cluster.remove()


_db_numbers = itertools.count()


@dataclass
class Database:
    cluster: Cluster
    name: str

    @property
    def uri(self) -> str:
        return self.cluster.dsn(self.name)

    def connect(self, autocommit: bool = True):
        return self.cluster.connect(self.name, autocommit)

    def execute(self, sql: str, params=None) -> list[tuple]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall() if cur.description else []
        conn.close()
        return rows


@pytest.fixture
def pg_db(pg_cluster) -> Database:
    """A new database of the session's cluster, with publication ``olr_buffer`` for all tables."""
    name = f"t{os.getpid()}_{next(_db_numbers)}"
    admin = pg_cluster.connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    db = Database(pg_cluster, name)
    db.execute("CREATE PUBLICATION olr_buffer FOR ALL TABLES")
    admin.close()
    yield db
    admin = pg_cluster.connect()  # the server may have been restarted
    with admin.cursor() as cur:
        cur.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,))
        for (slot,) in cur.fetchall():
            try:
                cur.execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                    "WHERE slot_name = %s AND active_pid IS NOT NULL",
                    (slot,),
                )
                time.sleep(0.2)
                cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            except psycopg2.Error:
                pass
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.close()


def run_cmd(db: Database, tmp: Path, *extra: str, uri: str | None = None) -> list[str]:
    return stream_run_args(uri or db.uri, tmp, *extra)


def start_service(db: Database, tmp: Path, *extra: str, uri: str | None = None) -> subprocess.Popen:
    return start_stream_run(uri or db.uri, tmp, *extra)


def wait_streaming(tmp: Path, proc: subprocess.Popen, timeout: float = 60.0, after: int = 0) -> None:
    """Until the service's log says it streams (the ``after``-th time): changes from then
    on are transactions, not part of the initial copy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = (tmp / "service.log").read_text(errors="replace")
        if text.count("streaming slot") > after:
            return
        if proc.poll() is not None:
            raise AssertionError(f"the service exited with {proc.returncode}:\n{text}")
        time.sleep(0.05)
    raise AssertionError(f"the service did not start streaming within {timeout}s")
