"""serve, in a thread of the test, against the tests' own receiver (tests/serve/receiver.py):
both handshakes, confirms, dropped connections, bad requests, one receiver at a time, a
receiver that reads slowly or not at all, a changefeed that grows."""

from __future__ import annotations

import logging
import random
import socket
import struct
import time
from pathlib import Path

import pytest

from olr_buffer.serve import receivers_status
from olr_buffer.serve import server as server_module
from olr_buffer.serve.metrics import ServeMetrics
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
)
from tests.serve.changefeeds import Feed, Row, Tx, random_transactions
from tests.serve.conftest import serving
from tests.serve.model import after, expected_messages, position
from tests.serve.receiver import Receiver


@pytest.fixture
def changefeed(tmp_path: Path) -> tuple[Path, list[dict]]:
    """Three files of transactions, many sharing a commit SCN."""
    feed = Feed(tmp_path / "cf")
    txs = random_transactions(random.Random(5), 40, share=0.4)
    for part in (txs[:15], txs[15:16], txs[16:]):
        feed.publish(part)
    rows = feed.rows()
    feed.close()
    return tmp_path / "cf", expected_messages(rows, "ORCL")


def connect(server, **kw) -> Receiver:
    return Receiver(*server.address, **kw)


def nothing_more(r: Receiver) -> None:
    """Nothing else comes (within a moment)."""
    with pytest.raises(TimeoutError):
        r.message(timeout=0.3)


def wait_for(predicate, timeout: float = 20.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.01)


def test_debezium_handshake_then_confirm_then_continue_after_it(changefeed):
    cf, everything = changefeed
    with serving(cf) as server:
        with connect(server) as r:
            r.send(INFO)
            assert r.response()["code"] == READY  # nothing confirmed yet
            r.send(START, scn=0)
            assert r.response()["code"] == REPLICATE
            got = r.messages(len(everything))
            assert got == everything
            mid = position(got[40])
            r.confirm(*mid)
            assert r.confirmed() == mid  # INFO answers with the confirmed position
        with connect(server) as r:
            r.send(INFO)
            info = r.response()
            assert (info["code"], info["c_scn"], info["c_idx"]) == (REPLICATE, *mid)
            r.send(CONTINUE, c_scn=info["c_scn"], c_idx=info["c_idx"])  # Debezium's adapter
            assert r.response()["code"] == REPLICATE
            rest = after(everything, mid)
            assert r.messages(len(rest)) == rest
            nothing_more(r)
        status = receivers_status(str(cf))
        assert status[0]["confirmed"]["c_scn"] == mid[0] and status[0]["serving"]


def test_synchdb_handshake_start_then_continue_after_already_started(changefeed):
    cf, everything = changefeed
    with serving(cf) as server:
        with connect(server) as r:
            assert r.synchdb_handshake()["code"] == REPLICATE  # nothing confirmed: START streams
            got = r.messages(30)
            r.confirm(*position(got[-1]))
            assert r.confirmed() == position(got[-1])
        with connect(server) as r:
            r.send(START, scn=0)
            reply = r.response()
            assert (reply["code"], reply["c_scn"], reply["c_idx"]) == (ALREADY_STARTED, *position(got[-1]))
            r.send(CONTINUE, c_scn=0)  # 0: the confirmed position
            assert r.response()["code"] == REPLICATE
            assert r.messages(len(everything) - 30) == everything[30:]


def test_start_from_an_scn_begins_at_the_first_commit_at_or_above_it(changefeed):
    cf, everything = changefeed
    c_scns = sorted({m["c_scn"] for m in everything})
    with serving(cf) as server:
        for scn in (c_scns[5], c_scns[5] - 1 if c_scns[5] - 1 > c_scns[4] else c_scns[5]):
            with connect(server) as r:
                r.send(START, scn=scn)
                assert r.response()["code"] == REPLICATE
                want = [m for m in everything if m["c_scn"] >= c_scns[5]]
                assert r.messages(len(want)) == want
                assert want[0]["payload"][0]["op"] == "begin"


