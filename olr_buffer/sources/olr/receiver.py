"""The OpenLogReplicator receiver: a sender's stream into the queue, exactly once across
reconnects and restarts (docs/operations.md, "Reading OpenLogReplicator").

One connection at a time. The handshake: ``INFO(database)``; on ``READY``, ``START(scn)``
(``--start-scn``, or the last published commit's ``c_scn`` when this queue has one); on
``REPLICATE``, ``CONTINUE`` from the last published commit's ``(c_scn, c_idx)``, or with
``c_scn`` 0 (the sender's own confirmed position) when nothing is published yet. Then
every frame is one JSON message (:func:`~olr_buffer.olr_protocol.read_message`).

**Transactions.** A ``begin`` entry opens one, a ``commit`` entry ends it; a message
whose rows come with no transaction open is a whole transaction (OpenLogReplicator's
one-message-per-transaction mode): it ends with the message. Its records go to the queue
as they arrive (a block is appended when it is full, or ``flush_seconds`` after its first
record), so a transaction of any size never has to fit in memory:

* ``BEGIN`` (added with the first row: a transaction without rows adds nothing), the rows
  (``scn``: the last one the transaction's messages gave; ``tm``: the message's own) in
  queue thread ``rth`` (1 without it), in message order;
* ``COMMIT`` in queue thread 1 with the key ``(c_scn, 1, 0, c_idx)`` of the commit
  message, and the thread's progress moved to ``c_scn``. The stream is in commit order
  and ``(c_scn, c_idx)`` increases strictly over it, so these keys keep its order. Thread
  1 is the only thread in play: its watermark is the last commit appended, which is all
  a single ordered stream can vouch for; the rows of another ``rth`` are in that
  thread's blocks (so the changefeed's ``thread`` is the message's ``rth``), always
  appended before their commit (a block is appended before one of another thread starts).

**Exact restart.** The state stored with every block (:class:`~.state.OlrState`) holds
the position of the last commit appended and the transaction whose records are in the
queue without its commit. A reconnect or a restart asks for everything after the last
published commit; the sender sends again what came after it: a message at or below the
last commit appended is skipped (its transaction is in the queue already), and the
transaction that had records without a commit is rolled back first (a ``ROLLBACK`` record
discards them) and appended again whole as it comes again.

**Types.** A table's columns (``schema.columns``, which OpenLogReplicator sends with a
table's first row, or every row) are kept in the queue's metadata and give the table its
schema document (:mod:`.types`): every later row of the table names its version, and the
first row of each table and version in a transaction carries the document, so that each
transaction brings the documents its rows name, whatever was sent before it.

**Confirmation.** ``CONFIRM(c_scn, c_idx)`` of a commit message once that transaction is
durable in the changefeed; and, when every transaction received is, of an
OpenLogReplicator checkpoint message, so that an idle database moves the sender's
checkpoint on.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ...changes import (
    BEGIN,
    COMMIT,
    DDL,
    DELETE,
    INSERT,
    ROLLBACK,
    UPDATE,
    RecordError,
    end_payload,
    row_payload,
    schema_fields,
)
from ...olr_protocol import (
    SCN_NOW,
    FrameReader,
    FrameTooLargeError,
    MalformedMessageError,
    MessageError,
    RedoRequest,
    RedoResponse,
    RequestCode,
    ResponseCode,
    code_name,
    frame,
    object_text,
    raw_text,
    read_message,
)
from ...olr_protocol.json_messages import OP_BEGIN, OP_CHECKPOINT, OP_COMMIT, OP_DDL, OP_DELETE, OP_INSERT, OP_UPDATE
from ...txbuffer import BlockAppender
from ..olr_types import ColumnsError, SchemaDocuments
from ..stream import StreamReader, StreamStopped
from .errors import OlrSourceError, OlrStreamError
from .location import Location
from .state import STATE_KEY, OlrState, OpenTransaction, Position, TableColumns, columns_key

log = logging.getLogger("olr_buffer.olr")

THREAD = 1  # the queue thread of the commits: the only thread in play
LARGE_TRANSACTION_ROWS = 100_000  # the commit of a transaction this large is logged
#: The largest message taken (a frame): one message per transaction holds a whole one.
MAX_MESSAGE_BYTES = 1 << 30
_ROW_CODES = {OP_INSERT: INSERT, OP_UPDATE: UPDATE, OP_DELETE: DELETE, OP_DDL: DDL}
#: Why a sender's c_scn goes back, or stays below its rows' SCNs: what OpenLogReplicator 2.0.0 sends.
_BEGIN_SCN_STAMPS = (
    "OpenLogReplicator 2.0.0 sends this: it stamps a transaction's messages with the transaction's begin SCN, not "
    "its commit's (OpenLogReplicator issue 330), so its positions are not in commit order and a receiver that "
    "confirms them loses transactions; use OpenLogReplicator 1.9.0 or earlier"
)
_UNSUPPORTED = (
    "OpenLogReplicator's format options message 4 and 8 (no begin, no commit message) are not "
    "supported: a receiver needs each transaction's bounds"
)


class ConnectionLost(Exception):
    """The connection failed or was closed: connect again."""


def _text(p: Position) -> str:
    return f"c_scn {p[0]} c_idx {p[1]}"


class _Txn:
    """The transaction being received."""

    __slots__ = ("xid", "thread", "first", "rows", "scn", "tm", "whole", "begun", "documented")

    def __init__(self, xid: str, thread: int, first: Position, scn: int, tm: int | None, whole: bool) -> None:
        self.xid = xid
        self.thread = thread
        self.first = first
        self.rows = 0
        self.scn = scn  # the last scn its messages gave
        self.tm = tm  # the tm of its first message
        self.whole = whole  # opened by a message without a begin entry: ends with that message
        self.begun = False  # its BEGIN record is added (with its first row)
        self.documented: set[str] = set()  # schema versions whose document a row of it carries


class OlrReceiver(StreamReader):
    """Reads one sender into the queue; see the module doc. ``state``: the resume state
    stored with the last block appended (None: a new queue); ``published``: the position
    of the last commit the changefeed made durable (what may be confirmed)."""

    def __init__(
        self,
        queue: BlockAppender,
        location: Location,
        *,
        state: OlrState | None = None,
        columns: dict[bytes, TableColumns] | None = None,
        start_scn: int = 0,
        connect_timeout: float = 10.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        accept_gap: bool = False,
        stored: Callable[[], Position | None] | None = None,
        **stream: Any,
    ) -> None:
        """``stream``: :class:`~olr_buffer.sources.stream.StreamReader`'s (``published``:
        the position, ``(c_scn, c_idx)``, of the last commit the changefeed made durable)."""
        super().__init__(queue, thread=THREAD, **stream)
        self.location = location
        self.name = location.uri
        self.start_scn = start_scn
        self.connect_timeout = connect_timeout
        self.max_message_bytes = max_message_bytes
        self.accept_gap = accept_gap
        # the idle_confirmed of the last state the queue stored (a child process appends through its parent);
        # None: what this receiver appends is stored when append returns
        self.stored = stored
        self.columns: dict[bytes, str] = {k: c.columns for k, c in (columns or {}).items()}
        self._schemas = SchemaDocuments()
        self.skipped = 0  # messages skipped as appended already (this process)
        # state stored with every block
        self.last_commit: Position | None = None
        self.txn: _Txn | None = None
        self.received: Position | None = None
        self.received_tm: int | None = None
        self.confirmed: Position | None = None
        self.confirmed_tm: int | None = None
        self.idle_confirmed: Position | None = None
        self.messages = 0
        self.transactions = 0
        self.checkpoints = 0
        # in memory
        self._held: Position | None = None  # the last commit appended of a transaction with rows: held until published
        self._commits: deque[tuple[Position, int | None]] = deque()  # commits appended, not confirmed: (position, c_tm)
        self._skip_through: Position | None = None  # messages at or below it are in the queue already
        self._last: Position | None = None  # the position of the last message of this connection
        self._frames: deque[bytes] = deque()
        self._confirmed_unstored = False  # a confirm not in the state stored yet (what `status` shows)
        if state is not None:
            self._restore(state)

    # -- state ---------------------------------------------------------------------------

    def _restore(self, st: OlrState) -> None:
        if st.database is not None and st.database != self.location.database:
            raise OlrSourceError(
                f"the queue was filled from database {st.database!r} (of {st.source}), not {self.location.database!r}",
                hint=f"run with olr://HOST:PORT/{st.database}, or use a new queue and changefeed directory",
            )
        self.last_commit = st.last_commit
        self._held = st.held
        self.received, self.received_tm = st.received, st.received_tm
        self.confirmed, self.confirmed_tm = st.confirmed, st.confirmed_tm
        self.idle_confirmed = st.idle_confirmed
        self.messages, self.transactions, self.checkpoints = st.messages, st.transactions, st.checkpoints
        self.reconnects = st.reconnects
        if st.open is not None:  # records in the queue without their commit: rolled back at the first connection
            self.txn = _Txn(st.open.xid, THREAD, st.open.first, 0, None, False)
            self.txn.begun = True
            self.txn.rows = st.open.rows

    def state(self) -> OlrState:
        t = self.txn
        return OlrState(
            source=self.name,
            database=self.location.database,
            last_commit=self.last_commit,
            held=self._held,
            open=OpenTransaction(t.xid, t.first, t.rows) if t is not None and t.begun else None,
            received=self.received,
            received_tm=self.received_tm,
            confirmed=self.confirmed,
            confirmed_tm=self.confirmed_tm,
            idle_confirmed=self.idle_confirmed,
            messages=self.messages,
            transactions=self.transactions,
            checkpoints=self.checkpoints,
            reconnects=self.reconnects,
            tables_with_columns=len(self.columns),
            written=time.time(),
        )

    state_key = STATE_KEY  # (and the tables' columns not stored yet, under their keys)

    def _appended(self) -> None:
        self._confirmed_unstored = False

    def _add(self, code: int, scn: int, xid: str, line: int, payload: list) -> None:
        """Add a record to the builder in use; a full block is appended, with the state as
        it is now (callers change the state before adding the record that goes with it)."""
        try:
            self._add_record(code, scn, xid, 0, line, payload)
        except RecordError as exc:
            raise OlrStreamError(f"{self.name}: message at {self._where()}: {exc}", **self._facts()) from None

    # -- the thread ------------------------------------------------------------------------

    connection_lost = (ConnectionLost,)

    def _reconnecting(self, exc: BaseException, delay: float) -> None:
        log.warning(
            "%s: %s; connecting again in %.0f s",
            self.name,
            exc,
            delay,
            extra={"sender": self.location.address, "retry_seconds": delay},
        )

    def _finish(self) -> None:
        self._use(THREAD)
        self._append()  # what it holds, and the state as of the stop, for `status`

    def _session(self) -> None:
        sock = self._connect()
        try:
            self._discard_open()
            self._handshake(sock)
            self.connected = True
            self._stream(sock)
        except StreamStopped:
            pass
        finally:
            self._append_held()
            sock.close()

    def _connect(self) -> socket.socket:
        loc = self.location
        try:
            sock = socket.create_connection((loc.host, loc.port), timeout=self.connect_timeout)
        except OSError as exc:
            raise ConnectionLost(f"cannot connect to {loc.address} ({exc.strerror or exc})") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for opt, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
                if hasattr(socket, opt):
                    sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
        except OSError:
            pass
        sock.settimeout(0.2)
        self._frames.clear()
        self._last = None
        return sock

    def _discard_open(self) -> None:
        """The sender sends again every transaction after the last published one: roll
        back the one whose records are in the queue without its commit."""
        t, self.txn = self.txn, None
        if t is not None and t.begun:
            self._use(THREAD)
            self._add(ROLLBACK, 0, t.xid, 0, end_payload(None))
            self._append()
            log.info(
                "%s: discarded the %d row(s) of transaction %s received before this connection (its commit "
                "did not come): it comes again",
                self.name,
                t.rows,
                t.xid,
                extra={"xid": t.xid},
            )

    # -- handshake -------------------------------------------------------------------------

    def _send(self, sock: socket.socket, request: RedoRequest) -> None:
        sock.settimeout(30.0)
        try:
            sock.sendall(frame(request.encode()))
        except OSError as exc:
            raise ConnectionLost(
                f"the connection to {self.location.address} was lost ({exc.strerror or exc})"
            ) from None
        finally:
            sock.settimeout(0.2)

    def _read(self, sock: socket.socket, reader: FrameReader) -> bool:
        """Read what the socket has (waiting up to its timeout); False when nothing came."""
        try:
            data = sock.recv(1 << 18)
        except TimeoutError:
            return False
        except OSError as exc:
            raise ConnectionLost(
                f"the connection to {self.location.address} was lost ({exc.strerror or exc})"
            ) from None
        if not data:
            raise ConnectionLost(f"{self.location.address} closed the connection")
        try:
            self._frames.extend(reader.feed(data))
        except FrameTooLargeError as exc:
            raise OlrStreamError(
                f"{self.name}: after {self._where()}: {exc.message} (--max-message-size)", **self._facts()
            ) from None
        return True

    def _reply(self, sock: socket.socket, reader: FrameReader, what: str) -> RedoResponse:
        waited = time.monotonic()
        told = False
        while not self._frames:
            if self.stop.is_set():
                raise StreamStopped
            if not self._read(sock, reader) and not told and time.monotonic() - waited >= 30:
                told = True
                log.info("%s: waiting for the sender's reply to %s", self.name, what)
        data = self._frames.popleft()
        try:
            return RedoResponse.decode(data)
        except MalformedMessageError as exc:
            raise OlrStreamError(f"{self.name}: the reply to {what} is not a RedoResponse ({exc.message})") from None

    def _handshake(self, sock: socket.socket) -> None:
        reader = self._reader = FrameReader(self.max_message_bytes)
        db = self.location.database
        pub = self.published()
        self._skip_through = max(p for p in (self.last_commit, pub, (0, -1)) if p is not None)
        self._send(sock, RedoRequest(RequestCode.INFO, db))
        info = self._reply(sock, reader, "INFO")
        if info.code == ResponseCode.READY:
            scn = self.start_scn if pub is None else pub[0]
            if pub is not None:
                log.warning(
                    "%s: the sender has no confirmed position: asking it to START at scn %d, the last "
                    "published commit's",
                    self.name,
                    scn,
                    extra={"scn": scn},
                )
            self._send(sock, RedoRequest(RequestCode.START, db, scn=scn))
            asked = "START(now)" if scn == SCN_NOW else f"START(scn {scn})"
            reply = self._reply(sock, reader, asked)
            if reply.code == ResponseCode.ALREADY_STARTED:
                self._check_gap(reply, pub)
                reply = self._continue(sock, reader, pub)
        elif info.code == ResponseCode.REPLICATE:
            self._check_gap(info, pub)
            reply = self._continue(sock, reader, pub)
            asked = "CONTINUE"
        else:
            reply, asked = info, "INFO"
        self._check_reply(reply, asked)
        log.info(
            "%s: streaming %s",
            self.name,
            f"from after {_text(pub)}"
            if pub is not None
            else (
                "from the sender's confirmed position"
                if asked == "CONTINUE"
                else ("from now on" if self.start_scn == SCN_NOW else f"from scn {self.start_scn}")
            ),
            extra={"sender": self.location.address},
        )

    def _check_gap(self, reply: RedoResponse, pub: Position | None) -> None:
        """The sender's confirmed position (in its reply) against what this queue holds: a
        sender sends only what follows its confirmed position, so one that is ahead (another
        receiver confirmed more, or the queue is an older copy) would leave a gap in the
        changefeed that nothing fills. Refused, unless ``accept_gap``."""
        if not 0 < reply.c_scn < 1 << 63:  # 0, or OpenLogReplicator's "none" (2^64-1): none confirmed
            return
        confirmed = (reply.c_scn, reply.c_idx)
        held = max((p for p in (self.last_commit, pub, self.idle_confirmed) if p is not None), default=None)
        if held is None:  # a new queue: the changefeed begins where the sender stands
            log.warning(
                "%s: a new queue: the changefeed begins after the sender's confirmed position, %s; what "
                "came before it is not asked for (another receiver confirmed it)",
                self.name,
                _text(confirmed),
                extra={"c_scn": confirmed[0], "c_idx": confirmed[1]},
            )
            return
        log.info("%s: the sender's confirmed position is %s", self.name, _text(confirmed))
        if confirmed <= held:
            return
        what = (
            f"the sender's confirmed position, {_text(confirmed)}, is ahead of what this queue holds, "
            f"{_text(held)}: the sender will not send the transactions between again (another receiver "
            "confirmed them, or this queue is an older copy)"
        )
        if self.accept_gap:
            log.warning(
                "%s: %s; --accept-gap: publishing on from the sender's position, without them",
                self.name,
                what,
                extra={"c_scn": confirmed[0], "c_idx": confirmed[1]},
            )
            return
        raise OlrSourceError(
            f"{self.name}: {what}",
            hint="to publish on from the sender's position and go without those transactions, run again with "
            "--accept-gap; to keep them, make the sender send them again (restore the queue and changefeed "
            "that confirmed them, or reset the sender's confirmed position)",
            c_scn=confirmed[0],
            c_idx=confirmed[1],
        )

    def _continue(self, sock: socket.socket, reader: FrameReader, pub: Position | None) -> RedoResponse:
        if pub is None:
            self._send(sock, RedoRequest(RequestCode.CONTINUE, self.location.database, c_scn=0))
            return self._reply(sock, reader, "CONTINUE(c_scn 0)")
        self._send(sock, RedoRequest(RequestCode.CONTINUE, self.location.database, c_scn=pub[0], c_idx=pub[1]))
        return self._reply(sock, reader, f"CONTINUE({_text(pub)})")

    def _check_reply(self, reply: RedoResponse, asked: str) -> None:
        code = reply.code
        if code == ResponseCode.REPLICATE:
            return
        if code == ResponseCode.INVALID_DATABASE:
            raise OlrSourceError(
                f"{self.name}: the sender does not serve database {self.location.database!r} (INVALID_DATABASE); "
                f"this queue is at {self._where()}",
                hint='give the database name the sender serves (OpenLogReplicator: its source\'s "name")',
                **self._facts(),
            )
        if code == ResponseCode.STARTING:
            raise ConnectionLost(f"the sender answered {asked} with STARTING (it is starting)")
        if code == ResponseCode.FAILED_START:
            raise OlrSourceError(
                f"{self.name}: the sender could not start replication (FAILED_START to {asked}); this queue is at "
                f"{self._where()}",
                hint="see the sender's log; --start-scn gives where a new queue starts",
                **self._facts(),
            )
        raise OlrStreamError(
            f"{self.name}: the sender answered {asked} with {code_name(code, ResponseCode)}, which the protocol does "
            f"not allow there; this queue is at {self._where()}",
            **self._facts(),
        )

    def _where(self) -> str:
        """Where the stream stands, for an error: the last position read, else the last
        commit appended."""
        p = self._last or self.last_commit
        return "the start of the stream" if p is None else _text(p)

    def _facts(self) -> dict:
        p = self._last or self.last_commit
        return {} if p is None else {"c_scn": p[0], "c_idx": p[1]}

    # -- the stream ------------------------------------------------------------------------

    def _stream(self, sock: socket.socket) -> None:
        reader = self._reader
        frames = self._frames
        last_status = 0.0
        self._status(sock)
        while not self.stop.is_set():
            if not frames and not self._read(sock, reader):
                if self.builder.count:
                    self._append()
            while frames:
                self._message(frames.popleft(), sock)
            now = time.monotonic()
            if self.flush_due(now):
                self._append()
            if now - last_status >= self.status_interval:
                self._status(sock)
                last_status = now
        self._status(sock)

    def _status(self, sock: socket.socket) -> None:
        """Confirm what the changefeed made durable; store the state now and then (what
        ``status`` shows)."""
        pub = self.published()
        if pub is not None and (self.confirmed is None or pub > self.confirmed):
            self._confirm(sock, pub)
            commits = self._commits
            while commits and commits[0][0] <= pub:
                _, tm = commits.popleft()
                if tm is not None:
                    self.confirmed_tm = tm
        self._confirm_idle(sock)
        now = time.monotonic()
        if self.store_due(now, self._confirmed_unstored, 1.0):
            self._use(THREAD)
            self._append()

    def _confirm(self, sock: socket.socket, pos: Position) -> None:
        self._send(sock, RedoRequest(RequestCode.CONFIRM, self.location.database, c_scn=pos[0], c_idx=pos[1]))
        self.confirmed = pos
        self._confirmed_unstored = True
        log.debug("%s: confirmed %s", self.name, _text(pos), extra={"c_scn": pos[0], "c_idx": pos[1]})

    def _bad(self, reason: str, pos: Position | None) -> OlrStreamError:
        where = f"message at {_text(pos)}" if pos is not None else f"the message after {self._where()}"
        facts = {"c_scn": pos[0], "c_idx": pos[1]} if pos is not None else self._facts()
        return OlrStreamError(
            f"{self.name}: {where}: {reason}",
            hint="the sender sent what the protocol does not allow; once it is fixed, the same "
            "command resumes after the last transaction published",
            **facts,
        )

    def _message(self, data: bytes, sock: socket.socket) -> None:
        try:
            m = read_message(data)
        except MessageError as exc:
            raise self._bad(exc.message, None) from None
        self.messages += 1
        pos = m.position
        if pos is None:
            raise self._bad("no c_scn and c_idx: the sender gives no positions to confirm", None)
        if self._last is not None and pos <= self._last:
            if pos[0] < self._last[0]:
                raise self._bad(
                    f"c_scn {pos[0]} goes back below c_scn {self._last[0]} of the message before: "
                    f"(c_scn, c_idx) must increase; {_BEGIN_SCN_STAMPS}",
                    pos,
                )
            if m.c_idx is None:
                raise self._bad(
                    f"the position does not follow {_text(self._last)}: the message has no c_idx, so "
                    "the messages that share a c_scn have no position of their own to resume from; "
                    "use an OpenLogReplicator that sends c_idx",
                    pos,
                )
            raise self._bad(f"the position does not follow {_text(self._last)}: (c_scn, c_idx) must increase", pos)
        self._last = self.received = pos
        if m.tm is not None:
            self.received_tm = m.tm
        if self._skip_through is not None and pos <= self._skip_through:
            self.skipped += 1  # in the queue already: sent again after a reconnect
            return
        checkpoint = False
        for entry in m.payload:
            op = entry.op
            code = _ROW_CODES.get(op)
            if code is not None:
                txn = self.txn
                if txn is None:
                    txn = self._open(m, pos, whole=True)
                self._row(txn, code, entry, m, pos)
            elif op == OP_BEGIN:
                if self.txn is not None:
                    raise self._bad(f"a begin while transaction {self.txn.xid} has no commit yet; {_UNSUPPORTED}", pos)
                self._open(m, pos, whole=False)
            elif op == OP_COMMIT:
                if self.txn is None:
                    raise self._bad(f"a commit with no transaction open; {_UNSUPPORTED}", pos)
                self._check_xid(m, pos)
                self._commit(m, pos)
            elif op == OP_CHECKPOINT:
                self.checkpoints += 1
                checkpoint = True
            else:
                raise self._bad(f"unknown op {op!r} in the payload", pos)
        if self.txn is not None and self.txn.whole:
            self._commit(m, pos)
        if checkpoint and self.txn is None:
            self._idle_confirm(sock, pos)

    def _check_xid(self, m, pos: Position) -> None:
        txn = self.txn
        assert txn is not None  # callers check a transaction is open
        if m.xid is not None and m.xid != txn.xid:
            raise self._bad(f"a message of transaction {m.xid} while transaction {txn.xid} has no commit yet", pos)

    def _open(self, m, pos: Position, whole: bool) -> _Txn:
        if m.xid is None:
            raise self._bad("a transaction without xid", pos)
        if pos[0] == 0:
            raise self._bad("c_scn 0 is not a position of a transaction", pos)
        thread = self._thread(m, pos)
        scn = m.scn if m.scn is not None else 0
        txn = self.txn = _Txn(m.xid, thread, pos, scn, m.tm, whole)
        return txn

    def _thread(self, m, pos: Position) -> int:
        rth = m.rth
        if rth is None:
            return self.txn.thread if self.txn is not None else THREAD
        if not 1 <= rth < 1 << 31:
            raise self._bad(f"rth {rth} is not a redo thread", pos)
        return rth

    def _row(self, txn: _Txn, code: int, entry, m, pos: Position) -> None:
        self._check_xid(m, pos)
        if m.scn is not None:
            txn.scn = m.scn
        scn = txn.scn
        if scn > pos[0]:
            raise self._bad(
                f"a row at scn {scn}, above the transaction's c_scn {pos[0]}: c_scn must be the "
                f"commit's position; {_BEGIN_SCN_STAMPS}",
                pos,
            )
        schema = entry.schema
        owner, table, obj = (schema.owner, schema.table, schema.obj) if schema is not None else (None, None, None)
        if table is None and code != DDL:  # OpenLogReplicator names every row's table (OBJ_<n> when it cannot)
            raise self._bad(f"a row ({entry.op}) without schema.table", pos)
        # what the sender does not name is the empty string (the changefeed's owner and table are never null):
        # the owner of an object OpenLogReplicator cannot name, or of every row in its schemaless mode; the
        # table of a ddl whose message has its sql alone
        owner = owner or ""
        table = table or ""
        try:
            before = object_text(entry.before, "before")
            after = object_text(entry.after, "after")
        except MessageError as exc:
            raise self._bad(exc.message, pos) from None
        if code != DDL and before is None and after is None:
            raise self._bad(f"a row ({entry.op}) with neither before nor after", pos)
        if code == DDL and entry.sql is None:
            raise self._bad("a ddl without sql", pos)
        if schema is not None and schema.columns is not None and table:
            self._columns(owner, table, obj, schema.columns, pos)
        thread = self._thread(m, pos)
        self._use(thread)
        if not txn.begun:
            txn.begun = True
            self._add(BEGIN, max(1, min(txn.scn, pos[0])), txn.xid, txn.first[1], end_payload(txn.tm))
        txn.rows += 1
        payload = row_payload(m.tm, owner, table, obj, entry.rid, before, after, entry.sql)
        known = self._schema(owner, table, pos) if table else None
        if known is not None:  # the row names its table's version; the first of the transaction carries the document
            version, document = known
            payload += schema_fields(version, None if version in txn.documented else document)
            txn.documented.add(version)
        self._add(code, scn, txn.xid, pos[1], payload)

    def _columns(self, owner: str, table: str, obj: int | None, columns, pos: Position) -> None:
        """Keep a table's columns (stored with the next block) when they are new or changed."""
        try:
            text = raw_text(columns)
        except MessageError as exc:
            raise self._bad(exc.message, pos) from None
        if text is None:
            return
        key = columns_key(owner, table)
        if self.columns.get(key) != text:
            self._document(owner, table, text, pos)  # refused here, before they are kept, when they are bad
            self.columns[key] = text
            self._pending_meta[key] = TableColumns(owner=owner, table=table, obj=obj, columns=text, at=pos).encode()

    def _schema(self, owner: str, table: str, pos: Position) -> tuple[str, str] | None:
        """``(version, document)`` of the table's schema document, from the last columns
        the sender gave for it (this run or before, from the queue's metadata); None when
        it gave none."""
        text = self.columns.get(columns_key(owner, table))
        return None if text is None else self._document(owner, table, text, pos)

    def _document(self, owner: str, table: str, text: str, pos: Position) -> tuple[str, str]:
        try:
            return self._schemas.of(owner, table, text)
        except ColumnsError as exc:
            raise self._bad(f"{owner}.{table}: {exc}", pos) from None

    def _commit(self, m, pos: Position) -> None:
        txn = self.txn
        assert txn is not None  # callers check a transaction is open
        c_tm = m.tm if m.tm is not None else txn.tm
        self._use(THREAD)
        # the state first: the add may close the block, which stores the state with it
        self.txn = None
        self.last_commit = pos
        if not txn.begun:  # no row: nothing to publish, nothing appended
            return
        self._held = pos
        self._commits.append((pos, c_tm))
        self.transactions += 1
        self.builder.heartbeat(pos[0])
        self._add(COMMIT, pos[0], txn.xid, pos[1], end_payload(c_tm))
        if txn.rows >= LARGE_TRANSACTION_ROWS:
            self._append()  # now: the dispatcher has its rows already
            log.info(
                "transaction %s committed at %s with %d row(s): in the queue",
                txn.xid,
                _text(pos),
                txn.rows,
                extra={"xid": txn.xid, "c_scn": pos[0], "c_idx": pos[1], "rows": txn.rows},
            )

    def _idle_confirm(self, sock: socket.socket, pos: Position) -> None:
        """A checkpoint message with every transaction received published: confirm it, so
        that the sender's checkpoint moves on while the database is idle."""
        pub = self.published()
        if self.builder.count or (self._held is not None and (pub is None or self._held > pub)):
            return
        if self.confirmed is None or pos > self.confirmed:
            # stored before the sender is told: a sender whose confirmed position is ahead of what the
            # queue says it holds is taken for one that will not send a gap again (_check_gap)
            self.idle_confirmed = pos
            self._use(THREAD)
            self._append()
            self._confirm_idle(sock)

    def _confirm_idle(self, sock: socket.socket) -> None:
        """Confirm the checkpoint of :meth:`_idle_confirm` once the queue stored it."""
        pos = self.idle_confirmed
        if pos is None or (self.confirmed is not None and pos <= self.confirmed):
            return
        if self.stored is not None:
            stored = self.stored()
            if stored is None or stored < pos:  # not yet written by the parent: at the next status
                return
        self._confirm(sock, pos)
