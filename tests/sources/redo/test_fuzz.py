"""Fuzzing the input side: damaged lines and damaged files never crash the reader.

(a) a damaged line fed to ``validate(parse_line(raw))`` either passes or raises
    :class:`RecordError` (nothing else), and what passes goes into a block as the reader
    puts it there (``BlockBuilder``), or is refused there with :class:`RecordError`;
(b) a damaged log file (plain or ``.zst``) read by a :class:`ThreadReader` into a
    :class:`MemoryQueue` either is read to its end or stops with :class:`InputError`,
    one line starting with the file's path (``FILE:LINE: reason`` when a line is at fault),
    and the stored position then lets a second run resume without repeating or skipping
    a record.

The tests at the end pin down what the fuzzing found on the stdlib-``json`` path (taken by
lines holding a run of 20 digits): deep nesting, lone surrogate escapes, numbers beyond
double range.
"""

from __future__ import annotations

import json
import os
import tempfile

import orjson
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from olr_buffer.changes import CLOSE, LWN, MARKER_CODES, OP_CODES, BlockBuilder, RecordError, decode_record
from olr_buffer.errors import OlrBufferError
from olr_buffer.sources.redo.errors import InputError
from olr_buffer.sources.redo.files import LogFile, scan
from olr_buffer.sources.redo.position import load_positions
from olr_buffer.sources.redo.records import decode_line, parse_line, validate
from olr_buffer.sources.redo.thread_reader import ThreadReader
from olr_buffer.testing import MemoryQueue

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
SCN = st.integers(0, (1 << 63) - 1)
TEXT = st.text(max_size=12)
BIG = 123456789012345678901234567  # > 2^64: orjson cannot hold it, the line goes through json

# ---------------------------------------------------------------------------------------
# Valid records

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
    st.sampled_from([BIG, -BIG, (1 << 64) - 1]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8
)
IMAGES = st.dictionaries(TEXT, JSON_VALUES, max_size=4)


@st.composite
def valid_records(draw, scn: int | None = None) -> dict:
    op = draw(st.sampled_from(sorted(OP_CODES)))
    rec: dict = {"op": op, "scn": draw(SCN) if scn is None else scn}
    if draw(st.booleans()):
        rec["sub"] = draw(st.integers(0, (1 << 63) - 1) | st.none())
    if op in ("lwn", "close") and draw(st.booleans()):
        return rec  # the other fields are not checked on them: sometimes present
    rec["xid"] = draw(st.text(min_size=1, max_size=20))
    if draw(st.booleans()):
        rec["tm"] = draw(INT64 | st.none())
    if op in ("insert", "update", "delete", "ddl"):
        rec["owner"], rec["table"] = draw(TEXT), draw(TEXT)
        if draw(st.booleans()):
            rec["obj"] = draw(INT64 | st.none())
    if op in ("insert", "update", "delete"):
        rec["rid"] = draw(TEXT)
        compensation = draw(st.booleans())
        if compensation:
            rec["rollback"] = True
        if op != "insert" and (not compensation or draw(st.booleans())):
            rec["before"] = draw(IMAGES)
        if op != "delete" and (not compensation or draw(st.booleans())):
            rec["after"] = draw(IMAGES)
    if op == "ddl":
        rec["sql"] = draw(TEXT)
        if draw(st.booleans()):
            rec["rid"] = draw(TEXT)
    if draw(st.booleans()):
        rec[draw(TEXT)] = draw(JSON_VALUES)  # an unknown field
    return rec


def dumps(rec: dict, ascii_only: bool = False) -> bytes:
    return json.dumps(rec, ensure_ascii=ascii_only).encode()


def test_the_generator_makes_valid_records() -> None:
    @given(valid_records(), st.booleans())
    @settings(max_examples=100)
    def check(rec: dict, ascii_only: bool) -> None:
        validate(parse_line(dumps(rec, ascii_only)))
        check_fast_path(dumps(rec, ascii_only))

    check()


