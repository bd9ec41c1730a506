"""Rows as columns (``olr_buffer.changes.columns``): the compiled read-back step
(``recscan.pyx``) gives exactly what its pure-Python reference gives, columns or refusal,
on any input: records as the sources write them, records of any other shape, and their
bytes cut or damaged."""

from __future__ import annotations

import subprocess
import sys

import msgspec
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from olr_buffer.changes import (
    BEGIN,
    COMMIT,
    COMPENSATION,
    CUT,
    DDL,
    DELETE,
    INSERT,
    READ_BACK_STEP,
    ROW_FIELDS,
    ROW_SCHEMA,
    TRUNCATE,
    UPDATE,
    encode_record,
    python_row_columns,
    row_columns,
    rows_to_columns,
)
from olr_buffer.changes.columns import RECSCAN, RowFieldsError

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TEXT = st.text(max_size=40)  # any code point but lone surrogates, which MessagePack cannot hold
_ROW_CODES = (INSERT, UPDATE, DELETE, DDL, TRUNCATE, 13)


def _opt(s):
    return st.none() | s


@st.composite
def row_records(draw) -> list:
    """A row record as the sources write it: 13 fields, or 14 (schema version) or 15 (and
    its document)."""
    rec = [
        draw(st.sampled_from(_ROW_CODES)),
        draw(INT64),
        draw(INT64),
        draw(INT64),
        draw(INT64),
        draw(_opt(INT64)),
        draw(_opt(TEXT)),
        draw(_opt(TEXT)),
        draw(_opt(INT64)),
        draw(_opt(TEXT)),
        draw(_opt(TEXT)),
        draw(_opt(TEXT)),
        draw(_opt(TEXT)),
    ]
    extra = draw(st.integers(0, 2))
    if extra:
        rec.append(draw(_opt(TEXT)))
    if extra == 2:
        rec.append(draw(_opt(TEXT)))
    return rec


PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.floats() | TEXT | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)


@st.composite
def other_records(draw) -> list:
    """Records that are not rows (begin, commit, compensation, cut), and any other shape:
    a row of another field count or another value type, another code's type."""
    kind = draw(st.integers(0, 5))
    head = [draw(INT64) for _ in range(4)]
    if kind == 0:
        return [draw(st.sampled_from((BEGIN, COMMIT))), *head, draw(_opt(INT64))]
    if kind == 1:
        return [INSERT | COMPENSATION, *head, draw(TEXT)]
    if kind == 2:
        return [CUT, *head, draw(INT64), draw(INT64)]
    if kind == 3:  # a row with a field of another type, or of another count
        rec = draw(row_records())
        if draw(st.booleans()):
            rec[draw(st.integers(1, len(rec) - 1))] = draw(PLAIN)
        else:
            rec = rec[: draw(st.integers(0, 12))] if draw(st.booleans()) else rec + [draw(PLAIN)] * 3
        return rec
    if kind == 4:
        return [draw(PLAIN) for _ in range(draw(st.integers(0, 7)))]
    return [draw(st.integers(-(1 << 63), (1 << 64) - 1)), *[draw(PLAIN) for _ in range(draw(st.integers(4, 6)))]]


def _same(data: bytes, count: int) -> object:
    want = python_row_columns(data, count)
    got = row_columns(data, count)
    if want is None:
        assert got is None
    else:
        assert got is not None
        assert got.flags == want.flags
        assert got.batch.schema.equals(ROW_SCHEMA)
        got.batch.validate(full=True)
        assert got.batch.equals(want.batch), (got.batch.to_pylist(), want.batch.to_pylist())
        assert got.starts is not None and len(got.starts) == count + 1 and got.starts[-1] == len(data)
        if want.starts is not None:
            assert list(got.starts) == list(want.starts)
    return want


def test_the_compiled_step_is_in_use():
    """The install compiles it (the rest of these tests then hold it to the reference)."""
    assert RECSCAN is not None, READ_BACK_STEP
    assert READ_BACK_STEP == "compiled"


@given(st.lists(row_records() | other_records(), max_size=30), st.integers(-2, 2))
def test_compiled_equals_reference_on_any_records(recs, miscount):
    data = b"".join(encode_record(r) for r in recs)
    want = _same(data, len(recs))
    ok = all(type(r) is list and len(r) >= 5 for r in recs)
    if want is not None:
        assert [r[0] in _ROW_CODES for r in recs] == list(map(bool, want.flags))
        assert want.batch.num_rows == sum(want.flags)
    elif ok and all(r[0] not in _ROW_CODES for r in recs if type(r[0]) is int):
        pass  # refused for a value of another shape somewhere
    # a count that is not the records': refused alike (bytes left over, or missing)
    if miscount and len(recs) + miscount >= 0:
        assert row_columns(data, len(recs) + miscount) is None
        assert python_row_columns(data, len(recs) + miscount) is None


