"""The compiled insert step (``tuplescan``, built from ``tuplescan.pyx`` at install) equals
the pure-Python function it stands for (:meth:`Table.reference_image_bytes`) on any input:
the same ``(rid, obj)`` text, or the same refusal (None), for well-formed tuples of every
type and value mapping, strings that need escaping, non-UTF-8 text, other column counts,
binary and unchanged values, and tuples cut short or followed by more bytes; and the
run of inserts the reader's loop hands over in one call (``Images.run`` against
:func:`python_insert_run`): the same records, stopping at the same place, on any batch.

The compiled module must be built where these tests run (``pip install -e .`` builds it
with the machine's C compiler): a tree where it is not fails here, which says so.
"""

from __future__ import annotations

import importlib
import os
import struct
import subprocess
import sys
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olr_buffer.sources.postgres import protocol as p
from olr_buffer.sources.postgres.compiled import PURE_PYTHON_ENV
from olr_buffer.sources.postgres.connection import python_split_copydata
from olr_buffer.sources.postgres.rows import Table, python_insert_record, python_insert_run
from tests.sources.postgres.test_protocol import _TYPES, tup

tuplescan = importlib.import_module("olr_buffer.sources.postgres.tuplescan")

_VALUE = st.one_of(
    st.none(),
    st.binary(max_size=8),
    st.text(max_size=12).map(str.encode),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=40).map(str.encode),  # control characters
    st.sampled_from(
        [b"1", b"-2.5", b"NaN", b"Infinity", b"-Infinity", b"t", b"f", b"true", b"false", b'"', b"\\"]
        + [b"\xc3\xa9", b"\xff", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b'{"a":1}', b"\x7f", b"\x1f"]
    ),
    st.just(p.UNCHANGED),
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_TYPES), min_size=0, max_size=6), st.data())
def test_compiled_images_equal_the_reference(types, data):
    names = data.draw(st.lists(st.text(max_size=4), min_size=len(types), max_size=len(types), unique=True))
    cols = tuple(p.Column(f"c{i}{n}", t, False) for i, (t, n) in enumerate(zip(types, names)))
    key = data.draw(
        st.one_of(st.none(), st.lists(st.integers(0, max(len(cols) - 1, 0)), max_size=min(2, len(cols)), unique=True))
    )
    table = Table(1, "public", "t", cols, None if key is None else tuple(key))
    values = data.draw(st.lists(_VALUE, min_size=max(len(cols) - 1, 0), max_size=len(cols) + 1))
    before = data.draw(st.binary(max_size=3))  # the message's bytes before the tuple
    raw = before + tup(*values)
    pos = len(before) if data.draw(st.integers(0, 4)) else data.draw(st.integers(0, 3))
    how = data.draw(st.sampled_from(["whole", "whole", "whole", "cut", "more", "damaged"]))
    if how == "cut":
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    elif how == "more":
        raw += data.draw(st.binary(min_size=1, max_size=3))
    elif how == "damaged" and raw:
        i = data.draw(st.integers(0, len(raw) - 1))
        raw = raw[:i] + bytes([data.draw(st.integers(0, 255))]) + raw[i + 1 :]
    table.image_bytes(b"", 0)  # the first call makes the table's step
    assert isinstance(table.image_bytes, tuplescan.Images)
    assert table.image_bytes(raw, pos) == table.reference_image_bytes()(raw, pos)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=4), st.integers(0, 70_000).map(lambda n: b"x" * n)), max_size=3),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=20),
    st.binary(max_size=20),
    st.binary(max_size=20),
    st.booleans(),
)
def test_compiled_record_equals_the_reference(values, lsn, head, middle, tail, keyed):
    """``Images.record`` (an insert's whole encoded record in one piece) is what
    :func:`python_insert_record` puts together from the reference's text, for LSNs of
    every MessagePack size, images of every string-header size, with and without a rid."""
    cols = tuple(p.Column(f"c{i}", 25 if i else 20, False) for i in range(len(values)))
    table = Table(1, "public", "t", cols, (0,) if keyed and cols else None)
    raw = tup(*values)
    expected = python_insert_record(table.reference_image_bytes(), raw, 0, head, lsn, middle, tail)
    assert table.insert_record(raw, 0, head, lsn, middle, tail) == expected
    assert isinstance(table.image_bytes, tuplescan.Images)