# ---------------------------------------------------------------------------------------
# Damage

FIELDS = ("op", "scn", "sub", "xid", "tm", "owner", "table", "obj", "rid", "before", "after", "rollback", "sql")
BAD_BYTES = st.sampled_from(
    [
        b"\x00",
        b"\xff",
        b"\xfe\xff",
        b"\xc3",
        b"\xc3\x28",
        b"\xe2\x82",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xc0\xaf",
        b"\n",
        b"\r",
        b'"',
        b"\\",
        b"{",
        b"}",
        b"[",
        b",",
        b":",
        b"\\u0000",
        b"\\ud800",
        b"\\udc00x",
        b"NaN",
        b"Infinity",
        b"-",
        b"1e999",
        b"0x10",
        b"true",
        b"null",
    ]
)


@st.composite
def damaged_dict(draw, rec: dict) -> dict:
    """Damage at the level of the record's fields."""
    rec = dict(rec)
    kind = draw(st.sampled_from(["drop", "retype", "huge-int", "long-string", "bad-value"]))
    name = draw(st.sampled_from(FIELDS + tuple(rec)))
    if kind == "drop":
        rec.pop(name, None)
    elif kind == "retype":
        rec[name] = draw(JSON_VALUES)
    elif kind == "huge-int":
        sign = draw(st.sampled_from([1, -1]))
        rec[name] = draw(
            st.sampled_from([1 << 63, (1 << 63) - 1, -(1 << 63), -(1 << 63) - 1, 1 << 64, -1, 0])
            | st.integers(18, 4000).map(lambda k: sign * 10**k)
        )
    elif kind == "long-string":
        rec[name] = "x" * draw(st.integers(1000, 300_000))
    else:
        rec[name] = draw(st.sampled_from([float("1e308"), -0.0, 1.5, True, False, [], {}, "", " ", "\u0000", "\ud7ff"]))
    return rec


@st.composite
def damaged_bytes(draw, raw: bytes) -> bytes:
    """Damage at the level of the line's bytes."""
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "insert", "deep", "long-digits", "long-string"]))
        pos = draw(st.integers(0, len(raw)))
        if kind == "truncate":
            raw = raw[:pos]
        elif kind == "flip" and raw:
            i = min(pos, len(raw) - 1)
            raw = raw[:i] + bytes([raw[i] ^ draw(st.integers(1, 255))]) + raw[i + 1 :]
        elif kind == "insert":
            raw = raw[:pos] + draw(BAD_BYTES | st.binary(min_size=1, max_size=8)) + raw[pos:]
        elif kind == "deep":
            depth = draw(st.integers(1, 5000))
            opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
            nested = opener * depth + b"0" + closer * depth
            if raw.endswith(b"}"):
                raw = raw[:-1] + b',"deep":' + nested + b"}"
            else:
                raw = raw[:pos] + nested + raw[pos:]
        elif kind == "long-digits":  # sends the line through the stdlib parser
            digits = b"9" * draw(st.integers(20, 5000))
            raw = raw[:-1] + b',"n":' + digits + b"}" if raw.endswith(b"}") else raw[:pos] + digits + raw[pos:]
        else:
            raw = raw[:pos] + b"y" * draw(st.integers(1000, 300_000)) + raw[pos:]
    return raw


@st.composite
def damaged_lines(draw, rec: dict | None = None) -> bytes:
    rec = draw(valid_records()) if rec is None else rec
    if draw(st.booleans()):
        rec = draw(damaged_dict(rec))
    raw = dumps(rec, ascii_only=draw(st.booleans()))
    if draw(st.booleans()):
        raw = raw[:-1] + b',"big":' + str(BIG).encode() + b"}"  # the stdlib-json path
    if draw(st.booleans()):
        raw = draw(damaged_bytes(raw))
    return raw


