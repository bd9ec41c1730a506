"""Issue 33's spike: values in Arrow memory from the line to the Parquet file (a prototype,
not the product: see bench/log/2026-11-26-columnar-spike.md for what it leaves out).

Four pieces, each usable alone (``stages_columnar.py`` times them one by one,
``replay_columnar.py`` runs them as a pipeline with reader processes):

* :class:`ColumnarReader` -- one redo thread's files, 64 KiB chunks: one msgspec
  ``decode_lines`` a chunk, then one Arrow array a field (``before``/``after`` kept as the
  input's own bytes: ``msgspec.Raw``), the contract's checks as vectorized expressions
  (:func:`check_chunk`: the first bad line, or none), ``lwn``/``close`` folded into the
  progress; blocks of ~4,096 records.
* :func:`build_block` -- a block: the records sorted by XID group (``dictionary_encode`` of
  ``xid``, stable ``sort_indices``), a summary per group (XID, start, count, rows,
  compensations, first SCN) and the block's begin/commit/rollback records ("events"),
  each an Arrow IPC stream, all four parts in one block of the queue's format (zstd, CRC32), as
  ``LmdbQueue.append_encoded`` takes it.
* :class:`ColumnarDispatcher` -- per block: progress, and the block's groups and events
  appended to the held ones (Python per block, never per transaction); every 16 blocks:
  the first end of each XID (one sort of the held events by commit key), the ends at or
  below the watermark, begins checked, commit order = that sort; the committed groups'
  records taken from the blocks' batches with one ``take``; rows after the commit
  dropped; transactions of several threads sorted into row order; compensation by
  vectorized bracket matching per ``(transaction, rid)``.
* :class:`ColumnarSink` -- the changefeed's columns (``ARROW_SCHEMA``) from those rows with
  Arrow compute (``tx_seq``, ``op_seq``, ``c_scn`` ... by ``take``), row groups of 65,536
  rows, files of ~1M rows cut at transaction boundaries, written with the changefeed's
  Parquet settings (``parquet_writer``), fsync'ed and renamed.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Iterator
from operator import attrgetter
from typing import Annotated

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import zstandard

from olr_buffer.changes import (
    BEGIN,
    CHANGEFEED_OP,
    CLOSE,
    COMMIT,
    COMPENSATION,
    DDL,
    DELETE,
    INFINITE_SCN,
    INSERT,
    LWN,
    OP_CODES,
    ROLLBACK,
    UPDATE,
)
from olr_buffer.sinks.parquet.schema import (
    ARROW_SCHEMA,
    META_FIRST,
    META_LAST,
    META_LAST_COMMIT,
    META_ROWS,
    nanos_to_timestamp,
    parquet_writer,
    part_name,
)
from olr_buffer.sources.redo.files import check_contiguous, scan
from olr_buffer.sources.redo.records import INT64_MAX, INT64_MIN, MAX_SCN

RECORD_FORMAT = 3  # what the product would call the queue's record format of this layout
CHUNK = 1 << 19  # the reader's read size (today 64 KiB: here a chunk's fixed cost is ~60 Arrow calls)
BLOCK_RECORDS = 4096
BLOCK_BYTES = 1 << 20
PUBLISH_EVERY = 16  # blocks between two looks at the watermark (today: a quarter of the cache)

I64, I32, I8, STR, BIN = pa.int64(), pa.int32(), pa.int8(), pa.string(), pa.binary()
_Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]


class Line(msgspec.Struct, gc=False):
    """One input line as msgspec decodes it: the types and ranges of the contract are
    checked by the decode itself; ``before``/``after`` are the input's bytes (``b""``:
    absent)."""

    op: str
    scn: Annotated[int, msgspec.Meta(ge=0, le=MAX_SCN)]
    xid: str | None = None
    sub: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)] | None = None
    tm: _Int64 | None = None
    owner: str | None = None
    table: str | None = None
    obj: _Int64 | None = None
    rid: str | None = None
    before: msgspec.Raw = msgspec.Raw(b"")
    after: msgspec.Raw = msgspec.Raw(b"")
    sql: str | None = None
    rollback: bool | None = None


_decode_lines = msgspec.json.Decoder(Line).decode_lines
_decode_line = msgspec.json.Decoder(Line).decode
_get = {name: attrgetter(name) for name in Line.__struct_fields__}
_OP_NAMES_IN = pa.array(list(OP_CODES), STR)
_CODE_BY_OP = pa.array(list(OP_CODES.values()), I8)
_NULL_TEXT = pa.scalar(b"null", BIN)
_OFFSETS = struct.Struct("<ii")
_TRUSTED_UTF8 = pc.CastOptions(target_type=STR, allow_invalid_utf8=True)
_BRACE = b"{"

# A chunk's records (markers are not records: they move the progress); in a block, the
# same without ``xid``: its groups and events carry it
CHUNK_SCHEMA = pa.schema(
    [
        ("code", I8),
        ("scn", I64),
        ("sub", I64),
        ("seq", I32),
        ("line", I64),
        ("xid", STR),
        ("tm", I64),
        ("owner", STR),
        ("table", STR),
        ("obj", I64),
        ("rid", STR),
        ("before", STR),
        ("after", STR),
        ("sql", STR),
    ]
)
RECORD_SCHEMA = pa.schema([f for f in CHUNK_SCHEMA if f.name != "xid"])

_ROWNUMS: list[pa.Array] = [pa.array([], I64)]


def rownums(n: int) -> pa.Array:
    """0 .. n-1 (a slice of a cached array)."""
    if len(_ROWNUMS[0]) < n:
        _ROWNUMS[0] = pa.array(range(max(n, 1 << 17)), I64)
    return _ROWNUMS[0].slice(0, n)


def shift(arr: pa.Array, first) -> pa.Array:
    """``arr`` moved one place down, ``first`` in front (the previous element's value)."""
    return pa.concat_arrays([pa.array([first], arr.type), arr.slice(0, len(arr) - 1)])


class ChunkState(msgspec.Struct):
    """What checking a chunk needs of the lines before it (the thread's, across files)."""

    last_scn: int = -1
    after_marker: bool = False  # the last line was an lwn/close: a record at its scn is refused
    last_sub: int = 0
    progress: int = -1
    closed: bool = False


class BadChunk(Exception):
    """A chunk the vectorized path does not take: ``index`` is its first bad line (0-based
    in the chunk), ``reason`` what the checks found; the product would read the chunk by
    today's line path from there (errors, dead letters)."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"line {index + 1} of the chunk: {reason}")
        self.index = index
        self.reason = reason


def decode_chunk(region: bytes) -> tuple[list[Line], int | None, str | None]:
    """The typed decode of every line of ``region`` in one call, under today's conditions
    for that (``records.batch_decode``: each line one object; UTF-8). Otherwise each line
    alone, up to the first that does not decode: ``(lines decoded, its index, why)``."""
    n = region.count(b"\n") + 1
    if region[:1] == b"{" and region[-1:] == b"}" and region.count(b"}\n{") == n - 1:
        try:
            if not region.isascii():  # the UTF-8 of the fields msgspec skips, in Arrow's validator
                pa.Array.from_buffers(
                    STR, 1, [None, pa.py_buffer(_OFFSETS.pack(0, len(region))), pa.py_buffer(region)]
                ).validate(full=True)
            out = _decode_lines(region)
            if len(out) == n:
                return out, None, None
        except (msgspec.MsgspecError, ValueError, pa.ArrowInvalid):
            pass
    out = []
    for i, raw in enumerate(region.split(b"\n")):
        try:
            raw.decode()
            out.append(_decode_line(raw))
        except (msgspec.MsgspecError, ValueError) as exc:
            return out, i, f"not a valid record: {exc}"
    return out, None, None  # pragma: no cover - the one call would have taken them


def check_chunk(code: pa.Array, cols: dict, state: ChunkState) -> pa.Array:
    """The contract's checks that the typed decode does not make, as Arrow expressions,
    for the lines of one chunk: returns a boolean array, true where a line is bad (the
    caller looks for the first true). ``state`` holds the thread's last (scn, sub)."""
    scn, sub = cols["scn"], cols["sub"]
    bad = pc.is_null(code)  # unknown op
    marker = pc.greater_equal(code, LWN)
    record = pc.invert(marker)
    # xid: a non-empty string on every record
    xid = cols["xid"]
    no_xid = pc.fill_null(pc.equal(pc.binary_length(xid), 0), True)
    bad = pc.or_(bad, pc.and_(record, no_xid))
    dml = pc.and_(pc.greater_equal(code, INSERT), pc.less_equal(code, DELETE))
    missing = pc.or_(pc.or_(pc.is_null(cols["owner"]), pc.is_null(cols["table"])), pc.is_null(cols["rid"]))
    bad = pc.or_(bad, pc.and_(dml, missing))
    bad = pc.or_(bad, pc.fill_null(pc.equal(code, DDL), False))  # DDL: today's line path (as its fast loop)
    # images: absent, null, or an object; required by the op unless a compensation
    rollback = cols["rollback"]
    for name, needed_by in (("before", (UPDATE, DELETE)), ("after", (INSERT, UPDATE))):
        img = cols[name]
        present = pc.greater(pc.binary_length(img), 0)
        is_null = pc.equal(img, _NULL_TEXT)
        is_object = pc.starts_with(img, pattern="{")
        wrong = pc.and_(present, pc.invert(pc.or_(is_null, is_object)))
        need = pc.and_(pc.invert(rollback), pc.is_in(code, value_set=pa.array(needed_by, I8)))
        lacking = pc.and_(need, pc.invert(pc.and_(present, is_object)))
        bad = pc.or_(bad, pc.and_(dml, pc.or_(wrong, lacking)))
    # SCN order in the thread: a record's (scn, sub) not below the last one's; not at the
    # scn of an lwn/close just before; a marker's scn not below the last scn
    prev_scn = shift(scn, state.last_scn)
    prev_sub = shift(sub, state.last_sub)
    prev_marker = shift(marker, state.after_marker)
    above = pc.greater(scn, prev_scn)
    same = pc.equal(scn, prev_scn)
    record_ok = pc.or_(above, pc.and_(same, pc.and_(pc.invert(prev_marker), pc.greater_equal(sub, prev_sub))))
    marker_ok = pc.greater_equal(scn, prev_scn)
    order_ok = pc.if_else(marker, marker_ok, record_ok)
    return pc.fill_null(pc.or_(bad, pc.invert(order_ok)), True)  # a null anywhere (an unknown op): bad


_REASONS = "unknown op, missing field, wrong image, DDL, or SCN out of order"


def chunk_columns(decoded: list[Line]) -> tuple[pa.Array, dict]:
    """One Arrow array a field of the decoded lines (the only per-value Python left:
    ``map`` over the structs, in C)."""
    m = lambda name: list(map(_get[name], decoded))  # noqa: E731
    ops = pa.array(m("op"), STR)
    code = _CODE_BY_OP.take(pc.index_in(ops, value_set=_OP_NAMES_IN))
    cols = {
        "scn": pa.array(m("scn"), I64),
        "sub": pc.fill_null(pa.array(m("sub"), I64), 0),
        "xid": pa.array(m("xid"), STR),
        "tm": pa.array(m("tm"), I64),
        "owner": pa.array(m("owner"), STR),
        "table": pa.array(m("table"), STR),
        "obj": pa.array(m("obj"), I64),
        "rid": pa.array(m("rid"), STR),
        "before": pa.array(list(map(bytes, m("before"))), BIN),
        "after": pa.array(list(map(bytes, m("after"))), BIN),
        "sql": pa.array(m("sql"), STR),
        "rollback": pc.fill_null(pa.array(m("rollback"), pa.bool_()), False),
    }
    return code, cols


def _image_text(img: pa.Array, keep: pa.Array | None) -> pa.Array:
    """``before``/``after`` as the changefeed has them: the object's text, or null
    (absent, ``null``, or a compensation's, which is not stored)."""
    drop = pc.or_(pc.equal(pc.binary_length(img), 0), pc.equal(img, _NULL_TEXT))
    if keep is not None:
        drop = pc.or_(drop, pc.invert(keep))
    # the chunk's UTF-8 is checked already (decode_chunk): the cast need not again
    return pc.cast(pc.if_else(drop, pa.scalar(None, BIN), img), options=_TRUSTED_UTF8)


def chunk_records(region: bytes, seq: int, line0: int, state: ChunkState) -> tuple[pa.RecordBatch | None, int]:
    """The records of one chunk (complete lines, ``line0`` lines of the file before it) as
    a record batch of :data:`RECORD_SCHEMA`, or :class:`BadChunk`; ``state`` is moved past
    it. Returns (batch or None, lines)."""
    decoded, failed, why = decode_chunk(region)
    n = len(decoded)
    if n:
        code, cols = chunk_columns(decoded)
        bad = check_chunk(code, cols, state)
        if pc.any(bad).as_py():  # the first bad line: an earlier one than where a decode failed
            raise BadChunk(pc.index(bad, True).as_py(), _REASONS)
    if failed is not None:
        raise BadChunk(failed, why)
    scn = cols["scn"]
    marker = pc.greater_equal(code, LWN)
    # progress: a marker's scn, a record's scn - 1; closed: the last line is a close
    record = pc.invert(marker)
    top = pc.max(pc.if_else(marker, scn, pc.subtract(scn, 1))).as_py()
    if top > state.progress:
        state.progress = top
    last_code = code[n - 1].as_py()
    state.closed = last_code == CLOSE
    state.last_scn = scn[n - 1].as_py()
    state.after_marker = last_code >= LWN
    state.last_sub = cols["sub"][n - 1].as_py()
    nrec = pc.sum(record).as_py() or 0
    if nrec == 0:
        return None, n
    rollback = pc.and_(cols["rollback"], pc.and_(pc.greater_equal(code, INSERT), pc.less_equal(code, DELETE)))
    any_comp = pc.any(rollback).as_py()
    if any_comp:
        code = pc.if_else(rollback, pc.bit_wise_or(code, pa.scalar(COMPENSATION, I8)), code)
    keep = pc.invert(rollback) if any_comp else None
    xid = cols["xid"]
    if nrec < n and pc.any(pc.and_(marker, pc.is_valid(xid))).as_py():
        xid = pc.if_else(marker, pa.scalar(None, STR), xid)  # an lwn/close with an xid: not a record
    arrays = [
        code,
        scn,
        cols["sub"],
        pa.repeat(pa.scalar(seq, I32), n),
        pc.add(rownums(n), line0 + 1),
        xid,
        cols["tm"],
        cols["owner"],
        cols["table"],
        cols["obj"],
        cols["rid"],
        _image_text(cols["before"], keep),
        _image_text(cols["after"], keep),
        cols["sql"],
    ]
    # lwn/close lines stay in the batch (xid null): build_block drops them in the take it
    # makes anyway, instead of a copy of every chunk that holds one
    return pa.RecordBatch.from_arrays(arrays, schema=CHUNK_SCHEMA), n


# -- blocks --------------------------------------------------------------------------------

GROUP_SCHEMA = pa.schema(
    [("xid", STR), ("start", I32), ("count", I32), ("rows", I64), ("comps", I64), ("first_scn", I64)]
)
EVENT_COLUMNS = ["xid", "code", "scn", "seq", "line", "tm"]


def _ipc(obj) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, obj.schema) as w:
        w.write(obj)
    return sink.getvalue().to_pybytes()


