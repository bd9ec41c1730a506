"""The changefeed as serve reads it: files listed and followed, the stream from any
position across files, and the transaction a confirmed position ends in."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olr_buffer.olr_protocol import Position
from olr_buffer.serve.feed import MAX_C_SCN, NO_SCN, Changefeed, MessageStream, continue_position, start_position
from olr_buffer.sinks.parquet import ChangefeedCorruptError, list_files
from tests.serve.changefeeds import Feed, Row, Tx, random_transactions
from tests.serve.model import expected_messages, position


def unframe(data: bytes) -> list[dict]:
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        out.append(json.loads(data[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    return out


def drain(stream: MessageStream, chunk: int = 1 << 20) -> list[dict]:
    out = []
    while data := stream.next_chunk(chunk):
        out += unframe(data)
    return out


def write_files(path: Path, seed: int, sizes: list[int], share: float = 0.6) -> Feed:
    """A changefeed of len(sizes) files; many transactions share a commit SCN, so that
    runs of one c_scn cross file boundaries."""
    txs = random_transactions(random.Random(seed), sum(sizes), share=share)
    feed = Feed(path)
    at = 0
    for n in sizes:
        feed.publish(txs[at : at + n])
        at += n
    return feed


@pytest.fixture(scope="module")
def five_files(tmp_path_factory) -> tuple[Path, list[dict]]:
    path = tmp_path_factory.mktemp("cf") / "cf"
    feed = write_files(path, 7, [3, 1, 4, 2, 5])
    rows = feed.rows()
    feed.close()
    return path, expected_messages(rows, "ORCL")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_stream_from_any_position_gives_the_rest_across_files(five_files, data):
    path, everything = five_files
    feed = Changefeed(str(path))
    feed.refresh()
    positions = [position(m) for m in everything]
    pick = data.draw(st.integers(0, len(positions)))
    start = Position(*positions[pick]) if pick < len(positions) else Position(positions[-1][0], positions[-1][1] + 1)
    if data.draw(st.booleans()):  # a START from an SCN: (scn, 0)
        start = Position(start.c_scn, 0)
    stream = MessageStream(feed, "ORCL", start, batch_rows=data.draw(st.sampled_from([1, 3, 8192])))
    assert drain(stream, chunk=data.draw(st.sampled_from([1, 500, 1 << 20]))) == [
        m for m in everything if position(m) >= start
    ]


def test_the_transaction_a_position_ends_in_is_the_last_whose_commit_is_at_or_below_it(five_files):
    path, everything = five_files
    feed = Changefeed(str(path))
    feed.refresh()
    assert len(feed.files) == 5
    commits = [(position(m), tx) for tx, m in enumerate(m for m in everything if m["payload"][0]["op"] == "commit")]
    tms = {tx: m.get("tm") for tx, m in enumerate(m for m in everything if m["payload"][0]["op"] == "commit")}
    probes = {position(m) for m in everything} | {(c, i + 1) for c, i in (position(m) for m in everything)} | {(0, 0)}
    probes |= {(c - 1, 10**6) for c, _ in probes}
    for probe in sorted(probes):
        whole = [tx for pos, tx in commits if pos <= probe]
        want = (whole[-1], tms[whole[-1]]) if whole else (-1, None)
        assert feed.confirmed_transaction(Position(*probe)) == want, probe


def test_following_lists_only_the_new_files_and_the_stream_goes_on(tmp_path: Path):
    feed_w = write_files(tmp_path / "cf", 3, [2, 2])
    cf = Changefeed(str(tmp_path / "cf"))
    assert cf.refresh() == 2
    stream = MessageStream(cf, "ORCL", Position(0, 0))
    first = drain(stream)
    assert drain(stream) == [] and cf.refresh() == 0
    more = random_transactions(random.Random(4), 3, c_scn=first[-1]["c_scn"])  # the first shares the last c_scn
    feed_w.publish(more)
    assert cf.refresh() == 1 and len(cf.files) == 3
    rest = drain(stream)
    assert first + rest == expected_messages(feed_w.rows(), "ORCL")
    feed_w.close()


def test_a_listing_from_a_later_file_checks_the_chain_from_there(tmp_path: Path):
    write_files(tmp_path / "cf", 5, [2, 3, 1]).close()
    files = list_files(str(tmp_path / "cf"))
    assert [f.first for f in list_files(str(tmp_path / "cf"), start=files[1].first)] == [files[1].first, files[2].first]
    assert list_files(str(tmp_path / "cf"), start=files[2].last + 1) == []
    (tmp_path / "cf" / files[1].name).unlink()  # a gap after the start
    with pytest.raises(ChangefeedCorruptError, match="gap"):
        list_files(str(tmp_path / "cf"), start=files[0].first)


def test_a_run_of_one_commit_scn_through_three_files(tmp_path: Path):
    """PostgreSQL's initial copy: one transaction per table, all at the slot's consistent point."""
    feed = Feed(tmp_path / "cf")
    for t in range(3):
        feed.publish(
            [Tx(f"copy{t}", 500, [Row(op="r", scn=500, table=f"T{t}", rid=f'{{"id":{i}}}') for i in range(2)])]
        )
    feed.publish([Tx("next", 501, [Row()])])
    rows = feed.rows()
    feed.close()
    everything = expected_messages(rows, "db")
    assert [position(m) for m in everything][:12] == [(500, i) for i in range(12)]
    cf = Changefeed(str(tmp_path / "cf"))
    cf.refresh()
    # 4 messages a transaction: copy0 is (500, 0..3), copy1 (500, 4..7), copy2 (500, 8..11)
    assert cf.confirmed_transaction(Position(500, 10)) == (1, None)
    assert cf.confirmed_transaction(Position(500, 11)) == (2, None)
    assert cf.confirmed_transaction(Position(500, 7)) == (1, None)
    assert cf.confirmed_transaction(Position(500, 6)) == (0, None)
    assert cf.confirmed_transaction(Position(499, 99)) == (-1, None)
    assert drain(MessageStream(cf, "db", Position(500, 6))) == everything[6:]


def test_now_is_right_after_the_last_message_even_in_a_run_of_one_commit_scn_across_files(tmp_path: Path):
    """START with scn 2^64-1 (OpenLogReplicator's "now"): the stream begins with the first
    message published after the request, whose c_idx goes on from the last one's when it
    shares its commit SCN."""
    feed = Feed(tmp_path / "cf")
    cf = Changefeed(str(tmp_path / "cf"))
    assert cf.end() is None and start_position(cf, NO_SCN) == Position(0, 0)  # nothing yet: everything to come
    for t in range(3):
        feed.publish([Tx(f"copy{t}", 500, [Row(op="r", scn=500, table=f"T{t}") for _ in range(2)])])
    cf.refresh()
    assert cf.end() == Position(500, 11)  # 3 transactions of 4 messages at c_scn 500, in 3 files
    now = start_position(cf, NO_SCN)
    assert now == Position(500, 12)
    stream = MessageStream(cf, "db", now, batch_rows=1)
    assert drain(stream) == []
    feed.publish([Tx("same", 500, [Row()]), Tx("next", 501, [Row(), Row()])])
    cf.refresh()
    everything = expected_messages(feed.rows(), "db")
    assert drain(stream) == everything[12:] and position(everything[12]) == (500, 12)
    assert cf.end() == Position(501, 3) == position(everything[-1])
    # the first transaction a stream from a position sends a message of (status counts from it)
    assert [
        cf.transactions_before(Position(*p))
        for p in [
            (0, 0),
            (500, 0),
            (500, 4),
            (500, 5),
            (500, 12),
            (500, 14),
            (500, 15),
            (501, 0),
            (501, 4),
            (NO_SCN, 0),
        ]
    ] == [0, 0, 1, 1, 3, 3, 4, 4, 5, 5]
    assert start_position(cf, 501) == Position(501, 0)
    feed.close()


def test_a_position_above_any_commit_scn_of_a_changefeed_gives_nothing_as_files_come(tmp_path: Path):
    """c_scn is an int64 in the changefeed; a receiver may ask for any uint64."""
    feed = write_files(tmp_path / "cf", 2, [2])
    cf = Changefeed(str(tmp_path / "cf"))
    cf.refresh()
    streams = [
        MessageStream(cf, "db", Position(c_scn, c_idx), batch_rows=b)
        for c_scn, c_idx, b in [
            (MAX_C_SCN, 10**6, 1),
            (MAX_C_SCN + 1, 0, 8192),
            (NO_SCN, 0, 3),
            (NO_SCN, NO_SCN + 1, 1),
        ]
    ]
    for i in range(2):
        feed.publish(random_transactions(random.Random(9), 2, c_scn=5000 + 100 * i))
        cf.refresh()
        assert [drain(s) for s in streams] == [[], [], [], []]
    feed.close()


def test_continue_goes_on_after_the_confirmed_position_for_c_scn_0_and_2_64_minus_1():
    confirmed = Position(700, 3)
    for c_idx in (None, 0, 5, NO_SCN):
        assert continue_position(0, c_idx, confirmed) == (Position(700, 4), confirmed)
        assert continue_position(NO_SCN, c_idx, confirmed) == (Position(700, 4), confirmed)
        assert continue_position(None, c_idx, None) == (Position(0, 0), None)
    assert continue_position(NO_SCN, 0, None) == (Position(0, 0), None)
    assert continue_position(650, None, confirmed) == (Position(650, 0), None)  # SynchDB: c_scn alone
    assert continue_position(650, 2, confirmed) == (Position(650, 3), Position(650, 2))
    assert continue_position(NO_SCN - 1, NO_SCN, None) == (
        Position(NO_SCN - 1, NO_SCN + 1),
        Position(NO_SCN - 1, NO_SCN),
    )