def _images_parsed(payload: list | None) -> list | None:
    if payload is None or len(payload) != 8:
        return payload
    return [*payload[:5], *(None if t is None else json.loads(t) for t in payload[5:7]), payload[7]]


def check_fast_path(raw: bytes) -> None:
    """The reader's ``decode_line`` agrees with the reference ``validate(parse_line(raw))``:
    the same records (images compared parsed: the fast path keeps the input's text), the
    same reason for a bad line."""
    try:
        expected = validate(parse_line(raw))
    except RecordError as exc:
        with pytest.raises(RecordError) as fast:
            decode_line(raw)
        assert str(fast.value) == str(exc)
        return
    got = decode_line(raw)
    assert got[:4] == expected[:4]
    assert _images_parsed(got[4]) == _images_parsed(expected[4])


def check_line(raw: bytes) -> None:
    """``validate(parse_line(raw))`` passes or raises RecordError; what passes is stored
    into a block as the reader does it, or refused there with RecordError. The reader's
    fast path agrees with it (:func:`check_fast_path`)."""
    check_fast_path(raw)
    try:
        code, scn, sub, xid, payload = validate(parse_line(raw))
        assert code in set(OP_CODES.values()) | {c | 16 for c in (2, 3, 4)}
        assert 0 <= scn < 1 << 63 and 0 <= sub < 1 << 63
        builder = BlockBuilder(1)
        if code == LWN:
            builder.heartbeat(scn)
        elif code == CLOSE:
            builder.close(scn)
            assert orjson.loads(builder.build()[0])["c"] is True
        else:
            builder.add(code, scn, sub, xid, 1, 1, payload)
        summary, *records = builder.build()
        orjson.loads(summary)
        assert [decode_record(r) for r in records] == (
            [] if code in MARKER_CODES else [[code, scn, sub, 1, 1, *payload]]
        )
    except RecordError as exc:
        assert str(exc) and "\n" not in str(exc)


@given(damaged_lines(), st.booleans())
@settings(max_examples=max(200, 5 * settings.default.max_examples))
def test_damaged_lines_pass_or_raise_record_error(raw: bytes, newline: bool) -> None:
    check_line(raw + b"\n" if newline else raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\n",
        b"\x00",
        b"{",
        b"}",
        b"{}",
        b"[]",
        b"null",
        b"1",
        b'"s"',
        b"\xef\xbb\xbf{}",
        b'{"op":"lwn","scn":1}\x00',
        b'{"op":"lwn","scn":1}{"op":"lwn","scn":2}',
        b'{"op":"lwn","scn":1,"scn":-1}',
        b'{"op":"lwn","scn":1e2}',
        b'{"op":"lwn","scn":-0}',
        b'{"op":"lwn","scn":00}',
        b'{"op":"lwn","scn":9223372036854775807}',
        b'{"op":"lwn","scn":9223372036854775808}',
        b'{"op":"lwn","scn":99999999999999999999999999}',
        b'{"op":"lwn","scn":1' + b"0" * 5000 + b"}",
        b'{"op":"lwn","scn":1,"x":' + b"1" * 5000 + b"}",
        b'{"op":"begin","scn":1,"xid":"\\u0000"}',
        b'{"op":"begin","scn":1,"xid":"a\x00b"}',
        b'{"op":"begin","scn":1,"xid":"\xed\xa0\x80"}',
        b'{"op":"begin","scn":1,"xid":"\\ud800"}',
        b'{"op":"begin","scn":1,"xid":"\\ud83d\\ude00","n":12345678901234567890}',
        b'{"op":"lwn","scn":1,"n":NaN}',
        b'{"op":"lwn","scn":1,"n":Infinity,"m":12345678901234567890}',
        b"[" * 2000 + b"]" * 2000,
        b'{"op":"lwn","scn":1,"d":' + b"[" * 1100 + b"]" * 1100 + b"}",
    ],
)
def test_hand_picked_damaged_lines(raw: bytes) -> None:
    check_line(raw)


