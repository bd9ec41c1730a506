"""Reading a file in chunks (``ThreadReader.chunked``, the default) equals reading it
line by line (the reader as it was, kept as the reference): the same queue blocks byte
for byte, the same positions, the same error or dead letters, whatever the input.

The chunked reader decodes all complete lines of a chunk in one call and takes most
records in a tight loop (``_fast_lines``); anything else goes to the line-by-line code
(``_slow_line``). The chunk size is made tiny here so that lines straddle chunks.
"""

from __future__ import annotations

import os
import tempfile

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olr_buffer.changes import RecordError
from olr_buffer.dead_letters import DeadLetters
from olr_buffer.sources.redo import thread_reader
from olr_buffer.sources.redo.errors import InputError
from olr_buffer.sources.redo.files import scan
from olr_buffer.sources.redo.records import batch_decode, decode_line
from olr_buffer.sources.redo.thread_reader import ThreadReader
from olr_buffer.testing import MemoryQueue

from .test_fuzz import damaged_lines, dumps, valid_records


class _Floor:
    def __init__(self, value: int) -> None:
        self.value = value


@st.composite
def plain_records(draw, scn: int) -> dict:
    """Records as a database writes them: few transactions, simple values, all fields."""
    op = draw(st.sampled_from(["begin", "insert", "insert", "update", "delete", "commit", "rollback", "ddl"]))
    rec: dict = {"op": op, "scn": scn, "xid": draw(st.sampled_from(["x1", "x2", "x3"]))}
    if draw(st.booleans()):
        rec["sub"] = draw(st.sampled_from([0, None]))  # a sub that goes back is an error: see "back"
    if draw(st.booleans()):
        # nanoseconds since 1970 (19 digits since 2001, as real captures write them), or small
        rec["tm"] = draw(st.integers(10**18, (1 << 63) - 1) | st.integers(0, 10**12) | st.none())
    if op in ("insert", "update", "delete", "ddl"):
        rec["owner"], rec["table"], rec["obj"] = "S", draw(st.sampled_from(["T1", "T2"])), 7
        rec["rid"] = draw(st.sampled_from(["R1", "R2", "R3"]))
        image = st.fixed_dictionaries({"ID": st.integers(0, 99), "N": st.text(max_size=4) | st.none()})
        if op != "insert" or draw(st.booleans()):
            rec["before"] = draw(image | st.none()) if op != "delete" else draw(image)
        if op != "delete" or draw(st.booleans()):
            rec["after"] = draw(image | st.none()) if op != "insert" else draw(image)
        if op != "ddl" and draw(st.booleans()):
            rec["rollback"] = draw(st.sampled_from([True, False, None]))
        if op == "ddl":
            rec["sql"] = "create table t (id int)"
    return rec


@st.composite
def line_files(draw) -> tuple[list[bytes], bool]:
    """One file's bytes as a list of lines: mostly valid records with SCNs mostly rising,
    some damaged, some unusual (blank, CRLF, a BOM, long, no final newline)."""
    scn = draw(st.integers(0, 1000))
    clean = draw(st.booleans())  # mostly lines the fast loop takes
    lines: list[bytes] = []
    if draw(st.booleans()):
        lines.append(b"\xef\xbb\xbf")
    for _ in range(draw(st.integers(10, 60) if clean else st.integers(0, 40))):
        kind = draw(
            st.sampled_from(
                ["plain"] * 10 + ["marker"]
                if clean
                else ["plain"] * 8 + ["valid"] * 4 + ["damaged", "back", "blank", "crlf", "spaces", "long", "marker"]
            )
        )
        if kind == "plain":
            scn += draw(st.integers(0, 3))
            raw = dumps(draw(plain_records(scn)), ascii_only=draw(st.booleans()))
        elif kind in ("valid", "crlf", "spaces", "long"):
            scn += draw(st.integers(0, 3))
            raw = dumps(draw(valid_records(scn=scn)), ascii_only=draw(st.booleans()))
            if kind == "crlf":
                raw += b"\r"
            elif kind == "spaces":
                raw = b" " + raw + b" "
            elif kind == "long":
                raw = raw[:-1] + b',"pad":"' + b"p" * draw(st.integers(100, 3000)) + b'"}'
        elif kind == "marker":
            scn += draw(st.integers(0, 3))
            raw = dumps({"op": draw(st.sampled_from(["lwn", "close"])), "scn": scn})
        elif kind == "back":
            raw = dumps(draw(valid_records(scn=max(0, scn - draw(st.integers(1, 5))))))
        elif kind == "blank":
            raw = b""
        else:
            raw = draw(damaged_lines())
            if len(raw) > 5000:
                raw = raw[:5000]
        lines.append(raw + b"\n")
    if lines and draw(st.booleans()):
        lines[-1] = lines[-1].rstrip(b"\n")  # no final newline
    return lines, draw(st.booleans())