def test_continue_with_a_c_scn_alone_gives_every_message_of_it_on(changefeed):
    """SynchDB continues with c_scn (its last + 1) and no c_idx."""
    cf, everything = changefeed
    shared = next(
        m["c_scn"]
        for m, n in zip(everything, everything[3:])
        if m["c_scn"] == n["c_scn"] and m["payload"][0]["op"] == "commit"
    )
    with serving(cf) as server, connect(server) as r:
        r.send(CONTINUE, c_scn=shared)
        assert r.response()["code"] == REPLICATE
        want = [m for m in everything if m["c_scn"] >= shared]
        assert r.messages(len(want)) == want


def test_every_transaction_exactly_once_after_the_confirmed_position_through_dropped_connections(changefeed):
    """A receiver whose state is what it confirmed: it reads, applies, confirms now and then,
    and loses its connection at random (the server does not see it coming). What it
    confirmed, in order, is the changefeed's stream, every message once."""
    cf, everything = changefeed
    rng = random.Random(11)
    applied: list[dict] = []
    with serving(cf) as server:
        for attempt in range(200):
            if len(applied) == len(everything):
                break
            with connect(server) as r:
                if attempt % 2:
                    r.synchdb_handshake()
                else:
                    r.debezium_handshake()
                owed = len(everything) - len(applied)
                got = r.messages(rng.randint(1, min(owed, 25)))
                assert got == everything[len(applied) : len(applied) + len(got)], (
                    "not right after the confirmed position"
                )
                keep = rng.randint(0, len(got))
                if keep:
                    r.confirm(*position(got[keep - 1]))
                    assert r.confirmed() == position(got[keep - 1])
                    applied += got[:keep]
                if rng.random() < 0.5:
                    r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
            wait_for(lambda: server.conn is None, what="the server noticing the dropped connection")
    assert applied == everything


def test_info_while_streaming_stops_the_stream_and_answers(changefeed):
    cf, everything = changefeed
    with serving(cf) as server, connect(server) as r:
        r.debezium_handshake()
        r.messages(3)
        assert r.confirmed() is None  # INFO: READY, nothing confirmed; the messages before it are dropped
        r.send(START, scn=0)  # the handshake starts again
        assert r.response()["code"] == REPLICATE
        assert r.messages(len(everything)) == everything


