"""Blocks: one thread's run of records as one queue block, and its summary
(the layout: :mod:`olr_buffer.changes`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from ..errors import OlrBufferError
from .codes import BEGIN, COMMIT, COMPENSATION, READABLE_FORMATS, RECORD_FORMAT, ROLLBACK, ROW_CODES
from .payloads import RecordError, encode_record, record

# a block holds at most this many records, or records of this many bytes (the unit of
# queue I/O and compression; ``--block-records``)
DEFAULT_BLOCK_RECORDS = 4096
DEFAULT_BLOCK_BYTES = 1 << 20


class RecordFormatError(OlrBufferError):
    """A queue block whose records this version cannot read."""


# -- blocks ------------------------------------------------------------------------------------

# A group in the summary: [xid, start, count, rows, compensations, first_scn, begin_scn, begin_tm, ends]
# begin_scn is -1 without a begin (begin_tm then None); ends is a list of [code, scn, sequence, line, tm].


class Group:
    """One transaction's group in a block being built."""

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
    """Collects one thread's records into a block; :meth:`build` returns the queue records.

    ``groups`` (by XID) and ``order`` are public for the redo reader's fast loop, which
    does what :meth:`add` does inline (``ThreadReader._fast_lines``; the tests hold the
    two to the same blocks), and for the PostgreSQL reader's runs of inserts (appended
    to a group's records after one :meth:`add_encoded_row`, then counted as it counts)."""

    def __init__(self, thread: int) -> None:
        self.thread = thread
        self.groups: dict[str, Group] = {}
        self.order: list[Group] = []
        self.count = 0
        self.nbytes = 0
        self.progress = -1
        self.closed = False

    def add(self, code: int, scn: int, sub: int, xid: str, seq: int, line: int, payload: list) -> None:
        """Add one record: ``payload`` is what follows ``[code, scn, sub, sequence, line]``.
        Raises :class:`RecordError` (and changes nothing) for strings that are not valid
        Unicode (a lone surrogate from a ``\\ud800`` escape)."""
        try:
            rec = encode_record(record(code, scn, sub, seq, line, payload))
        except UnicodeEncodeError:
            raise RecordError("a string is not valid Unicode (lone surrogate)") from None
        g = self.groups.get(xid)
        if g is None or (code == BEGIN and g.ends):
            try:
                xid.encode()
            except UnicodeEncodeError:
                raise RecordError("field 'xid' is not valid Unicode (lone surrogate)") from None
            g = Group(xid)
            self.groups[xid] = g
            self.order.append(g)
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
        self._append(g, scn, rec)

    def add_row(self, scn: int, xid: str, record: list) -> None:
        """:meth:`add` of a row (``record[0]`` in :data:`ROW_CODES`), given the whole record
        ``[code, scn, sub, sequence, line, ...payload]``: the PostgreSQL reader's hot path,
        the same block as :meth:`add` builds."""
        g = self.groups.get(xid)
        if g is None or not g.records:
            self.add(record[0], scn, record[2], xid, record[3], record[4], record[5:])
            return
        try:
            rec = encode_record(record)
        except UnicodeEncodeError:
            raise RecordError("a string is not valid Unicode (lone surrogate)") from None
        g.rows += 1
        self._append(g, scn, rec)

    def add_encoded_row(self, scn: int, xid: str, rec: bytes) -> None:
        """:meth:`add` of a row given as its encoded record ``rec`` (whose SCN is ``scn``):
        the PostgreSQL reader's hot path, the same block as :meth:`add` builds."""
        g = self.groups.get(xid)
        if g is None:
            try:
                xid.encode()
            except UnicodeEncodeError:
                raise RecordError("field 'xid' is not valid Unicode (lone surrogate)") from None
            g = self.groups[xid] = Group(xid)
            self.order.append(g)
        # _append's lines, written out: a call more costs 3 % of the PostgreSQL reader's
        # CPU a row where each insert is a run of its own (inserts into tables in turn;
        # bench/postgres_split.py --tables 2: 1.013 -> 1.044 us a row of its decode stage)
        if not g.records:
            g.first_scn = scn
        g.records.append(rec)
        g.rows += 1
        self.count += 1
        self.nbytes += len(rec)
        self.closed = False
        if scn - 1 > self.progress:
            self.progress = scn - 1

    def _append(self, g: Group, scn: int, rec: bytes) -> None:
        """The encoded record ``rec`` (SCN ``scn``) at the end of group ``g``, counted in
        the block: what :meth:`add` and :meth:`add_row` end with (and
        :meth:`add_encoded_row`, inline)."""
        if not g.records:
            g.first_scn = scn
        g.records.append(rec)
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
        for g in self.order:
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
        self.groups.clear()
        self.order.clear()
        self.count = 0
        self.nbytes = 0


@dataclass(slots=True)
class BlockSummary:
    """What the dispatcher reads of a block."""

    thread: int
    progress: int
    groups: list[list] = field(default_factory=list)
    closed: bool = False  # the thread is closed after this block


def read_summary(record0: bytes) -> BlockSummary:
    """The summary of a block (its record 0), or :class:`RecordFormatError`."""
    try:
        d = orjson.loads(record0)
    except orjson.JSONDecodeError as exc:
        raise RecordFormatError(
            f"a queue block's summary is not readable ({exc})",
            hint="the queue is damaged or was written by another program: replay the input into a new queue",
        ) from None
    fmt = d.get("f", 1)  # blocks of format 1 had no "f"
    if fmt not in READABLE_FORMATS:
        raise RecordFormatError(
            f"the queue holds records of format {fmt}; this olr-buffer reads formats "
            f"{' and '.join(map(str, READABLE_FORMATS))}",
            hint="the queue was written by another version of olr-buffer: use that version to finish it, "
            "or replay the input into a new queue directory",
        )
    return BlockSummary(d["t"], d["p"], d["g"], d.get("c", False))
