"""A throwaway PostgreSQL cluster for the tests of the PostgreSQL source.

One cluster per test session: ``initdb`` into a temporary directory, unix socket only,
``wal_level = logical`` and ``logical_decoding_work_mem = 64kB`` (so that transactions of
a few hundred rows stream). The server refuses to run as root: under root the cluster is
owned by and run as the ``postgres`` user. Without the server binaries the tests fail
(they are required, see the README), they are not skipped.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

ROOT = Path(__file__).resolve().parents[2]
PG_BIN_CANDIDATES = [os.environ.get("OLR_PG_BIN", ""), *(f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15))]
CMD_TIMEOUT = 60


def _pg_bin() -> Path:
    for c in PG_BIN_CANDIDATES:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    pytest.fail(
        "PostgreSQL 15+ server binaries (initdb, pg_ctl) not found in "
        + ", ".join(c for c in PG_BIN_CANDIDATES if c)
        + ": install them (e.g. apt-get install postgresql-15) or set OLR_PG_BIN",
        pytrace=False,
    )


@dataclass
class Cluster:
    bin: Path
    base: Path
    data: Path
    sock: Path
    as_user: list[str]

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stdout}{proc.stderr}")
        return proc

    def start(self) -> None:
        self.ctl("-l", str(self.base / "server.log"), "-w", "-t", "30", "start")

    def restart(self) -> None:
        self.ctl("-l", str(self.base / "server.log"), "-w", "-t", "30", "-m", "fast", "restart")

    def stop(self) -> None:
        self.ctl("-w", "-t", "30", "-m", "fast", "stop", check=False)

    def dsn(self, db: str = "postgres", user: str = "postgres", password: str | None = None) -> str:
        auth = f"{user}:{password}@" if password else f"{user}@"
        return f"postgresql://{auth}/{db}?host={self.sock}"

    def connect(self, db: str = "postgres", autocommit: bool = True):
        conn = psycopg2.connect(dbname=db, host=str(self.sock), user="postgres", connect_timeout=10)
        conn.autocommit = autocommit
        return conn


def _as_user() -> tuple[list[str], int | None, int | None]:
    if os.geteuid() != 0:
        return [], None, None
    pw = pwd.getpwnam("postgres")
    return ["runuser", "-u", "postgres", "--"], pw.pw_uid, pw.pw_gid


@pytest.fixture(scope="session")
def pg_cluster():
    pg_bin = _pg_bin()
    as_user, uid, gid = _as_user()
    base = Path(tempfile.mkdtemp(prefix="olr-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if uid is not None:
        for path in (base, sock):
            os.chown(path, uid, gid)
    cluster = Cluster(pg_bin, base, data, sock, as_user)
    init = subprocess.run(
        [*as_user, str(pg_bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
         "--locale=C", "--no-sync"],
        capture_output=True, text=True, timeout=CMD_TIMEOUT,
    )
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"initdb failed: {init.stdout}{init.stderr}", pytrace=False)
    with open(data / "postgresql.conf", "a") as fh:
        fh.write(
            "\nlisten_addresses = ''\n"
            f"unix_socket_directories = '{sock}'\n"
            "wal_level = logical\n"
            "logical_decoding_work_mem = 64kB\n"
            "max_wal_senders = 20\n"
            "max_replication_slots = 20\n"
            "fsync = off\nfull_page_writes = off\nsynchronous_commit = off\n"
            "shared_buffers = 32MB\n"
            "max_connections = 60\n"
        )
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # an interrupted run stops the server too
        cluster.stop()
        signal.signal(signal.SIGTERM, previous)
        os.kill(os.getpid(), signum)

    try:
        cluster.start()
        signal.signal(signal.SIGTERM, on_term)
        yield cluster
    finally:
        signal.signal(signal.SIGTERM, previous)
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


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
                cur.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                            "WHERE slot_name = %s AND active_pid IS NOT NULL", (slot,))
                time.sleep(0.2)
                cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            except psycopg2.Error:
                pass
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.close()


def run_cmd(db: Database, tmp: Path, *extra: str, uri: str | None = None) -> list[str]:
    return [
        sys.executable, "-m", "olr_buffer.cli", "run", uri or db.uri, "--queue", str(tmp / "q"),
        "--changefeed", str(tmp / "cf"), "--flush-interval", "0.2", "--checkpoint-interval", "0.5",
        "--log-level", "info", *extra,
    ]


def start_service(db: Database, tmp: Path, *extra: str, uri: str | None = None) -> subprocess.Popen:
    log = open(tmp / "service.log", "ab")
    return subprocess.Popen(run_cmd(db, tmp, *extra, uri=uri), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


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