# ---------------------------------------------------------------------------------------
# Damaged files


@st.composite
def thread_inputs(draw) -> tuple[list[list[bytes]], list[bool]]:
    """One or two sequences of thread 1: valid lines, SCNs not decreasing; each file
    plain or zstd (only the last may be plain, as archived logs are compressed)."""
    nseq = draw(st.integers(1, 2))
    scn = draw(st.integers(0, 1000))
    seqs = []
    for _ in range(nseq):
        lines = []
        for _ in range(draw(st.integers(1, 12))):
            scn += draw(st.integers(0, 3))
            lines.append(dumps(draw(valid_records(scn=scn))) + b"\n")
        seqs.append(lines)
    compressed = [True] * (nseq - 1) + [draw(st.booleans())]
    if nseq == 1 and draw(st.booleans()):
        compressed = [True]
    return seqs, compressed


@st.composite
def damaged_files(draw):
    seqs, compressed = draw(thread_inputs())
    target = draw(st.integers(0, len(seqs) - 1))
    kind = draw(st.sampled_from(["replace-line", "truncate", "overwrite", "insert", "replace-line-and-truncate"]))
    lines = seqs[target]
    if kind.startswith("replace-line"):
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = draw(damaged_lines()) + b"\n"
    contents = []
    for ls, comp in zip(seqs, compressed):
        data = b"".join(ls)
        if comp:
            data = zstandard.ZstdCompressor(level=draw(st.integers(1, 5)), write_checksum=draw(st.booleans())).compress(
                data
            )
        contents.append(data)
    data = contents[target]
    if kind in ("truncate", "replace-line-and-truncate") and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif kind == "overwrite" and data:
        pos = draw(st.integers(0, len(data) - 1))
        junk = draw(st.binary(min_size=1, max_size=16) | BAD_BYTES)
        data = data[:pos] + junk + data[pos + len(junk) :]
    elif kind == "insert":
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + draw(st.binary(min_size=1, max_size=16) | BAD_BYTES) + data[pos:]
    contents[target] = data
    return contents, compressed, draw(st.integers(1, 5))


def _queued_lines(queue: MemoryQueue) -> list[tuple[int, int]]:
    """(sequence, line) of every record in the queue, in order."""
    out = []
    index = queue.first_index
    while index < queue.next_index:
        block = queue.read_block(index)
        for i in range(1, block.count):
            rec = decode_record(block.record(i))
            out.append((rec[3], rec[4]))
        index = block.end
    return out


def _lwn_only(path: str, compressed: bool, after: int, upto: int) -> bool:
    """Lines ``after+1 .. upto`` of the file are all ``lwn`` records."""
    with LogFile(1, 1, path, compressed).open() as fh:
        lines = [fh.readline() for _ in range(upto)]
    return all(decode_line(raw)[0] == LWN for raw in lines[after:])  # a close changes the thread's state


