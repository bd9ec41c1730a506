"""Reading the messages a sender streams, in each form OpenLogReplicator's format options
give them (its BuilderJson): one form for all, the values' text kept exactly, a reason
for anything that cannot be read."""

from __future__ import annotations

import pytest

from olr_buffer.olr_protocol import MessageError, object_text, parse_time, raw_text, read_message


def test_the_default_form_begin_row_commit():
    begin = read_message(
        b'{"scn":4996,"tm":1700000000005002000,"c_scn":5002,"c_idx":0,"xid":"0x000f.016.000003e8",'
        b'"payload":[{"op":"begin"}]}'
    )
    assert (begin.scn, begin.tm, begin.position, begin.xid, begin.rth) == (
        4996,
        1700000000005002000,
        (5002, 0),
        "0x000f.016.000003e8",
        None,
    )
    assert [e.op for e in begin.payload] == ["begin"]
    row = read_message(
        b'{"c_scn":5002,"c_idx":1,"xid":"0x000f.016.000003e8","payload":[{"op":"u","schema":'
        b'{"owner":"HR","table":"EMP","obj":7001},"rid":"AAAR00000AAE000000","before":{"ID":7},'
        b'"after":{"ID":7,"N":1.10}}]}'
    )
    assert row.scn is None and row.tm is None  # only in a transaction's first message
    (e,) = row.payload
    assert (e.op, e.schema.owner, e.schema.table, e.schema.obj, e.rid) == ("u", "HR", "EMP", 7001, "AAAR00000AAE000000")
    assert object_text(e.before, "before") == '{"ID":7}'
    assert object_text(e.after, "after") == '{"ID":7,"N":1.10}'  # the text as sent: 1.10 stays 1.10


def test_scns_tms_xidn_rth_num_columns():
    m = read_message(
        b'{"scns":"0x0000008a33ac2263","tms":"2022-05-01T06:00:00.123456789Z","c_scn":5,"c_idx":1,'
        b'"xidn":22158,"rth":2,"db":"ORCL","payload":[{"op":"c","schema":{"owner":"A","table":"T",'
        b'"columns":[{"name":"X","type":"number","precision":38,"scale":2,"nullable":true}]},"num":3,'
        b'"offset":77,"after":{"X":123456789012345678901234567890123456.78,"S":"\\u00e9\\n"}}]}'
    )
    assert m.scn == 0x8A33AC2263 and m.tm == 1651384800123456789 and m.xid == "22158" and m.rth == 2
    assert m.db == "ORCL"
    (e,) = m.payload
    assert e.num == 3
    assert raw_text(e.schema.columns) == '[{"name":"X","type":"number","precision":38,"scale":2,"nullable":true}]'
    assert object_text(e.after, "after") == '{"X":123456789012345678901234567890123456.78,"S":"\\u00e9\\n"}'


@pytest.mark.parametrize(
    "text, ns",
    [
        ("1651384800123456789", 1651384800123456789),
        ("2022-05-01T06:00:00.123Z", 1651384800123000000),
        ("2022-05-01 06:00:00.123456", 1651384800123456000),
        ("2022-05-01 06:00:00", 1651384800000000000),
        ("1969-12-31T23:59:59Z", -1_000_000_000),
    ],
)
def test_time_text_forms(text, ns):
    assert parse_time(text) == ns


def test_one_message_per_transaction_and_checkpoints():
    m = read_message(
        b'{"scn":10,"tm":1,"c_scn":12,"c_idx":0,"xid":"1.2.3","payload":[{"op":"c","schema":{"table":'
        b'"T"},"after":{"A":1}},{"op":"d","schema":{"table":"T"},"before":{"A":1}}]}'
    )
    assert [e.op for e in m.payload] == ["c", "d"] and m.xid == "1.2.3"
    c = read_message(
        b'{"scn":12,"tm":1,"c_scn":12,"c_idx":1,"payload":[{"op":"chkpt","seq":1763,"offset":15872,"redo":true}]}'
    )
    assert [e.op for e in c.payload] == ["chkpt"] and c.xid is None


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"not json", "not valid JSON"),
        (b'{"c_scn":1,', "not valid JSON"),
        (b'{"c_scn":"1","payload":[]}', "wrong type"),
        (b'{"c_scn":1,"c_idx":0}', "no 'payload'"),
        (b'{"scns":"zz","payload":[]}', "not a hexadecimal"),
        (b'{"tms":"yesterday","payload":[]}', "not a time"),
        (b'{"payload":[{"schema":{}}]}', "wrong type or is missing"),
        (b'{"payload":[{"op":"c"}], "c_scn": 18446744073709551616}', "wrong type"),
    ],
)
def test_what_cannot_be_read_is_one_reason(data, reason):
    with pytest.raises(MessageError, match=reason) as info:
        read_message(data)
    assert info.value.exit_code == 3 and "\n" not in str(info.value)


def test_before_after_must_be_objects():
    m = read_message(b'{"payload":[{"op":"c","after":[1],"before":null}]}')
    assert object_text(m.payload[0].before, "before") is None
    with pytest.raises(MessageError, match="'after' is not an object"):
        object_text(m.payload[0].after, "after")


def test_values_beyond_int64_are_refused_not_wrapped():
    for field in ("scn", "c_scn", "c_idx", "tm"):
        with pytest.raises(MessageError, match="wrong type"):
            read_message(f'{{"{field}":{1 << 63},"payload":[]}}'.encode())
    with pytest.raises(MessageError, match="out of range"):
        read_message(b'{"scns":"0xffffffffffffffff","payload":[]}')


def test_bytes_that_are_not_json_are_said_so_whatever_the_types_before():
    with pytest.raises(MessageError, match="not valid JSON"):
        read_message(b'{"c_scn":1,"c_idx":{oops')


@pytest.mark.parametrize(
    "text", ["2262-04-12T00:00:00Z", "9999-12-31 23:59:59", "1677-09-21T00:00:00Z", "0001-01-01T00:00:00Z"]
)
def test_a_time_beyond_int64_nanoseconds_is_refused_not_kept(text):
    """``tm`` is nanoseconds in an int64 column: an ISO time the column cannot hold is the
    sender's bad input, refused when it arrives (never queued, to fail when published)."""
    with pytest.raises(MessageError, match="'tms' is out of range"):
        read_message(f'{{"tms":"{text}","payload":[]}}'.encode())
    assert parse_time("2262-04-11T23:47:16.854775807Z") == (1 << 63) - 1


@pytest.mark.parametrize(
    "data",
    [
        b'{"c_scn":1,"payload":[{"op":"c","sql":"\xed\xa0\x80"}]}',
        b'{"rth":18446744073709551616,"xid":"\xff","payload":[]}',
    ],
)
def test_strings_that_are_not_utf8_are_said_so(data):
    with pytest.raises(MessageError, match="not valid UTF-8") as info:
        read_message(data)
    assert "\n" not in str(info.value)
