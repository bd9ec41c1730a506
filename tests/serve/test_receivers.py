"""serve and the receivers it meets: one that reads as fast as it can, one that confirms
what it cannot have received, one that asks INFO with much of the stream queued, one that
reads slowly but steadily, one that stops while caught up; and the CONFIRMs a receiver
sent just before serve closes its connection. Small socket buffers make backpressure
come at once."""

from __future__ import annotations

import json
import logging
import random
import socket
import struct
import time
from pathlib import Path

import pytest

from olr_buffer.serve.state import read_confirmed
from tests.olr_wire import CONFIRM, CONTINUE, INFO, READY, REPLICATE, START
from tests.serve.changefeeds import Feed, Row, Tx, random_transactions
from tests.serve.conftest import serving
from tests.serve.model import after, expected_messages, position
from tests.serve.receiver import Receiver, decode_response, request

SMALL = 16 << 10  # a small socket buffer: the kernel holds little of the stream


@pytest.fixture(scope="module")
def backlog(tmp_path_factory) -> tuple[Path, int]:
    """A changefeed of about 30 MB of messages (transactions of 4 rows of 1 KB): more than
    the kernel's buffers hold; with the number of its messages."""
    cf = tmp_path_factory.mktemp("backlog") / "cf"
    feed = Feed(cf)
    text = {"TEXT": "y" * 1000}
    for f in range(4):
        feed.publish(
            [
                Tx(
                    f"b{f}.{i}",
                    100 + f * 10_000 + i,
                    [Row(scn=100 + f * 10_000 + i, after=text, rid=f"r{j}") for j in range(4)],
                )
                for i in range(1500)
            ]
        )
    feed.close()
    return cf, 4 * 1500 * 6


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, list[dict]]:
    feed = Feed(tmp_path / "cf")
    txs = random_transactions(random.Random(7), 40, share=0.3)
    feed.publish(txs[:20])
    feed.publish(txs[20:])
    everything = expected_messages(feed.rows(), "ORCL")
    feed.close()
    return tmp_path / "cf", everything


def wait_for(predicate, timeout: float = 30.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.01)


def stored(state: Path) -> tuple[int, int] | None:
    confirmed = read_confirmed(str(state), "ORCL")
    return confirmed.position if confirmed else None


def read_until_closed(r: Receiver) -> list[bytes]:
    frames = []
    while (f := r.read_frame(timeout=30)) is not None:
        frames.append(f)
    return frames


def test_a_confirm_is_stored_while_a_receiver_that_keeps_up_is_streamed(backlog, tmp_path: Path):
    """The receiver reads as fast as it can and confirms the 5th transaction: the confirm
    is stored while serve still has most of the backlog to send, not once it has sent it."""
    cf, total = backlog
    state = tmp_path / "state"
    with serving(cf, state_dir=str(state), chunk_bytes=64 << 10) as server, Receiver(*server.address) as r:
        r.debezium_handshake()
        fifth = r.messages(5 * 6)[-1]
        assert fifth["payload"] == [{"op": "commit"}]
        r.confirm(*position(fifth))
        while stored(state) is None:  # reading on, as fast as it can
            assert r.sock.recv(1 << 20), "closed"
        made_then = server.stats.messages_sent
        assert made_then < total, "the confirm was stored only once the whole backlog was made"
        assert stored(state) == position(fifth)
    with serving(cf, state_dir=str(state)) as server, Receiver(*server.address) as r:  # a reconnect goes on after it
        r.debezium_handshake()
        first = r.messages(1)[0]
        assert first["payload"] == [{"op": "begin"}] and first["c_scn"] > fifth["c_scn"]


def test_a_confirm_sent_before_a_bad_frame_is_stored_when_serve_closes(small, caplog):
    cf, everything = small
    with serving(cf) as server:
        with Receiver(*server.address) as r:
            r.debezium_handshake()
            got = r.messages(30)
            # one write: the CONFIRM, then bytes no request starts with (serve closes on them)
            confirm = request(CONFIRM, "ORCL", c_scn=got[29]["c_scn"], c_idx=got[29]["c_idx"])
            r.sock.sendall(struct.pack("<I", len(confirm)) + confirm + b"GET / HTTP/1.1\r\n")
            read_until_closed(r)
        assert server.confirmed is not None and server.confirmed.position == position(got[29])
        with Receiver(*server.address) as r:
            r.debezium_handshake()
            rest = after(everything, position(got[29]))
            assert r.messages(len(rest)) == rest
    assert "connection closed: bad request" in caplog.text


