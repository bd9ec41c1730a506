"""Connections to the server: checks with clear errors, the slot, and the raw replication I/O.

psycopg2's ``LogicalReplicationConnection`` opens the replication connection and sends
``START_REPLICATION``; the CopyData messages are then read and written here through
libpq itself (:class:`ReplicationStream`), so that the stream's framing and every flush
position we confirm are ours: psycopg2's own ``read_message`` would move the confirmed
position to a keepalive's position whenever the last message's LSN is at or below what
we confirmed, which streamed transactions (whose message LSNs go backwards, relation
messages carrying 0/0) make unsafe.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import select
import time
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg2
import psycopg2.extras

from ...errors import OlrBufferError
from .protocol import encode_status


class PostgresError(OlrBufferError):
    """The PostgreSQL source cannot go on; the message names the cause and what to do."""


class ConnectionLostError(PostgresError):
    """The server went away (or is not reachable yet): the reader retries."""


class SlotInUseError(PostgresError):
    """The replication slot is held by another connection."""


_PASSWORD_IN_URI = re.compile(r"(://[^:/@]*:)[^@]*@")
_PASSWORD_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact(text: str, password: str | None = None) -> str:
    """``text`` without any password (in a URI, as ``password=...``, or verbatim)."""
    text = _PASSWORD_IN_URI.sub(r"\1***@", text)
    text = _PASSWORD_KV.sub(r"\1***", text)
    if password:
        for form in {password, unquote(password)}:
            text = text.replace(form, "***")
    return text


def uri_password(uri: str) -> str | None:
    try:
        return urlsplit(uri).password
    except ValueError:
        return None


def safe_uri(uri: str) -> str:
    """The URI for logs and status: the password replaced by ``***``."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return redact(uri)
    if parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        netloc = f"{parts.username or ''}:***@{host}"
        parts = parts._replace(netloc=netloc)
    return redact(urlunsplit(parts), uri_password(uri))


def _one_line(exc: BaseException, password: str | None) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return redact(text, password)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class Server:
    """Opens connections to one database; every error it raises names the cause without the password."""

    def __init__(self, uri: str, connect_timeout: int = 10) -> None:
        self.uri = uri
        self.password = uri_password(uri)
        self.safe = safe_uri(uri)
        self.connect_timeout = connect_timeout

    def connect(self, replication: bool = False):
        factory = psycopg2.extras.LogicalReplicationConnection if replication else None
        try:
            conn = psycopg2.connect(self.uri, connection_factory=factory, connect_timeout=self.connect_timeout,
                                    application_name="olr-buffer")
        except psycopg2.OperationalError as exc:
            text = _one_line(exc, self.password)
            if "must be superuser or replication role" in text or "permission denied to start WAL sender" in text:
                raise PostgresError(
                    f"{self.safe}: the role may not open a replication connection ({text})",
                    hint="grant it: ALTER ROLE <name> REPLICATION",
                ) from None
            if "does not exist" in text or "password authentication failed" in text or "no pg_hba.conf" in text:
                raise PostgresError(f"{self.safe}: {text}", hint="check the user, password and database of the URI") from None
            raise ConnectionLostError(
                f"{self.safe}: cannot reach the server: {text}",
                hint="check that the server runs and the URI's host and port",
            ) from None
        except psycopg2.Error as exc:
            raise PostgresError(f"{self.safe}: {_one_line(exc, self.password)}") from None
        if not replication:
            conn.autocommit = True
        return conn

    def error(self, exc: BaseException, doing: str) -> PostgresError:
        """A psycopg2 error as ours: lost connections are :class:`ConnectionLostError`."""
        text = _one_line(exc, self.password)
        # a slot still held by the server process of a connection that just died is transient too
        lost = isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError, psycopg2.errors.ObjectInUse))
        cls = ConnectionLostError if lost else PostgresError
        return cls(f"{self.safe}: {doing}: {text}")


