"""The replication stream read from the socket (:class:`SocketStream`), against a fake
server on a socket pair: CopyData messages split anywhere by the socket, messages longer
than a read, the answers to START_REPLICATION, and the ways a stream ends."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from olr_buffer.errors import OlrBufferError
from olr_buffer.sources.postgres import connection as c
from olr_buffer.sources.postgres.connection import ConnectionLostError, PostgresError, Server, SocketStream
from olr_buffer.sources.postgres.protocol import encode_status

PASSWORD = "Sup3r-s3cret-pw"


def msg(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def error_body(code: str, text: str, severity: str = "ERROR") -> bytes:
    return b"".join(k + v.encode() + b"\0" for k, v in ((b"S", severity), (b"C", code), (b"M", text))) + b"\0"


class FakeConn:
    """What SocketStream uses of a psycopg2 connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.closed = True
        self.sock.close()


@pytest.fixture
def pair():
    ours, server = socket.socketpair()
    ours.setblocking(False)  # as libpq leaves it
    stream = SocketStream(Server(f"postgresql://u:{PASSWORD}@h/db"), FakeConn(ours))
    yield stream, server
    stream.close()
    server.close()


def started(stream: SocketStream, server: socket.socket, after: bytes = b"") -> None:
    server.sendall(msg(b"W", b"\0\0\0") + after)
    stream.start("START_REPLICATION SLOT s LOGICAL 0/0")
    sent = server.recv(1000)
    assert sent == msg(b"Q", b"START_REPLICATION SLOT s LOGICAL 0/0\0")


def drain(stream: SocketStream) -> list[bytes]:
    out = []
    while batch := stream.read_batch(0):
        out.extend(batch)
    return out


@settings(max_examples=150, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
    chunk=st.sampled_from([5, 7, 64, c.CHUNK]),
    notices=st.lists(st.integers(min_value=0, max_value=20), max_size=3),
)
def test_messages_split_anywhere_come_out_whole_and_in_order(payloads, cuts, chunk, notices):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(c, "CHUNK", chunk)
        split_and_read(payloads, cuts, notices)


def split_and_read(payloads, cuts, notices):
    ours, server = socket.socketpair()
    ours.setblocking(False)
    stream = SocketStream(Server("postgresql://u@h/db"), FakeConn(ours))
    try:
        parts = [msg(b"d", p) for p in payloads]
        for i in sorted(notices, reverse=True):  # notices and parameter changes are skipped
            parts.insert(min(i, len(parts)), msg(b"N", b"SNOTICE\0Mhello\0\0") + msg(b"S", b"a\0b\0"))
        wire = msg(b"W", b"\0\0\0") + b"".join(parts)
        bounds = sorted({0, len(wire), *(x % (len(wire) + 1) for x in cuts)})
        got: list[bytes] = []
        begun = False
        for a, b in zip(bounds, bounds[1:]):
            server.sendall(wire[a:b])
            if not begun and b >= 8:
                stream.start("START_REPLICATION")
                begun = True
            if begun:
                got.extend(drain(stream))
        assert got == payloads
    finally:
        stream.close()
        server.close()


def test_a_message_longer_than_many_reads(pair):
    stream, server = pair
    started(stream, server)
    big = bytes(range(256)) * 8000  # 2 MB, 8 reads of CHUNK
    wire = msg(b"d", big) + msg(b"d", b"after")
    server.setblocking(False)
    got = []
    view = memoryview(wire)
    while view or not got or got[-1] != b"after":
        if view:
            try:
                view = view[server.send(view) :]
            except BlockingIOError:
                pass
        got.extend(stream.read_batch(0.01))
    assert got == [big, b"after"]


def test_timeout_without_data_is_an_empty_batch(pair):
    stream, server = pair
    started(stream, server)
    assert stream.read_batch(0) == []
    assert stream.read_batch(0.05) == []
    server.sendall(msg(b"d", b"x")[:3])  # a partial message is kept, not returned
    assert stream.read_batch(0.05) == []
    server.sendall(msg(b"d", b"x")[3:])
    assert stream.read_batch(0.05) == [b"x"]


