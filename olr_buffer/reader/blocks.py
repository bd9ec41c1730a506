"""Redo blocks: how a reader lays out one queue block, and the summary the dispatcher reads.

A reader thread turns a run of one redo thread's records into one queue block::

    record 0        the block summary (JSON), see :class:`BlockSummary`
    records 1..n    the records, grouped by transaction: each group holds one XID's
                    records in input order; groups appear in order of first appearance.
                    Each record is a MessagePack array (see
                    :mod:`olr_buffer.reader.records`), so a run of ``n`` records (one
                    slice of the block) behind a MessagePack array header of ``n`` is one
                    array of them: :func:`decode_records` decodes a group in one call.

The summary says which record format the block's records use (``"f"``); a queue written
with another one is refused with a clear error instead of being misread.

The summary says, per group, where it is and what it holds (begin, end records, row and
compensation counts), the thread's progress after the block, and (``"c": true``, only
when so) that the thread is closed after the block: its last record is a ``close``.
Blocks without ``"c"`` (every block written before ``close`` existed) are of open
threads, so the key needs no new record format; a version that ignored it would only
hold the watermark, never publish early. The dispatcher reads
only summaries while tailing; it decodes a transaction's records only at commit, and
only its own groups. Memory per open transaction is then a list of group locations,
which grows with the number of blocks it spans, not with its rows.

If a ``begin`` follows an end record of the same XID (XID reuse), a new group starts,
so a group never mixes two transactions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import orjson

from ..errors import OlrBufferError
from .records import BEGIN, COMMIT, COMPENSATION, ROLLBACK, ROW_CODES, RecordError

INFINITE_SCN = 1 << 63  # a watermark above every SCN: releases every end (end of a replay)
# 1: records as JSON arrays (olr-buffer 0.1.0 until 2026-11-22); 2: MessagePack arrays
RECORD_FORMAT = 2

_encode_record = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


def decode_records(data: bytes | memoryview, count: int) -> list[list]:
    """The ``count`` records in ``data`` (consecutive encoded records), as lists."""
    return _decode(b"\xdd" + count.to_bytes(4, "big") + data)  # array 32: count, then the items


def decode_record(raw: bytes) -> list:
    """One encoded record, as a list ``[code, scn, sub, sequence, line, ...]``."""
    return _decode(raw)

# A group in the summary: [xid, start, count, rows, compensations, first_scn, begin_scn, begin_tm, ends]
# begin_scn is -1 without a begin (begin_tm then None); ends is a list of [code, scn, sequence, line, tm].


class _Group:
    __slots__ = ("xid", "records", "rows", "comps", "first_scn", "begin_scn", "begin_tm", "ends")

    def __init__(self, xid: str) -> None:
        self.xid = xid
        self.records: list[bytes] = []
        self.rows = 0
        self.comps = 0
        self.first_scn = -1
        self.begin_scn = -1
        self.begin_tm: int | None = None
        self.ends: list[list] = []


class BlockBuilder:
    """Collects one thread's records into a block; :meth:`build` returns the queue records."""

    def __init__(self, thread: int) -> None:
        self.thread = thread
        self._groups: dict[str, _Group] = {}
        self._order: list[_Group] = []
        self.count = 0
        self.nbytes = 0
        self.progress = -1
        self.closed = False

    def add(self, code: int, scn: int, sub: int, xid: str, seq: int, line: int, payload: list) -> None:
        """Add one validated record. Raises :class:`RecordError` (and changes nothing) for
        strings that are not valid Unicode (a lone surrogate from a ``\\ud800`` escape)."""
        try:
            rec = _encode_record([code, scn, sub, seq, line, *payload])
        except UnicodeEncodeError:
            raise RecordError("a string is not valid Unicode (lone surrogate)") from None
        g = self._groups.get(xid)
        if g is None or (code == BEGIN and g.ends):
            try:
                xid.encode()
            except UnicodeEncodeError:
                raise RecordError("field 'xid' is not valid Unicode (lone surrogate)") from None
            g = _Group(xid)
            self._groups[xid] = g
            self._order.append(g)
        if not g.records:
            g.first_scn = scn
        g.records.append(rec)
        if code in ROW_CODES:
            g.rows += 1
        elif code & COMPENSATION:
            g.comps += 1
        elif code == BEGIN:
            if g.begin_scn < 0:
                g.begin_scn = scn
                g.begin_tm = payload[0]
        elif code == COMMIT or code == ROLLBACK:
            g.ends.append([code, scn, seq, line, payload[0]])
        self.count += 1
        self.nbytes += len(rec)
        self.closed = False
        if scn - 1 > self.progress:
            self.progress = scn - 1

    def heartbeat(self, scn: int) -> None:
        """An ``lwn``: every record with an SCN up to ``scn`` is written (a closed thread
        is open again)."""
        if scn > self.progress:
            self.progress = scn
        self.closed = False

    def close(self, scn: int) -> None:
        """A ``close``: the thread has written everything up to ``scn`` and nothing more
        until its next record, which opens it again."""
        if scn > self.progress:
            self.progress = scn
        self.closed = True

    def build(self) -> list[bytes]:
        """The block's records: the summary first, then the groups."""
        groups = []
        records: list[bytes] = [b""]
        for g in self._order:
            groups.append(
                [g.xid, len(records), len(g.records), g.rows, g.comps, g.first_scn, g.begin_scn, g.begin_tm, g.ends]
            )
            records.extend(g.records)
        summary = {"f": RECORD_FORMAT, "t": self.thread, "p": self.progress, "g": groups}
        if self.closed:
            summary["c"] = True
        records[0] = orjson.dumps(summary)
        return records

    def reset(self) -> None:
        self._groups.clear()
        self._order.clear()
        self.count = 0
        self.nbytes = 0


@dataclass(slots=True)
class BlockSummary:
    """What the dispatcher reads of a block."""

    thread: int
    progress: int
    groups: list[list] = field(default_factory=list)
    closed: bool = False  # the thread is closed after this block


class RecordFormatError(OlrBufferError):
    """A queue block whose records this version cannot read."""


def read_summary(record0: bytes) -> BlockSummary:
    try:
        d = orjson.loads(record0)
    except orjson.JSONDecodeError as exc:
        raise RecordFormatError(
            f"a queue block's summary is not readable ({exc})",
            hint="the queue is damaged or was written by another program: replay the input into a new queue",
        ) from None
    fmt = d.get("f", 1)  # blocks of format 1 had no "f"
    if fmt != RECORD_FORMAT:
        raise RecordFormatError(
            f"the queue holds records of format {fmt}; this olr-buffer reads format {RECORD_FORMAT}",
            hint="the queue was written by another version of olr-buffer: use that version to finish it, "
                 "or replay the input into a new queue directory",
        )
    return BlockSummary(d["t"], d["p"], d["g"], d.get("c", False))
