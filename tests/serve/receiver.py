"""A receiver of OpenLogReplicator's network protocol, written for the tests from the
protocol's facts (contracts section 6), sharing no code with olr-buffer's own encoder:
its own protobuf encoding of a ``RedoRequest`` and decoding of a ``RedoResponse``, its
own framing (:mod:`tests.olr_wire`, the stand-in sender's too), and JSON messages read
with the standard library."""

from __future__ import annotations

import json
import socket
import struct
import time

from tests.olr_wire import (
    ALREADY_STARTED,
    CONFIRM,
    CONTINUE,
    INFO,
    READY,
    REPLICATE,
    START,
    framed,
    read_varint,
    varint,
)

#: OpenLogReplicator's "no SCN" (Scn::none(), Ctx::ZERO_SCN): START from it is "now",
#: CONTINUE from it "next" (after the confirmed position)
NO_SCN = (1 << 64) - 1


def request(
    code: int,
    database: str | None = None,
    *,
    scn: int | None = None,
    tms: str | None = None,
    tm_rel: int | None = None,
    c_scn: int | None = None,
    c_idx: int | None = None,
    seq: int | None = None,
) -> bytes:
    """A RedoRequest: field 1 code, 2 database_name, 3 scn, 4 tms, 5 tm_rel (int64), 6 seq,
    8 c_scn, 9 c_idx."""
    out = b""
    if code:
        out += b"\x08" + varint(code)
    if database:
        raw = database.encode()
        out += b"\x12" + varint(len(raw)) + raw
    if scn is not None:
        out += b"\x18" + varint(scn)
    if tms is not None:
        raw = tms.encode()
        out += b"\x22" + varint(len(raw)) + raw
    if tm_rel is not None:
        out += b"\x28" + varint(tm_rel & NO_SCN)  # an int64 is its two's complement in 64 bits
    if seq is not None:
        out += b"\x30" + varint(seq)
    if c_scn is not None:
        out += b"\x40" + varint(c_scn)
    if c_idx is not None:
        out += b"\x48" + varint(c_idx)
    return out


def decode_response(data: bytes) -> dict:
    """A RedoResponse's fields by number (1 code, 2 scn, 10 c_scn, 11 c_idx), varints only."""
    fields: dict[int, int] = {}
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        assert wire == 0, f"field {number}: wire type {wire}: only varints are expected in a reply"
        fields[number], pos = read_varint(data, pos)
    return {"code": fields.get(1, 0), "scn": fields.get(2), "c_scn": fields.get(10, 0), "c_idx": fields.get(11, 0)}


class Receiver:
    """One connection to a server of the protocol."""

    def __init__(
        self, host: str, port: int, database: str = "ORCL", timeout: float = 30.0, rcvbuf: int | None = None
    ) -> None:
        self.database = database
        if rcvbuf is None:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        else:  # set before the connection, so that the window it offers is that small
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.settimeout(timeout)
            self.sock.connect((host, port))
        self._buf = bytearray()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- frames ---------------------------------------------------------------------------

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(framed(payload))

    def send(self, code: int, database: str | None = None, **fields) -> None:
        self.send_frame(request(code, self.database if database is None else database, **fields))

    def read_frame(self, timeout: float | None = None) -> bytes | None:
        """The next frame; None when the server closed the connection."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if len(self._buf) >= 4:
                (n,) = struct.unpack_from("<I", self._buf)
                if len(self._buf) >= 4 + n:
                    frame = bytes(self._buf[4 : 4 + n])
                    del self._buf[: 4 + n]
                    return frame
            if deadline is not None:
                self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                data = self.sock.recv(1 << 20)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self._buf += data

    def response(self) -> dict:
        frame = self.read_frame()
        assert frame is not None, "the server closed the connection instead of answering"
        return decode_response(frame)

    def message(self, timeout: float | None = None) -> dict | None:
        frame = self.read_frame(timeout)
        return None if frame is None else json.loads(frame)

    # -- handshakes -----------------------------------------------------------------------

    def debezium_handshake(self, scn: int = 0, c_scn: int | None = None, c_idx: int | None = None) -> dict:
        """INFO; then START(scn) on READY, CONTINUE(c_scn, c_idx) on REPLICATE (Debezium's
        adapter continues from its own offset)."""
        self.send(INFO)
        info = self.response()
        if info["code"] == READY:
            self.send(START, scn=scn)
        else:
            assert info["code"] == REPLICATE, info
            self.send(
                CONTINUE,
                c_scn=info["c_scn"] if c_scn is None else c_scn,
                c_idx=info["c_idx"] if c_idx is None else c_idx,
            )
        reply = self.response()
        assert reply["code"] == REPLICATE, reply
        return info

    def synchdb_handshake(self, scn: int = 0) -> dict:
        """START; on ALREADY_STARTED, CONTINUE with c_scn 0 (the confirmed position)."""
        self.send(START, scn=scn)
        reply = self.response()
        if reply["code"] == ALREADY_STARTED:
            self.send(CONTINUE, c_scn=0)
            reply = self.response()
        assert reply["code"] == REPLICATE, reply
        return reply

    def confirm(self, c_scn: int, c_idx: int) -> None:
        self.send(CONFIRM, c_scn=c_scn, c_idx=c_idx)

    def confirmed(self) -> tuple[int, int] | None:
        """Asks INFO (the stream stops): the server's confirmed position, or None (READY).
        Messages still on their way before the reply are dropped."""
        self.send(INFO)
        while True:
            frame = self.read_frame()
            assert frame is not None, "closed"
            if not frame.startswith(b"{"):
                r = decode_response(frame)
                return None if r["code"] == READY else (r["c_scn"], r["c_idx"])

    def messages(self, n: int, timeout: float = 30.0) -> list[dict]:
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            m = self.message(timeout=max(0.001, deadline - time.monotonic()))
            assert m is not None, f"closed after {len(out)} of {n} messages"
            out.append(m)
        return out


class StreamClientError(Exception):
    """What OpenLogReplicator's StreamClient stops with (it logs the error and exits)."""


