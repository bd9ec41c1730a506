"""The server of ``olr-buffer serve``: one receiver at a time, OpenLogReplicator's
handshakes, the stream with backpressure, confirmations stored durably.

One thread runs a ``selectors`` loop over the listening socket and the receiver's
connection. While streaming, one chunk of messages is made per turn of the loop, and only
while less than ``chunk_bytes`` wait for the socket: a receiver that reads slowly slows
the reading of the changefeed, it never makes ``serve`` buffer more (about two chunks and
one message at most). Each turn reads what the receiver sent, so a ``CONFIRM`` is taken
while the stream goes on; the last one is stored at most ``CONFIRM_STORE_SECONDS`` after
it is read (one write for a run of them), before any other request is answered, and
before the connection is closed for whatever reason (the requests the receiver sent until
then are read first).

What the receiver got is what its machine acknowledged: the bytes handed to the kernel
less those still in the socket's send queue (``SIOCOUTQ``, Linux; elsewhere the bytes
handed to the kernel). A ``CONFIRM`` beyond the last message whose bytes are all
acknowledged is taken as that message (the segment that carries a CONFIRM acknowledges
all the receiver had before it, so a receiver's CONFIRM of what it read is never cut); a
receiver whose machine acknowledges no byte of the stream for ``stall_seconds`` while
some wait is closed, however slowly it reads.

Bad input is answered and logged, and the server stays up: a request that is not a
``RedoRequest`` or has an unknown code gets ``INVALID_COMMAND``; a frame longer than a
request may be (1 KiB) closes the connection (where the next frame starts is unknown); a
connection that sends no request for ``handshake_seconds`` before streaming is closed.
A second connection while a receiver is connected is closed at once, unless the receiver
has made no progress (no request, no byte of the stream acknowledged) for
``takeover_seconds``: the new connection then takes over (the protocol has no heartbeat,
so a receiver that stopped while caught up is told from a waiting one only this way).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

from ..errors import OlrBufferError
from ..olr_protocol import (
    MAX_REQUEST_BYTES,
    FrameReader,
    FrameTooLargeError,
    MalformedMessageError,
    Position,
    RedoRequest,
    RedoResponse,
    RequestCode,
    ResponseCode,
    StreamError,
    code_name,
    frame,
)
from .errors import ServeError
from .feed import MAX_C_SCN, NO_SCN, Changefeed, MessageStream, continue_position, start_position
from .state import Confirmed, StateStore, default_state_dir

log = logging.getLogger("olr_buffer.serve")

_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
#: Bad requests a connection may send before it is closed.
MAX_BAD_REQUESTS = 16
#: Bytes of replies that may wait for a receiver in the handshake before it is closed.
MAX_UNREAD_REPLIES = 64 << 10
#: A CONFIRM read is stored at most this long after (one write for a run of them).
CONFIRM_STORE_SECONDS = 0.1
#: Reads of what a receiver sent before its connection is closed (its last CONFIRMs).
_LAST_READS = 64

if sys.platform.startswith("linux"):
    import fcntl
    import termios

    _SIOCOUTQ: int | None = termios.TIOCOUTQ  # the same request number for a socket
else:  # pragma: no cover
    _SIOCOUTQ = None
_INT = struct.Struct("i")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def _unacknowledged(sock: socket.socket) -> int:
    """Bytes in the socket's send queue that its peer has not acknowledged (sent or not);
    0 where the kernel does not tell."""
    if _SIOCOUTQ is None:
        return 0
    try:
        return _INT.unpack(fcntl.ioctl(sock.fileno(), _SIOCOUTQ, b"\0\0\0\0"))[0]
    except OSError:
        return 0


@dataclass(frozen=True, slots=True)
class ServeOptions:
    changefeed: str
    host: str
    port: int
    database: str
    state_dir: str | None = None  # default: CHANGEFEED/_olr_buffer/serve
    poll_seconds: float = 0.2  # caught up: look for newly published files this often
    chunk_bytes: int = 1 << 20  # messages made per step; at most about twice this waits for the socket
    handshake_seconds: float = 30.0  # before streaming, a request at least this often
    stall_seconds: float = 60.0  # a receiver whose machine acknowledges no byte of the stream this long is dropped
    takeover_seconds: float = 60.0  # a new connection takes over from a receiver without progress this long
    durable: bool = True


def peer_name(addr) -> str:
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Chunk:
    """A chunk of the stream not known to be received whole: where it lies in the bytes
    of the connection, the position of its last message, and its bytes (to find the last
    message received in it: ``scan`` is how far its frames were walked, ``scan_last`` the
    position of the last whole one found)."""

    __slots__ = ("start", "end", "last", "data", "scan", "scan_last")

    def __init__(self, start: int, data: bytes, last: Position | None) -> None:
        self.start = start
        self.end = start + len(data)
        self.last = last
        self.data = data
        self.scan = 0
        self.scan_last: Position | None = None

    def received_up_to(self, acked: int) -> Position | None:
        """The position of the last message of the chunk whose bytes end at or before
        ``acked`` (an offset of the connection), or None."""
        data, off, limit = self.data, self.scan, acked - self.start
        whole = None
        while off + 4 <= limit:
            (n,) = _U32.unpack_from(data, off)
            head = 4
            if n == 0xFFFFFFFF:
                if off + 12 > limit:
                    break
                (n,) = _U64.unpack_from(data, off + 4)
                head = 12
            if off + head + n > limit:
                break
            whole = (off + head, off + head + n)
            off += head + n
        self.scan = off
        if whole is not None:
            doc = json.loads(data[whole[0] : whole[1]])
            self.scan_last = Position(doc["c_scn"], doc["c_idx"])
        return self.scan_last


class _Connection:
    __slots__ = (
        "sock",
        "peer",
        "reader",
        "inbox",
        "out",
        "out_pos",
        "queued",
        "sent",
        "acked",
        "in_flight",
        "acked_pos",
        "replies_from",
        "stream",
        "connected",
        "last_request",
        "active",
        "ack_wait",
        "caught_up",
        "next_poll",
        "pending_confirm",
        "stored_at",
        "bad",
        "interest",
        "beyond_warned",
        "started_from",
        "started_tx_seq",
    )

    def __init__(self, sock: socket.socket, peer: str, now: float) -> None:
        self.sock = sock
        self.peer = peer
        self.reader = FrameReader(MAX_REQUEST_BYTES)
        self.inbox: deque[bytes] = deque()  # requests read, not yet taken
        self.out = bytearray()
        self.out_pos = 0
        # offsets in the bytes of the connection: queued for it, handed to the kernel,
        # acknowledged by the receiver's machine; where the replies after a stream begin
        self.queued = 0
        self.sent = 0
        self.acked = 0
        self.replies_from = 0
        self.in_flight: deque[_Chunk] = deque()  # the stream's chunks not acknowledged whole
        self.acked_pos: Position | None = None  # the last message of the last chunk acknowledged whole
        self.stream: MessageStream | None = None
        self.connected = now
        self.last_request = now
        self.active = now  # the receiver's last progress: a request, or bytes acknowledged
        self.ack_wait = now  # since when bytes wait for the receiver without any acknowledged
        self.caught_up = False
        self.next_poll = 0.0
        self.pending_confirm: Position | None = None
        self.stored_at = 0.0
        self.bad = 0
        self.interest = _READ
        self.beyond_warned = False
        self.started_from: Position | None = None
        self.started_tx_seq: int | None = None  # the first transaction the stream sends a message of

    @property
    def pending(self) -> int:
        """Bytes waiting in serve for the socket."""
        return len(self.out) - self.out_pos

    @property
    def outstanding(self) -> int:
        """Bytes queued that the receiver's machine has not acknowledged (in serve or the kernel)."""
        return self.queued - self.acked

    def acknowledged(self, now: float) -> None:
        """Learn from the kernel how far the receiver's machine has acknowledged the bytes."""
        acked = self.sent - _unacknowledged(self.sock)
        if acked > self.acked:
            self.acked = acked
            self.active = self.ack_wait = now
            while self.in_flight and self.in_flight[0].end <= acked:
                self.acked_pos = self.in_flight.popleft().last

    def received_up_to(self, now: float) -> Position | None:
        """The position of the last message of the stream the receiver can have received:
        the last whose bytes its machine acknowledged."""
        self.acknowledged(now)
        if self.in_flight and self.acked > self.in_flight[0].start:
            return self.in_flight[0].received_up_to(self.acked) or self.acked_pos
        return self.acked_pos

    def forget_stream(self) -> None:
        """The stream stopped: what follows are replies, and the next stream's chunks."""
        self.in_flight.clear()
        self.acked_pos = None
        self.replies_from = self.queued


