"""The JSON messages made from changefeed rows, against the model of contracts section 6
(tests/serve/model.py): begin, rows, commit; fields and their order; (c_scn, c_idx)
strictly increasing, also across transactions that share a commit SCN; a stream that
resumes from any position gives exactly the rest."""

from __future__ import annotations

import json
import random
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from olr_buffer.olr_protocol import COLUMNS, MessageBuilder, Position, StreamError
from tests.serve.changefeeds import random_transactions
from tests.serve.model import expected_messages, position

SCHEMA = pa.schema(
    [
        ("tx_seq", pa.int64()),
        ("c_scn", pa.int64()),
        ("c_tm", pa.int64()),
        ("xid", pa.string()),
        ("op", pa.string()),
        ("scn", pa.int64()),
        ("tm", pa.int64()),
        ("owner", pa.string()),
        ("table", pa.string()),
        ("obj", pa.int64()),
        ("rid", pa.string()),
        ("before", pa.string()),
        ("after", pa.string()),
        ("sql", pa.string()),
    ]
)


def changefeed_rows(seed: int, n: int) -> list[dict]:
    rows = []
    for tx_seq, tx in enumerate(random_transactions(random.Random(seed), n)):
        for r in tx.rows:
            rows.append(
                {
                    "tx_seq": tx_seq,
                    "c_scn": tx.c_scn,
                    "c_tm": tx.c_tm,
                    "xid": tx.xid,
                    "op": r.op,
                    "scn": r.scn,
                    "tm": r.tm,
                    "owner": r.owner,
                    "table": r.table,
                    "obj": r.obj,
                    "rid": r.rid,
                    "before": None if r.before is None else json.dumps(r.before),
                    "after": None if r.after is None else json.dumps(r.after),
                    "sql": r.sql,
                }
            )
    return rows


def unframe(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    assert pos == len(data)
    return out


START = Position(0, 0)


def build(rows: list[dict], cuts: list[int], *, start=START, max_bytes=1 << 20) -> list[bytes]:
    """The builder's messages for ``rows`` cut into batches at ``cuts``."""
    b = MessageBuilder("ORCL", start)
    out = b""
    bounds = sorted({0, len(rows), *cuts})
    for lo, hi in zip(bounds, bounds[1:]):
        batch = pa.RecordBatch.from_pylist(rows[lo:hi], schema=SCHEMA)
        row = 0
        while row < batch.num_rows:
            data, row = b.add(batch, row, max_bytes)
            out += data
    return unframe(out + b.end_of_file())


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 25), data=st.data())
def test_messages_are_those_of_the_contract_however_the_rows_are_cut(seed, n, data):
    rows = changefeed_rows(seed, n)
    cuts = data.draw(st.lists(st.integers(1, len(rows)), max_size=6))
    max_bytes = data.draw(st.sampled_from([1, 200, 1 << 20]))
    frames = build(rows, cuts, max_bytes=max_bytes)
    messages = [json.loads(f) for f in frames]
    assert messages == expected_messages(rows, "ORCL")
    positions = [position(m) for m in messages]
    assert all(a < b for a, b in zip(positions, positions[1:]))
    # OpenLogReplicator's field order
    assert all(
        list(m)[:2] in (["scn", "tm"], ["scn", "c_scn"]) and list(m)[-4:] == ["c_idx", "xid", "db", "payload"]
        for m in messages
    )


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 25), data=st.data())
def test_a_stream_that_resumes_from_any_position_gives_exactly_the_rest(seed, n, data):
    rows = changefeed_rows(seed, n)
    everything = build(rows, [])
    positions = [position(json.loads(f)) for f in everything]
    pick = data.draw(st.integers(0, len(positions)))
    if pick < len(positions) and data.draw(st.booleans()):
        start = Position(*positions[pick])  # exactly a message's position
    else:  # between two messages, or past the end
        base = positions[pick - 1] if pick else (0, 0)
        start = Position(base[0], base[1] + 1)
    cuts = data.draw(st.lists(st.integers(1, len(rows)), max_size=4))
    assert build(rows, cuts, start=start, max_bytes=data.draw(st.sampled_from([1, 1 << 20]))) == [
        f for f, p in zip(everything, positions) if p >= start
    ]