def test_bad_requests_are_answered_logged_and_the_server_stays_up(changefeed, caplog):
    cf, everything = changefeed
    caplog.set_level(logging.INFO, logger="olr_buffer.serve")
    with serving(cf) as server:
        with connect(server) as r:
            for code in (INFO, START, CONTINUE):
                r.send(code, database="OTHER", scn=0 if code == START else None)
                assert r.response()["code"] == INVALID_DATABASE
            r.send(9)
            assert r.response()["code"] == INVALID_COMMAND
            r.send_frame(b"\x0a\x01x")  # field 1 with a string: not a RedoRequest
            assert r.response()["code"] == INVALID_COMMAND
            r.send(CONFIRM, c_scn=5, c_idx=0)  # before streaming
            assert r.response()["code"] == INVALID_COMMAND
            r.send(START, scn=0)
            assert r.response()["code"] == REPLICATE
            first = r.messages(2)
            r.send(START, scn=0)  # while streaming: refused, the stream goes on
            r.send(CONFIRM, database="OTHER", c_scn=first[1]["c_scn"], c_idx=first[1]["c_idx"])  # ignored
            rest = []
            while True:
                frame = r.read_frame(timeout=10)
                if not frame.startswith(b"{"):
                    assert frame == b"\x08\x07"  # INVALID_COMMAND, in its place in the stream
                    break
                rest.append(frame)
            assert r.confirmed() is None
        with connect(server) as r:  # garbage: a length no request has
            r.send_frame(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            r.sock.sendall(b"GET / HTTP/1.1\r\n")
            assert r.read_frame(timeout=10) is None  # closed
        with connect(server) as r:
            r.debezium_handshake()
            assert r.messages(len(everything)) == everything
    log = caplog.text
    for line in (
        "for database 'OTHER': this is 'ORCL', answered INVALID_DATABASE",
        "unknown request code 9",
        "malformed request (3 bytes: 0a0178): field 1: wire type 2, expected a varint",
        "CONFIRM before streaming",
        "START while streaming (only CONFIRM and INFO are)",
        "CONFIRM for database 'OTHER' ignored",
        "connection closed: bad request: a frame of 542,393,671 bytes is announced",
    ):
        assert line in log, line


def test_a_receiver_that_asks_without_reading_the_answers_is_closed(changefeed, caplog, monkeypatch):
    cf, everything = changefeed
    # a lower bound of unread replies: serve answers (and logs) every INFO, which on a loaded
    # machine took over 2 ms each, so the 16,000 replies of 64 KiB outlasted the test's wait
    monkeypatch.setattr(server_module, "MAX_UNREAD_REPLIES", 8 << 10)
    # (the handshake's idle limit out of the way: this test is about the unread replies)
    with serving(cf, handshake_seconds=600) as server:
        # a small send buffer for the connection the server accepts (it inherits the
        # listener's): otherwise the kernel takes megabytes of replies before one waits in
        # serve, which under load took longer than the test waits
        server.listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        # and a small window of the receiver's (set before it connects: set after, the
        # window it already offered stays, and the kernel takes more replies, each one
        # answered and logged by serve, before one waits in serve: under load 13 that
        # outlasted the test's wait)
        r = connect(server, rcvbuf=4096)
        wait_for(lambda: server.conn is not None, what="the connection being accepted")
        info = struct.pack("<I", 6) + b"\x12\x04ORCL"  # INFO for ORCL: READY, 4 bytes each
        t0 = time.monotonic()
        try:
            while server.conn is not None and time.monotonic() - t0 < 60:
                r.sock.sendall(info * 1_000)
        except OSError:
            pass  # closed under it
        wait_for(lambda: server.conn is None, timeout=120, what="the connection being closed")
        r.close()
        with connect(server) as r:  # the next one is served
            r.debezium_handshake()
            assert r.messages(len(everything)) == everything
    assert "the receiver reads none of its replies" in caplog.text


def test_a_connection_that_says_nothing_is_closed(changefeed):
    cf, _ = changefeed
    with serving(cf, handshake_seconds=0.5) as server, connect(server) as r:
        t0 = time.monotonic()
        assert r.read_frame(timeout=10) is None
        assert time.monotonic() - t0 < 5


def test_one_receiver_at_a_time(changefeed, caplog):
    cf, everything = changefeed
    with serving(cf) as server:
        with connect(server) as first:
            first.debezium_handshake()
            with connect(server) as second:
                assert second.read_frame(timeout=10) is None  # closed at once
            assert first.messages(len(everything)) == everything
        wait_for(lambda: server.conn is None)
        with connect(server) as third:
            third.debezium_handshake()
            assert third.messages(1) == everything[:1]
    assert "connection refused: the receiver at 127.0.0.1:" in caplog.text
    assert server.stats.refused == 1


def test_a_receiver_that_stops_reading_gets_nothing_buffered_without_bound_and_is_dropped(tmp_path: Path, caplog):
    feed = Feed(tmp_path / "cf")
    big = {"TEXT": "x" * 2000}
    for f in range(4):  # about 40 MB of messages
        feed.publish(
            [
                Tx(f"x{f}.{i}", 100 + f * 10_000 + i, [Row(after=big, rid=f"r{j}") for j in range(4)])
                for i in range(1200)
            ]
        )
    feed.close()
    with serving(tmp_path / "cf", chunk_bytes=256 << 10, stall_seconds=2) as server:
        r = Receiver(*server.address, timeout=30)
        r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        r.debezium_handshake()
        wait_for(lambda: server.conn is not None and server.conn.pending > 0, what="the socket filling up")
        time.sleep(1)
        made = server.conn.stream.builder.bytes
        waiting = server.conn.pending
        assert waiting <= 2 * (256 << 10) + 10_000, waiting
        assert made < 16 << 20, f"{made:,} bytes made for a receiver that reads nothing"
        wait_for(lambda: server.conn is None, timeout=30, what="the stalled receiver being dropped")
        r.close()
    assert "the receiver took no byte of the stream for 2s" in caplog.text


def test_a_slow_reader_gets_everything(tmp_path: Path):
    feed = Feed(tmp_path / "cf")
    txs = random_transactions(random.Random(8), 300)
    feed.publish(txs[:150])
    feed.publish(txs[150:])
    everything = expected_messages(feed.rows(), "ORCL")
    feed.close()
    with serving(tmp_path / "cf", chunk_bytes=4096) as server, connect(server) as r:
        r.debezium_handshake()
        got = []
        while len(got) < len(everything):
            got += r.messages(min(50, len(everything) - len(got)))
            time.sleep(0.005)
        assert got == everything


def test_the_stream_follows_files_published_while_it_runs(tmp_path: Path):
    feed = Feed(tmp_path / "cf")
    rng = random.Random(3)
    feed.publish(random_transactions(rng, 5))
    with serving(tmp_path / "cf", poll_seconds=0.05) as server, connect(server) as r:
        r.synchdb_handshake()
        got = r.messages(len(expected_messages(feed.rows(), "ORCL")))
        for round_ in range(3):
            last = got[-1]["c_scn"]
            feed.publish(random_transactions(rng, 4, c_scn=last + round_ % 2))  # round 0: shares the last c_scn
            everything = expected_messages(feed.rows(), "ORCL")
            got += r.messages(len(everything) - len(got))
            assert got == everything
        nothing_more(r)
    feed.close()


def test_metrics_and_status_show_the_receiver_and_its_lag(tmp_path: Path):
    feed = Feed(tmp_path / "cf")
    txs = [
        Tx(f"t{i}", 100 + i, [Row(scn=100 + i)], c_tm=1_700_000_000_000_000_000 + i * 1_000_000_000) for i in range(10)
    ]
    feed.publish(txs)
    everything = expected_messages(feed.rows(), "ORCL")
    with serving(tmp_path / "cf") as server, connect(server) as r:
        r.debezium_handshake()
        got = r.messages(len(everything))
        r.confirm(*position(got[11]))  # the commit of the 4th transaction (3 messages each)
        r.confirm(*position(got[1]))  # a position below: the stored one never moves back
        assert r.confirmed() == position(got[11])
        (status,) = receivers_status(str(tmp_path / "cf"))
        assert status["serving"] and status["receiver"].startswith("127.0.0.1:") and not status["streaming"]
        assert status["confirmed"]["tx_seq"] == 3
        assert status["transactions_behind"] == 6 and status["seconds_behind"] == 6.0
        text = ServeMetrics(server).text().decode()
        for line in (
            'olr_buffer_serve_receiver_connected{database="ORCL"} 1.0',
            'olr_buffer_serve_transactions_behind{database="ORCL"} 6.0',
            f'olr_buffer_serve_messages_sent_total{{database="ORCL"}} {float(len(everything))}',
            'olr_buffer_serve_connections_total{database="ORCL"} 1.0',
        ):
            assert line in text, line
        feed.publish([Tx("t10", 200, [Row(scn=200)], c_tm=1_700_000_000_000_000_000 + 20 * 1_000_000_000)])
        (status,) = receivers_status(str(tmp_path / "cf"))
        assert status["transactions_behind"] == 7 and status["seconds_behind"] == 17.0
    feed.close()
    (status,) = receivers_status(str(tmp_path / "cf"))
    assert not status["serving"] and status["confirmed"]["c_scn"] == got[11]["c_scn"]