def test_a_confirm_sent_after_the_bad_request_that_closes_the_connection_is_stored(small):
    """serve closes a connection at its 16th bad request: a CONFIRM the receiver sent
    after it, already read, is stored all the same."""
    cf, everything = small
    with serving(cf) as server:
        with Receiver(*server.address) as r:
            r.debezium_handshake()
            got = r.messages(12)
            frames = [request(9, "ORCL")] * 16 + [
                request(CONFIRM, "ORCL", c_scn=got[11]["c_scn"], c_idx=got[11]["c_idx"])
            ]
            r.sock.sendall(b"".join(struct.pack("<I", len(f)) + f for f in frames))
            read_until_closed(r)
        assert server.confirmed is not None and server.confirmed.position == position(got[11])
        with Receiver(*server.address) as r:
            r.synchdb_handshake()
            rest = after(everything, position(got[11]))
            assert r.messages(len(rest)) == rest


def test_a_confirm_beyond_what_the_receiver_can_have_received_is_capped(backlog, tmp_path: Path, caplog):
    """The receiver reads 50 messages and confirms the last message of the changefeed: the
    position stored is at most the last message its machine has (read, or in its socket's
    receive queue), and at least the 50th."""
    cf, _total = backlog
    state = tmp_path / "state"
    with serving(cf, state_dir=str(state)) as server:
        server.listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL)
        r = Receiver(*server.address)
        r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL)
        try:
            r.debezium_handshake()
            got = r.messages(50)
            wait_for(lambda: server.conn is not None and server.conn.pending > 0, what="serve waiting for the socket")
            r.confirm(4 * 10_000 + 100, 5)  # the last message of the changefeed: far beyond
            wait_for(lambda: stored(state) is not None, what="the confirm being stored")
            # what the receiver's machine holds: what it read, and its socket's receive queue
            held = bytes(r._buf) + r.sock.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            last_held = None
            pos = 0
            while pos + 4 <= len(held):
                (n,) = struct.unpack_from("<I", held, pos)
                if pos + 4 + n > len(held):
                    break
                last_held = json.loads(held[pos + 4 : pos + 4 + n])
                pos += 4 + n
            bound = position(last_held) if last_held else position(got[-1])
            assert position(got[-1]) <= stored(state) <= bound
        finally:
            r.close()
    assert "beyond the last message the receiver can have received" in caplog.text


def test_info_with_much_of_the_stream_queued_stops_the_stream_and_answers(backlog):
    cf, total = backlog
    with serving(cf) as server:
        server.listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL)
        with Receiver(*server.address) as r:
            r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL)
            r.debezium_handshake()
            wait_for(
                lambda: server.conn is not None and server.conn.pending > 256 << 10, what="the stream queued in serve"
            )
            r.send(INFO)
            messages = 0
            while (frame := r.read_frame(timeout=30)) is not None and frame.startswith(b"{"):
                messages += 1
            assert frame is not None, f"closed after {messages} messages instead of answering INFO"
            assert frame == b""  # READY: nothing confirmed (an empty RedoResponse)
            assert 0 < messages < total
            r.send(START, scn=0)  # the handshake again: the stream from the start
            assert r.response()["code"] == REPLICATE
            assert r.messages(1)[0]["payload"] == [{"op": "begin"}]


def test_a_slow_but_steady_reader_is_not_taken_for_stalled(backlog, caplog):
    """The receiver takes 4 KB every 80 ms (50 KB/s): serve's send() waits for room in
    its socket's large send buffer (a third of it frees in about 7 s) longer than the
    stall timeout, but the receiver's machine acknowledges bytes all the time: it is kept.
    (A 3 s stall bound: a loaded machine may hold the receiver back for a second.)"""
    cf, _total = backlog
    with serving(cf, stall_seconds=3, chunk_bytes=64 << 10) as server:
        server.listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 512 << 10)
        with Receiver(*server.address) as r:
            r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL)
            r.debezium_handshake()
            received = 0
            t0 = time.monotonic()
            while time.monotonic() - t0 < 12:
                data = r.sock.recv(4096)
                assert data, f"closed after {received:,} bytes"
                received += len(data)
                time.sleep(0.08)
            assert server.conn is not None
    assert "took no byte of the stream" not in caplog.text


