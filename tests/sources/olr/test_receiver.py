"""The receiver against the stand-in, with the changefeed's published position in the
test's hands: what it confirms and when, what it appends, what it refuses."""

from __future__ import annotations

import json
import random
import threading
from contextlib import contextmanager

import pytest

from olr_buffer.changes import BEGIN, COMMIT, ROLLBACK, ROW_CODES, decode_records, read_summary
from olr_buffer.sources.olr import OlrReceiver, OlrSourceError, OlrStreamError, parse_location
from olr_buffer.sources.olr.state import STATE_KEY, load_state
from olr_buffer.testing import MemoryQueue
from tests.sources.olr.service import wait_for
from tests.sources.olr.standin import StandIn, position_of
from tests.sources.olr.streams import FORMS, messages, workload


@contextmanager
def receiving(sender: StandIn, queue: MemoryQueue, published: dict, database: str | None = None, **options):
    """An :class:`OlrReceiver` of ``sender`` in a thread; ``published["pos"]`` is what it
    is told the changefeed made durable. Yields a dict that gets ``error``."""
    stop = threading.Event()
    loc = parse_location(sender.uri if database is None else f"olr://127.0.0.1:{sender.port}/{database}")
    state = load_state(queue.meta_items(b"olr/"))
    r = OlrReceiver(
        queue, loc, state=state, published=lambda: published.get("pos"), stop=stop, status_interval=0.05, **options
    )
    box: dict = {"receiver": r}

    def body():
        try:
            r.run()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    try:
        yield box
    finally:
        stop.set()
        t.join(30)
        assert not t.is_alive()


def records(queue: MemoryQueue) -> list[tuple[int, list]]:
    """Every record of the queue with its block's thread, in queue order."""
    out = []
    i = queue.first_index
    while i < queue.next_index:
        block = queue.read_block(i)
        summary = read_summary(block.record(0))
        for g in summary.groups:
            _, start, count = g[0], g[1], g[2]
            for rec in decode_records(block.span(start, start + count), count):
                out.append((summary.thread, g[0], rec))
        i = block.end
    return out


def commit_positions(msgs: list[bytes]) -> list[tuple[int, int]]:
    return [position_of(m) for m in msgs if b'"op":"commit"' in m]


def test_confirms_only_what_is_published_and_checkpoints_when_idle():
    txs = workload(random.Random(3), 12)
    msgs = messages(txs, FORMS["per-row-all"])  # with a checkpoint message after every third transaction
    last_chkpt = max(i for i, m in enumerate(msgs) if b"chkpt" in m)
    commits = commit_positions(msgs)
    queue = MemoryQueue()
    published: dict = {}
    with StandIn(msgs, hold_at=last_chkpt) as sender, receiving(sender, queue, published) as box:
        wait_for(lambda: box["receiver"].last_commit == commits[-1] or "error" in box, what="every commit appended")
        assert sender.confirms() == [], "confirmed before anything was published"
        published["pos"] = commits[4]
        wait_for(lambda: sender.confirms(), what="a confirm")
        assert sender.confirms() == [commits[4]]
        published["pos"] = commits[-1]
        wait_for(lambda: sender.confirms()[-1] == commits[-1], what="the last commit confirmed")
        # idle: every transaction published, a checkpoint message comes: it is confirmed too
        sender.release()
        wait_for(lambda: sender.confirms()[-1] == position_of(msgs[last_chkpt]), what="the checkpoint confirmed")
    assert "error" not in box
    confirms = sender.confirms()
    assert confirms == sorted(set(confirms)), "confirms go forward, each once"
    for req in sender.requests:
        assert req["database"] == "ORCL", (
            "every request names the database (OpenLogReplicator ignores a CONFIRM without)"
        )
    st = load_state(queue.meta_items(b"olr/"))
    assert st.checkpoints == sum(b"chkpt" in m for m in msgs)