def build_block(parts: list[pa.RecordBatch], thread: int, progress: int, closed: bool) -> tuple[bytes, int, int]:
    """The queue block of one thread's records (``parts``, in input order): the value for
    ``append_encoded``, its count of queue records (4) and of change records."""
    b = pa.concat_batches(parts) if len(parts) > 1 else parts[0]
    enc = pc.dictionary_encode(b.column("xid"))  # groups in order of first appearance, as today
    gid = enc.indices
    order = pc.sort_indices(gid)  # stable: each group's records keep their input order
    markers = gid.null_count  # lwn/close (no xid): sorted last, dropped here
    if markers:
        order = order.slice(0, len(order) - markers)
    b = b.take(order)
    gid = gid.take(order)
    code = b.column("code")
    ends = pc.run_end_encode(gid).run_ends  # gid sorted: one run a group, in gid order
    counts = pc.subtract(ends, shift(ends, 0))
    starts = shift(ends, 0)
    is_row = pc.and_(pc.greater_equal(code, INSERT), pc.less_equal(code, DDL))
    is_comp = pc.greater_equal(code, COMPENSATION)
    rows_g, comps_g = (_per_run(pc.cumulative_sum(x.cast(I64)), ends) for x in (is_row, is_comp))
    events_mask = pc.is_in(code, value_set=pa.array([BEGIN, COMMIT, ROLLBACK], I8))
    # XID reuse inside a block (a begin after an end of the same XID): today's path makes
    # a new group; the prototype does not (never in these inputs): refuse, not misread
    ev = b.filter(events_mask).select(EVENT_COLUMNS)
    if len(ev) > 1:
        # a group's events are in input order: a begin after an end of the same XID has
        # an end just before it (the first such begin does)
        x, k = ev.column("xid"), ev.column("code")
        reuse = pc.and_(pc.and_(pc.equal(x, shift(x, None)), pc.equal(k, BEGIN)), pc.not_equal(shift(k, BEGIN), BEGIN))
        if pc.any(reuse).as_py():
            raise NotImplementedError("XID reuse inside one block")
    groups = pa.RecordBatch.from_arrays(
        [enc.dictionary, starts.cast(I32), counts.cast(I32), rows_g, comps_g, b.column("scn").take(starts)],
        schema=GROUP_SCHEMA,
    )
    meta = json.dumps({"f": RECORD_FORMAT, "t": thread, "p": progress, "c": closed}).encode()
    value = encode_block([meta, _ipc_buffer(groups), _ipc_buffer(ev), _ipc_buffer(b.drop_columns(["xid"]))])
    return value, 4, len(b)


