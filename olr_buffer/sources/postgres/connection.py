"""Connections to the server: checks with clear errors, the slot, and the raw replication I/O.

psycopg2's ``LogicalReplicationConnection`` opens the replication connection (and
authenticates, and runs ``CREATE_REPLICATION_SLOT``); the replication stream itself is
read and written here, so that the stream's framing and every flush position we confirm
are ours: psycopg2's own ``read_message`` would move the confirmed position to a
keepalive's position whenever the last message's LSN is at or below what we confirmed,
which streamed transactions (whose message LSNs go backwards, relation messages carrying
0/0) make unsafe. Two ways, the same messages:

* :class:`SocketStream`, on a plain connection (unix socket, or TCP without SSL or GSSAPI
  encryption): ``START_REPLICATION`` is sent on the socket by us, not by libpq, and the
  CopyBoth stream is read from the socket in large chunks and split into its CopyData
  messages in Python. libpq has nothing buffered at the switch: the connection is idle
  (its last command ended with ReadyForQuery, after which the server sends nothing
  unasked), and libpq never reads from it again (closing it only sends Terminate).
* :class:`ReplicationStream`, on an encrypted connection: psycopg2 sends
  ``START_REPLICATION``, and each message is read through libpq (``PQgetCopyData``).
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import select
import socket
import struct
import time
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from ...errors import OlrBufferError
from .compiled import TUPLESCAN
from .protocol import PgoutputError, encode_status


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


# The walsender (and the copy's SELECT) send values in the text form of the session's
# settings, which ALTER DATABASE/ROLE ... SET and postgresql.conf may change. Every
# connection fixes them as PostgreSQL's own subscriber does on its replication connection
# (datestyle, intervalstyle, extra_float_digits, an empty search_path), with a fixed time
# zone, bytea's hex form and UTF-8: docs/postgresql.md, "Type mapping".
SESSION_SETTINGS = (
    ("datestyle", "ISO"),
    ("intervalstyle", "postgres"),
    ("extra_float_digits", "3"),
    ("TimeZone", "UTC"),
    ("bytea_output", "hex"),
    ("search_path", ""),
)
CLIENT_ENCODING = "UTF8"


def session_options(uri: str) -> str:
    """libpq's ``options`` for a connection: the user's (in the URI, else ``PGOPTIONS``),
    then :data:`SESSION_SETTINGS`, which win (the server applies them in order)."""
    try:
        theirs = psycopg2.extensions.parse_dsn(uri).get("options")
    except psycopg2.ProgrammingError:  # psycopg2.connect says what is wrong with it
        theirs = None
    if theirs is None:
        theirs = os.environ.get("PGOPTIONS", "")
    ours = " ".join(f"-c {name}={value}" for name, value in SESSION_SETTINGS)
    return f"{theirs} {ours}".strip()


class Server:
    """Opens connections to one database; every error it raises names the cause without the password."""

    def __init__(self, uri: str, connect_timeout: int = 10) -> None:
        self.uri = uri
        self.password = uri_password(uri)
        self.safe = safe_uri(uri)
        self.connect_timeout = connect_timeout
        self.options = session_options(uri)

    def connect(self, replication: bool = False):
        factory = psycopg2.extras.LogicalReplicationConnection if replication else None
        try:
            conn = psycopg2.connect(
                self.uri,
                connection_factory=factory,
                connect_timeout=self.connect_timeout,
                application_name="olr-buffer",
                options=self.options,
                client_encoding=CLIENT_ENCODING,
            )
        except psycopg2.OperationalError as exc:
            text = _one_line(exc, self.password)
            if "must be superuser or replication role" in text or "permission denied to start WAL sender" in text:
                raise PostgresError(
                    f"{self.safe}: the role may not open a replication connection ({text})",
                    hint="grant it: ALTER ROLE <name> REPLICATION",
                ) from None
            if "no password supplied" in text:
                raise PostgresError(
                    f"{self.safe}: the server asks for a password: {text}",
                    hint="give it in PGPASSWORD or a ~/.pgpass line (PGPASSFILE), not in the URI, "
                    "where a process listing shows it",
                ) from None
            if "does not exist" in text or "password authentication failed" in text or "no pg_hba.conf" in text:
                raise PostgresError(
                    f"{self.safe}: {text}",
                    hint="check the user, password (PGPASSWORD, ~/.pgpass) and database of the URI",
                ) from None
            raise ConnectionLostError(
                f"{self.safe}: cannot reach the server: {text}",
                hint="check that the server runs and the URI's host and port",
            ) from None
        except psycopg2.Error as exc:
            raise self.error(exc, "connecting") from None
        if not replication:
            conn.autocommit = True
        return conn

    def error(self, exc: BaseException, doing: str, *conns) -> PostgresError:
        """A psycopg2 error as ours: :class:`ConnectionLostError` (the reader retries) when
        it is the loss of a connection (:func:`lost`; ``conns``: those the failed call
        used, still open), else :class:`PostgresError`, which ends the run."""
        cls = ConnectionLostError if lost(exc, *conns) else PostgresError
        return cls(f"{self.safe}: {doing}: {_one_line(exc, self.password)}")


_CONNECTION_OK = 0  # libpq's PQstatus() of a usable connection
# Errors taken as transient, as before: psycopg2's OperationalError (SQLSTATE class 08
# connection exception, 53 insufficient resources, 57 the server shutting down, 58, ...;
# libpq's own "server closed the connection" once it has marked the connection bad), its
# InterfaceError ("connection already closed"), and a slot still held by the server process
# of a connection that just died (55006).
_TRANSIENT = (psycopg2.OperationalError, psycopg2.InterfaceError, psycopg2.errors.ObjectInUse)
# ... but for the server's definite answers among those: a slot it invalidated ("can no
# longer get changes from replication slot", 55000 object_not_in_prerequisite_state) and
# WAL it removed ("requested WAL segment ... has already been removed", 58P01
# undefined_file): every retry would end the same way
_DEFINITE = {"55000", "58P01"}


def broken(conn) -> bool:
    """Whether ``conn`` is gone: closed, marked bad by libpq, or its socket at its end or
    failed. libpq notices the end of a connection late at times: a query sent to a server
    that died while the connection was idle fails (the send finds the socket closed) with
    the connection still marked good, and psycopg2 raises a plain ``DatabaseError``
    ("server closed the connection unexpectedly"); the socket tells."""
    try:
        if conn.closed or conn.info.status != _CONNECTION_OK:
            return True
        fd = conn.fileno()
    except psycopg2.Error:
        return True
    try:
        if not select.select([fd], [], [], 0)[0]:
            return False  # nothing to read: the server has not gone
        with socket.socket(fileno=os.dup(fd)) as sock:
            return not sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)  # b"": the end
    except BlockingIOError:
        return False
    except (OSError, ValueError):  # reset, or no socket any more
        return True


def lost(exc: BaseException, *conns) -> bool:
    """Whether a psycopg2 error is the loss of the connection (a new one may well work),
    rather than a definite answer of the server (a SQLSTATE of class 42, a missing object, a
    right not granted: every retry would end the same way). Lost: one of
    ``conns`` is :func:`broken`; an error of the server that ends the session or is
    transient (:data:`_TRANSIENT`); or an error without a SQLSTATE that libpq raised as a
    plain ``DatabaseError``: the server sends a SQLSTATE with each of its errors, libpq's own
    are about the connection."""
    if any(broken(c) for c in conns if c is not None):
        return True
    if getattr(exc, "pgcode", None) in _DEFINITE:
        return False
    if isinstance(exc, _TRANSIENT):
        return True
    return type(exc) is psycopg2.DatabaseError and getattr(exc, "pgcode", None) is None


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
            "SELECT plugin, active, active_pid, database = current_database(), confirmed_flush_lsn::text, "
            "wal_status FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        )
        row = cur.fetchone()
    if row is None:
        return {"exists": False}
    plugin, active, pid, same_db, confirmed, wal_status = row
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
    if wal_status == "lost":
        raise PostgresError(
            f"{server.safe}: replication slot {slot!r} was invalidated by the server: it removed WAL the slot "
            "still needed (max_slot_wal_keep_size), and the changes in it are lost to this slot",
            hint="drop the slot (olr-buffer drop-slot), then start a new queue and changefeed with an initial "
            "copy; raise max_slot_wal_keep_size, or keep the service running, so that it does not happen again",
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
    if hasattr(lib, "PQgssEncInUse"):  # libpq 12+
        lib.PQgssEncInUse.argtypes = [ctypes.c_void_p]
        lib.PQgssEncInUse.restype = ctypes.c_int
    return lib


def libpq() -> ctypes.CDLL:
    global _libpq
    if _libpq is None:
        _libpq = _load_libpq()
    return _libpq


def encrypted(conn) -> bool:
    """Whether the connection's traffic is encrypted by libpq (SSL or GSSAPI): then only
    libpq can read and write it."""
    if conn.info.ssl_in_use:
        return True
    lib = libpq()
    return bool(hasattr(lib, "PQgssEncInUse") and lib.PQgssEncInUse(ctypes.c_void_p(conn.pgconn_ptr)))


_libpq: ctypes.CDLL | None = None


class ReplicationStream:
    """The CopyData messages of a started replication connection, read and written with libpq."""

    def __init__(self, server: Server, conn) -> None:
        self.lib = libpq()
        self.server = server
        self.conn = conn
        self.pgconn = ctypes.c_void_p(conn.pgconn_ptr)
        self.sock = conn.fileno()
        self._buf = ctypes.c_void_p()
        self._buf_ref = ctypes.byref(self._buf)
        self._pending = 0  # an end (-1) or error (-2) of PQgetCopyData met by read_batch

    def _lost(self, doing: str) -> ConnectionLostError:
        msg = (self.lib.PQerrorMessage(self.pgconn) or b"").decode("utf-8", "replace")
        msg = redact(" ".join(msg.split()), self.server.password) or "connection closed"
        return ConnectionLostError(f"{self.server.safe}: {doing}: {msg}")

    def read(self, timeout: float) -> bytes | None:
        """The next message, or None if none arrived within ``timeout`` seconds."""
        lib, pgconn, buf, ref = self.lib, self.pgconn, self._buf, self._buf_ref
        if self._pending:
            n, self._pending = self._pending, 0
        else:
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

    def read_batch(self, timeout: float, most: int = 512) -> list[bytes]:
        """The next messages (those libpq holds already, up to ``most``); empty if none
        arrived within ``timeout`` seconds."""
        data = self.read(timeout)
        if data is None:
            return []
        batch = [data]
        lib, pgconn, buf, ref = self.lib, self.pgconn, self._buf, self._buf_ref
        string_at, free = ctypes.string_at, lib.PQfreemem
        while len(batch) < most:
            n = lib.PQgetCopyData(pgconn, ref, 1)
            if n <= 0:
                self._pending = n  # an end or error: raised by the next read
                break
            batch.append(string_at(buf, n))
            free(buf)
        return batch

    def send_status(self, write_lsn: int, flush_lsn: int, reply: bool = False) -> None:
        data = encode_status(write_lsn, flush_lsn, flush_lsn, int(time.time() * 1_000_000), reply)
        if self.lib.PQputCopyData(self.pgconn, data, len(data)) != 1 or self.lib.PQflush(self.pgconn) == -1:
            raise self._lost("sending the standby status")

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass


# -- the stream read from the socket ---------------------------------------------------------

_HEAD = struct.Struct("!Bi").unpack_from  # a backend message's type and length (which counts itself)
_LENGTH = struct.Struct("!i").pack
_SKIPPED = frozenset(b"NSA")  # NoticeResponse, ParameterStatus, NotificationResponse: nothing to do
CHUNK = 127 * 1024  # bytes asked of the socket at a time: a buffer malloc takes from its heap (a larger one is
# mmap()ed and faulted in at each read: 2.5x the CPU per byte; unix sockets hold 208 KiB by default)
MOST = 16 << 20  # bytes asked at most at a time, for a long message
SEND_TIMEOUT = 30.0  # seconds a status update may wait for room in the socket's buffer


def python_split_copydata(buf: bytes, pos: int, out: list[bytes]) -> int:
    """The bodies of the whole CopyData messages (``d``, a length of at least 5: a body of
    a byte or more) of ``buf`` from ``pos``, appended to ``out``; where it stopped: the
    end, or a message of another kind, length, or not whole yet (:meth:`SocketStream._split`
    takes it from there). The reference of the compiled ``tuplescan.split_copydata``."""
    end = len(buf)
    append = out.append
    while end - pos >= 5 and buf[pos] == 0x64:  # d
        _, n = _HEAD(buf, pos)
        stop = pos + 1 + n
        if n < 5 or stop > end:
            break
        append(buf[pos + 5 : stop])
        pos = stop
    return pos


# the split of the common case: compiled where it is built
_split_copydata = TUPLESCAN.split_copydata if TUPLESCAN is not None else python_split_copydata


def _error_fields(body: bytes) -> dict[str, str]:
    """The fields of an ErrorResponse or NoticeResponse: code letter -> text."""
    fields = {}
    for part in body.split(b"\0"):
        if part:
            fields[part[:1].decode("ascii", "replace")] = part[1:].decode("utf-8", "replace")
    return fields


def _error_text(fields: dict[str, str]) -> str:
    """An ErrorResponse as libpq words it (severity, message, detail, hint)."""
    text = f"{fields.get('S', 'ERROR')}:  {fields.get('M', 'unknown error')}"
    if "D" in fields:
        text += f"\nDETAIL:  {fields['D']}"
    if "H" in fields:
        text += f"\nHINT:  {fields['H']}"
    return text


def _is_lost(sqlstate: str | None) -> bool:
    """Whether psycopg2 would raise this SQLSTATE as an error that :meth:`Server.error`
    takes as transient (the server going away, a slot still held): the same classes."""
    try:
        cls = psycopg2.errors.lookup(sqlstate or "")
    except KeyError:
        return False
    return issubclass(cls, (psycopg2.OperationalError, psycopg2.InterfaceError))


class SocketStream:
    """The CopyData messages of a replication connection, read from its socket in large
    chunks (see the module doc); only for a connection that is not encrypted.

    :meth:`start` sends ``START_REPLICATION`` and reads the answer (CopyBothResponse, or an
    ErrorResponse raised as psycopg2's would be). Then every backend message is framed as
    type (1 byte) and length (Int32, counting itself): CopyData (``d``) carries a message
    of the stream; ErrorResponse ends it (the server going away: :class:`ConnectionLostError`
    with the server's words), as do CopyDone, CommandComplete (``COPY 0``: a walsender
    that shuts down sends it) and the socket's end; notices and parameter
    changes are skipped; anything else is a protocol error. Messages received before an
    error are returned first, the error is raised by the next read."""

    def __init__(self, server: Server, conn) -> None:
        self.server = server
        self.conn = conn
        self.sock = socket.socket(fileno=os.dup(conn.fileno()))  # non-blocking, as libpq left it
        self._rest = b""  # bytes received after the last whole message
        self._chunks: list[bytes] = []  # received while a message longer than one chunk is incomplete
        self._have = 0  # bytes in _rest and _chunks
        self._need = 5  # bytes needed before the next message can be complete
        self._error: OlrBufferError | None = None  # the stream's end, raised at the next read

    # -- errors ------------------------------------------------------------------------

    def _lost(self, what: str) -> ConnectionLostError:
        return ConnectionLostError(f"{self.server.safe}: {redact(' '.join(what.split()), self.server.password)}")

    def _server_error(self, body: bytes, doing: str) -> PostgresError:
        fields = _error_fields(body)
        text = _one_line(Exception(_error_text(fields)), self.server.password)
        cls = ConnectionLostError if _is_lost(fields.get("C")) else PostgresError
        return cls(f"{self.server.safe}: {doing}: {text}")

    # -- start ---------------------------------------------------------------------------

    def start(self, command: str, encoding: str = "utf-8", timeout: float = 120.0) -> None:
        """Send ``command`` (START_REPLICATION) as a simple query and wait for CopyBoth."""
        body = command.encode(encoding) + b"\0"
        self._send(b"Q" + _LENGTH(len(body) + 4) + body)
        deadline = time.monotonic() + timeout
        while True:
            while self._have < self._need:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._lost("START_REPLICATION: no answer from the server")
                self._receive(left)
            buf = self._take()
            kind, n = _HEAD(buf, 0)
            kind = bytes([kind])
            if n < 4:
                raise self._lost(f"START_REPLICATION: invalid message length {n} from the server")
            if len(buf) < 1 + n:
                self._keep(buf, 1 + n)
                continue
            body, self._rest = buf[5 : 1 + n], buf[1 + n :]
            self._have, self._need = len(self._rest), 5
            if kind == b"W":  # CopyBothResponse: the stream follows
                return
            if kind == b"E":
                raise self._server_error(body, "replication")
            if kind not in (b"N", b"S"):  # a notice, a parameter status
                raise self._lost(f"START_REPLICATION: unexpected message type {kind!r} from the server")

    # -- socket I/O ----------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        deadline = None
        view = memoryview(data)
        while view:
            try:
                sent = self.sock.send(view, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
                view = view[sent:]
                continue
            except BlockingIOError:
                pass
            except OSError as exc:
                raise self._lost(f"sending to the server: {exc.strerror or exc}") from None
            if deadline is None:
                deadline = time.monotonic() + SEND_TIMEOUT
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [self.sock], [], left)[1]:
                raise self._lost("sending to the server: the server does not read")

    def _receive(self, timeout: float) -> bool:
        """Receive what the socket holds (at least ``_need`` bytes asked for); False if
        nothing came within ``timeout`` seconds."""
        size = min(max(CHUNK, self._need - self._have), MOST)
        try:
            data = self.sock.recv(size, socket.MSG_DONTWAIT)
        except BlockingIOError:
            if timeout <= 0 or not select.select([self.sock], [], [], timeout)[0]:
                return False
            try:
                data = self.sock.recv(size, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return False
            except OSError as exc:
                raise self._lost(f"reading the replication stream: {exc.strerror or exc}") from None
        except OSError as exc:
            raise self._lost(f"reading the replication stream: {exc.strerror or exc}") from None
        if not data:
            raise self._lost("reading the replication stream: the server closed the connection")
        if self._chunks or self._rest:
            if not self._chunks:
                self._chunks.append(self._rest)
                self._rest = b""
            self._chunks.append(data)
        else:
            self._rest = data
        self._have += len(data)
        return True

    def _take(self) -> bytes:
        """Every byte received and not yet split into messages, as one bytes object."""
        if self._chunks:
            self._rest = b"".join(self._chunks)
            self._chunks = []
        return self._rest

    def _keep(self, buf: bytes, need: int) -> None:
        self._rest, self._have, self._need = buf, len(buf), need

    # -- the stream ------------------------------------------------------------------------

    def read_batch(self, timeout: float) -> list[bytes]:
        """The CopyData messages received so far (none of them empty: an empty one is a
        :class:`PgoutputError`), at least one unless none came within ``timeout`` seconds
        (then the list is empty)."""
        if self._error is not None:
            raise self._error
        deadline = None
        while True:
            while self._have < self._need:
                if not self._receive(0):
                    if timeout <= 0:
                        return []
                    if deadline is None:
                        deadline = time.monotonic() + timeout
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._receive(left):
                        return []
            out = self._split()
            if out:
                return out
            # nothing whole yet: a message longer than what was received, read on

    def _split(self) -> list[bytes]:
        """The CopyData messages of what was received; the rest is kept. An error (the
        stream's end) is raised now if no message came before it, else by the next read."""
        buf = self._take()
        out: list[bytes] = []
        append = out.append
        head = _HEAD
        pos, end = _split_copydata(buf, 0, out), len(buf)
        while end - pos >= 5:
            kind, n = head(buf, pos)
            stop = pos + 1 + n
            if n < 5:
                if n < 4:
                    self._error = self._lost(f"reading the replication stream: invalid message length {n}")
                    break
                if kind == 0x64:  # a CopyData without a message
                    self._error = PgoutputError("empty replication message")
                    break
            if stop > end:
                self._keep(buf[pos:], stop - pos)
                break
            if kind == 0x64:  # d: CopyData
                append(buf[pos + 5 : stop])
            elif kind not in _SKIPPED:
                self._error = self._end(kind, buf[pos + 5 : stop])
                break
            pos = stop
        else:
            self._keep(buf[pos:] if pos else buf, 5)
        if self._error is not None:
            self._rest, self._chunks, self._have, self._need = b"", [], 0, 5
            if not out:
                raise self._error
        return out

    def _end(self, kind: int, body: bytes) -> PostgresError:
        if kind == 0x45:  # E: ErrorResponse (the server shutting down, the walsender failing)
            err = self._server_error(body, "the server ended the replication stream")
            if (_error_fields(body).get("C") or "").startswith("42"):
                # an object gone or a right taken (the publication dropped, a table of it, the
                # role's REPLICATION): every reconnect would end the same way, after the
                # server decoded again from the slot's position
                return PostgresError(
                    str(err),
                    hint="fix it on the server (CREATE PUBLICATION ..., GRANT ...), "
                    "then start the service again: the slot keeps its position",
                )
            return ConnectionLostError(str(err))
        if kind == 0x63 or kind == 0x43:  # c: CopyDone; C: CommandComplete (a walsender shutting down sends it)
            return self._lost("the server ended the replication stream")
        return self._lost(f"reading the replication stream: unexpected message type {bytes([kind])!r}")

    def send_status(self, write_lsn: int, flush_lsn: int, reply: bool = False) -> None:
        data = encode_status(write_lsn, flush_lsn, flush_lsn, int(time.time() * 1_000_000), reply)
        self._send(b"d" + _LENGTH(len(data) + 4) + data)

    def close(self) -> None:
        try:
            self.sock.close()  # our duplicate of the descriptor; libpq's closes with the connection
        except OSError:
            pass
        try:
            self.conn.close()
        except Exception:
            pass