def test_records_go_to_the_queue_before_the_commit_arrives():
    txs = workload(random.Random(4), 3, large=3000)
    msgs = messages(txs, FORMS["per-row"])
    big_commit = commit_positions(msgs)[1]
    hold = next(i for i, m in enumerate(msgs) if position_of(m) == big_commit)
    queue = MemoryQueue()
    with StandIn(msgs, hold_at=hold) as sender, receiving(sender, queue, {}, block_records=256) as box:
        wait_for(lambda: sender.sent == hold and box["receiver"].builder.count == 0, what="the rows sent, appended")
        recs = records(queue)
        rows = [r for t, x, r in recs if r[0] in ROW_CODES]
        assert len(rows) >= 3000, "the large transaction's rows are in the queue before its commit"
        st = load_state(queue.meta_items(b"olr/"))
        assert st.open is not None and st.open.rows == 3000 and st.last_commit == commit_positions(msgs)[0]
        sender.release()
        wait_for(lambda: box["receiver"].last_commit == commit_positions(msgs)[-1], what="the last commit")
    recs = records(queue)
    commits = [(t, r) for t, x, r in recs if r[0] == COMMIT]
    assert [(r[1], r[4]) for t, r in commits] == commit_positions(msgs)  # key (c_scn, 1, 0, c_idx)
    assert {t for t, r in commits} == {1}


def test_a_lost_connection_rolls_back_the_partial_transaction_and_takes_it_again():
    txs = workload(random.Random(5), 6, large=500)
    msgs = messages(txs, FORMS["per-row"])
    hold = next(i for i, m in enumerate(msgs) if position_of(m) == commit_positions(msgs)[3]) - 100
    queue = MemoryQueue()
    published: dict = {}
    with StandIn(msgs, hold_at=hold) as sender, receiving(sender, queue, published, block_records=64) as box:
        wait_for(lambda: sender.sent == hold and box["receiver"].builder.count == 0, what="half the large one")
        published["pos"] = commit_positions(msgs)[1]
        wait_for(lambda: sender.confirms(), what="a confirm")
        sender.disconnect()  # the connection is lost mid-transaction
        sender.release()
        wait_for(lambda: box["receiver"].last_commit == commit_positions(msgs)[-1], 60, "the last commit")
    recs = records(queue)
    big = txs[3]
    xid = f"0x{big.xid >> 48:04x}.{(big.xid >> 32) & 0xFFFF:03x}.{big.xid & 0xFFFFFFFF:08x}"
    codes = [r[0] for t, x, r in recs if x == xid]
    assert codes.count(ROLLBACK) == 1 and codes.count(BEGIN) == 2 and codes.count(COMMIT) == 1
    assert codes[-1] == COMMIT and codes[codes.index(ROLLBACK) + 1] == BEGIN
    # the transactions appended before the loss are not appended again
    for tx in txs[:3]:
        xid = f"0x{tx.xid >> 48:04x}.{(tx.xid >> 32) & 0xFFFF:03x}.{tx.xid & 0xFFFFFFFF:08x}"
        assert [r[0] for t, x, r in recs if x == xid].count(COMMIT) == 1
    assert box["receiver"].skipped > 0, "the sender sent again what came after the confirmed position"
    assert sender.connections == 2


@pytest.mark.parametrize(
    "bad, reason",
    [
        (b'{"c_scn":7000,"c_idx":0,"xid":"x", not json', "not valid JSON"),
        (b'{"c_scn":5000,"c_idx":0,"xid":"0x1.1.1","payload":[{"op":"begin"}]}', "must increase"),
        (b'{"c_scn":90000,"c_idx":0,"xid":"0x1.1.1","payload":[{"op":"lob"}]}', "unknown op 'lob'"),
        (b'{"c_scn":90000,"c_idx":0,"xid":"0x1.1.1","payload":[{"op":"commit"}]}', "a commit with no transaction open"),
        (
            b'{"scn":90001,"c_scn":90000,"c_idx":0,"xid":"0x1.1.1","payload":[{"op":"c","schema":{"table":"T"},"after":{}}]}',
            "above the transaction's c_scn",
        ),
        (
            b'{"c_scn":90000,"c_idx":0,"xid":"0x1.1.1","payload":[{"op":"c","schema":{"table":"T"},"after":[1]}]}',
            "'after' is not an object",
        ),
    ],
)
def test_a_bad_message_stops_with_one_line_naming_its_position(bad, reason):
    txs = workload(random.Random(6), 5)
    msgs = messages(txs, FORMS["per-row"])
    queue = MemoryQueue()
    with StandIn([*msgs, bad]) as sender, receiving(sender, queue, {}) as box:
        wait_for(lambda: "error" in box, what="the error")
    err = box["error"]
    assert isinstance(err, OlrStreamError) and err.exit_code == 3
    text = str(err)
    assert reason in text and "\n" not in text
    last = position_of(msgs[-1])
    if reason == "not valid JSON":
        assert f"the message after c_scn {last[0]} c_idx {last[1]}" in text
    else:
        assert f"message at c_scn {json.loads(bad)['c_scn']} c_idx 0" in text
    # what came before it is in the queue, whole
    assert box["receiver"].last_commit == commit_positions(msgs)[-1]
    assert load_state(queue.meta_items(b"olr/")).last_commit == commit_positions(msgs)[-1]