def _per_run(cumsum: pa.Array, ends: pa.Array) -> pa.Array:
    """Sums per run (runs ending at ``ends``) from the cumulative sum of the values."""
    at_end = cumsum.take(pc.subtract(ends, 1))
    return pc.subtract(at_end, shift(at_end, 0))


_BLOCK_HEADER = struct.Struct(">BIII")
_ZSTD = zstandard.ZstdCompressor(level=1)  # the queue's level; one per reader process


def encode_block(parts: list) -> bytes:
    """What ``BlockCodec.encode(parts)`` returns (the queue's block format: header, then
    zstd of the offsets and the parts), written into one buffer: no copy of the parts
    before the compressor reads them."""
    import zlib
    from array import array
    from itertools import accumulate

    offsets = array("I", [0])
    offsets.extend(accumulate(map(len, parts)))
    out = pa.BufferOutputStream()
    out.write(offsets.tobytes())
    for p in parts:
        out.write(p)
    raw = out.getvalue()
    compressed = _ZSTD.compress(raw)
    return _BLOCK_HEADER.pack(1, len(parts), raw.size, zlib.crc32(compressed)) + compressed


def _ipc_buffer(obj) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, obj.schema) as w:
        w.write(obj)
    return sink.getvalue()


def read_ipc(data: bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_next_batch()


# -- the reader ------------------------------------------------------------------------------


class ColumnarReader:
    """One redo thread's files to blocks (offline: every file to its end), handed to
    ``emit(value, count, records, meta)``; the position after each block goes in
    ``meta`` as today's readers do (sequence, offset, line; a JSON stand-in)."""

    def __init__(self, input_dir: str, thread: int, emit) -> None:
        self.input_dir = input_dir
        self.thread = thread
        self.emit = emit
        self.state = ChunkState()
        self.parts: list[pa.RecordBatch] = []
        self.nrec = 0
        self.nbytes = 0
        self.records = 0
        self.blocks = 0
        self.lines = 0

    def read_to_end(self) -> None:
        files = scan(self.input_dir).get(self.thread, {})
        for lf in check_contiguous(self.input_dir, self.thread, files):
            self._read_file(lf)
        self._flush(lf.sequence, 0, 0, force=True)

    def _read_file(self, lf) -> None:
        seq, line, offset = lf.sequence, 0, 0
        buf = b""
        with lf.open() as fh:
            while True:
                data = fh.read1(CHUNK) if hasattr(fh, "read1") else fh.read(CHUNK)
                if not data:
                    if buf:  # the last line without "\n": the line path's (refused offline, as today)
                        raise BadChunk(0, "last line without a line break")
                    return
                buf = buf + data if buf else data
                end = buf.rfind(b"\n")
                if end < 0:
                    continue
                region = buf[:end]
                batch, n = chunk_records(region, seq, line, self.state)
                line += n
                offset += end + 1
                self.lines += n
                buf = buf[end + 1 :]
                if batch is not None:
                    self.parts.append(batch)
                    self.nrec += len(batch)  # lwn/close lines included (a few)
                    self.nbytes += end + 1
                    if self.nrec >= BLOCK_RECORDS or self.nbytes >= BLOCK_BYTES:
                        self._flush(seq, offset, line)

    def _flush(self, seq: int, offset: int, line: int, force: bool = False) -> None:
        if not self.parts and not force:
            return
        pos = json.dumps(
            {"t": self.thread, "s": seq, "o": offset, "l": line, "p": self.state.progress, "c": self.state.closed}
        ).encode()
        if self.parts:
            value, count, nrec = build_block(self.parts, self.thread, self.state.progress, self.state.closed)
            self.emit(value, count, nrec, {b"columnar/reader/%d" % self.thread: pos})
            self.records += nrec
            self.blocks += 1
        self.parts, self.nrec, self.nbytes = [], 0, 0


# -- the dispatcher --------------------------------------------------------------------------

HELD_GROUP_SCHEMA = pa.schema(
    [("xid", STR), ("block", I64), ("thread", I32), ("start", I32), ("count", I32), ("comps", I64)]
)
HELD_EVENT_SCHEMA = pa.schema(
    [("xid", STR), ("code", I8), ("scn", I64), ("thread", I32), ("seq", I32), ("line", I64), ("tm", I64)]
)


class Published(msgspec.Struct):
    """What the dispatcher hands the sink for a run of commits: ``rows`` in changefeed
    order (rank, then row order), ``rank``/``thread`` per row, and per rank the commit's
    ``xid``, ``c_scn``, ``c_tm`` (``commits``)."""

    rows: pa.Table
    rank: pa.Array
    thread: pa.Array
    commits: pa.Table


class Stats(msgspec.Struct):
    blocks: int = 0
    records: int = 0
    committed: int = 0
    rolled_back: int = 0
    no_begin: int = 0
    late_rows: int = 0
    compensations: int = 0
    unmatched_compensations: int = 0
    block_reads: int = 0


class ColumnarDispatcher:
    """Tails a queue of columnar blocks and hands committed transactions to ``sink``
    (``sink.write(Published)``) in commit order; ``threads``: the threads in play."""

    def __init__(self, queue, sink, threads, cache_blocks: int = 64) -> None:
        self.queue = queue
        self.sink = sink
        self.progress = {t: -1 for t in threads}
        self.tailer = queue.tailer(queue.first_index)
        self.cache: dict[int, pa.RecordBatch] = {}
        self.cache_blocks = cache_blocks
        self.new_groups: list[pa.RecordBatch] = []
        self.new_events: list[pa.RecordBatch] = []
        self.held_groups = HELD_GROUP_SCHEMA.empty_table()
        self.held_events = HELD_EVENT_SCHEMA.empty_table()
        self.stats = Stats()

    # per block: Python here, never per transaction
    def poll(self, max_blocks: int = 64) -> int:
        n = 0
        while n < max_blocks:
            block = self.tailer.next_block()
            if block is None:
                break
            self._process(block)
            n += 1
            if self.stats.blocks % PUBLISH_EVERY == 0:
                self.publish_ready()
        self.publish_ready()
        return n

    def _process(self, block) -> None:
        meta = json.loads(block.record(0))
        if meta["f"] != RECORD_FORMAT:
            raise ValueError(f"record format {meta['f']}")
        t, index = meta["t"], block.first
        if meta["p"] > self.progress.get(t, -1):
            self.progress[t] = meta["p"]
        g, ev, recs = read_ipc(block.record(1)), read_ipc(block.record(2)), read_ipc(block.record(3))
        self._cache_put(index, recs)
        n = len(g)
        self.new_groups.append(
            pa.RecordBatch.from_arrays(
                [
                    g.column("xid"),
                    pa.repeat(pa.scalar(index, I64), n),
                    pa.repeat(pa.scalar(t, I32), n),
                    g.column("start"),
                    g.column("count"),
                    g.column("comps"),
                ],
                schema=HELD_GROUP_SCHEMA,
            )
        )
        m = len(ev)
        self.new_events.append(
            pa.RecordBatch.from_arrays(
                [
                    ev.column("xid"),
                    ev.column("code"),
                    ev.column("scn"),
                    pa.repeat(pa.scalar(t, I32), m),
                    ev.column("seq"),
                    ev.column("line"),
                    ev.column("tm"),
                ],
                schema=HELD_EVENT_SCHEMA,
            )
        )
        self.stats.blocks += 1
        self.stats.records += len(recs)

    def _cache_put(self, index: int, batch: pa.RecordBatch) -> None:
        self.cache[index] = batch
        if len(self.cache) > self.cache_blocks:
            del self.cache[next(iter(self.cache))]

    def _batch_of(self, index: int) -> pa.RecordBatch:
        b = self.cache.get(index)
        if b is None:  # evicted: read back from the queue (as today's block cache)
            self.stats.block_reads += 1
            b = read_ipc(self.queue.read_block(index).record(3))
            self._cache_put(index, b)
        return b

    @property
    def watermark(self) -> int:
        return min(self.progress.values()) if self.progress else INFINITE_SCN

    def publish_ready(self, watermark: int | None = None) -> int:
        """Act on every transaction whose first end is at or below the watermark, in commit
        order; returns how many ends were acted on."""
        w = min(self.watermark if watermark is None else watermark, INT64_MAX)
        if self.new_groups:
            self.held_groups = pa.concat_tables([self.held_groups, pa.Table.from_batches(self.new_groups)])
            self.held_events = pa.concat_tables([self.held_events, pa.Table.from_batches(self.new_events)])
            self.new_groups, self.new_events = [], []
        ev = self.held_events
        code = col(ev, "code")
        ends = ev.filter(pc.not_equal(code, BEGIN))
        if not len(ends):
            return 0
        # commit order: (scn, thread, sequence, line); an XID's end is its first in that order
        ends = ends.take(
            pc.sort_indices(
                ends, [("scn", "ascending"), ("thread", "ascending"), ("seq", "ascending"), ("line", "ascending")]
            )
        )
        idx = pc.dictionary_encode(col(ends, "xid")).indices
        first = pc.greater(idx, shift(pc.cumulative_max(idx), -1))
        ends = ends.filter(first)
        ready = ends.filter(pc.less_equal(col(ends, "scn"), w))
        if not len(ready):
            return 0
        xids = col(ready, "xid")
        done_groups = pc.is_in(col(self.held_groups, "xid"), value_set=xids)
        done_events = pc.is_in(col(ev, "xid"), value_set=xids)
        groups = self.held_groups.filter(done_groups)
        events = ev.filter(done_events)
        self.held_groups = self.held_groups.filter(pc.invert(done_groups))
        self.held_events = ev.filter(pc.invert(done_events))
        # begins: the lowest begin of each XID, at or below its commit
        begins = events.filter(pc.equal(col(events, "code"), BEGIN))
        if (
            len(begins)
            and pc.any(
                pc.greater(
                    col(begins, "scn"), pc.take(col(ready, "scn"), pc.index_in(col(begins, "xid"), value_set=xids))
                )
            ).as_py()
        ):
            raise NotImplementedError("XID reuse (a begin after its commit) in one publish")
        bpos = pc.index_in(col(ready, "xid"), value_set=col(begins, "xid"))
        has_begin = pc.is_valid(bpos)
        is_commit = pc.equal(col(ready, "code"), COMMIT)
        self.stats.rolled_back += len(ready) - (pc.sum(is_commit).as_py() or 0)
        ok = pc.and_(is_commit, has_begin)
        self.stats.no_begin += pc.sum(pc.and_(is_commit, pc.invert(has_begin))).as_py() or 0
        commits = ready.filter(ok).select(["xid", "scn", "tm"]).rename_columns(["xid", "c_scn", "c_tm"])
        commits = commits.combine_chunks()
        self.stats.committed += len(commits)
        if len(commits):
            self._publish(commits, groups)
        return len(ready)

    def _publish(self, commits: pa.Table, groups: pa.Table) -> None:
        cx = col(commits, "xid")
        rank = pc.index_in(col(groups, "xid"), value_set=cx)
        groups = groups.append_column("rank", rank).filter(pc.is_valid(rank))
        groups = groups.take(
            pc.sort_indices(
                groups, [("rank", "ascending"), ("thread", "ascending"), ("block", "ascending"), ("start", "ascending")]
            )
        )
        counts = col(groups, "count")
        run_ends = pc.cumulative_sum(counts.cast(I64))
        total = run_ends[-1].as_py()
        out_first = pc.subtract(run_ends, counts.cast(I64))

        def per_record(values) -> pa.Array:
            values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
            return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(run_ends, values))

        if len(groups) <= 64 or total >= 256 * len(groups):
            # few, large groups (large transactions): each a zero-copy slice of its block's
            # batch (a group is contiguous there): a table of them, no copy (the Parquet
            # writer reads the chunks where they are)
            parts = [
                self._batch_of(b).slice(st, n)
                for b, st, n in zip(
                    col(groups, "block").to_pylist(), col(groups, "start").to_pylist(), counts.to_pylist()
                )
            ]
            recs = pa.Table.from_batches(parts)
        else:
            # many small groups: one take from the blocks they are in
            blocks = pc.unique(col(groups, "block")).to_pylist()
            blocks.sort()
            batches = [self._batch_of(b) for b in blocks]
            offsets, at = [], 0
            for b in batches:
                offsets.append(at)
                at += len(b)
            big = pa.concat_batches(batches) if len(batches) > 1 else batches[0]
            bpos = pc.index_in(col(groups, "block"), value_set=pa.array(blocks, I64))
            gstart = pc.add(pc.take(pa.array(offsets, I64), bpos), col(groups, "start").cast(I64))
            indices = pc.add(rownums(total), per_record(pc.subtract(gstart, out_first)))
            recs = pa.Table.from_batches([big.take(indices)])
        rank_r = _arr(per_record(col(groups, "rank")))
        thread_r = _arr(per_record(col(groups, "thread")))
        code = col(recs, "code")
        c_scn_r = _arr(pc.take(col(commits, "c_scn"), rank_r))
        is_row = pc.and_(pc.greater_equal(code, INSERT), pc.less_equal(code, DDL))
        is_comp = pc.greater_equal(code, COMPENSATION)
        upto = pc.less_equal(col(recs, "scn"), c_scn_r)
        late = pc.sum(pc.and_(pc.or_(is_row, is_comp), pc.invert(upto))).as_py() or 0
        self.stats.late_rows += late
        any_comp = (pc.sum(col(groups, "comps")).as_py() or 0) > 0
        keep = pc.and_(pc.or_(is_row, is_comp) if any_comp else is_row, upto)
        recs, rank_r, thread_r = _keep_rows(recs, keep), rank_r.filter(keep), thread_r.filter(keep)
        # transactions of several threads: their records sorted into row order (only theirs)
        per_tx = groups.group_by("rank", use_threads=False).aggregate([("thread", "min"), ("thread", "max")])
        multi = per_tx.filter(pc.not_equal(per_tx["thread_min"], per_tx["thread_max"])).column("rank")
        if len(multi):
            recs, rank_r, thread_r = _row_order(recs, rank_r, thread_r, multi.combine_chunks())
        if any_comp:
            recs, rank_r, thread_r = self._compensate(recs, rank_r, thread_r)
        if len(recs):
            self.sink.write(Published(recs, rank_r, thread_r, commits))

    def _compensate(self, recs, rank_r, thread_r):
        """Compensation records cancel rows, per (transaction, rid): the latest row before
        them not cancelled already (the contract's rule) -- as bracket matching, vectorized:
        per partition, depth after each row / before each compensation (clamped at 0:
        a compensation at depth 0 cancels nothing); at each depth, rows and compensations
        alternate, so each compensation cancels the element just before it in
        (partition, depth, position) order."""
        code = col(recs, "code")
        is_comp = pc.greater_equal(code, COMPENSATION)
        n = len(recs)
        pos = rownums(n)
        t = pa.table({"rank": rank_r, "rid": col(recs, "rid"), "pos": pos, "comp": is_comp})
        t = t.take(pc.sort_indices(t, [("rank", "ascending"), ("rid", "ascending"), ("pos", "ascending")]))
        rk, rid, p, comp = (t.column(i).combine_chunks() for i in range(4))
        new = pc.or_(pc.not_equal(rk, shift(rk, -1)), pc.fill_null(pc.not_equal(rid, shift(rid, None)), True))
        new = pc.fill_null(new, True)
        pid = pc.subtract(pc.cumulative_sum(new.cast(I64)), 1)
        delta = pc.if_else(comp, -1, 1).cast(I64)
        c = pc.cumulative_sum(delta)
        base = pc.fill_null_forward(pc.if_else(new, pc.subtract(c, delta), pa.scalar(None, I64)))
        s = pc.subtract(c, base)
        big = 2 * n + 2
        m = pc.add(pc.cumulative_min(pc.subtract(s, pc.multiply(pid, big))), pc.multiply(pid, big))
        d = pc.subtract(s, pc.min_element_wise(m, 0))
        d_prev = pc.if_else(new, 0, shift(d, 0))
        matched = pc.and_(comp, pc.greater(d_prev, 0))
        unmatched = pc.sum(pc.and_(comp, pc.invert(matched))).as_py() or 0
        self.stats.compensations += pc.sum(comp).as_py() or 0
        self.stats.unmatched_compensations += unmatched
        level = pc.if_else(comp, d_prev, d)
        e = pa.table({"pid": pid, "level": level, "pos": p, "comp": comp})
        e = e.filter(pc.or_(pc.invert(comp), matched))
        e = e.take(pc.sort_indices(e, [("pid", "ascending"), ("level", "ascending"), ("pos", "ascending")]))
        ecomp = col(e, "comp")
        epos = col(e, "pos")
        cancelled = pc.filter(shift(epos, -1), ecomp)  # the element before each compensation
        keep = pc.and_(pc.invert(is_comp), pc.invert(pc.is_in(pos, value_set=cancelled)))
        return recs.filter(keep), rank_r.filter(keep), thread_r.filter(keep)