class StreamServer:
    """Serves ``opts.changefeed`` on ``opts.host:opts.port``; :meth:`run` until ``stop``.
    Creating it takes the state's lock, loads the confirmed position, lists the
    changefeed and binds the address: each fails here, with a :class:`ServeError` or
    the changefeed's own error, before anything is served."""

    def __init__(self, opts: ServeOptions) -> None:
        self.opts = opts
        self.state_dir = opts.state_dir or default_state_dir(opts.changefeed)
        assert self.state_dir is not None, "a changefeed on object storage needs a state directory"
        self.feed = Changefeed(opts.changefeed)
        self.feed.refresh()
        self.store = StateStore(self.state_dir, opts.database, durable=opts.durable)
        try:
            self.confirmed: Confirmed | None = self.store.load()
            self.listener = _listen(opts.host, opts.port)
        except BaseException:
            self.store.release()
            raise
        self.address = self.listener.getsockname()[:2]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.conn: _Connection | None = None
        self.stats = ServeStats()
        self.stats.next_tx_seq = self.feed.next_tx_seq
        self._sel = selectors.DefaultSelector()

    @property
    def listen(self) -> str:
        return peer_name(self.address)

    def wake(self) -> None:
        """Make :meth:`run` look at its stop event now (from another thread)."""
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass

    def _changefeed_shown(self) -> str:
        """The changefeed as the state records it: an absolute path, or its URI."""
        return self.feed.location.uri if self.feed.location.remote else os.path.abspath(self.opts.changefeed)

    def run(self, stop: threading.Event) -> None:
        sel = self._sel
        sel.register(self.listener, _READ, "listen")
        sel.register(self._wake_r, _READ, "wake")
        previous_wakeup = None
        if threading.current_thread() is threading.main_thread():
            previous_wakeup = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        pos = self.confirmed.position if self.confirmed else None
        log.info(
            "serving %s as database %r on %s (state %s); confirmed position %s; changefeed holds tx_seq 0..%d",
            self.opts.changefeed,
            self.opts.database,
            self.listen,
            self.state_dir,
            f"c_scn {pos[0]} c_idx {pos[1]}" if pos else "none",
            self.feed.next_tx_seq - 1,
            extra={"listen": self.listen, "database": self.opts.database},
        )
        self._session()
        try:
            while not stop.is_set():
                self.stats.tick = time.monotonic()
                for key, mask in sel.select(self._timeout()):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except BlockingIOError:
                            pass
                    elif self.conn is not None and key.data is self.conn:
                        if mask & _READ:
                            self._read(self.conn)
                        if self.conn is key.data and mask & _WRITE:
                            self._flush(self.conn)
                if self.conn is not None:
                    self._step(self.conn)
                if (
                    self.conn is not None
                    and self.conn.pending_confirm is not None
                    and time.monotonic() - self.conn.stored_at >= CONFIRM_STORE_SECONDS
                ):
                    self._store_confirm(self.conn)
        finally:
            if previous_wakeup is not None:
                signal.set_wakeup_fd(previous_wakeup)
            if self.conn is not None:
                self._close(self.conn, "serve is stopping", level=logging.INFO)
            sel.close()
            self.listener.close()
            self._wake_r.close()
            self._wake_w.close()
            self.store.release()
        log.info("stopped cleanly", extra={"database": self.opts.database})

    # -- connections -------------------------------------------------------------------

    def _accept(self) -> None:
        try:
            sock, addr = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # out of descriptors, a connection reset before accept
            log.warning("accepting a connection failed: %s", exc.strerror or exc)
            return
        peer = peer_name(addr)
        if self.conn is not None:
            now = time.monotonic()
            self.conn.acknowledged(now)
            idle = now - self.conn.active
            if idle < self.opts.takeover_seconds:
                self.stats.refused += 1
                log.warning(
                    "%s: connection refused: the receiver at %s is connected (one receiver per changefeed "
                    "and database name; it made progress %.0fs ago, a new connection takes over after "
                    "%gs without)",
                    peer,
                    self.conn.peer,
                    idle,
                    self.opts.takeover_seconds,
                    extra={"peer": peer},
                )
                sock.close()
                return
            self.stats.taken_over += 1
            self._close(
                self.conn,
                f"taken over by a new connection from {peer}: no request and no byte of the stream "
                f"taken for {idle:.0f}s (--takeover-after {self.opts.takeover_seconds:g})",
                level=logging.WARNING,
            )
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
        self.conn = _Connection(sock, peer, time.monotonic())
        self.stats.connections += 1
        self._sel.register(sock, _READ, self.conn)
        log.info("%s: receiver connected", peer, extra={"peer": peer})
        self._session()

    def _close(self, conn: _Connection, why: str, level: int = logging.INFO) -> None:
        if self.conn is not conn:
            return
        try:
            self._take_last_confirms(conn)
            self._store_confirm(conn)
        finally:
            self.conn = None
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.sock.close()
            if conn.stream is not None:
                conn.stream.close()
            sent = (
                f"; {conn.stream.builder.messages:,} messages ({conn.stream.builder.transactions:,} transactions) sent"
                if conn.stream
                else ""
            )
            log.log(level, "%s: connection closed: %s%s", conn.peer, why, sent, extra={"peer": conn.peer})
            self._session()

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"receive failed: {exc.strerror or exc}")
            return
        if not data:
            self._close(conn, "the receiver closed it")
            return
        try:
            conn.inbox.extend(conn.reader.feed(data))
        except FrameTooLargeError as exc:
            self.stats.bad_requests += 1
            conn.inbox.extend(exc.facts.get("frames") or ())  # sent before it: their CONFIRMs are taken
            self._close(
                conn, f"bad request: {exc} (a request is at most {MAX_REQUEST_BYTES} bytes)", level=logging.WARNING
            )
            return
        while conn.inbox and self.conn is conn:
            self._request(conn, conn.inbox.popleft())

    def _take_last_confirms(self, conn: _Connection) -> None:
        """Before a connection is closed: read what the receiver sent and take its
        CONFIRMs (a receiver may have confirmed what it got just before serve closes)."""
        frames = list(conn.inbox)
        conn.inbox.clear()
        try:
            for _ in range(_LAST_READS):
                data = conn.sock.recv(65536)
                if not data:
                    break
                frames += conn.reader.feed(data)
        except FrameTooLargeError as exc:
            frames += exc.facts.get("frames") or ()
        except OSError:  # nothing more now (BlockingIOError), or the connection is gone
            pass
        if conn.stream is None:
            return
        for data in frames:
            try:
                req = RedoRequest.decode(data)
            except MalformedMessageError:
                continue
            if req.code == RequestCode.CONFIRM and req.database_name == self.opts.database and req.c_scn is not None:
                self._confirm(conn, req)

    def _flush(self, conn: _Connection) -> None:
        if not conn.pending:
            return
        try:
            sent = conn.sock.send(memoryview(conn.out)[conn.out_pos :])
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._close(conn, f"send failed: {exc.strerror or exc}")
            return
        if sent:
            conn.out_pos += sent
            conn.sent += sent
            self.stats.bytes_sent += sent
            if conn.out_pos == len(conn.out):
                conn.out.clear()
                conn.out_pos = 0
        self._want(conn, _READ | _WRITE if conn.pending else _READ)

    def _want(self, conn: _Connection, interest: int) -> None:
        if conn.interest != interest:
            conn.interest = interest
            self._sel.modify(conn.sock, interest, conn)

    def _queue(self, conn: _Connection, data: bytes) -> None:
        if not conn.outstanding:
            conn.ack_wait = time.monotonic()
        if conn.out_pos and conn.out_pos >= len(conn.out) // 2:
            del conn.out[: conn.out_pos]
            conn.out_pos = 0
        conn.out += data
        conn.queued += len(data)

    def _reply(self, conn: _Connection, code: ResponseCode, pos: tuple[int, int] | None = None) -> None:
        resp = RedoResponse(code)
        if pos is not None:
            resp.c_scn, resp.c_idx = pos
        self._queue(conn, frame(resp.encode()))
        self._flush(conn)
        unread = conn.queued - max(conn.sent, conn.replies_from)  # the messages of a stream stopped before aside
        if self.conn is conn and conn.stream is None and unread > MAX_UNREAD_REPLIES:
            self._close(
                conn, f"the receiver reads none of its replies ({unread:,} bytes waiting)", level=logging.WARNING
            )

    # -- the stream ----------------------------------------------------------------------

    def _step(self, conn: _Connection) -> None:
        now = time.monotonic()
        if conn.stream is None:
            if now - conn.last_request > self.opts.handshake_seconds:
                self._close(
                    conn, f"no request for {self.opts.handshake_seconds:g}s before streaming", level=logging.WARNING
                )
            return
        if conn.outstanding:
            conn.acknowledged(now)
            if conn.outstanding and now - conn.ack_wait > self.opts.stall_seconds:
                self._close(
                    conn,
                    f"the receiver took no byte of the stream for {self.opts.stall_seconds:g}s "
                    f"({conn.outstanding:,} bytes wait for it)",
                    level=logging.WARNING,
                )
                return
        chunk = self.opts.chunk_bytes
        if conn.pending >= chunk or (conn.caught_up and now < conn.next_poll):
            return
        try:  # one chunk per turn of the loop: what the receiver sends is read between two
            builder = conn.stream.builder
            messages, transactions = builder.messages, builder.transactions
            data = conn.stream.next_chunk(chunk)
            self.stats.messages_sent += builder.messages - messages
            self.stats.transactions_sent += builder.transactions - transactions
            if data:
                conn.in_flight.append(_Chunk(conn.queued, data, conn.stream.last))
                self._queue(conn, data)
                conn.caught_up = False
                self._flush(conn)
                return
            if now >= conn.next_poll:
                conn.next_poll = now + self.opts.poll_seconds
                if self.feed.refresh():
                    self.stats.next_tx_seq = self.feed.next_tx_seq
                    conn.caught_up = False
                    return  # more to make: the next turn makes it
            conn.caught_up = True
        except StreamError as exc:
            self._close(conn, f"cannot stream: {exc}", level=logging.ERROR)
        except OlrBufferError as exc:  # the changefeed: a gap, a file removed (compaction in place)
            self.feed.reset()
            self._close(conn, f"cannot read the changefeed: {exc}", level=logging.ERROR)
        except OSError as exc:
            self.feed.reset()
            self._close(conn, f"cannot read the changefeed: {exc.strerror or exc}", level=logging.ERROR)
        except Exception as exc:  # pyarrow's errors on a file that is not what its footer said
            if type(exc).__module__.startswith("pyarrow"):
                self.feed.reset()
                self._close(conn, f"cannot read the changefeed: {exc}", level=logging.ERROR)
            else:
                raise

    def _timeout(self) -> float:
        conn = self.conn
        if conn is None:
            return 1.0
        if conn.stream is not None and conn.pending < self.opts.chunk_bytes and not conn.caught_up:
            return 0.0  # more to make and room for it
        now = time.monotonic()
        wait = min(1.0, self.opts.poll_seconds)
        if conn.stream is not None and conn.caught_up:
            wait = max(0.0, min(1.0, conn.next_poll - now))
        if conn.pending_confirm is not None:
            wait = max(0.0, min(wait, conn.stored_at + CONFIRM_STORE_SECONDS - now))
        return wait

    def _start_stream(self, conn: _Connection, start: Position | int, reply: RedoResponse) -> None:
        """Stream from ``start``: a position, or the SCN of a ``START`` (resolved here, on
        the changefeed as it is now: :data:`NO_SCN` is "from now on")."""
        now = start == NO_SCN
        try:
            self.feed.refresh()
            if not isinstance(start, Position):
                start = start_position(self.feed, start)
            conn.started_tx_seq = self.feed.transactions_before(start)
        except (OlrBufferError, OSError, ValueError) as exc:  # ValueError: pyarrow's ArrowInvalid
            self.feed.reset()
            self._reply(conn, ResponseCode.FAILED_START)
            self._close(
                conn, f"cannot read the changefeed: {getattr(exc, 'strerror', None) or exc}", level=logging.ERROR
            )
            return
        self.stats.next_tx_seq = self.feed.next_tx_seq
        conn.forget_stream()
        conn.stream = MessageStream(self.feed, self.opts.database, start)
        conn.started_from = start
        conn.caught_up = False
        conn.next_poll = time.monotonic() + self.opts.poll_seconds
        self._queue(conn, frame(reply.encode()))
        self._flush(conn)
        log.info(
            "%s: streaming from c_scn %d c_idx %d%s",
            conn.peer,
            start.c_scn,
            start.c_idx,
            " (from now on: the first message published after the request)"
            if now
            else " (above any commit SCN a changefeed holds: nothing will come)"
            if start.c_scn > MAX_C_SCN
            else "",
            extra={"peer": conn.peer, "c_scn": start.c_scn, "c_idx": start.c_idx},
        )
        self._session()

    # -- requests ------------------------------------------------------------------------

    def _request(self, conn: _Connection, data: bytes) -> None:
        conn.last_request = conn.active = time.monotonic()
        try:
            req = RedoRequest.decode(data)
        except MalformedMessageError as exc:
            self._bad(conn, f"malformed request ({len(data)} bytes: {data[:32].hex()}): {exc}")
            return
        code = req.code
        if code == RequestCode.CONFIRM:
            if conn.stream is None:
                self._bad(conn, "CONFIRM before streaming")
            elif req.database_name != self.opts.database:
                log.warning(
                    "%s: CONFIRM for database %r ignored: this is %r",
                    conn.peer,
                    req.database_name,
                    self.opts.database,
                    extra={"peer": conn.peer},
                )
            elif req.c_scn is None:
                self._bad(conn, "CONFIRM without c_scn")
            else:
                self._confirm(conn, req)
            return
        self._store_confirm(conn)
        # an INFO is a receiver's poll (SynchDB's and StreamClient's ask it on every
        # reconnect and Debezium's adapter now and then): at DEBUG, as OpenLogReplicator
        # traces it; START and CONTINUE change what is streamed: at INFO
        log.log(
            logging.DEBUG if code == RequestCode.INFO else logging.INFO,
            "%s: %s",
            conn.peer,
            req.describe(),
            extra={"peer": conn.peer, "request": code_name(code, RequestCode)},
        )
        if code not in (RequestCode.INFO, RequestCode.START, RequestCode.CONTINUE):
            self._bad(conn, f"unknown request code {code}")
            return
        if code != RequestCode.INFO and conn.stream is not None:
            self._bad(conn, f"{code_name(code, RequestCode)} while streaming (only CONFIRM and INFO are)")
            return
        if conn.stream is not None:  # INFO while streaming: the stream stops, the handshake starts again
            conn.stream.close()
            conn.stream = None
            conn.forget_stream()  # the messages queued go out, then the answer
            log.info("%s: INFO while streaming: streaming stopped", conn.peer, extra={"peer": conn.peer})
            self._session()
        if req.database_name != self.opts.database:
            self.stats.bad_requests += 1
            log.warning(
                "%s: %s for database %r: this is %r, answered INVALID_DATABASE",
                conn.peer,
                code_name(code, RequestCode),
                req.database_name,
                self.opts.database,
                extra={"peer": conn.peer},
            )
            self._reply(conn, ResponseCode.INVALID_DATABASE)
            return
        confirmed = self.confirmed.position if self.confirmed else None
        if code == RequestCode.INFO:
            self._reply(conn, ResponseCode.REPLICATE if confirmed else ResponseCode.READY, confirmed)
        elif code == RequestCode.START:
            if confirmed:
                self._reply(conn, ResponseCode.ALREADY_STARTED, confirmed)
            elif req.tms is not None or req.tm_rel is not None:
                log.warning(
                    "%s: START from a time is not supported (give an SCN): answered FAILED_START",
                    conn.peer,
                    extra={"peer": conn.peer},
                )
                self._reply(conn, ResponseCode.FAILED_START)
            else:  # scn NO_SCN: from now on (resolved with the changefeed listed again)
                self._start_stream(conn, req.scn or 0, RedoResponse(ResponseCode.REPLICATE))
        else:  # CONTINUE: after (c_scn, c_idx); c_scn 0 or NO_SCN: after the confirmed position
            start, after = continue_position(req.c_scn, req.c_idx, Position(*confirmed) if confirmed else None)
            if req.c_scn and req.c_scn != NO_SCN and confirmed and start <= confirmed:
                log.info(
                    "%s: CONTINUE from before the confirmed position (c_scn %d c_idx %d): streaming from there",
                    conn.peer,
                    *confirmed,
                    extra={"peer": conn.peer},
                )
            reply = RedoResponse(ResponseCode.REPLICATE)
            if after is not None:
                reply.c_scn, reply.c_idx = after
            self._start_stream(conn, start, reply)

    def _bad(self, conn: _Connection, why: str) -> None:
        self.stats.bad_requests += 1
        conn.bad += 1
        log.warning("%s: %s: answered INVALID_COMMAND", conn.peer, why, extra={"peer": conn.peer})
        self._reply(conn, ResponseCode.INVALID_COMMAND)
        if conn.bad >= MAX_BAD_REQUESTS and self.conn is conn:
            self._close(conn, f"{conn.bad} bad requests", level=logging.WARNING)

    def _confirm(self, conn: _Connection, req: RedoRequest) -> None:
        assert req.c_scn is not None
        pos = Position(req.c_scn, req.c_idx or 0)
        if conn.acked_pos is None or pos > conn.acked_pos:  # beyond what is surely received: look closer
            received = conn.received_up_to(time.monotonic())
            if received is None or pos > received:
                if not conn.beyond_warned:
                    conn.beyond_warned = True
                    log.warning(
                        "%s: CONFIRM of c_scn %d c_idx %d, beyond the last message the receiver can have "
                        "received (%s; its machine acknowledged %s of the %s bytes of this connection "
                        "serve queued): taken as that message",
                        conn.peer,
                        pos.c_scn,
                        pos.c_idx,
                        f"c_scn {received.c_scn} c_idx {received.c_idx}" if received else "none yet",
                        f"{conn.acked:,}",
                        f"{conn.queued:,}",
                        extra={"peer": conn.peer},
                    )
                if received is None:
                    return
                pos = received
        current = conn.pending_confirm or (Position(*self.confirmed.position) if self.confirmed else None)
        if current is not None and pos <= current:
            return  # the stored position never moves back
        conn.pending_confirm = pos
        self.stats.confirms += 1

    def _store_confirm(self, conn: _Connection) -> None:
        """Store the connection's last CONFIRM (one write for a run of them)."""
        pos = conn.pending_confirm
        if pos is None:
            return
        conn.pending_confirm = None
        conn.stored_at = time.monotonic()
        try:
            tx_seq, c_tm = self.feed.confirmed_transaction(pos)
        except Exception as exc:  # the changefeed could not be read: the position is stored all the same
            log.warning("cannot tell which transaction c_scn %d c_idx %d ends in: %s", pos.c_scn, pos.c_idx, exc)
            tx_seq, c_tm = None, None
        confirmed = Confirmed(
            self.opts.database, pos.c_scn, pos.c_idx, tx_seq, c_tm, time.time(), conn.peer, self._changefeed_shown()
        )
        self.store.save(confirmed)  # a failure stops serve (exit 1): a position it cannot keep is not confirmed
        self.confirmed = confirmed
        log.debug(
            "%s: confirmed c_scn %d c_idx %d (tx_seq %s)",
            conn.peer,
            pos.c_scn,
            pos.c_idx,
            tx_seq,
            extra={"peer": conn.peer, "c_scn": pos.c_scn, "c_idx": pos.c_idx},
        )

    def _session(self) -> None:
        conn = self.conn
        self.store.save_session(
            {
                "database": self.opts.database,
                "changefeed": self._changefeed_shown(),
                "listen": self.listen,
                "receiver": conn.peer if conn else None,
                "connected_at": time.time() - (time.monotonic() - conn.connected) if conn else None,
                "streaming": bool(conn and conn.stream),
                "streaming_from": list(conn.started_from) if conn and conn.stream and conn.started_from else None,
                "streaming_from_tx_seq": conn.started_tx_seq if conn and conn.stream else None,
            }
        )


@dataclass(slots=True)
class ServeStats:
    """What the server did, for its metrics (read from the metrics thread)."""

    connections: int = 0
    refused: int = 0
    bad_requests: int = 0
    confirms: int = 0
    taken_over: int = 0
    messages_sent: int = 0
    transactions_sent: int = 0
    bytes_sent: int = 0
    next_tx_seq: int = 0
    tick: float = 0.0


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=16, reuse_port=False)
    except socket.gaierror as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}", hint="check --listen HOST:PORT") from None
    except OSError as exc:
        hint = (
            "another process listens there: choose another port"
            if exc.errno == errno.EADDRINUSE
            else "check --listen HOST:PORT"
        )
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}", hint=hint) from None
    sock.setblocking(False)
    return sock