@given(damaged_files())
@settings(max_examples=max(100, settings.default.max_examples))
def test_damaged_files_are_read_or_stop_with_input_error(case) -> None:
    contents, compressed, block_records = case
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for seq, (data, comp) in enumerate(zip(contents, compressed), start=1):
            path = os.path.join(tmp, f"redo_1_{seq}.jsonl" + (".zst" if comp else ""))
            with open(path, "wb") as fh:
                fh.write(data)
            paths.append(path)
        queue = MemoryQueue()
        reader = ThreadReader(queue, tmp, 1, scan(tmp)[1], None, block_records=block_records)
        try:
            reader.read_to_end()
        except InputError as exc:
            assert isinstance(exc, OlrBufferError)
            text = str(exc)
            assert "\n" not in text, text
            assert exc.path in paths, text
            assert text.startswith(exc.path), text
            seq = paths.index(exc.path) + 1
            queued = _queued_lines(queue)
            pos = load_positions(queue.meta_items()).get(1)
            if exc.line is not None:
                assert text.startswith(f"{exc.path}:{exc.line}: "), text
                assert exc.line >= 1
                # Resuming from the stored position neither repeats nor skips a record:
                # every queued record is at or before it, and it is not past the bad line
                # (it may stand at the end of the previous sequence: the same place).
                stored = (pos.sequence, pos.line) if pos else (0, 0)
                assert all(q <= stored for q in queued), (text, stored, queued)
                assert stored <= (seq, exc.line - 1), (text, stored)
                if stored < (seq, exc.line - 1):
                    # behind only by lines that change nothing: the end of the previous
                    # sequence, or lwn records that did not move the thread's progress
                    if stored[0] < seq:
                        assert exc.line == 1 or _lwn_only(exc.path, compressed[seq - 1], 0, exc.line - 1), (
                            text,
                            stored,
                        )
                    else:
                        assert _lwn_only(exc.path, compressed[seq - 1], stored[1], exc.line - 1), (text, stored)
            assert not (pos and pos.finished), (text, pos)
        else:
            pos = load_positions(queue.meta_items())[1]
            assert pos.finished and pos.sequence == len(contents)


# ---------------------------------------------------------------------------------------
# Found by the fuzzing above: lines holding a run of 20 digits are parsed by Python's json
# module (records.py parse_line), whose behaviour differs from orjson's

DEEP = b'{"op":"lwn","scn":1,"n":12345678901234567890,"d":' + b"[" * 5000 + b"]" * 5000 + b"}"
SURROGATE = b'{"op":"begin","scn":1,"xid":"\\ud800","n":12345678901234567890}'
SURROGATE_IN_VALUE = (
    b'{"op":"insert","scn":1,"xid":"x","owner":"O","table":"T","rid":"R",'
    b'"after":{"S":"a\\udc00b","N":123456789012345678901234567}}'
)
HUGE_FLOAT = (
    b'{"op":"insert","scn":1,"xid":"x","owner":"O","table":"T","rid":"R",'
    b'"after":{"F":1e400,"N":123456789012345678901234567}}'
)


def test_deep_nesting_on_the_stdlib_path_is_a_record_error() -> None:
    with pytest.raises(RecordError, match="malformed JSON"):
        validate(parse_line(DEEP))


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(DEEP, id="deep-nesting"),
        pytest.param(SURROGATE, id="lone-surrogate-in-xid"),
        pytest.param(SURROGATE_IN_VALUE, id="lone-surrogate-in-value"),
    ],
)
def test_reader_reports_bad_lines_of_the_stdlib_path_as_input_error(tmp_path, raw: bytes) -> None:
    good = b'{"op":"lwn","scn":1}\n'
    (tmp_path / "redo_1_1.jsonl").write_bytes(good + raw + b"\n" + good)
    queue = MemoryQueue()
    with pytest.raises(InputError) as info:
        ThreadReader(queue, str(tmp_path), 1, scan(str(tmp_path))[1], None).read_to_end()
    assert str(info.value).startswith(f"{tmp_path / 'redo_1_1.jsonl'}:2: ")
    assert load_positions(queue.meta_items())[1].line == 1


def test_numbers_beyond_double_range_are_kept_as_written() -> None:
    """1e400 and a 27-digit integer in a value are JSON numbers: the reader keeps their text
    (once they were turned into infinity, which became null or the non-JSON Infinity in
    the changefeed, and then refused); out of range only where an integer field needs one."""
    after = HUGE_FLOAT[HUGE_FLOAT.index(b'"after":') + 8 : -1].decode()
    assert decode_line(HUGE_FLOAT)[4][6] == after
    assert validate(parse_line(HUGE_FLOAT))[0] == OP_CODES["insert"]
    for big in (b"1e400", b"9" * 5000, b"-" + b"9" * 5000):
        with pytest.raises(RecordError, match="field 'scn' out of range"):
            decode_line(b'{"op":"lwn","scn":' + big + b"}")