def _keep_rows(t: pa.Table, keep: pa.Array) -> pa.Table:
    """``t.filter(keep)``; where only a few rows go (a large transaction's begin and
    commit), zero-copy slices around them instead of a copy of every value."""
    dropped = pc.indices_nonzero(pc.invert(keep))
    if not len(dropped):
        return t
    if len(dropped) > 64 or t.num_columns and t.column(0).num_chunks == 1:
        return t.filter(keep)
    parts, at = [], 0
    for i in dropped.to_pylist():
        if i > at:
            parts.append(t.slice(at, i - at))
        at = i + 1
    if at < len(t):
        parts.append(t.slice(at))
    return pa.concat_tables(parts) if parts else t.slice(0, 0)


def _arr(x):
    return x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x


def col(t, name: str) -> pa.Array:
    """A column of a table or batch as one array."""
    return _arr(t.column(name))


def _row_order(recs, rank_r, thread_r, multi):
    """Rows of the transactions in ``multi`` sorted by (rank, scn, sub, thread, sequence,
    line) in place: they hold whole rank ranges, so sorting them among themselves and
    putting them back in the same places orders everything."""
    mask = pc.is_in(rank_r, value_set=multi)
    where = pc.indices_nonzero(mask)
    sub = pa.table(
        {
            "rank": rank_r.filter(mask),
            "scn": recs.column("scn").filter(mask),
            "sub": recs.column("sub").filter(mask),
            "thread": thread_r.filter(mask),
            "seq": recs.column("seq").filter(mask),
            "line": recs.column("line").filter(mask),
        }
    )
    order = pc.sort_indices(sub, [(k, "ascending") for k in ("rank", "scn", "sub", "thread", "seq", "line")])
    perm = pc.replace_with_mask(rownums(len(recs)), mask, pc.take(where, order).cast(I64))
    return recs.take(perm), rank_r.take(perm), thread_r.take(perm)