def test_a_receiver_that_stops_reading_is_still_dropped(backlog, caplog):
    cf, _total = backlog
    with serving(cf, stall_seconds=1, chunk_bytes=64 << 10) as server:
        server.listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL)
        with Receiver(*server.address) as r:
            r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL)
            r.debezium_handshake()
            r.messages(10)
            wait_for(lambda: server.conn is None, what="the stopped receiver being dropped")
    assert "the receiver took no byte of the stream for 1s" in caplog.text


def test_a_new_connection_takes_over_from_a_receiver_stopped_while_caught_up(small, caplog):
    cf, everything = small
    caplog.set_level(logging.INFO, logger="olr_buffer.serve")
    with serving(cf, takeover_seconds=0.5) as server:
        stopped = Receiver(*server.address)
        stopped.debezium_handshake()
        got = stopped.messages(len(everything))  # caught up
        stopped.confirm(*position(got[20]))
        # it stops: the connection stays open (its kernel would answer keepalives)
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, "no new connection was let in"
            r = Receiver(*server.address)
            try:
                r.send(INFO)
                frame = r.read_frame(timeout=30)
            except OSError:
                frame = None
            if frame is not None:
                break
            r.close()  # refused: the stopped one made progress too recently
        with r:
            info = decode_response(frame)  # the position the stopped one confirmed, stored
            assert (info["code"], info["c_scn"], info["c_idx"]) == (REPLICATE, *position(got[20]))
            r.send(CONTINUE, c_scn=0)
            assert r.response()["code"] == REPLICATE
            rest = after(everything, position(got[20]))
            assert r.messages(len(rest)) == rest
        assert stopped.read_frame(timeout=30) is None  # closed by serve
        stopped.close()
    assert "taken over by a new connection from 127.0.0.1:" in caplog.text
    assert server.stats.taken_over == 1


def test_a_receiver_that_makes_progress_is_not_taken_over(small, caplog):
    cf, everything = small
    with serving(cf, takeover_seconds=600) as server:
        with Receiver(*server.address) as first:
            first.debezium_handshake()
            first.messages(len(everything))
            with Receiver(*server.address) as second:
                assert second.read_frame(timeout=10) is None  # refused at once
            assert first.confirmed() is None  # still served
    assert server.stats.refused == 1 and server.stats.taken_over == 0


@pytest.mark.e2e
def test_serve_takes_its_takeover_time_from_the_command_line(small):
    from tests.serve.serve_process import ServeProcess

    cf, everything = small
    serve = ServeProcess(cf, "--takeover-after", "0")
    try:
        with serve.receiver() as first:
            first.debezium_handshake()
            first.messages(len(everything))
            with serve.receiver() as second:  # 0: a new connection always takes over
                second.send(INFO)
                assert second.response()["code"] == READY
            assert first.read_frame(timeout=30) is None
        assert serve.stop() == 0
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    assert "taken over by a new connection" in serve.log


def test_info_polls_are_logged_at_debug_and_start_at_info(small, caplog):
    """A receiver asks INFO on every reconnect (and some now and then): serve logs those
    at DEBUG, as OpenLogReplicator traces them; the START that begins a stream at INFO."""
    cf, _ = small
    with caplog.at_level(logging.DEBUG, logger="olr_buffer.serve"), serving(cf) as server:
        with Receiver(*server.address) as r:
            for _ in range(5):
                r.send(INFO)
                r.response()
            r.debezium_handshake()
            r.messages(1)
    requests = [rec for rec in caplog.records if rec.__dict__.get("request")]
    infos = [rec for rec in requests if rec.__dict__["request"] == "INFO"]
    starts = [rec for rec in requests if rec.__dict__["request"] == "START"]
    assert len(infos) == 6 and all(rec.levelno == logging.DEBUG for rec in infos)
    assert len(starts) == 1 and starts[0].levelno == logging.INFO