@pytest.mark.parametrize("type_oid", _TYPES)
def test_compiled_images_of_every_ascii_character(type_oid):
    """Each ASCII character (the escapes of JSON strings), in each value mapping."""
    table = Table(1, "public", "t", (p.Column("id", 23, True), p.Column("v", type_oid, False)), (1, 0))
    reference = table.reference_image_bytes()
    for c in range(128):
        for value in (bytes([c]), b"a" + bytes([c]) * 3 + b"z"):
            raw = tup(b"7", value)
            assert table.image_bytes(raw, 0) == reference(raw, 0), (c, value)
    assert isinstance(table.image_bytes, tuplescan.Images)


def test_tables_use_the_compiled_step_unless_told_not_to():
    """Where it is built, tables run the compiled step; ``OLR_BUFFER_PURE_PYTHON=1`` runs
    the pure-Python one."""
    code = (
        "from olr_buffer.sources.postgres.compiled import INSERT_STEP; "
        "from olr_buffer.sources.postgres import protocol as p; "
        "from olr_buffer.sources.postgres.rows import Table; "
        "t = Table(1, 's', 't', (p.Column('id', 23, True),), (0,)); t.image_bytes(b'', 0); "
        "print(INSERT_STEP, type(t.image_bytes).__name__)"
    )
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["compiled", "Images"]
    env[PURE_PYTHON_ENV] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("pure Python") and out.split()[-1] == "function"


@pytest.mark.parametrize(
    "bad", [("names", [1], [0], None), ("key", [b'"a":'], [0], (1,)), ("cats", [b'"a":'], [], None)]
)
def test_compiled_images_refuse_inconsistent_tables(bad):
    _, names, cats, key = bad
    with pytest.raises((TypeError, ValueError)):
        tuplescan.Images(names, cats, key)


_REL, _SUB = 16386, 700
_GOOD = st.one_of(st.none(), st.sampled_from([b"1", b"-2.5", b"t", b"NaN"]), st.text(max_size=8).map(str.encode))


