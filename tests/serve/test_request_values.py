"""Every value a request can carry is a request `serve` answers, never one that stops it:
any uint64 in any field (2^64-1 is OpenLogReplicator's "no SCN": START from now on,
CONTINUE after the confirmed position), any tms text, any int64 tm_rel, with the
changefeed growing under the stream it starts."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from olr_buffer.serve import receivers_status
from olr_buffer.serve.metrics import ServeMetrics
from tests.olr_wire import (
    ALREADY_STARTED,
    CONFIRM,
    CONTINUE,
    FAILED_START,
    INFO,
    INVALID_COMMAND,
    INVALID_DATABASE,
    READY,
    REPLICATE,
    START,
)
from tests.serve.changefeeds import Feed, random_transactions
from tests.serve.conftest import serving
from tests.serve.model import expected_messages, position
from tests.serve.receiver import NO_SCN, Receiver, decode_response


def wait_for(predicate, timeout: float = 30.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.005)


EDGES = [0, 1, 2, (1 << 63) - 1, 1 << 63, (1 << 63) + 1, NO_SCN - 1, NO_SCN]


class Growing:
    """A changefeed that a test publishes to while a server in a thread serves it."""

    def __init__(self, path: Path) -> None:
        self.feed = Feed(path)
        self.rng = random.Random(8)
        self.c_scn = 1000
        self.transactions = 0
        self.publish(6)

    def publish(self, n: int) -> None:
        txs = random_transactions(self.rng, n, c_scn=self.c_scn, share=0.4)
        if self.rng.random() < 0.5:  # the first shares the last commit SCN published
            txs[0].c_scn = self.c_scn
        self.c_scn = txs[-1].c_scn
        self.feed.publish(txs)
        self.transactions += n

    def messages(self) -> list[dict]:
        return expected_messages(self.feed.rows(), "ORCL")


def serve_thread_alive() -> bool:
    return any(t.name == "serve" and t.is_alive() for t in threading.enumerate())


def streamed(
    r: Receiver,
    server,
    growing: Growing,
    start: tuple[int, int] | None,
    confirm: tuple[int | None, int | None] | None = None,
    confirmed: tuple[int, int] | None = None,
) -> str:
    """After REPLICATE: two files are published, one after the other; the receiver gets
    exactly the messages at or after ``start`` (None: the ones published after the
    request); serve takes a ``confirm`` of any values (the position it stores is never
    beyond the last message sent nor before the ``confirmed`` one), and answers an INFO.
    Returns what happened, in a few words."""
    before = growing.messages()
    for _ in range(2):  # when serve lists the second file, its stream has read the first
        growing.publish(1)
        wait_for(lambda: server.stats.next_tx_seq == growing.transactions, what="serve listing the new file")
    everything = growing.messages()
    want = everything[len(before) :] if start is None else [m for m in everything if position(m) >= start]
    assert r.messages(len(want)) == want
    if confirm is not None:
        r.send(CONFIRM, c_scn=confirm[0], c_idx=confirm[1])
    r.send(INFO)
    reply = r.read_frame(timeout=30)
    assert reply is not None and not reply.startswith(b"{"), "a message more than the stream holds, or no reply"
    if confirm is not None and confirm[0] is None:  # a CONFIRM without c_scn
        assert decode_response(reply)["code"] == INVALID_COMMAND
        reply = r.read_frame(timeout=30)
        assert reply is not None
    info = decode_response(reply)
    assert info["code"] in (READY, REPLICATE)
    if info["code"] == REPLICATE:
        stored = (info["c_scn"], info["c_idx"])
        assert confirmed is None or stored >= confirmed  # never moves back
        assert stored == confirmed or (want and stored <= position(want[-1]))  # never beyond what was sent
    return f"a stream of {'some' if want else 'no'} messages, then INFO answered {info['code']}"


@pytest.mark.parametrize(
    "request_fields",
    [
        {"code": START, "scn": 1 << 63},
        {"code": START, "scn": NO_SCN - 1},
        {"code": CONTINUE, "c_scn": 1 << 63, "c_idx": 0},
        {"code": CONTINUE, "c_scn": NO_SCN - 1},
        {"code": CONTINUE, "c_scn": 1, "c_idx": NO_SCN},
    ],
    ids=["START-2^63", "START-2^64-2", "CONTINUE-2^63", "CONTINUE-2^64-2-alone", "CONTINUE-c_idx-2^64-1"],
)
def test_a_position_beyond_the_changefeed_waits_and_serve_goes_on_as_files_come(tmp_path: Path, request_fields):
    growing = Growing(tmp_path / "cf")
    fields = dict(request_fields)
    code = fields.pop("code")
    with serving(tmp_path / "cf", poll_seconds=0.01) as server:
        with Receiver(*server.address) as r:
            r.send(code, **fields)
            assert r.response()["code"] == REPLICATE
            c_scn = fields.get("scn", fields.get("c_scn"))
            c_idx = fields.get("c_idx")
            streamed(r, server, growing, (c_scn, 0 if c_idx is None else c_idx + 1))
        wait_for(lambda: server.conn is None, what="the server noticing the closed connection")
        with Receiver(*server.address) as r:  # and the next receiver is served
            r.synchdb_handshake()
            assert r.messages(3) == growing.messages()[:3]
        assert serve_thread_alive()
    growing.feed.close()


def test_a_receiver_started_from_now_is_behind_by_what_came_after_it_not_by_the_changefeed(tmp_path: Path):
    growing = Growing(tmp_path / "cf")
    with serving(tmp_path / "cf", poll_seconds=0.01) as server, Receiver(*server.address) as r:
        r.send(START, scn=NO_SCN)
        assert r.response()["code"] == REPLICATE
        before = growing.messages()
        for n in (2, 3):
            growing.publish(n)
            wait_for(lambda: server.stats.next_tx_seq == growing.transactions, what="serve listing the new file")
        new = growing.messages()[len(before) :]
        assert r.messages(len(new)) == new
        (status,) = receivers_status(str(tmp_path / "cf"))
        assert status["confirmed"] is None and status["transactions_behind"] == 5
        assert status["streaming_from"] == {"c_scn": new[0]["c_scn"], "c_idx": new[0]["c_idx"]}
        assert 'olr_buffer_serve_transactions_behind{database="ORCL"} 5.0' in ServeMetrics(server).text().decode()
        r.confirm(*position(new[-1]))
        r.send(INFO)
        assert decode_response(r.read_frame(timeout=30))["code"] == REPLICATE
        assert 'olr_buffer_serve_transactions_behind{database="ORCL"} 0.0' in ServeMetrics(server).text().decode()
    growing.feed.close()


uint64 = st.one_of(st.sampled_from(EDGES), st.integers(0, NO_SCN))
int64 = st.one_of(st.sampled_from([0, -1, 1, -(1 << 63), (1 << 63) - 1]), st.integers(-(1 << 63), (1 << 63) - 1))


@pytest.fixture(scope="module")
def growing_server(tmp_path_factory):
    path = tmp_path_factory.mktemp("values") / "cf"
    growing = Growing(path)
    with serving(path, poll_seconds=0.01) as server:
        yield growing, server
    growing.feed.close()


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_request_is_answered_and_what_it_starts_is_the_right_stream(growing_server, data):
    """A request of any code with any values in its fields, then (when it started a stream)
    a file published and a CONFIRM of any values: the answer is the one the contract
    gives, the stream the one the position names, and serve stays up."""
    growing, server = growing_server
    try:
        with Receiver(*server.address) as r:
            exchange(r, server, growing, data)
    finally:
        wait_for(lambda: server.conn is None, what="the server noticing the closed connection")
    assert serve_thread_alive()


# a value near the changefeed's positions: an index into its commit SCNs (and each + 1), taken
# modulo their number when the request is made (the changefeed grows from one example to the
# next; what is drawn must not depend on it)
near = st.builds(lambda k: ("near", k), st.integers(0, 1 << 16))


def exchange(r: Receiver, server, growing: Growing, data) -> None:
    everything = growing.messages()
    scns = sorted({m["c_scn"] for m in everything} | {m["c_scn"] + 1 for m in everything})

    def value(v):
        return scns[v[1] % len(scns)] if isinstance(v, tuple) else v

    # every value is drawn first, whatever the server answers
    code = data.draw(
        st.sampled_from([INFO, START, START, START, CONTINUE, CONTINUE, CONTINUE, CONFIRM, None]), label="code"
    )
    unknown = data.draw(
        st.sampled_from([CONFIRM + 1, 1 << 63, NO_SCN]) | st.integers(CONFIRM + 1, NO_SCN), label="unknown code"
    )
    code = unknown if code is None else code  # None: a code the protocol does not have
    fields: dict = {"database": data.draw(st.sampled_from(["ORCL"] * 6 + ["OTHER", ""]), label="database")}
    which = data.draw(st.sampled_from(["scn", "tms", "tm_rel", None]), label="oneof")
    oneof = {
        "scn": value(data.draw(uint64 | near, label="scn")),
        "tms": data.draw(st.text(max_size=60), label="tms"),
        "tm_rel": data.draw(int64, label="tm_rel"),
    }
    if which is not None:
        fields[which] = oneof[which]
    for name in ("seq", "c_scn", "c_idx"):
        fields[name] = value(
            data.draw(st.none() | uint64 | (near if name == "c_scn" else st.integers(0, 40)), label=name)
        )
    confirm = (
        value(data.draw(st.none() | uint64 | near, label="confirm c_scn")),
        data.draw(st.none() | uint64 | st.integers(0, 40), label="confirm c_idx"),
    )
    r.send(INFO)
    info = r.response()
    confirmed = (info["c_scn"], info["c_idx"]) if info["code"] == REPLICATE else None
    r.send(code, **fields)
    reply = r.response()
    name = code if code > CONFIRM else ("INFO", "START", "CONTINUE", "CONFIRM")[code]
    event(f"request {name}: reply {reply['code']}")
    if fields["database"] != "ORCL" and code in (INFO, START, CONTINUE):
        assert reply["code"] == INVALID_DATABASE
        return
    if code == INFO:
        assert reply == info
        return
    if code not in (START, CONTINUE):  # CONFIRM before streaming, an unknown code
        assert reply["code"] == INVALID_COMMAND
        return
    start: tuple[int, int] | None
    if code == START:
        if confirmed is not None:
            assert (reply["code"], reply["c_scn"], reply["c_idx"]) == (ALREADY_STARTED, *confirmed)
            return
        if which in ("tms", "tm_rel"):
            assert reply["code"] == FAILED_START
            return
        scn = fields.get("scn") or 0
        start = None if scn == NO_SCN else (scn, 0)
    else:
        c_scn, c_idx = fields["c_scn"], fields["c_idx"]
        if not c_scn or c_scn == NO_SCN:
            start = (0, 0) if confirmed is None else (confirmed[0], confirmed[1] + 1)
        else:
            start = (c_scn, 0 if c_idx is None else c_idx + 1)
    assert reply["code"] == REPLICATE
    event(streamed(r, server, growing, start, confirm, confirmed))