def test_skip_begin_and_skip_commit_forms_are_refused_by_name():
    msgs = [
        b'{"c_scn":10,"c_idx":0,"xid":"0x1.1.1","payload":[{"op":"c","schema":{"table":"T"},"after":{"A":1}}]}',
        b'{"c_scn":10,"c_idx":1,"xid":"0x1.1.1","payload":[{"op":"commit"}]}',
    ]
    with StandIn(msgs) as sender, receiving(sender, MemoryQueue(), {}) as box:
        wait_for(lambda: "error" in box, what="the error")
    assert "message 4 and 8" in str(box["error"])


def test_another_database_name_is_one_line_and_no_retry():
    with (
        StandIn(messages(workload(random.Random(7), 2), FORMS["per-row"])) as sender,
        receiving(sender, MemoryQueue(), {}, database="OTHER") as box,
    ):
        wait_for(lambda: "error" in box, what="the error")
    err = box["error"]
    assert isinstance(err, OlrSourceError) and err.exit_code == 1
    assert "INVALID_DATABASE" in str(err) and "'OTHER'" in str(err) and "the start of the stream" in str(err)
    assert sender.connections == 1


def test_a_queue_of_another_database_is_refused():
    queue = MemoryQueue()
    with StandIn(messages(workload(random.Random(8), 2), FORMS["per-row"])) as sender:
        with receiving(sender, queue, {}) as box:
            wait_for(lambda: box["receiver"].transactions == 2, what="two transactions")
        with pytest.raises(OlrSourceError, match="filled from database 'ORCL'"):
            OlrReceiver(
                queue,
                parse_location(f"olr://127.0.0.1:{sender.port}/OTHER"),
                state=load_state(queue.meta_items(b"olr/")),
            )


def test_an_unreachable_sender_is_retried_and_said(caplog):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    msgs = messages(workload(random.Random(9), 3), FORMS["per-row"])
    with caplog.at_level("WARNING", logger="olr_buffer.olr"):
        stop = threading.Event()
        r = OlrReceiver(MemoryQueue(), parse_location(f"olr://127.0.0.1:{port}/ORCL"), stop=stop)
        t = threading.Thread(target=r.run, daemon=True)
        t.start()
        wait_for(lambda: r.reconnects >= 1, what="a retry")
        later = StandIn(msgs, port=port).start()  # the sender comes up: the next attempt connects
        try:
            wait_for(lambda: r.transactions == 3, 30, "the transactions")
        finally:
            stop.set()
            t.join(10)
            later.stop()
    assert any("cannot connect to 127.0.0.1" in m and "connecting again in" in m for m in caplog.messages)


def test_columns_are_kept_in_the_queue():
    txs = workload(random.Random(10), 10)
    queue = MemoryQueue()
    with StandIn(messages(txs, FORMS["per-transaction"])) as sender, receiving(sender, queue, {}) as box:
        wait_for(lambda: box["receiver"].transactions == 10, what="ten transactions")
    from olr_buffer.sources.olr.state import load_columns
    from tests.sources.olr.streams import columns_sent

    kept = {(c.owner, c.table): json.loads(c.columns) for c in load_columns(queue.meta_items(b"olr/")).values()}
    assert kept == columns_sent(txs, FORMS["per-transaction"]) and kept
    assert load_state(queue.meta_items(b"olr/")).tables_with_columns == len(kept)


def test_state_key_is_stored_with_every_block():
    queue = MemoryQueue()
    with (
        StandIn(messages(workload(random.Random(11), 30), FORMS["per-row"])) as sender,
        receiving(sender, queue, {}, block_records=16) as box,
    ):
        wait_for(lambda: box["receiver"].transactions == 30, what="thirty transactions")
    assert STATE_KEY in queue.meta_items(b"olr/")