def check_setup(server: Server, conn, slot: str, publication: str) -> dict:
    """The user's set-up, before anything is created: raises :class:`PostgresError` naming
    what is missing. Returns the slot's row (or None) and the server facts."""
    with conn.cursor() as cur:
        cur.execute("SHOW wal_level")
        (wal_level,) = cur.fetchone()
        if wal_level != "logical":
            raise PostgresError(
                f"{server.safe}: wal_level is {wal_level!r}, logical replication needs 'logical'",
                hint="set wal_level = logical in postgresql.conf and restart the server",
            )
        cur.execute("SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user")
        row = cur.fetchone()
        if not row or not row[0]:
            raise PostgresError(
                f"{server.safe}: the role has neither REPLICATION nor SUPERUSER",
                hint="ALTER ROLE <name> REPLICATION (and grant SELECT on the published tables)",
            )
        cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
        if cur.fetchone() is None:
            raise PostgresError(
                f"{server.safe}: publication {publication!r} does not exist in this database",
                hint=f"CREATE PUBLICATION {quote_ident(publication)} FOR ALL TABLES (or FOR TABLE ...)",
            )
        cur.execute(
            "SELECT plugin, active, active_pid, database = current_database(), confirmed_flush_lsn::text "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        )
        row = cur.fetchone()
    if row is None:
        return {"exists": False}
    plugin, active, pid, same_db, confirmed = row
    if plugin != "pgoutput":
        raise PostgresError(
            f"{server.safe}: replication slot {slot!r} was created with plugin {plugin!r}, not 'pgoutput'",
            hint="use another --slot name, or drop that slot if nobody needs it: SELECT pg_drop_replication_slot(...)",
        )
    if not same_db:
        raise PostgresError(
            f"{server.safe}: replication slot {slot!r} belongs to another database",
            hint="use another --slot name",
        )
    if active:
        raise SlotInUseError(
            f"{server.safe}: replication slot {slot!r} is in use by another connection (server process {pid})",
            hint="stop the other consumer of the slot, or use another --slot name",
        )
    return {"exists": True, "confirmed": confirmed}


def _load_libpq() -> ctypes.CDLL:
    """The libpq that psycopg2 itself uses (a connection's ``pgconn_ptr`` belongs to it)."""
    import psycopg2._psycopg as ext

    path = None
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                name = line.split()[-1]
                if os.path.basename(name).startswith("libpq"):
                    path = name
                    break
    except OSError:
        pass
    if path is None:
        libs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(ext.__file__)), "psycopg2_binary.libs", "libpq*"))
        path = libs[0] if libs else "libpq.so.5"
    lib = ctypes.CDLL(path)
    lib.PQgetCopyData.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.PQgetCopyData.restype = ctypes.c_int
    lib.PQputCopyData.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    lib.PQputCopyData.restype = ctypes.c_int
    lib.PQflush.argtypes = [ctypes.c_void_p]
    lib.PQflush.restype = ctypes.c_int
    lib.PQconsumeInput.argtypes = [ctypes.c_void_p]
    lib.PQconsumeInput.restype = ctypes.c_int
    lib.PQfreemem.argtypes = [ctypes.c_void_p]
    lib.PQfreemem.restype = None
    lib.PQerrorMessage.argtypes = [ctypes.c_void_p]
    lib.PQerrorMessage.restype = ctypes.c_char_p
    return lib


_libpq: ctypes.CDLL | None = None


class ReplicationStream:
    """The CopyData messages of a started replication connection, read and written with libpq."""

    def __init__(self, server: Server, conn) -> None:
        global _libpq
        if _libpq is None:
            _libpq = _load_libpq()
        self.lib = _libpq
        self.server = server
        self.conn = conn
        self.pgconn = ctypes.c_void_p(conn.pgconn_ptr)
        self.sock = conn.fileno()
        self._buf = ctypes.c_void_p()
        self._buf_ref = ctypes.byref(self._buf)

    def _lost(self, doing: str) -> ConnectionLostError:
        msg = (self.lib.PQerrorMessage(self.pgconn) or b"").decode("utf-8", "replace")
        msg = redact(" ".join(msg.split()), self.server.password) or "connection closed"
        return ConnectionLostError(f"{self.server.safe}: {doing}: {msg}")

    def read(self, timeout: float) -> bytes | None:
        """The next message, or None if none arrived within ``timeout`` seconds."""
        lib, pgconn, buf, ref = self.lib, self.pgconn, self._buf, self._buf_ref
        n = lib.PQgetCopyData(pgconn, ref, 1)  # mostly a message is in libpq's buffer already
        deadline = None
        while n <= 0:
            if n == -1:
                raise ConnectionLostError(f"{self.server.safe}: the server ended the replication stream")
            if n < -1:
                raise self._lost("reading the replication stream")
            if deadline is None:
                deadline = time.monotonic() + timeout
            r, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
            if not r:
                return None
            if not lib.PQconsumeInput(pgconn):
                raise self._lost("reading the replication stream")
            n = lib.PQgetCopyData(pgconn, ref, 1)
        data = ctypes.string_at(buf, n)
        lib.PQfreemem(buf)
        return data

    def send_status(self, write_lsn: int, flush_lsn: int, reply: bool = False) -> None:
        data = encode_status(write_lsn, flush_lsn, flush_lsn, int(time.time() * 1_000_000), reply)
        if self.lib.PQputCopyData(self.pgconn, data, len(data)) != 1 or self.lib.PQflush(self.pgconn) == -1:
            raise self._lost("sending the standby status")

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass
