"""A throwaway PostgreSQL cluster (for the tests and the benchmarks of the PostgreSQL source).

``initdb`` into a temporary directory, unix socket only, ``wal_level = logical`` and
``logical_decoding_work_mem = 64kB`` (so that transactions of a few hundred rows stream).
The server refuses to run as root: under root the cluster is owned by and run as the
``postgres`` user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg2

PG_BIN_CANDIDATES = [os.environ.get("OLR_PG_BIN", ""), *(f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15))]
CMD_TIMEOUT = 60


class MissingServerError(RuntimeError):
    """The PostgreSQL server binaries are not installed."""


def find_pg_bin() -> Path:
    for c in PG_BIN_CANDIDATES:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    raise MissingServerError(
        "PostgreSQL 15+ server binaries (initdb, pg_ctl) not found in "
        + ", ".join(c for c in PG_BIN_CANDIDATES if c)
        + ": install them (e.g. apt-get install postgresql-15) or set OLR_PG_BIN"
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

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

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


def create_cluster(extra_conf: str = "") -> Cluster:
    """A new cluster, started; :meth:`Cluster.remove` stops and deletes it."""
    pg_bin = find_pg_bin()
    as_user, uid, gid = _as_user()
    base = Path(tempfile.mkdtemp(prefix="olr-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if uid is not None:
        for path in (base, sock):
            os.chown(path, uid, gid)
    cluster = Cluster(pg_bin, base, data, sock, as_user)
    init = subprocess.run(
        [
            *as_user,
            str(pg_bin / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ],
        capture_output=True,
        text=True,
        timeout=CMD_TIMEOUT,
    )
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stdout}{init.stderr}")
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
            "max_connections = 60\n" + extra_conf
        )
    try:
        cluster.start()
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return cluster