def test_after_a_restart_that_followed_an_empty_transaction_idle_checkpoints_are_confirmed():
    """A transaction without rows publishes nothing: it must not hold back the confirm of a
    checkpoint after a restart (the state keeps the last transaction with rows)."""
    msgs = [
        b'{"scn":9,"tm":1,"c_scn":10,"c_idx":0,"xid":"0x1.1.1","payload":[{"op":"begin"}]}',
        b'{"c_scn":10,"c_idx":1,"xid":"0x1.1.1","payload":[{"op":"c","schema":{"table":"T"},"after":{"A":1}}]}',
        b'{"c_scn":10,"c_idx":2,"xid":"0x1.1.1","payload":[{"op":"commit"}]}',
        b'{"scn":11,"tm":2,"c_scn":12,"c_idx":0,"xid":"0x1.1.2","payload":[{"op":"begin"}]}',
        b'{"c_scn":12,"c_idx":1,"xid":"0x1.1.2","payload":[{"op":"commit"}]}',
        b'{"scn":13,"tm":3,"c_scn":13,"c_idx":0,"payload":[{"op":"chkpt","seq":1,"offset":2}]}',
    ]
    queue = MemoryQueue()
    with StandIn(msgs, hold_at=5) as sender:
        with receiving(sender, queue, {}) as box:
            wait_for(lambda: box["receiver"].last_commit == (12, 1) and sender.sent == 5, what="both commits")
        published = {"pos": (10, 2)}  # the first transaction, the only one with rows, is published
        sender.release()
        with receiving(sender, queue, published) as box:
            wait_for(lambda: (13, 0) in sender.confirms() or "error" in box, what="the checkpoint confirmed")
    assert "error" not in box and sender.confirms() == [(10, 2), (13, 0)]


def test_begin_scn_stamps_of_openlogreplicator_2_0_are_refused_and_said_so():
    """OpenLogReplicator 2.0.0 stamps a transaction's messages with its begin SCN (its
    issue 330; 1.9.0 and earlier stamp the commit's): a transaction that began earlier
    and committed later comes after one with a higher c_scn, and its rows are above its
    c_scn. Both are refused (confirming such positions loses transactions), naming that
    version and the ones that work."""
    b_first = [  # B began at 105, committed at 110; then A, which began at 100 and committed at 120
        b'{"scn":105,"tm":1,"c_scn":105,"c_idx":0,"xid":"0x0002.001.00000001","payload":[{"op":"begin"}]}',
        b'{"c_scn":105,"c_idx":1,"xid":"0x0002.001.00000001","payload":[{"op":"c","schema":{"owner":"HR",'
        b'"table":"T"},"after":{"A":1}}]}',
        b'{"c_scn":105,"c_idx":2,"xid":"0x0002.001.00000001","payload":[{"op":"commit"}]}',
        b'{"scn":100,"tm":2,"c_scn":100,"c_idx":0,"xid":"0x0001.001.00000001","payload":[{"op":"begin"}]}',
    ]
    row_above = [  # scn in every message (scn-type 1): a row's SCN above the begin SCN that stamps it
        b'{"scn":100,"tm":1,"c_scn":100,"c_idx":0,"xid":"0x0001.001.00000001","payload":[{"op":"begin"}]}',
        b'{"scn":103,"c_scn":100,"c_idx":1,"xid":"0x0001.001.00000001","payload":[{"op":"c","schema":{"owner":'
        b'"HR","table":"T"},"after":{"A":1}}]}',
    ]
    for msgs, words in (
        (b_first, "c_scn 100 goes back below c_scn 105"),
        (row_above, "a row at scn 103, above the transaction's c_scn 100"),
    ):
        queue = MemoryQueue()
        with StandIn(msgs) as sender, receiving(sender, queue, {}) as box:
            wait_for(lambda: "error" in box, what="the error")
        err = box["error"]
        assert isinstance(err, OlrStreamError) and err.exit_code == 3
        text = str(err)
        assert "\n" not in text
        for w in (words, "OpenLogReplicator 2.0.0", "begin SCN", "issue 330", "1.9.0 or earlier"):
            assert w in text, text
