"""An OpenLogReplicator stand-in for the tests: a sender of its network protocol, written
from the protocol's facts (contracts sections 6 and 7; OpenLogReplicator's own network
writer, ``WriterStream``), sharing no code with olr-buffer (neither ``olr_protocol`` nor
``serve``): its own framing (:mod:`tests.olr_wire`, the tests' receiver's too), its own
protobuf decoding of ``RedoRequest`` and encoding of ``RedoResponse``.

It serves a recorded stream of messages (bytes, each with its ``(c_scn, c_idx)``) to one
receiver at a time, as OpenLogReplicator does:

* ``INFO(database)``: ``INVALID_DATABASE`` for another name; ``READY`` while no position
  is confirmed, else ``REPLICATE`` with the confirmed ``c_scn``/``c_idx``;
* ``START(scn)``: ``ALREADY_STARTED`` once a position is confirmed; else ``REPLICATE`` and
  the stream from the first message whose ``c_scn`` is at least ``scn``;
* ``CONTINUE(c_scn, c_idx)``: ``REPLICATE`` and everything after the confirmed position
  (OpenLogReplicator keeps the unconfirmed messages and sends them again), and after the
  position asked for when that is further (``c_scn`` 0: the confirmed position);
* ``CONFIRM(database, c_scn, c_idx)``: the confirmed position moves on (a request for
  another database is ignored, as OpenLogReplicator does); with a state file, it is
  stored there, so that a stand-in killed and started again resumes from it.

``python -m tests.sources.olr.standin STREAM --port N [--state FILE] [--rate R]`` runs it
as a process (the tests kill it with SIGKILL): STREAM is a file of messages, one per line.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from tests.olr_wire import (
    ALREADY_STARTED,
    CONFIRM,
    CONTINUE,
    INFO,
    INVALID_COMMAND,
    INVALID_DATABASE,
    READY,
    REPLICATE,
    START,
    framed,
    read_varint,
    varint,
)

# -- protobuf, by hand -------------------------------------------------------------------


def decode_request(data: bytes) -> dict:
    """A RedoRequest: 1 code, 2 database_name, 3 scn, 4 tms, 5 tm_rel, 6 seq, 8 c_scn, 9 c_idx."""
    req: dict = {"code": 0, "database": ""}
    names = {1: "code", 3: "scn", 5: "tm_rel", 6: "seq", 8: "c_scn", 9: "c_idx"}
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
            if number in names:
                req[names[number]] = value
        elif wire == 2:
            n, pos = read_varint(data, pos)
            value, pos = data[pos : pos + n], pos + n
            if number == 2:
                req["database"] = value.decode()
            elif number == 4:
                req["tms"] = value.decode()
        else:
            raise ValueError(f"wire type {wire}")
    return req


def encode_response(code: int, scn: int | None = None, c_scn: int = 0, c_idx: int = 0) -> bytes:
    """A RedoResponse: 1 code, 2 scn, 10 c_scn, 11 c_idx (varints; defaults left out)."""
    out = b""
    if code:
        out += b"\x08" + varint(code)
    if scn is not None:
        out += b"\x10" + varint(scn)
    if c_scn:
        out += b"\x50" + varint(c_scn)
    if c_idx:
        out += b"\x58" + varint(c_idx)
    return out


def position_of(message: bytes) -> tuple[int, int]:
    doc = json.loads(message)
    return doc.get("c_scn", 0), doc.get("c_idx", 0)


# -- the sender ------------------------------------------------------------------------------


class StandIn:
    """Serves ``messages`` (JSON bytes, in stream order) on ``host:port`` (0: a free port),
    in a thread (:meth:`start`) or in the calling thread (:meth:`serve_forever`).

    ``rate``: messages a second at most (None: as fast as the receiver takes them);
    ``hold_at``: the stream pauses before that message until :meth:`release`;
    ``state``: a file that keeps the confirmed position across a kill; ``on_confirm``:
    called with the position of each CONFIRM when it arrives."""

    def __init__(
        self,
        messages: list[bytes],
        database: str = "ORCL",
        host: str = "127.0.0.1",
        port: int = 0,
        state: Path | None = None,
        rate: float | None = None,
        hold_at: int | None = None,
        on_confirm=None,
    ) -> None:
        self.messages = list(messages)
        self.positions: list[tuple[int, int]] = []
        for m in self.messages:  # (a message that is not JSON, sent to test a receiver, is where the one before is)
            try:
                self.positions.append(position_of(m))
            except ValueError:
                self.positions.append(self.positions[-1] if self.positions else (0, 0))
        self.database = database
        self.state = state
        self.rate = rate
        self.hold_at = hold_at
        self.on_confirm = on_confirm  # called with each CONFIRM's position as it arrives
        self._released = threading.Event()
        self.confirmed: tuple[int, int] | None = None
        if state is not None and state.exists():
            self.confirmed = tuple(json.loads(state.read_text()))
        self.requests: list[dict] = []  # every request received, in order
        self.connections = 0
        self.sent = 0  # messages sent (every connection)
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._conn: socket.socket | None = None
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, port))
        self.listener.listen(4)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self._thread: threading.Thread | None = None

    @property
    def uri(self) -> str:
        return f"olr://127.0.0.1:{self.port}/{self.database}"

    def start(self) -> StandIn:
        self._thread = threading.Thread(target=self.serve_forever, name="olr-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.disconnect()
        if self._thread is not None:
            self._thread.join(10)
        self.listener.close()

    def release(self) -> None:
        self._released.set()

    def disconnect(self) -> None:
        """Close the receiver's connection (a network failure, as the receiver sees it)."""
        conn = self._conn
        if conn is not None:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def confirms(self) -> list[tuple[int, int]]:
        with self.lock:
            return [(r.get("c_scn", 0), r.get("c_idx", 0)) for r in self.requests if r["code"] == CONFIRM]

    def serve_forever(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            self._conn = conn
            try:
                self._serve(conn)
            except (OSError, ConnectionError):
                pass
            finally:
                self._conn = None
                conn.close()

    # -- one connection -----------------------------------------------------------------

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.05)
        buf = bytearray()
        streaming_from: int | None = None
        next_send = time.monotonic()
        while not self._stop.is_set():
            # requests
            try:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            except TimeoutError:
                pass
            while len(buf) >= 4:
                (n,) = struct.unpack_from("<I", buf)
                if len(buf) < 4 + n:
                    break
                req = decode_request(bytes(buf[4 : 4 + n]))
                del buf[: 4 + n]
                with self.lock:
                    self.requests.append(req)
                reply, start = self._request(req, streaming_from is not None)
                if reply is not None:
                    conn.sendall(framed(reply))
                if start is not None:
                    streaming_from = start
            # the stream
            if streaming_from is None:
                continue
            while streaming_from < len(self.messages) and not self._stop.is_set():
                if self.hold_at is not None and streaming_from >= self.hold_at and not self._released.is_set():
                    break
                if self.rate is not None:
                    now = time.monotonic()
                    if now < next_send:
                        break
                    next_send = max(next_send, now - 0.05) + 1.0 / self.rate
                conn.settimeout(30)
                conn.sendall(framed(self.messages[streaming_from]))
                conn.settimeout(0.05)
                streaming_from += 1
                self.sent += 1
                if self.rate is None and streaming_from % 64 == 0:
                    break  # look for requests now and then
            if self.rate is not None or streaming_from >= len(self.messages) or self.hold_at is not None:
                time.sleep(0.005)

    def _after(self, pos: tuple[int, int] | None) -> int:
        """The index of the first message after ``pos``."""
        if pos is None:
            return 0
        for i, p in enumerate(self.positions):
            if p > pos:
                return i
        return len(self.positions)

    def _request(self, req: dict, streaming: bool) -> tuple[bytes | None, int | None]:
        code = req["code"]
        if code == CONFIRM:
            if req["database"] != self.database:
                return None, None  # OpenLogReplicator ignores it
            pos = (req.get("c_scn", 0), req.get("c_idx", 0))
            if self.on_confirm is not None:
                self.on_confirm(pos)
            with self.lock:
                if self.confirmed is None or pos > self.confirmed:
                    self.confirmed = pos
                    if self.state is not None:
                        tmp = self.state.with_suffix(".tmp")
                        tmp.write_text(json.dumps(list(pos)))
                        os.replace(tmp, self.state)
            return None, None
        if req["database"] != self.database:
            return encode_response(INVALID_DATABASE), None
        confirmed = self.confirmed
        if code == INFO:
            if confirmed is None:
                return encode_response(READY), None
            return encode_response(REPLICATE, 0, *confirmed), None
        if streaming:
            return encode_response(INVALID_COMMAND), None
        if code == START:
            if confirmed is not None:
                return encode_response(ALREADY_STARTED, 0, *confirmed), None
            scn = req.get("scn", 0)
            start = next((i for i, p in enumerate(self.positions) if p[0] >= scn), len(self.positions))
            return encode_response(REPLICATE, scn), start
        if code == CONTINUE:
            asked = (req["c_scn"], req.get("c_idx", 0)) if req.get("c_scn") else None
            start = max(self._after(confirmed), self._after(asked))
            return encode_response(REPLICATE), start
        return encode_response(INVALID_COMMAND), None


def main(argv: list[str]) -> None:
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("stream")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--database", default="ORCL")
    p.add_argument("--state")
    p.add_argument("--rate", type=float)
    a = p.parse_args(argv)
    messages = [line for line in Path(a.stream).read_bytes().split(b"\n") if line]
    s = StandIn(messages, a.database, port=a.port, state=Path(a.state) if a.state else None, rate=a.rate)
    print(f"listening {s.port}", flush=True)
    s.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