def test_transactions_sharing_a_commit_scn_number_their_messages_on():
    rows = [
        {
            "tx_seq": 0,
            "c_scn": 50,
            "c_tm": 9,
            "xid": "A",
            "op": "c",
            "scn": 48,
            "tm": None,
            "owner": "O",
            "table": "T",
            "obj": None,
            "rid": "r1",
            "before": None,
            "after": '{"X":1}',
            "sql": None,
        },
        {
            "tx_seq": 1,
            "c_scn": 50,
            "c_tm": 9,
            "xid": "B",
            "op": "t",
            "scn": 50,
            "tm": 7,
            "owner": 'O"x',
            "table": "T",
            "obj": 12,
            "rid": None,
            "before": None,
            "after": None,
            "sql": None,
        },
    ]
    frames = build(rows, [])
    assert frames == [
        b'{"scn":48,"tm":9,"c_scn":50,"c_idx":0,"xid":"A","db":"ORCL","payload":[{"op":"begin"}]}',
        b'{"scn":48,"tm":9,"c_scn":50,"c_idx":1,"xid":"A","db":"ORCL","payload":[{"op":"c","schema":{"owner":"O",'
        b'"table":"T"},"rid":"r1","after":{"X":1}}]}',
        b'{"scn":50,"tm":9,"c_scn":50,"c_idx":2,"xid":"A","db":"ORCL","payload":[{"op":"commit"}]}',
        b'{"scn":50,"tm":9,"c_scn":50,"c_idx":3,"xid":"B","db":"ORCL","payload":[{"op":"begin"}]}',
        b'{"scn":50,"tm":7,"c_scn":50,"c_idx":4,"xid":"B","db":"ORCL","payload":[{"op":"ddl","schema":{"owner":"O\\"x",'
        b'"table":"T","obj":12},"sql":"TRUNCATE TABLE \\"O\\"\\"x\\".\\"T\\""}]}',
        b'{"scn":50,"tm":9,"c_scn":50,"c_idx":5,"xid":"B","db":"ORCL","payload":[{"op":"commit"}]}',
    ]


def test_a_commit_scn_that_goes_back_stops_the_stream():
    rows = changefeed_rows(1, 3)
    for r in rows:
        if r["tx_seq"] == 2:
            r["c_scn"] = rows[0]["c_scn"] - 1
    with pytest.raises(StreamError, match="tx_seq 2 has c_scn .* below"):
        build(rows, [])


def test_an_op_the_protocol_cannot_carry_stops_the_stream():
    rows = changefeed_rows(2, 1)
    rows[0]["op"] = "x"
    with pytest.raises(StreamError, match="op 'x'"):
        build(rows, [])


def test_the_builder_reads_only_the_columns_it_names():
    # the batches of these tests have no schema_version: a file written before it existed
    assert set(COLUMNS) == set(SCHEMA.names) | {"schema_version"}


def test_a_row_whose_source_named_no_owner_has_no_owner_in_its_schema():
    """A changefeed row with the empty owner (OpenLogReplicator's schemaless mode, an
    object it could not name) goes out as OpenLogReplicator sends such a row: ``schema``
    with its ``table`` alone (and ``obj`` when known), no ``owner``."""
    rows = [
        {
            "tx_seq": 0,
            "c_scn": 70,
            "c_tm": 5,
            "xid": "A",
            "op": "c",
            "scn": 69,
            "tm": None,
            "owner": "",
            "table": "OBJ_87705",
            "obj": None,
            "rid": None,
            "before": None,
            "after": '{"COL_0":"53544f50"}',
            "sql": None,
        },
        {
            "tx_seq": 0,
            "c_scn": 70,
            "c_tm": 5,
            "xid": "A",
            "op": "u",
            "scn": 69,
            "tm": None,
            "owner": "",
            "table": "OBJ_87706",
            "obj": 87706,
            "rid": None,
            "before": '{"COL_0":1}',
            "after": '{"COL_0":2}',
            "sql": None,
        },
    ]
    frames = build(rows, [])
    assert json.loads(frames[1])["payload"][0]["schema"] == {"table": "OBJ_87705"}
    assert json.loads(frames[2])["payload"][0]["schema"] == {"table": "OBJ_87706", "obj": 87706}
