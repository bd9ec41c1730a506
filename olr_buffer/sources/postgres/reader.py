"""The PostgreSQL reader: the replication stream into the queue, exactly once across restarts.

One thread (queue "thread" 1) reads the slot's pgoutput stream and appends its changes
as blocks (:class:`~olr_buffer.changes.BlockBuilder`), each with the reader's
state (:class:`~.state.PostgresState`) in the same LMDB write. Rows go to the group of their
top-level transaction, in the order the server sends them, whatever the interleaving of
streamed transactions:

* ``BEGIN`` when a transaction is first seen (B, or the first S), ``COMMIT`` (key: commit
  LSN) at C or Stream Commit, ``ROLLBACK`` at Stream Abort of the top-level xid;
* Stream Abort of a subtransaction: a ``CUT`` record drops the transaction's rows from
  the first one of that subxid on, which includes subtransactions first seen after it
  (PostgreSQL's own subscriber rule); a subxid never seen does nothing.
* Relation messages update a per-transaction overlay of the relation cache, merged at
  commit, dropped with the transaction or the subtransaction that carried them.
* Types: each relation (its columns, their types from the Relation and TypeInfo messages,
  nullability and key from the catalog) has a schema document (``Table.version``,
  ``Table.document``). Every row names its table's version; the first row of each table
  (and version) in a transaction carries the document too, and so does the next one when
  a subtransaction abort cut that row: whatever the dispatcher publishes of a transaction,
  the document of every version its rows name comes with them, in order.

Exact restart. The state stored with every block holds the last commit LSN appended,
the transactions with records in the queue and no end yet ("open"), and the streamed
transactions committed but not yet known to be published (xid -> commit LSN). After a
reconnect or a restart the server sends again every transaction it was not told was
done, in-progress ones from their first chunk: the open ones get a ``ROLLBACK`` first
(their partial records are discarded), a transaction whose commit LSN is at or below
the last appended commit is skipped (B's final LSN), or rolled back at its commit (a
streamed one), and a streamed transaction whose xid is among the appended commits is
skipped whole. The slot's confirmed position (flush LSN) moves only to the end LSN of
commits the changefeed has published (their commit LSN after a restart), or to the
keepalive's position when nothing is in flight.
"""

from __future__ import annotations

import logging
import struct
import time
from collections import deque
from typing import Any

import psycopg2

from ...changes import (
    BEGIN,
    COMMIT,
    COPY_ROW,
    CUT,
    DELETE,
    INSERT,
    ROLLBACK,
    TRUNCATE,
    UPDATE,
    SchemaColumn,
    cut_payload,
    end_payload,
    row_head,
    row_payload,
    schema_document,
)
from ...txbuffer import BlockAppender
from ..stream import StreamReader, StreamStopped
from . import protocol as p
from .compiled import INSERT_STEP
from .connection import (
    ConnectionLostError,
    PostgresError,
    ReplicationStream,
    Server,
    SlotInUseError,
    SocketStream,
    check_setup,
    encrypted,
    quote_ident,
    quote_literal,
)
from .rows import Table
from .state import STATE_KEY, PostgresState
from .types import column_type, is_builtin

log = logging.getLogger("olr_buffer.postgres")

THREAD = 1
COPY_SEQUENCE = -1  # commit keys of the initial copy: (consistent point, 1, -1, n) sort before every change
LARGE_TRANSACTION_ROWS = 100_000  # the commit of a transaction this large is logged
PAUSE = 0.01  # seconds the stream may pause before the rows received are appended (see _stream_loop)
# an XLogData frame of an Insert: data start, WAL end, (send time, 'I'), [xid in a stream block,]
# relation OID, tuple tag
_INSERT_FRAME = struct.Struct("!QQ9xIB").unpack_from
_STREAM_INSERT_FRAME = struct.Struct("!QQ9xIIB").unpack_from
HEAD_13, HEAD_14, HEAD_15 = (row_head(INSERT, n) for n in (13, 14, 15))  # an insert's, by its fields
_DATA = frozenset((p.Insert, p.Update, p.Delete, p.Truncate, p.Relation))  # messages of a transaction