def _frame(data, in_stream: bool, start: int, rel: int = _REL, sub: int = _SUB, tag: bytes = b"N") -> bytes:
    """An XLogData frame of an Insert of ``rel`` (of subtransaction ``sub`` in a stream
    block) whose tuple is drawn."""
    head = struct.pack("!QQq", start, start + data.draw(st.integers(0, 2**20)), 0)
    xid = struct.pack("!I", sub) if in_stream else b""
    return b"w" + head + b"I" + xid + struct.pack("!I", rel) + tag


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_TYPES), min_size=1, max_size=4), st.booleans(), st.data())
def test_compiled_run_equals_the_reference(types, in_stream, data):
    """``Images.run`` (a run of inserts in one call) appends the records
    :func:`python_insert_run` appends from the reference, and stops at the same frame with
    the same figures, on batches of inserts of the relation among inserts of others, of
    other subtransactions, other tuple tags, other messages, damaged and cut frames, with
    any room left in the block (records and bytes)."""
    cols = tuple(p.Column(f"c{i}", t, False) for i, t in enumerate(types))
    key = data.draw(st.one_of(st.none(), st.just((0,))))
    table = Table(_REL, "public", "t", cols, key)
    batch: list[bytes] = []
    start = data.draw(st.integers(0, 2**64 - 2**40))
    for _ in range(data.draw(st.integers(0, 12))):
        start += data.draw(st.integers(0, 2**30))
        values = data.draw(st.lists(_GOOD, min_size=len(cols), max_size=len(cols)))
        if data.draw(st.integers(0, 15)) == 0:  # sometimes any value, any column count
            values = data.draw(st.lists(_VALUE, max_size=len(cols) + 1))
        what = data.draw(
            st.sampled_from(["insert"] * 24 + ["rel", "sub", "tag", "other"] * 2 + ["cut", "damaged", "any"])
        )
        frame = _frame(data, in_stream, start)
        if what == "rel":
            frame = _frame(data, in_stream, start, rel=_REL + 1)
        elif what == "sub":
            frame = _frame(data, in_stream, start, sub=_SUB + 1)
        elif what == "tag":
            frame = _frame(data, in_stream, start, tag=data.draw(st.sampled_from([b"K", b"O", b"n", b"t"])))
        elif what == "other":
            frame = frame[:25] + data.draw(st.sampled_from([b"U", b"D", b"R", b"E"])) + frame[26:]
        frame += tup(*values)
        if what == "cut":
            frame = frame[: data.draw(st.integers(1, len(frame)))]
        elif what == "damaged":
            i = data.draw(st.integers(0, len(frame) - 1))
            frame = frame[:i] + bytes([data.draw(st.integers(0, 255))]) + frame[i + 1 :]
        elif what == "any":
            frame = data.draw(st.binary(min_size=1, max_size=50))
        batch.append(frame)
    i = data.draw(st.integers(0, len(batch))) if data.draw(st.booleans()) else 0
    room = data.draw(st.integers(1, 14))
    room_bytes = data.draw(st.sampled_from([1, 60, 200, 1 << 20, 1 << 20]))
    head, middle, tail = data.draw(st.sampled_from([(b"\x9e\x01", b"mid", b"\xc0"), (b"h", b"", b"tail")]))
    sub = _SUB if in_stream else 0  # the reader's call: 0 out of a stream block
    reference = partial(python_insert_record, table.reference_image_bytes())
    expected: list[bytes] = [b"before"]
    want = python_insert_run(reference, batch, i, in_stream, _REL, sub, head, middle, tail, expected, room, room_bytes)
    got: list[bytes] = [b"before"]
    table.image_bytes(b"", 0)  # the first call makes the table's step
    assert isinstance(table.image_bytes, tuplescan.Images)
    assert table.insert_run(batch, i, in_stream, _REL, sub, head, middle, tail, got, room, room_bytes) == want
    assert got == expected


_MESSAGE = st.one_of(
    st.binary(min_size=1, max_size=30).map(lambda b: b"d" + struct.pack("!i", len(b) + 4) + b),  # CopyData
    st.tuples(  # any kind, its length right or not (empty, short, negative, longer than what follows)
        st.sampled_from(b"ddNSAEcC"),
        st.binary(max_size=8),
        st.one_of(st.sampled_from([0, 0, -1, 1, -4, -5, -(2**31)]), st.integers(-(2**31), 2**31 - 40)),
    ).map(lambda t: bytes([t[0]]) + struct.pack("!i", max(-(2**31), len(t[1]) + 4 + t[2])) + t[1]),
    st.binary(max_size=6),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_MESSAGE, max_size=10), st.data())
def test_compiled_split_equals_the_reference(messages, data):
    """``split_copydata`` (the socket stream's split of CopyData messages) takes the same
    messages and stops at the same place as :func:`python_split_copydata` on any bytes:
    whole messages, other kinds, lengths below 5 or negative, messages not whole yet."""
    buf = b"".join(messages)
    how = data.draw(st.sampled_from(["whole", "cut", "short by one"]))
    if how == "cut":
        buf = buf[: data.draw(st.integers(0, len(buf)))]
    elif how == "short by one":  # the last message not whole yet
        buf = buf[:-1]
    pos = data.draw(st.integers(0, len(buf)))
    expected: list[bytes] = [b"before"]
    stop = python_split_copydata(buf, pos, expected)
    got: list[bytes] = [b"before"]
    assert tuplescan.split_copydata(buf, pos, got) == stop
    assert got == expected
