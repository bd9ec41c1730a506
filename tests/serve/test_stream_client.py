"""A receiver that behaves as OpenLogReplicator's own StreamClient (tests/serve/receiver.py)
against a real `olr-buffer serve` process, with its three ways of starting: `now` (START
with scn 2^64-1), `next` (CONTINUE with c_scn 2^64-1 after a reconnect) and `c:SCN,IDX`
(CONTINUE at a c_idx, here inside a transaction)."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest

from tests.serve.changefeeds import Feed, Row, Tx, random_transactions
from tests.serve.model import after, expected_messages, position
from tests.serve.receiver import StreamClient, StreamClientError
from tests.serve.serve_process import ServeProcess, run_cli

pytestmark = pytest.mark.e2e


def client(serve: ServeProcess, **kw) -> StreamClient:
    return StreamClient("127.0.0.1", serve.port, "ORCL", **kw)


def closed(serve: ServeProcess, n: int, timeout: float = 60.0) -> None:
    """Wait until serve has logged ``n`` closed connections (a receiver that reconnects
    at once would otherwise meet the one before it, and be refused)."""
    deadline = time.monotonic() + timeout
    while serve.log.count("connection closed") < n:
        assert time.monotonic() < deadline, f"serve did not log {n} closed connections:\n{serve.log}"
        time.sleep(0.02)


def later_transactions(last_c_scn: int, n: int, seed: int) -> list[Tx]:
    """``n`` transactions to publish later; the first shares the commit SCN ``last_c_scn``
    of the last one published (its messages' c_idx go on from there)."""
    first = Tx(
        "0x9999.001.00000001",
        last_c_scn,
        [Row(scn=last_c_scn, after={"ID": 9}), Row(op="d", before={"ID": 9}, after=None)],
    )
    return [first, *random_transactions(random.Random(seed), n - 1, c_scn=last_c_scn)]


@pytest.fixture
def feed(tmp_path: Path):
    """A changefeed of two files, kept open to publish more while serve runs."""
    feed = Feed(tmp_path / "cf")
    txs = random_transactions(random.Random(3), 30, share=0.4)
    feed.publish(txs[:12])
    feed.publish(txs[12:])
    yield feed
    feed.close()


def test_now_gets_only_what_is_published_after_it_connected(feed):
    before = expected_messages(feed.rows(), "ORCL")
    serve = ServeProcess(feed.path)
    try:
        with client(serve, confirm_seconds=1e9) as r:  # confirms after 1000 messages only
            r.handshake("now")  # READY: START with scn 2^64-1
            more = later_transactions(before[-1]["c_scn"], 8, seed=4)
            feed.publish(more[:3])
            feed.publish(more[3:])
            everything = expected_messages(feed.rows(), "ORCL")
            assert everything[: len(before)] == before
            new = everything[len(before) :]
            assert r.read(len(new)) == new
            assert new[0]["c_scn"] == before[-1]["c_scn"] and new[0]["c_idx"] == before[-1]["c_idx"] + 1
            # status: behind by the transactions published since it started, not by the changefeed
            status = run_cli("status", "--changefeed", str(feed.path), "--json")
            (receiver,) = json.loads(status.stdout)["receivers"]
            assert receiver["streaming"] and receiver["confirmed"] is None
            assert (receiver["streaming_from"]["c_scn"], receiver["streaming_from"]["c_idx"]) == position(new[0])
            assert receiver["transactions_behind"] == len(more)
            text = run_cli("status", "--changefeed", str(feed.path)).stdout
            assert (
                f"nothing confirmed yet, streaming from c_scn {new[0]['c_scn']} c_idx {new[0]['c_idx']}: "
                f"{len(more)} transactions behind the changefeed" in text
            )
            r.confirm(*position(new[-1]))
            assert r.confirmed() == position(new[-1])  # INFO: REPLICATE, the position confirmed
        status = run_cli("status", "--changefeed", str(feed.path), "--json")
        (receiver,) = json.loads(status.stdout)["receivers"]
        assert (receiver["confirmed"]["c_scn"], receiver["confirmed"]["c_idx"], receiver["transactions_behind"]) == (
            *position(new[-1]),
            0,
        )
        assert serve.stop() == 0, serve.log
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    assert "Traceback" not in serve.log


def test_next_after_a_reconnect_gets_exactly_what_follows_the_confirmed_position(feed):
    before = expected_messages(feed.rows(), "ORCL")
    serve = ServeProcess(feed.path)
    try:
        with client(serve) as r:
            with pytest.raises(StreamClientError, match="waiting to define position"):
                r.handshake("next")  # nothing confirmed: StreamClient's next is refused by StreamClient itself
        closed(serve, 1)
        with client(serve, confirm_every=7) as r:
            r.handshake("now")
            more = later_transactions(before[-1]["c_scn"], 12, seed=5)
            feed.publish(more[:5])
            feed.publish(more[5:])
            everything = expected_messages(feed.rows(), "ORCL")
            new = everything[len(before) :]
            got = r.read(len(new) // 2)  # a CONFIRM after every 8th message; the last ones unconfirmed
            assert got == new[: len(got)] and r.confirms
            confirmed = r.confirms[-1]
        closed(serve, 2)
        with client(serve, confirm_every=5) as r:
            info = r.handshake("next")  # REPLICATE with the confirmed position: CONTINUE with c_scn 2^64-1
            assert (info["c_scn"], info["c_idx"]) == confirmed
            rest = after(everything, confirmed)
            got = r.read(len(rest) - 3)
            assert got == rest[: len(got)]
            confirmed = r.confirms[-1]
            assert r.confirmed() == confirmed  # stored before INFO is answered
            serve.proc.kill()
            assert serve.proc.wait(30) == -signal.SIGKILL
        status = run_cli("status", "--changefeed", str(feed.path), "--json")
        (receiver,) = json.loads(status.stdout)["receivers"]
        assert (receiver["confirmed"]["c_scn"], receiver["confirmed"]["c_idx"]) == confirmed
        serve = ServeProcess(feed.path)
        with client(serve) as r:  # after a kill and a restart of serve
            info = r.handshake("next")
            assert (info["c_scn"], info["c_idx"]) == confirmed
            rest = after(everything, confirmed)
            assert r.read(len(rest)) == rest
        assert serve.stop() == 0, serve.log
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    assert "Traceback" not in serve.log


def test_a_resume_at_a_c_idx_inside_a_transaction_gets_the_rest_of_it_and_nothing_before(feed):
    everything = expected_messages(feed.rows(), "ORCL")
    serve = ServeProcess(feed.path)
    try:
        with client(serve, confirm_every=9) as r:
            r.handshake("scn:0")
            got = r.read(30)
            assert got == everything[:30] and r.confirms
            confirmed = r.confirms[-1]
        closed(serve, 1)
        # a row message in the middle of a transaction of at least three rows, after the confirm
        begins = [i for i, m in enumerate(everything) if m["payload"][0]["op"] == "begin"]
        ends = [i for i, m in enumerate(everything) if m["payload"][0]["op"] == "commit"]
        start, end = next((b, e) for b, e in zip(begins, ends) if e - b >= 4 and position(everything[b]) > confirmed)
        inside = everything[start + 2]
        with client(serve) as r:
            r.handshake(f"c:{inside['c_scn']},{inside['c_idx']}")
            rest = after(everything, position(inside))
            got = r.read(len(rest))
            assert got == rest
            assert got[: end - start - 2] == everything[start + 3 : end + 1]  # the rest of its transaction
            assert got[0]["xid"] == inside["xid"] and got[0]["payload"][0]["op"] != "begin"
        assert serve.stop() == 0, serve.log
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    assert "Traceback" not in serve.log
