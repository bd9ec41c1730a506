"""The pgoutput decoder (pure): hand-built messages, and fuzzing: any bytes give a message
or a one-line :class:`PgoutputError`, never another exception."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from olr_buffer.errors import OlrBufferError
from olr_buffer.sources.postgres import protocol as p
from olr_buffer.sources.postgres.rows import Table, value_json


def s(text: str) -> bytes:
    return text.encode() + b"\0"


def tup(*cols) -> bytes:
    out = struct.pack("!H", len(cols))
    for c in cols:
        if c is None:
            out += b"n"
        elif c is p.UNCHANGED:
            out += b"u"
        else:
            out += b"t" + struct.pack("!i", len(c)) + c
    return out


def relation(xid: int | None = None) -> bytes:
    head = b"R" + (struct.pack("!I", xid) if xid is not None else b"")
    cols = b"".join(
        struct.pack("!B", k) + s(n) + struct.pack("!Ii", t, -1)
        for k, n, t in ((1, "id", 23), (0, "body", 25), (0, "n", 1700))
    )
    return head + struct.pack("!I", 16384) + s("public") + s("docs") + b"d" + struct.pack("!H", 3) + cols


def test_messages_of_a_streamed_transaction():
    d = p.StreamDecoder()
    assert d.decode(b"S" + struct.pack("!IB", 700, 1)) == p.StreamStart(700, True)
    rel = d.decode(relation(701))
    assert rel.xid == 701 and rel.oid == 16384 and [c.name for c in rel.columns] == ["id", "body", "n"]
    assert rel.columns[0].key and not rel.columns[1].key
    ins = d.decode(b"I" + struct.pack("!II", 701, 16384) + b"N" + tup(b"1", None, b"1.50"))
    assert ins == p.Insert(701, 16384, (b"1", None, b"1.50"))
    upd = d.decode(
        b"U" + struct.pack("!II", 700, 16384) + b"K" + tup(b"1", None, None) + b"N" + tup(b"2", p.UNCHANGED, b"NaN")
    )
    assert upd.old_kind == "K" and upd.old == (b"1", None, None) and upd.new[1] is p.UNCHANGED
    trunc = d.decode(b"T" + struct.pack("!IIB", 700, 2, 1) + struct.pack("!II", 1, 2))
    assert trunc == p.Truncate(700, (1, 2), 1)
    assert d.decode(b"E") == p.StreamStop()
    assert d.decode(b"A" + struct.pack("!II", 700, 701)) == p.StreamAbort(700, 701)
    commit = d.decode(b"c" + struct.pack("!IBQQq", 700, 0, 100, 120, 0))
    assert commit == p.StreamCommit(700, 100, 120, p.PG_EPOCH_US * 1000)
    # outside a stream block data messages have no xid
    assert d.decode(b"I" + struct.pack("!I", 16384) + b"N" + tup(b"3", b"x", None)).xid is None


def test_begin_commit_frames_and_status():
    assert p.decode_message(b"B" + struct.pack("!QqI", 500, 1_000_000, 42)) == p.Begin(
        500, (p.PG_EPOCH_US + 1_000_000) * 1000, 42
    )
    assert p.decode_message(b"C" + struct.pack("!BQQq", 0, 500, 540, 0)).end_lsn == 540
    w = p.decode_frame(b"w" + struct.pack("!QQq", 1, 2, 3) + b"E")
    assert w == p.XLogData(1, 2, 3, b"E")
    assert p.decode_frame(b"k" + struct.pack("!Qq?", 9, 0, True)) == p.Keepalive(9, 0, True)
    r = p.encode_status(10, 20, 30, p.PG_EPOCH_US, True)
    assert r[0:1] == b"r" and struct.unpack("!QQQq?", r[1:]) == (10, 20, 30, 0, True)
    assert p.parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848 and p.lsn_text(p.parse_lsn("0/1A")) == "0/1A"


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty"),
        (b"Z", "unknown pgoutput message type"),
        (b"B\0\0", "ends inside its final LSN"),
        (b"I" + struct.pack("!I", 1) + b"X", "unexpected tuple tag"),
        (b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!H", 1) + b"q", "unknown kind"),
        (b"I" + struct.pack("!I", 1), "ends inside its tuple tag"),
        (b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!H", 2) + b"n", "ends inside column 1"),
        (
            b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!H", 1) + b"t" + struct.pack("!i", 5) + b"ab",
            "ends inside column 0",
        ),
        (b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!H", 1) + b"t" + struct.pack("!i", -1), "negative length"),
        (b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!H", 1) + b"n" + b"zz", "2 unexpected trailing"),
        (b"E\0", "trailing"),
        (b"R" + struct.pack("!I", 1) + b"sch", "no terminating zero"),
    ],
)
def test_malformed_messages_are_one_line_errors(data, reason):
    with pytest.raises(p.PgoutputError, match=reason) as info:
        p.decode_message(data)
    assert "\n" not in str(info.value)


@given(st.binary(max_size=200), st.booleans())
def test_fuzz_any_bytes_decode_or_fail_cleanly(data, in_stream):
    for fn in (lambda: p.decode_message(data, in_stream), lambda: p.decode_frame(data)):
        try:
            fn()
        except OlrBufferError as exc:
            assert "\n" not in str(exc)


_VALID = [
    relation(),
    relation(5),
    b"B" + struct.pack("!QqI", 1, 2, 3),
    b"S" + struct.pack("!IB", 1, 1),
    b"I" + struct.pack("!I", 16384) + b"N" + tup(b"1", None, b"2"),
]


@given(st.sampled_from(_VALID), st.integers(0, 80), st.binary(max_size=8))
def test_fuzz_damaged_valid_messages(msg, at, junk):
    data = msg[:at] + junk + msg[at + len(junk) :]
    for in_stream in (False, True):
        try:
            p.decode_message(data, in_stream)
        except OlrBufferError as exc:
            assert "\n" not in str(exc)


def test_value_mapping():
    assert value_json(23, b"42") == b"42"
    assert value_json(1700, b"1.500") == b"1.500" and value_json(1700, b"NaN") == b'"NaN"'
    assert value_json(701, b"-Infinity") == b'"-Infinity"' and value_json(700, b"1e+30") == b"1e+30"
    assert value_json(16, b"t") == b"true" and value_json(16, b"f") == b"false"
    assert value_json(3802, b'{"a": [1]}') == b'{"a": [1]}'
    assert value_json(1184, b"2026-01-01 00:00:00+00") == b'"2026-01-01 00:00:00+00"'
    assert value_json(17, b"\\x00ff") == b'"\\\\x00ff"'
    assert value_json(25, None) == b"null"


def test_rows_key_order_and_unchanged_toast():
    cols = (p.Column("b", 23, True), p.Column("a", 23, True), p.Column("body", 25, False))
    t = Table(1, "s", "t", cols, key=(1, 0))  # key order (a, b) differs from column order
    assert t.rid((b"2", b"1", b"x")) == '{"a":1,"b":2}'
    assert t.obj((b"2", b"1", p.UNCHANGED)) == '{"b":2,"a":1}'
    assert t.obj((b"2", b"1", p.UNCHANGED), fallback=(b"2", b"1", b"old")) == '{"b":2,"a":1,"body":"old"}'
    assert Table(1, "s", "t", cols, key=None).rid((b"1", b"2", None)) is None


def test_password_is_hidden_everywhere():
    from olr_buffer.sources.postgres.connection import redact, safe_uri

    uri = "postgresql://cdc:p%40ss-w0rd@db.example.com:5433/shop?sslmode=require"
    assert safe_uri(uri) == "postgresql://cdc:***@db.example.com:5433/shop?sslmode=require"
    assert "w0rd" not in safe_uri("postgres://u:w0rd@/db?host=/tmp")
    assert safe_uri("postgresql://u@h/db") == "postgresql://u@h/db"
    assert redact("connect failed: password=w0rd host=x", "w0rd") == "connect failed: password=*** host=x"
    assert redact("FATAL for user u with w0rd inside", "w0rd") == "FATAL for user u with *** inside"
    assert redact("echo p@ss-w0rd and p%40ss-w0rd", "p%40ss-w0rd") == "echo *** and ***"


def test_insert_in_and_outside_a_stream_block():
    tup = struct.pack("!H", 3) + b"t" + struct.pack("!i", 2) + b"42" + b"n" + b"u"
    assert p.decode_message(b"I" + struct.pack("!I", 16384) + b"N" + tup) == p.Insert(
        None, 16384, (b"42", None, p.UNCHANGED)
    )
    streamed = b"I" + struct.pack("!II", 731, 16384) + b"N" + tup
    assert p.decode_message(streamed, in_stream=True) == p.Insert(731, 16384, (b"42", None, p.UNCHANGED))
    with pytest.raises(p.PgoutputError, match="unexpected tuple tag"):
        p.decode_message(streamed)  # read without the xid: the tag is the OID's first byte


_TYPES = (16, 20, 21, 23, 26, 114, 700, 701, 1700, 3802, 25, 1043, 1114)


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from(_TYPES), min_size=0, max_size=6),
    st.data(),
)
def test_fast_insert_images_equal_the_general_path(types, data):
    """``Table.images`` (the hot path of inserts) gives the text of ``rid`` and ``obj`` of
    the decoded tuple, or None (then the general path decodes it): never other text."""
    names = data.draw(st.lists(st.text(max_size=4), min_size=len(types), max_size=len(types), unique=True))
    cols = tuple(p.Column(f"c{i}{n}", t, False) for i, (t, n) in enumerate(zip(types, names)))
    key = data.draw(
        st.one_of(
            st.none(),
            st.lists(st.integers(0, max(len(cols) - 1, 0)), min_size=0, max_size=min(2, len(cols)), unique=True),
        )
    )
    table = Table(1, "public", "t", cols, None if key is None else tuple(key))
    value = st.one_of(
        st.none(),
        st.binary(max_size=8),
        st.text(max_size=6).map(str.encode),
        st.sampled_from(
            [b"1", b"-2.5", b"NaN", b"-Infinity", b"t", b"f", b"true", b"false", b'"', b"\xc3\xa9", b"\xff", b'{"a":1}']
        ),
        st.just(p.UNCHANGED),
    )
    values = data.draw(st.lists(value, min_size=max(len(cols) - 1, 0), max_size=len(cols) + 1))
    raw = tup(*values)
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]  # cut short
    got = table.images(raw, 0)
    try:
        decoded, end = p._tuple_data(raw, 0, "I")
        expected = (table.rid(decoded), table.obj(decoded)) if end == len(raw) else None
    except (p.PgoutputError, UnicodeDecodeError):
        expected = None
    if got is not None:
        assert got == expected
        assert len(values) == len(cols) and p.UNCHANGED not in values
    elif expected is not None:
        # only what the general path handles differently: other column counts, unchanged
        # values, text that is not UTF-8 (which the general path rejects in obj)
        assert len(values) != len(cols) or p.UNCHANGED in values


_SPECIAL = [
    None,
    b"",
    b"1",
    b"-2.5",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"t",
    b"f",
    b"true",
    b"false",
    b'"',
    b"\\",
    b"\x01",
    b"\xc3\xa9",
    b'{"a":1}',
]


@pytest.mark.parametrize("type_oid", _TYPES)
def test_fast_insert_images_of_every_type_and_special_value(type_oid):
    """Each value mapping of ``Table.images``, every type against the general path."""
    cols = (p.Column("id", 23, True), p.Column('v"\u00e9', type_oid, False))
    for key in (None, (0,), (1,), (1, 0)):
        table = Table(1, "public", "t", cols, key)
        for value in _SPECIAL:
            for id_ in (b"7", None):
                raw = tup(id_, value)
                decoded, _ = p._tuple_data(raw, 0, "I")
                assert table.images(raw, 0) == (table.rid(decoded), table.obj(decoded)), (key, value, id_)