class _Txn:
    """A top-level transaction the reader is receiving."""

    __slots__ = ("xid", "top", "rows", "subs", "rels", "skip", "streamed", "carried")

    def __init__(self, xid: str, skip: bool = False, streamed: bool = False) -> None:
        self.xid = xid
        self.top = int(xid) if xid.isdigit() else None  # the xid as data messages carry it
        self.rows = 0  # rows appended so far: the ordinals CUT records name
        self.subs: dict[int, int] = {}  # subxid -> ordinal of the first row at or after it was first seen
        self.rels: dict[int, tuple[Table, int]] = {}  # relation OID -> (table, subxid that carried it)
        self.skip = skip
        self.streamed = streamed
        # relation OID -> (schema version, ordinal of the row that carried its document)
        self.carried: dict[int, tuple[str, int]] = {}

    def schema_fields(self, table: Table) -> list:
        """What a row of ``table`` appended next ends with: its schema version, and the
        document too if no row of this transaction left by cuts carried it."""
        version = table.version
        if version is None:
            return []
        if self.carried.get(table.oid, _NOT_CARRIED)[0] == version:
            return [version]
        self.carried[table.oid] = (version, self.rows)
        return [version, table.document]


_NOT_CARRIED = (None, -1)


class PostgresReader(StreamReader):
    """Reads one slot into the queue; see the module doc. ``state``: the resume state
    stored with the last block appended (None: a new queue). ``prepare`` checks the set-up
    (errors are raised there, at start); ``run`` (in a thread, or in a child process:
    :mod:`.process`) copies and streams."""

    def __init__(
        self,
        queue: BlockAppender,
        uri: str,
        *,
        state: PostgresState | None = None,
        slot: str = "olr_buffer",
        publication: str = "olr_buffer",
        streaming: bool = True,
        initial_copy: bool = True,
        slot_wait: float = 5.0,
        socket_reads: bool = True,
        **stream: Any,
    ) -> None:
        """``stream``: :class:`~olr_buffer.sources.stream.StreamReader`'s (``published``:
        the last commit the changefeed made durable, whose ``scn`` is its commit LSN)."""
        super().__init__(queue, thread=THREAD, **stream)
        self.server = Server(uri)
        self.slot = slot
        self.publication = publication
        self.streaming = streaming
        self.initial_copy = initial_copy
        self.slot_wait = slot_wait
        self.socket_reads = socket_reads  # read the stream from the socket when not encrypted (else libpq)
        self.reads = ""  # how the stream is read: "socket" or "libpq"
        self.source_id: str | None = None
        # state stored with every block
        self.last_commit = -1
        self.committed: dict[str, int] = {}  # streamed transactions appended, not yet published: xid -> commit LSN
        self.copy = "none"
        self.consistent_point = 0
        self.confirmed = 0
        self.server_lsn = 0
        self.cuts = 0  # subtransaction aborts that dropped rows already appended
        # in memory
        self.txns: dict[str, _Txn] = {}  # open, by top-level xid
        self._ends: deque[tuple[int, int]] = deque()  # (commit LSN, end LSN) of commits appended, not yet published
        self._current: _Txn | None = None  # B..C
        self._stream: _Txn | None = None  # S..E
        self.tables: dict[int, Table] = {}  # committed relation cache
        self._last_seen: dict[int, Table] = {}
        self._keys: dict[int, tuple[str, ...] | None] = {}
        self._not_null: dict[int, frozenset[str]] = {}
        self._type_names: dict[int, tuple[str, str]] = {}  # from TypeInfo messages: OID -> (schema, name)
        self._sql = None
        if state is not None:
            self._restore(state)

    # -- state ---------------------------------------------------------------------------

    def _restore(self, st: PostgresState) -> None:
        if st.slot and st.slot != self.slot:
            raise PostgresError(
                f"the queue was filled from replication slot {st.slot!r}, not {self.slot!r}",
                hint=f"run with --slot {st.slot}, or use a new queue and changefeed directory",
            )
        self.last_commit = st.last_commit
        self.committed = dict(st.committed)
        self.copy = st.copy
        self.consistent_point = st.consistent_point
        self.confirmed = st.confirmed
        self.server_lsn = st.server_lsn
        self.cuts = st.cuts
        for xid in st.open:
            self.txns[xid] = _Txn(xid)

    def state(self) -> PostgresState:
        return PostgresState(
            slot=self.slot,
            publication=self.publication,
            source=self.server.safe,
            source_id=self.source_id,
            last_commit=self.last_commit,
            committed=self.committed,
            open=[x for x, t in self.txns.items() if not t.skip],
            streaming=sum(1 for t in self.txns.values() if t.streamed and not t.skip),
            copy=self.copy,
            consistent_point=self.consistent_point,
            confirmed=self.confirmed,
            server_lsn=self.server_lsn,
            cuts=self.cuts,
            written=time.time(),
        )

    state_key = STATE_KEY

    def _add(
        self, code: int, scn: int, xid: str, payload: list, seq: int = 0, line: int = 0, may_close: bool = True
    ) -> None:
        """Add a record; a full block is appended, with the state as it is now: the
        callers change the state before adding the record that goes with the change."""
        self._add_record(code, scn, xid, seq, line, payload, may_close)

    # -- set-up ----------------------------------------------------------------------------

    def prepare(self) -> None:
        """Check the set-up and identify the server; every problem is a one-line error."""
        conn = self.server.connect()
        try:
            # a slot held by the server process of our own killed predecessor is freed
            # when the server notices; a consumer that keeps it is an error
            # (a standby waits as long as it takes: the active service it took over from
            # may hold the slot until the server notices that it is gone)
            deadline = time.monotonic() + self.slot_wait
            said = False
            while True:
                try:
                    slot = check_setup(self.server, conn, self.slot, self.publication)
                    break
                except psycopg2.Error as exc:
                    raise self.server.error(exc, "checking the set-up", conn) from None
                except SlotInUseError as exc:
                    if time.monotonic() >= deadline or self.stop.is_set():
                        raise
                    if not said and self.slot_wait > 5.0:
                        log.warning("%s; waiting for it to be free", exc)
                        said = True
                    self.stop.wait(0.5)
        finally:
            conn.close()
        if not slot["exists"] and self.copy in ("done", "skipped"):
            raise PostgresError(
                f"{self.server.safe}: replication slot {self.slot!r} is gone, but this queue was filled from it",
                hint="changes made since may be lost: start again with a new queue and changefeed directory",
            )
        repl = self.server.connect(replication=True)
        try:
            with repl.cursor() as cur:
                cur.execute("IDENTIFY_SYSTEM")
                system_id = cur.fetchone()[0]
        except psycopg2.Error as exc:
            raise self.server.error(exc, "IDENTIFY_SYSTEM", repl) from None
        finally:
            repl.close()
        self.source_id = f"postgresql:{system_id}:{self.slot}"
        log.debug("PostgreSQL insert step: %s", INSERT_STEP)

    # -- the thread --------------------------------------------------------------------------

    # (run: copy if needed, then stream until ``stop``; reconnect with a capped backoff)
    connection_lost = (ConnectionLostError,)

    def _reconnecting(self, exc: BaseException, delay: float) -> None:
        self._close_sql()
        log.warning("%s; reconnecting in %.0f s", exc, delay)

    def _finish(self) -> None:
        self._append()  # what it holds, and the state as of the stop (confirmed LSN, lag) for `status`
        self._close_sql()

    def _session(self) -> None:
        repl = self.server.connect(replication=True)
        stream = None
        try:
            self._discard_open()
            if self.copy in ("none", "running"):
                self._create_slot_and_copy(repl)
            stream = self._start(repl)
            self._stream_loop(stream)
        except psycopg2.Error as exc:
            # the replication connection, or the one of the catalog look-ups (the copy's
            # are classified in _copy, before it is closed)
            raise self.server.error(exc, "replication", repl, self._sql) from None
        finally:
            self._append_held()
            (stream.close() if stream else repl.close())

    def _discard_open(self) -> None:
        """The server sends again every transaction not confirmed: roll back the partial
        ones held from before."""
        self._current = self._stream = None
        dropped = [t.xid for t in self.txns.values() if not t.skip]
        self.txns.clear()
        if dropped:
            for xid in dropped:
                self._add(ROLLBACK, 0, xid, end_payload(None))
            self._append()
            log.info("discarded %d partial transaction(s) held from before the reconnect", len(dropped))

    # -- slot and initial copy -------------------------------------------------------------

    def _sql_conn(self):
        if self._sql is None or self._sql.closed:
            self._sql = self.server.connect()
        return self._sql

    def _close_sql(self) -> None:
        if self._sql is not None:
            try:
                self._sql.close()
            except Exception:
                pass
            self._sql = None

    def _create_slot_and_copy(self, repl) -> None:
        sql = self._sql_conn()
        with sql.cursor() as cur:
            cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
            row = cur.fetchone()
            if row is not None:
                if self.copy == "running":
                    log.warning("an initial copy was interrupted: dropping slot %s and copying again", self.slot)
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
                else:
                    # a slot that exists already (created by the user): no copy
                    self.copy = "skipped"
                    self._append()
                    return
        copy = self.initial_copy
        self.copy = "running"
        self._append()  # from here a kill drops the slot at the next start
        mode = "EXPORT_SNAPSHOT" if copy else "NOEXPORT_SNAPSHOT"
        with repl.cursor() as cur:
            cur.execute(f"CREATE_REPLICATION_SLOT {quote_ident(self.slot)} LOGICAL pgoutput {mode}")
            _, point, snapshot, _ = cur.fetchone()
        self.consistent_point = p.parse_lsn(point)
        log.info("created replication slot %s at %s", self.slot, point)
        if not copy:
            self.copy = "skipped"
            self._append()
            return
        self._copy(snapshot)

    def _copy(self, snapshot: str) -> None:
        conn = self.server.connect()
        conn.autocommit = False
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        xids = []
        try:
            with conn.cursor() as cur:
                cur.execute(f"SET TRANSACTION SNAPSHOT {quote_literal(snapshot)}")
                # PostgreSQL 15+ publications may have a column list and a row filter per
                # table: the copy takes what the stream would send, as PostgreSQL's own
                # table synchronization does (the listed columns, WHERE the filter)
                filters = "t.attnames::text[], t.rowfilter" if conn.server_version >= 150000 else "NULL, NULL"
                cur.execute(
                    f"SELECT c.oid, n.nspname, c.relname, {filters} FROM pg_publication_tables t "
                    "JOIN pg_namespace n ON n.nspname = t.schemaname "
                    "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename "
                    "WHERE t.pubname = %s ORDER BY 2, 3",
                    (self.publication,),
                )
                tables = cur.fetchall()
            for oid, schema, name, attnames, rowfilter in tables:
                if self.stop.is_set():
                    raise StreamStopped()  # the copy starts again from a new slot next time
                xids.append(self._copy_table(conn, oid, schema, name, attnames, rowfilter))
            conn.rollback()
        except psycopg2.Error as exc:
            raise self.server.error(exc, "initial copy", conn) from None
        finally:
            conn.close()
        # every table's commit and the state "done" in one write: all of the copy or nothing
        for n, xid in enumerate(xids, 1):
            self._add(COMMIT, self.consistent_point, xid, end_payload(None), seq=COPY_SEQUENCE, line=n, may_close=False)
            self.txns.pop(xid, None)
        self.builder.heartbeat(self.consistent_point)
        self.copy = "done"
        self._append()
        log.info("initial copy: %d table(s) at %s", len(xids), p.lsn_text(self.consistent_point))

    def _copy_table(self, conn, oid: int, schema: str, name: str, attnames=None, rowfilter: str | None = None) -> str:
        """Copy one table as a transaction of ``op = 'r'`` rows. ``attnames`` (the
        publication's column list, or every column) and ``rowfilter`` (its WHERE
        expression) come from ``pg_publication_tables`` on PostgreSQL 15+."""
        with conn.cursor() as cur:
            cur.execute(
                "SELECT attname, atttypid, atttypmod FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                "AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
                (oid,),
            )
            listed = None if attnames is None else set(attnames)
            cols = tuple(p.Column(n, t, False, m) for n, t, m in cur.fetchall() if listed is None or n in listed)
        self._look_up_types([c.type_oid for c in cols], conn)
        table = self._table(oid, schema, name, "d", cols, conn)
        xid = f"copy-{oid}"
        self.txns[xid] = txn = _Txn(xid)
        self._add(BEGIN, 1, xid, end_payload(None))
        select = ", ".join(f"{quote_ident(c.name)}::text" for c in cols) or "NULL"
        target = f"{quote_ident(schema)}.{quote_ident(name)}"
        with conn.cursor(name=f"olr_copy_{oid}") as cur:
            cur.itersize = 5000
            where = f" WHERE ({rowfilter})" if rowfilter else ""
            cur.execute(f"SELECT {select} FROM ONLY {target}{where}")
            scn = self.consistent_point
            for row in cur:
                values = tuple(None if v is None else v.encode() for v in row)
                self._add(
                    COPY_ROW,
                    scn,
                    xid,
                    row_payload(None, schema, name, oid, table.rid(values), None, table.obj(values))
                    + txn.schema_fields(table),
                )
                txn.rows += 1
        log.info("initial copy of %s: %d row(s)", target, txn.rows)
        return xid

    # -- relations -------------------------------------------------------------------------

    def _key_names(self, oid: int, conn=None) -> tuple[str, ...] | None:
        if oid not in self._keys:
            with (conn or self._sql_conn()).cursor() as cur:
                cur.execute(
                    "SELECT array(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY k(attnum, ord) "
                    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.ord) "
                    "FROM pg_index i WHERE i.indrelid = %s AND (i.indisprimary OR i.indisreplident) "
                    "ORDER BY i.indisprimary DESC LIMIT 1",
                    (oid,),
                )
                row = cur.fetchone()
            self._keys[oid] = tuple(row[0]) if row else None
        return self._keys[oid]

    def _not_null_names(self, oid: int, conn=None) -> frozenset[str]:
        """The columns of relation ``oid`` that the catalog declares NOT NULL."""
        if oid not in self._not_null:
            with (conn or self._sql_conn()).cursor() as cur:
                cur.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND attnotnull "
                    "AND NOT attisdropped",
                    (oid,),
                )
                self._not_null[oid] = frozenset(n for (n,) in cur.fetchall())
        return self._not_null[oid]

    def _look_up_types(self, oids: list[int], conn) -> None:
        """The names of types that are not built in, from the catalog as TypeInfo messages
        give them (a domain: its base type's name), for the initial copy."""
        wanted = sorted({o for o in oids if not is_builtin(o) and o not in self._type_names})
        if not wanted:
            return
        with conn.cursor() as cur:
            cur.execute(
                "WITH RECURSIVE d(oid, base) AS (SELECT oid, oid FROM pg_type WHERE oid = ANY(%s) "
                "UNION ALL SELECT d.oid, t.typbasetype FROM d JOIN pg_type t ON t.oid = d.base WHERE t.typtype = 'd') "
                "SELECT d.oid, n.nspname, t.typname FROM d JOIN pg_type t ON t.oid = d.base "
                "JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.typtype <> 'd'",
                (wanted,),
            )
            for type_oid, nsp, typname in cur.fetchall():
                self._type_names[type_oid] = (nsp, typname)

    def _table(self, oid, schema, name, ident, cols, conn=None) -> Table:
        names = self._key_names(oid, conn)
        positions = {c.name: i for i, c in enumerate(cols)}
        key: tuple[int, ...] | None
        if names is not None and all(n in positions for n in names):
            key = tuple(positions[n] for n in names)
        elif names is None and ident in ("d", "i") and any(c.key for c in cols):
            key = tuple(i for i, c in enumerate(cols) if c.key)
        else:
            key = None
        not_null = self._not_null_names(oid, conn)
        columns = []
        for c in cols:
            type_name, spark = column_type(c.type_oid, c.type_mod, self._type_names)
            columns.append(SchemaColumn(c.name, type_name, c.name not in not_null, spark))
        version, document = schema_document(
            "postgresql", schema, name, columns, [cols[i].name for i in key] if key is not None else []
        )
        return Table(oid, schema, name, cols, key, version, document)

    def _relation(self, txn: _Txn | None, msg: p.Relation) -> None:
        seen = self._last_seen.get(msg.oid)
        if seen is not None and (seen.columns != msg.columns or (seen.schema, seen.name) != (msg.schema, msg.name)):
            self._keys.pop(msg.oid, None)  # the table changed: look its key up again
            self._not_null.pop(msg.oid, None)
        table = self._table(msg.oid, msg.schema, msg.name, msg.replica_identity, msg.columns)
        self._last_seen[msg.oid] = table
        if txn is None:
            self.tables[msg.oid] = table
        else:
            txn.rels[msg.oid] = (table, msg.xid if msg.xid is not None else -1)

    def _lookup(self, txn: _Txn, oid: int) -> Table:
        got = txn.rels.get(oid)
        if got is not None:
            return got[0]
        table = self.tables.get(oid) or self._last_seen.get(oid)
        if table is None:
            raise PostgresError(f"a change of relation OID {oid} arrived before its Relation message")
        return table

    # -- the stream ----------------------------------------------------------------------------

    def _start(self, repl) -> ReplicationStream | SocketStream:
        if self.streaming:
            opts = (
                f"proto_version '2', streaming 'on', publication_names {quote_literal(quote_ident(self.publication))}"
            )
        else:
            opts = f"proto_version '1', publication_names {quote_literal(quote_ident(self.publication))}"
        command = f"START_REPLICATION SLOT {quote_ident(self.slot)} LOGICAL 0/0 ({opts})"
        stream: ReplicationStream | SocketStream
        if self.socket_reads and not encrypted(repl):
            stream = SocketStream(self.server, repl)
            try:
                stream.start(command, psycopg2.extensions.encodings.get(repl.encoding, "utf-8"))
            except BaseException:
                stream.sock.close()
                raise
        else:
            repl.cursor().start_replication_expert(command, decode=False, status_interval=3600)
            stream = ReplicationStream(self.server, repl)
        self.reads = "socket" if isinstance(stream, SocketStream) else "libpq"
        self.connected = True
        log.info(
            "streaming slot %s (publication %s, %s, read %s)",
            self.slot,
            self.publication,
            "protocol 2, streaming" if self.streaming else "protocol 1",
            "from the socket" if self.reads == "socket" else "through libpq",
        )
        return stream

    def _stream_loop(self, stream: ReplicationStream | SocketStream) -> None:
        decoder = p.StreamDecoder()
        last_status = 0.0
        received = 0
        # the newest keepalive's position: confirmed whenever the reader is idle, not only
        # in the reply to it (the server asks once, and may ask again only after
        # wal_sender_timeout / 2; the changefeed may publish the last commit just after)
        keepalive_lsn: int | None = None
        builder = self.builder
        add_encoded = builder.add_encoded_row
        groups = builder.groups
        block_records, block_bytes = self.block_records, self.block_bytes
        # Inserts, the common message, take a path of their own (no message object, the
        # record encoded whole by Table.insert_record): into ``txn``, the transaction
        # receiving them when it is not skipped, with the table of relation ``rel`` looked
        # up once for a run of inserts into it; the inserts that follow one into the same
        # table and subtransaction are taken in one call (Table.insert_run) up to the
        # first other message or the block's end; every other message, and any insert out
        # of the ordinary, goes to _handle, after which these are looked up again.
        txn = None
        rel_seen, table, version = -1, None, None
        in_stream = False
        while not self.stop.is_set():
            batch = stream.read_batch(0)
            if not batch and builder.count:
                # a pause of a busy stream (the walsender slower than this loop, or waiting
                # for a core) does not close the block: one block a pause was a queue write
                # for the service every few hundred rows; the block is appended when the
                # stream has been quiet for PAUSE seconds (or full, or flush_seconds old)
                batch = stream.read_batch(PAUSE)
            if not batch:
                if builder.count:
                    self._append()
                self._status(stream, received, idle_lsn=keepalive_lsn)
                last_status = time.monotonic()
                batch = stream.read_batch(min(self.status_interval, 0.5))
                if not batch:
                    continue
            server_lsn = self.server_lsn  # kept here during the batch, stored before any call out
            i, n = 0, len(batch)
            while i < n:
                data = batch[i]
                i += 1
                if data[0] == 0x77 and len(data) > 35 and data[25] == 0x49:  # XLogData of an Insert: the hot path
                    if in_stream:
                        start, wal_end, sub, rel, tag = _STREAM_INSERT_FRAME(data, 1)
                        pos = 35
                    else:
                        start, wal_end, rel, tag = _INSERT_FRAME(data, 1)
                        sub, pos = None, 31
                    if wal_end > server_lsn:
                        server_lsn = wal_end
                    if start > received:
                        received = start
                    if txn is not None and tag == 0x4E:  # N
                        if rel != rel_seen:
                            got = txn.rels.get(rel)
                            table = got[0] if got is not None else (self.tables.get(rel) or self._last_seen.get(rel))
                            rel_seen = rel if table is not None else -1
                            version = table.version if table is not None else None
                        if rel == rel_seen and table is not None:
                            if version is None:
                                head, tail, first = HEAD_13, table.tail, False
                            elif txn.carried.get(rel, _NOT_CARRIED)[0] == version:
                                head, tail, first = HEAD_14, table.tail, False
                            else:  # the first row of this table (version) in the transaction
                                head, tail, first = HEAD_15, table.tail_document, True
                            # the record encoded whole (no list, no str): Table.insert_record
                            rec = table.insert_record(data, pos, head, start, table.middle, tail)
                        else:
                            rec = None
                        if rec is not None:
                            assert table is not None  # the record comes from the table seen
                            if first:
                                assert version is not None  # a first row is one that names its version
                                txn.carried[rel] = (version, txn.rows)
                            if sub is not None and sub != txn.top and sub not in txn.subs:
                                txn.subs[sub] = txn.rows
                            if not builder.count:
                                self._pending_since = time.monotonic()
                            add_encoded(start, txn.xid, rec)
                            txn.rows += 1
                            if builder.count < block_records and builder.nbytes < block_bytes and i < n:
                                # the inserts that follow into the same table (and subtransaction),
                                # in one call (Table.insert_run): their records straight into the
                                # group, counted here as add_encoded_row counts them
                                g = groups[txn.xid]
                                j, nbytes, top_start, top_end = table.insert_run(
                                    batch,
                                    i,
                                    in_stream,
                                    rel,
                                    sub or 0,
                                    HEAD_13 if version is None else HEAD_14,
                                    table.middle,
                                    table.tail,
                                    g.records,
                                    block_records - builder.count,
                                    block_bytes - builder.nbytes,
                                )
                                run, i = j - i, j
                                if run:
                                    g.rows += run
                                    txn.rows += run
                                    builder.count += run
                                    builder.nbytes += nbytes
                                    if top_start - 1 > builder.progress:
                                        builder.progress = top_start - 1
                                    if top_start > received:
                                        received = top_start
                                    if top_end > server_lsn:
                                        server_lsn = top_end
                            if builder.count >= block_records or builder.nbytes >= block_bytes:
                                self.server_lsn = server_lsn  # stored with the block
                                self._append()
                            continue
                    self.server_lsn = server_lsn
                    self._handle(decoder.decode(data[25:]), start)
                else:
                    self.server_lsn = server_lsn
                    frame = p.decode_frame(data)
                    if isinstance(frame, p.Keepalive):
                        if frame.wal_end > server_lsn:
                            self.server_lsn = server_lsn = frame.wal_end
                        keepalive_lsn = frame.wal_end
                        if frame.reply or time.monotonic() - last_status >= self.status_interval:
                            if builder.count:
                                self._append()
                            self._status(stream, received, idle_lsn=frame.wal_end)
                            last_status = time.monotonic()
                        continue
                    if frame.wal_end > server_lsn:
                        self.server_lsn = server_lsn = frame.wal_end
                    if frame.data_start > received:
                        received = frame.data_start
                    self._handle(decoder.decode(frame.payload), frame.data_start)
                # after _handle: the transaction, the stream block and the relations may have changed
                txn = self._stream or self._current
                if txn is not None and txn.skip:
                    txn = None
                in_stream = decoder.in_stream
                rel_seen = -1
            self.server_lsn = server_lsn
            # once a batch (a socket read: up to 256 KiB, a few thousand messages)
            now = time.monotonic()
            if self.flush_due(now):
                self._append()
            if now - last_status >= self.status_interval:
                self._status(stream, received, idle_lsn=keepalive_lsn)
                last_status = now

    def _idle(self) -> bool:
        pub = self.published()
        published_all = self.last_commit <= (pub.scn if pub is not None else -1)
        return published_all and not self.txns and not self.builder.count and self.copy != "running"

    def _status(self, stream: ReplicationStream | SocketStream, received: int, idle_lsn: int | None = None) -> None:
        """Tell the server what the changefeed has published (see the module doc)."""
        pub = self.published()
        pub_lsn = pub.scn if pub is not None else -1
        # commits are published in commit LSN order: every commit up to pub_lsn is published,
        # and is at most sent again (and skipped) if we confirm its commit LSN, not its end
        flush = max(self.confirmed, pub_lsn)
        ends = self._ends
        while ends and ends[0][0] <= pub_lsn:
            flush = max(flush, ends.popleft()[1])
        for xid in [x for x, lsn in self.committed.items() if lsn <= pub_lsn]:
            del self.committed[xid]
        if self._idle() and idle_lsn is not None:
            flush = max(flush, idle_lsn)
        changed = flush != self.confirmed
        self.confirmed = flush
        stream.send_status(max(received, flush), flush, reply=False)
        now = time.monotonic()
        if self.store_due(now, changed, 5.0):
            self._append()  # the state alone: what `status` shows (confirmed LSN, lag)

    def _handle(self, msg, lsn: int) -> None:
        kind = type(msg)
        if kind in _DATA:
            self._data(kind, msg, lsn)
        elif kind is p.Begin:
            xid = str(msg.xid)
            if msg.final_lsn <= self.last_commit:
                self._current = _Txn(xid, skip=True)  # appended before the reconnect
                return
            self._current = self._begin(xid, False)
        elif kind is p.Commit:
            txn, self._current = self._current, None
            if txn is not None:
                if txn.skip:
                    self._merge_relations(txn)
                else:
                    self._commit(txn, msg.commit_lsn, msg.end_lsn, msg.commit_time)
        elif kind is p.StreamStart:
            xid = str(msg.xid)
            txn = self.txns.get(xid)
            if txn is None:
                txn = _Txn(xid, skip=True, streamed=True) if xid in self.committed else self._begin(xid, True)
                self.txns[xid] = txn
            self._stream = txn
        elif kind is p.StreamStop:
            self._stream = None
        elif kind is p.StreamCommit:
            txn = self.txns.get(str(msg.xid))
            if txn is not None:
                if txn.skip:
                    self._merge_relations(txn)
                elif msg.commit_lsn <= self.last_commit:
                    self._rollback(txn)
                    self._merge_relations(txn)
                else:
                    self._commit(txn, msg.commit_lsn, msg.end_lsn, msg.commit_time)
            self.txns.pop(str(msg.xid), None)
        elif kind is p.StreamAbort:
            self._abort(str(msg.xid), msg.subxid)
        elif kind is p.TypeInfo:
            # the name of a type that is not built in, before the Relation message that
            # uses it (for a domain: its base type's)
            self._type_names[msg.oid] = (msg.schema, msg.name)
        # Origin, LogicalMessage: not rows

    def _data(self, kind: type, msg, lsn: int) -> None:
        """A change or a Relation message."""
        txn = self._stream or self._current
        if txn is None:
            if kind is p.Relation:
                self._relation(None, msg)
                return
            raise PostgresError(f"a {kind.__name__} message outside any transaction at {p.lsn_text(lsn)}")
        sub = msg.xid
        if sub is not None and sub != txn.top and sub not in txn.subs:
            txn.subs[sub] = txn.rows
        if kind is p.Relation:
            # also in a transaction skipped as appended already: the server counts the
            # relation as sent once that transaction commits, and does not send it again
            self._relation(txn, msg)
        elif not txn.skip:
            self._change(txn, msg, lsn)

    def _begin(self, xid: str, streamed: bool) -> _Txn:
        txn = _Txn(xid, streamed=streamed)
        self.txns[xid] = txn
        self._add(BEGIN, 1, xid, end_payload(None))
        return txn

    def _commit(self, txn: _Txn, commit_lsn: int, end_lsn: int, tm: int) -> None:
        # the state first: the add may close the block, which stores the state with it
        self.last_commit = commit_lsn
        self._ends.append((commit_lsn, end_lsn))
        if txn.streamed:
            self.committed[txn.xid] = commit_lsn
        self.txns.pop(txn.xid, None)
        self._merge_relations(txn)
        self.builder.heartbeat(commit_lsn)
        self._add(COMMIT, commit_lsn, txn.xid, end_payload(tm))
        if txn.rows >= LARGE_TRANSACTION_ROWS:
            self._append()  # now: the dispatcher has its rows already
            log.info(
                "transaction %s committed at %s with %d row(s): in the queue",
                txn.xid,
                p.lsn_text(commit_lsn),
                txn.rows,
                extra={"xid": txn.xid, "commit_lsn": p.lsn_text(commit_lsn), "rows": txn.rows},
            )

    def _merge_relations(self, txn: _Txn) -> None:
        """A committed transaction's relation messages join the cache."""
        for oid, (table, _sub) in txn.rels.items():
            self.tables[oid] = table

    def _rollback(self, txn: _Txn) -> None:
        self.txns.pop(txn.xid, None)  # before the add, which may close the block with the state
        self._add(ROLLBACK, 0, txn.xid, end_payload(None))

    def _abort(self, xid: str, subxid: int) -> None:
        txn = self.txns.get(xid)
        if txn is None:
            return
        if str(subxid) == xid:
            if not txn.skip:
                self._rollback(txn)
            self.txns.pop(xid, None)
            return
        first = txn.subs.get(subxid)
        if first is None:
            return  # never seen: nothing of it was sent
        dropped = {s for s, f in txn.subs.items() if f >= first}
        for s in dropped:
            del txn.subs[s]
        txn.rels = {oid: v for oid, v in txn.rels.items() if v[1] not in dropped}
        # a document carried by a row the cut drops is carried again by the next row of its table
        txn.carried = {oid: c for oid, c in txn.carried.items() if c[1] < first}
        if not txn.skip and first < txn.rows:
            self._add(CUT, 0, xid, cut_payload(first, txn.rows))
            self.cuts += 1

    def _row(self, txn: _Txn, code: int, lsn: int, table: Table, rid, before, after) -> None:
        self._add(
            code,
            lsn,
            txn.xid,
            row_payload(None, table.schema, table.name, table.oid, rid, before, after) + txn.schema_fields(table),
        )
        txn.rows += 1

    def _change(self, txn: _Txn, msg, lsn: int) -> None:
        kind = type(msg)
        if kind is p.Insert:
            t = self._lookup(txn, msg.relation)
            self._row(txn, INSERT, lsn, t, t.rid(msg.new), None, t.obj(msg.new))
        elif kind is p.Update:
            t = self._lookup(txn, msg.relation)
            old = msg.old
            full = msg.old_kind == "O"
            before = None if old is None else t.obj(old, only=None if full else t.flagged())
            after = t.obj(msg.new, fallback=old if full else None)
            new_rid = t.rid(msg.new)
            old_rid = t.rid(old) if old is not None else None
            if old_rid is not None and new_rid is not None and old_rid != new_rid:
                self._row(txn, DELETE, lsn, t, old_rid, before, None)
                self._row(txn, INSERT, lsn, t, new_rid, None, after)
            else:
                self._row(txn, UPDATE, lsn, t, new_rid or old_rid, before, after)
        elif kind is p.Delete:
            t = self._lookup(txn, msg.relation)
            full = msg.old_kind == "O"
            before = t.obj(msg.old, only=None if full else t.flagged())
            self._row(txn, DELETE, lsn, t, t.rid(msg.old), before, None)
        elif kind is p.Truncate:
            for oid in msg.relations:
                self._row(txn, TRUNCATE, lsn, self._lookup(txn, oid), None, None, None)