class StreamClient(Receiver):
    """A receiver that behaves as OpenLogReplicator's own test client does (its
    ``src/StreamClient.cpp``, v1.x: ``StreamClient network HOST:PORT DATABASE json MODE``).

    :meth:`handshake` sends ``INFO``; on ``REPLICATE`` (the server has a confirmed
    position), ``CONTINUE``: MODE ``next`` is ``c_scn`` 2^64-1 and ``c_idx`` 0 ("after the
    confirmed position"), ``c:SCN,IDX`` is that position; any other MODE stops it. On
    ``READY``, ``START``: ``now`` is ``scn`` 2^64-1 ("from now on"), ``scn:SCN`` that SCN,
    ``tms:TEXT`` and ``tm_rel:N`` a time, each with an optional ``,SEQ`` (``seq``); any
    other MODE stops it. Any reply other than ``REPLICATE`` to that stops it too.

    :meth:`read` then takes the messages one by one and confirms as StreamClient does:
    after more than ``confirm_every`` messages since the last confirm (1000) or
    ``confirm_seconds`` (10 s), ``CONFIRM`` with the ``c_scn`` and ``c_idx`` of the
    message just received."""

    def __init__(
        self,
        host: str,
        port: int,
        database: str = "ORCL",
        *,
        confirm_every: int = 1000,
        confirm_seconds: float = 10.0,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(host, port, database, timeout)
        self.confirm_every = confirm_every
        self.confirm_seconds = confirm_seconds
        self.confirms: list[tuple[int, int]] = []
        self._num = 0
        self._last = time.monotonic()

    def handshake(self, mode: str) -> dict:
        """INFO, then START or CONTINUE as ``mode`` says; the INFO reply."""
        self.send(INFO)
        info = self.response()
        if info["code"] == REPLICATE:
            if mode.startswith("next"):
                self.send(CONTINUE, c_scn=NO_SCN, c_idx=0)
            elif mode.startswith("c:") and len(mode) > 4 and "," in mode[2:]:
                scn, idx = mode[2:].split(",", 1)
                self.send(CONTINUE, c_scn=int(scn), c_idx=int(idx))
            else:
                raise StreamClientError("server already stared, expected: [c:<scn>,<idx>]")
        elif info["code"] == READY:
            point, _, seq = mode.partition(",")
            fields: dict = {"seq": int(seq)} if seq else {}
            if point.startswith("now"):
                fields["scn"] = NO_SCN
            elif point.startswith("scn:"):
                fields["scn"] = int(point[4:])
            elif point.startswith("tms:"):
                fields["tms"] = point[4:]
            elif point.startswith("tm_rel:"):
                fields["tm_rel"] = int(point[7:])
            else:
                raise StreamClientError("server is waiting to define position to start")
            self.send(START, **fields)
        else:
            raise StreamClientError(f"server returned code: {info['code']} for request code: {INFO}")
        reply = self.response()
        if reply["code"] != REPLICATE:
            raise StreamClientError(f"server returned code: {reply['code']}")
        return info

    def read(self, n: int, timeout: float = 30.0) -> list[dict]:
        """The next ``n`` messages, confirming as StreamClient does."""
        out: list[dict] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            m = self.message(timeout=max(0.001, deadline - time.monotonic()))
            if m is None:
                raise StreamClientError(f"network error: closed after {len(out)} of {n} messages")
            out.append(m)
            self._num += 1
            now = time.monotonic()
            if self._num > self.confirm_every or now - self._last > self.confirm_seconds:
                self.confirm(m["c_scn"], m["c_idx"])
                self.confirms.append((m["c_scn"], m["c_idx"]))
                self._num = 0
                self._last = now
        return out