@given(st.lists(row_records(), min_size=1, max_size=20))
def test_rows_as_the_sources_write_them_are_all_taken(recs):
    data = b"".join(encode_record(r) for r in recs)
    got = _same(data, len(recs))
    assert got is not None and got.flags == b"\x01" * len(recs)
    padded = [r + [None] * (len(ROW_FIELDS) - len(r)) for r in recs]
    for name, i in zip(ROW_SCHEMA.names, [ROW_FIELDS.index(n) for n in ROW_SCHEMA.names]):
        assert got.batch.column(name).to_pylist() == [r[i] for r in padded]


@given(st.lists(row_records() | other_records(), min_size=1, max_size=12), st.data())
def test_damaged_bytes_are_refused_or_read_alike(recs, data):
    raw = bytearray(b"".join(encode_record(r) for r in recs))
    for _ in range(data.draw(st.integers(1, 3))):
        if data.draw(st.booleans()) and len(raw) > 1:
            del raw[data.draw(st.integers(0, len(raw) - 1)) :]
        elif raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    _same(bytes(raw), len(recs))


@pytest.mark.parametrize("size", [31, 32, 255, 256, 65535, 65536])
def test_strings_and_bytes_of_each_length_width_are_read_alike(size):
    """MessagePack gives a string's (bytes') length in 0, 1, 2 or 4 bytes by its size
    (fixstr, str 8/16/32; bin 8/16/32), beyond the short values generated above: each is
    taken (a row's string) or stepped over (bytes, in another record), and refused when
    its bytes are cut short, as the reference reads them."""
    text = "\u00e9" * (size // 2) + "x" * (size % 2)  # size bytes of UTF-8
    row = encode_record([INSERT, 1, 0, 0, 0, None, "O", "T", None, None, text, text, None])
    other = encode_record([COMMIT, 1, 0, 0, 0, b"\x00" * size, text])
    got = _same(row + other, 2)
    assert got is not None and got.flags == b"\x01\x00"
    assert got.batch.column("before").to_pylist() == got.batch.column("after").to_pylist() == [text]
    for cut in (1, size // 2, size + 1):
        assert _same(row[:-cut], 1) is None
        assert _same(row + other[:-cut], 2) is None
        assert _same(row + other[: len(other) - size - cut], 2) is None  # in the bytes, or the string after them


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("\ud800", id="lone-surrogate-in-a-row"),
        pytest.param(b"\xed\xa0\x80", id="surrogate-bytes"),
        pytest.param(b"\xc0\xaf", id="overlong"),
        pytest.param(b"\xf4\x90\x80\x80", id="past-U+10FFFF"),
        pytest.param(b"abc\xff", id="not-utf8"),
    ],
)
def test_a_string_that_is_not_strict_utf8_is_refused(bad):
    """Anywhere: in a row's column, or in a record stepped over. MessagePack is written by
    hand here, as no encoder writes such a string."""
    raw = bad.encode("utf-8", "surrogatepass") if isinstance(bad, str) else bad
    text = bytes([0xA0 | len(raw)]) + raw
    row = encode_record([INSERT, 1, 0, 0, 0, None, "O", "T", None, None, None, "x", None])
    bad_row = row[:-3] + text + row[-1:]  # the after image replaced
    commit = encode_record([COMMIT, 1, 0, 0, 0, "y"])
    bad_commit = commit[:-2] + text
    for data, count in ((bad_row, 1), (row + bad_commit, 2)):
        assert python_row_columns(data, count) is None
        assert row_columns(data, count) is None
    with pytest.raises((msgspec.DecodeError, UnicodeDecodeError)):  # and the record path says why
        msgspec.msgpack.decode(bad_row)


def test_rows_to_columns_refuses_a_row_of_more_fields_than_the_format_has():
    row = [INSERT, 1, 0, 0, 0, None, "O", "T", None, None, None, "{}", None]
    assert rows_to_columns([row, row + [None, None]]).num_rows == 2
    with pytest.raises(RowFieldsError, match="a row has 16 fields; this olr-buffer knows 15"):
        rows_to_columns([row + [None, None, "extra"]])


def test_no_rows_at_all():
    assert row_columns(b"", 0).batch.num_rows == 0
    got = _same(encode_record([BEGIN, 1, 0, 0, 0, 5]), 1)
    assert got is not None and got.batch.num_rows == 0 and got.flags == b"\x00"
    assert rows_to_columns([]).schema.equals(ROW_SCHEMA)
    assert isinstance(rows_to_columns([]), pa.RecordBatch)


def test_the_readers_do_not_load_pyarrow():
    """The record format's face gives the columns' names, but loads them (and pyarrow) on
    first use: the sources, whose reader processes use the format, start without it."""
    code = (
        "import sys; import olr_buffer.sources.redo, olr_buffer.sources.postgres, olr_buffer.sources.olr, "
        "olr_buffer.changes as c; assert 'pyarrow' not in sys.modules, 'loaded'; "
        "c.row_columns; assert 'pyarrow' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