def test_error_response_ends_the_stream_after_the_messages_before_it(pair):
    stream, server = pair
    started(stream, server)
    server.sendall(
        msg(b"d", b"one")
        + msg(b"d", b"two")
        + msg(b"E", error_body("57P01", "terminating connection due to administrator command", "FATAL"))
    )
    assert stream.read_batch(0.5) == [b"one", b"two"]
    with pytest.raises(ConnectionLostError) as info:
        stream.read_batch(0)
    text = str(info.value)
    assert "the server ended the replication stream: FATAL: terminating connection due to administrator command" in text
    assert "\n" not in text and PASSWORD not in text and "u:***@h" in text


@pytest.mark.parametrize("end", [msg(b"c", b""), msg(b"C", b"COPY 0\0")])
def test_copy_done_and_command_complete_end_the_stream(pair, end):
    stream, server = pair
    started(stream, server)
    server.sendall(end)
    with pytest.raises(ConnectionLostError, match="the server ended the replication stream$"):
        stream.read_batch(0.5)


def test_socket_closed_by_the_server(pair):
    stream, server = pair
    started(stream, server)
    server.sendall(msg(b"d", b"last"))
    server.close()
    assert stream.read_batch(0.5) == [b"last"]
    with pytest.raises(ConnectionLostError, match="the server closed the connection"):
        stream.read_batch(0.5)


@pytest.mark.parametrize(
    "wire, reason",
    [
        (b"d\xff\xff\xff\xff", "invalid message length -1"),
        (b"d\0\0\0\x02", "invalid message length 2"),
        (msg(b"Z", b"I"), "unexpected message type b'Z'"),
        (msg(b"d", b""), "empty replication message"),
    ],
)
def test_malformed_stream_is_a_one_line_error(pair, wire, reason):
    stream, server = pair
    started(stream, server)
    server.sendall(wire)
    with pytest.raises(OlrBufferError, match=reason) as info:
        stream.read_batch(0.5)
    assert "\n" not in str(info.value)


def test_messages_received_with_the_copy_both_response(pair):
    stream, server = pair
    started(stream, server, after=msg(b"d", b"first") + msg(b"d", b"sec"))
    assert stream.read_batch(0) == [b"first", b"sec"]


@pytest.mark.parametrize("code, cls", [("55006", ConnectionLostError), ("42704", PostgresError)])
def test_start_replication_refused(pair, code, cls):
    stream, server = pair
    server.sendall(
        msg(b"N", b"SNOTICE\0Mfyi\0\0")
        + msg(b"E", error_body(code, f'replication slot "s" fails; password {PASSWORD}'))
        + msg(b"Z", b"I")
    )
    with pytest.raises(cls) as info:
        stream.start("START_REPLICATION SLOT s LOGICAL 0/0")
    text = str(info.value)
    assert text.startswith('postgresql://u:***@h/db: replication: ERROR: replication slot "s" fails'), text
    assert PASSWORD not in text
    assert cls is PostgresError or isinstance(info.value, ConnectionLostError)
    if cls is PostgresError:
        assert not isinstance(info.value, ConnectionLostError)


def test_status_update_is_a_copy_data_frame(pair):
    stream, server = pair
    started(stream, server)
    stream.send_status(0x200, 0x100, reply=False)
    got = server.recv(1000)
    assert got[:5] == b"d" + struct.pack("!i", 4 + 34)
    body = got[5:]
    expected = encode_status(0x200, 0x100, 0x100, 0, False)
    assert body[:25] == expected[:25] and body[33:] == expected[33:]  # all but the send time


def test_sending_to_a_closed_server_is_a_lost_connection(pair):
    stream, server = pair
    started(stream, server)
    server.close()
    with pytest.raises(ConnectionLostError, match="sending to the server"):
        for _ in range(100):  # the first send may still land in the socket's buffer
            stream.send_status(1, 1)