def _run(
    tmp: str,
    data: bytes,
    compressed: bool,
    *,
    chunked: bool,
    block_records: int,
    max_line_bytes: int,
    dead: bool,
    floor: int | None,
    final: bool,
    linescan: object = "built",
) -> dict:
    """One read of ``data``; ``linescan``: the compiled loop the chunked reader uses (None:
    the pure-Python loop; "built": the reader's default)."""
    name = "redo_1_1.jsonl" + (".zst" if compressed else "")
    path = os.path.join(tmp, name)
    with open(path, "wb") as fh:
        fh.write(zstandard.ZstdCompressor().compress(data) if compressed else data)
    dead_path = os.path.join(tmp, f"dead-{chunked}.jsonl")
    letters = DeadLetters(dead_path) if dead else None
    queue = MemoryQueue()
    reader = ThreadReader(
        queue,
        tmp,
        1,
        scan(tmp)[1],
        None,
        block_records=block_records,
        max_line_bytes=max_line_bytes,
        dead_letters=letters,
    )
    reader.chunked = chunked
    if linescan != "built":
        reader.linescan = linescan  # type: ignore[assignment]
    if floor is not None:
        reader.enable_floor(_Floor(floor))
    error = None
    try:
        if final:
            reader.read_to_end()
        else:
            reader._read_file(reader.files[1], final=False)
            reader._flush()
    except InputError as exc:
        error = str(exc)
    finally:
        if letters:
            letters.close()
    blocks = []
    index = queue.first_index
    while index < queue.next_index:
        block = queue.read_block(index)
        blocks.append(block.records())
        index = block.end
    out = {
        "error": error,
        "blocks": blocks,
        "meta": sorted(queue.meta_items()),
        "pos": reader.pos.encode(),
        "partial": reader._partial_at,
        "stats": (reader.stats.records, reader.stats.blocks),
        "dead": open(dead_path, "rb").read() if dead else None,
    }
    os.remove(path)
    if dead:
        os.remove(dead_path)  # the next run in the same directory starts its own
    return out


@given(
    line_files(),
    st.sampled_from([64, 1, 2, 7, 4096, 1 << 20]),
    st.integers(1, 6),
    st.sampled_from([thread_reader.MAX_LINE_BYTES, 2000, 300, 64]),
    st.booleans(),
    st.sampled_from([None, 0, 500, 1000]),
    st.booleans(),
)
@settings(
    max_examples=max(120, 2 * settings.default.max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_chunked_reading_equals_line_by_line(case, chunk, block_records, max_line_bytes, dead, floor, final) -> None:
    lines, compressed = case
    data = b"".join(lines)
    saved = thread_reader._CHUNK
    thread_reader._CHUNK = chunk
    try:
        with tempfile.TemporaryDirectory() as tmp:
            kw = dict(
                block_records=block_records,
                max_line_bytes=max_line_bytes,
                dead=dead,
                floor=floor,
                final=final or compressed,
            )
            ref = _run(tmp, data, compressed, chunked=False, **kw)
            got = _run(tmp, data, compressed, chunked=True, **kw)
    finally:
        thread_reader._CHUNK = saved
    assert got == ref


def test_chunked_reading_takes_a_line_being_written_once_complete(tmp_path) -> None:
    """Follow mode: a last line without its newline is left; read again once complete."""
    path = tmp_path / "redo_1_1.jsonl"
    first = b'{"op":"begin","scn":5,"xid":"a"}\n{"op":"commit","scn":6,"xid":"a"}\n'
    path.write_bytes(first + b'{"op":"begin","sc')
    queue = MemoryQueue()
    reader = ThreadReader(queue, str(tmp_path), 1, scan(str(tmp_path))[1], None)
    assert reader._read_file(reader.files[1], final=False) == 2
    assert reader._partial_at == (1, len(first), len(first) + 17)
    assert (reader.pos.line, reader.pos.offset) == (2, len(first))
    with open(path, "ab") as fh:
        fh.write(b'n":7,"xid":"b"}\n')
    assert reader._read_file(reader.files[1], final=False) == 1
    assert (reader.pos.line, reader.pos.offset) == (3, path.stat().st_size)


# ---------------------------------------------------------------------------------------
# batch_decode: one decode of many lines stands for one decode per line, or declines


@given(st.lists(valid_records() | damaged_lines(), min_size=1, max_size=8), st.booleans())
@settings(
    max_examples=max(120, 2 * settings.default.max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_batch_decode_equals_one_decode_per_line(items, ascii_only) -> None:
    lines = [dumps(x, ascii_only) if isinstance(x, dict) else x.replace(b"\n", b" ") for x in items]
    region = b"\n".join(lines)
    decoded = batch_decode(region, region.split(b"\n"), thread_reader.MAX_LINE_BYTES)
    if decoded is None:
        return
    assert len(decoded) == len(lines)
    from olr_buffer.sources.redo.records import _decode_line

    for raw, r in zip(lines, decoded):
        assert r == _decode_line(raw)
        try:  # and decode_line takes the line (the struct is all the fast loop looks at)
            decode_line(raw)
        except RecordError:
            pass


@pytest.mark.parametrize(
    "region",
    [
        b'{"op":"lwn","scn":1} {"op":"lwn","scn":2,"x":\n{"a":1}}',  # a value across a line break
        b'{"op":"lwn","scn":1} {"op":"lwn","scn":2}\n{"op":"lwn","scn":3,"x":[1,\n2]}',
        b'{"op":"lwn","scn":1}\n\n{"op":"lwn","scn":2}',  # a blank line
        b'{"op":"lwn","scn":1}\r\n{"op":"lwn","scn":2}',
        b'{"op":"lwn","scn":1,"x":"}\n{"}',  # a newline inside a string
        b'{"op":"lwn","scn":1,"d":' + b"[" * 600 + b"]" * 600 + b"}",  # perhaps nested too deeply
        b'{"op":"lwn","scn":1,"s":"\xff"}',  # not UTF-8
    ],
)
def test_batch_decode_declines_what_one_decode_per_line_would_not_give(region) -> None:
    assert batch_decode(region, region.split(b"\n"), thread_reader.MAX_LINE_BYTES) is None