# -- the sink --------------------------------------------------------------------------------

_OP_NAMES = pa.array([CHANGEFEED_OP.get(code) for code in range(max(CHANGEFEED_OP) + 1)], STR)


class ColumnarSink:
    """The changefeed from :class:`Published` runs: files of about ``file_rows`` rows cut
    at transaction boundaries, row groups of ``row_group_rows``."""

    def __init__(
        self, path: str, file_rows: int = 1_000_000, row_group_rows: int = 65_536, durable: bool = True
    ) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        self.file_rows = file_rows
        self.row_group_rows = row_group_rows
        self.durable = durable
        self.next_tx_seq = 0
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.file_rows_now = 0
        self.file_first = 0
        self.writer = None
        self.tmp = None
        self.last_commit = None
        self.rows = 0
        self.files = 0
        self.parquet_cpu = 0.0  # CPU seconds inside the Parquet writer (encoding, compression)

    def write(self, p: Published) -> None:
        rank = p.rank
        n = len(rank)
        new_tx = pc.not_equal(rank, shift(rank, -1))
        txno = pc.subtract(pc.cumulative_sum(new_tx.cast(I64)), 1)
        tx_seq = pc.add(txno, self.next_tx_seq)
        first_row = pc.cumulative_max(pc.if_else(new_tx, rownums(n), 0))
        op_seq = pc.subtract(rownums(n), first_row)
        c = p.commits
        c_tm = pc.take(c.column("c_tm"), rank)
        tm = p.rows.column("tm")
        arrays = [
            tx_seq,
            op_seq,
            pc.take(c.column("c_scn"), rank),
            c_tm,
            pc.take(c.column("xid"), rank),
            pc.take(_OP_NAMES, p.rows.column("code")),
            p.rows.column("scn"),
            p.rows.column("sub"),
            tm,
            p.thread,
            *(p.rows.column(k) for k in ("owner", "table", "obj", "rid", "before", "after", "sql")),
            nanos_to_timestamp(c_tm),
            nanos_to_timestamp(tm),
        ]
        batch = pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)  # the rows' own chunks, not copied
        ntx = txno[-1].as_py() + 1
        self.next_tx_seq += ntx
        last = rank[-1].as_py()
        self.last_commit = (c.column("c_scn")[last].as_py(), c.column("xid")[last].as_py())
        self.pending.append(batch)
        self.pending_rows += n
        self.file_rows_now += n
        self.rows += n
        if self.pending_rows >= self.row_group_rows:
            self._row_groups(final=False)
        if self.file_rows_now >= self.file_rows:  # at a transaction boundary: each write ends one
            self.flush()

    def _row_groups(self, final: bool) -> None:
        if not self.pending:
            return
        t = pa.concat_tables(self.pending) if len(self.pending) > 1 else self.pending[0]
        if self.writer is None:
            self.tmp = os.path.join(self.path, f"_tmp-{self.file_first}.parquet")
            self.writer = parquet_writer(self.tmp, "zstd")
        g = self.row_group_rows
        whole = len(t) if final else len(t) - len(t) % g
        for at in range(0, whole, g):
            part = t.slice(at, min(g, whole - at))
            c0 = time.thread_time()
            self.writer.write_table(part, row_group_size=len(part))
            self.parquet_cpu += time.thread_time() - c0
        rest = t.slice(whole)
        self.pending = [rest] if len(rest) else []
        self.pending_rows = len(rest)

    def flush(self) -> None:
        if not self.file_rows_now:
            return
        self._row_groups(final=True)
        first, last = self.file_first, self.next_tx_seq - 1
        self.writer.add_key_value_metadata(
            {
                META_FIRST: str(first),
                META_LAST: str(last),
                META_ROWS: str(self.file_rows_now),
                META_LAST_COMMIT: json.dumps(self.last_commit),
            }
        )
        self.writer.close()
        self.writer = None
        if self.durable:
            fd = os.open(self.tmp, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        os.rename(self.tmp, os.path.join(self.path, part_name(first, last)))
        if self.durable:
            fd = os.open(self.path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        self.files += 1
        self.file_first = self.next_tx_seq
        self.file_rows_now = 0


def iter_blocks(input_dir: str) -> Iterator[tuple[int, bytes, int, int, dict]]:
    """Every thread's blocks, read one thread after the other (for the stage timings)."""
    for t in sorted(scan(input_dir)):
        out: list = []
        r = ColumnarReader(input_dir, t, lambda v, c, n, meta, out=out: out.append((v, c, n, meta)))
        r.read_to_end()
        for v, c, n, meta in out:
            yield t, v, c, n, meta
