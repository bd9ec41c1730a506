"""The change-record format: what every source writes to the queue and every consumer reads.

Neutral ground between the packages: the readers (redo files, PostgreSQL) produce
records and blocks in this format, the dispatcher and the changefeed writer consume them;
none of them imports another for it (see docs/architecture.md, "Packages").

**Records.** A record in the queue is the MessagePack encoding of a list. Its first five
items are always ``[code, scn, sub, sequence, line]`` (:data:`CODE` .. :data:`LINE`):

* rows (insert, update, delete, ddl; from PostgreSQL also truncate and rows of the
  initial copy): ``+ [tm, owner, table, obj, rid, before, after, sql]``
  (:data:`ROW_FIELDS`), where ``before``/``after`` are JSON text or ``None``; then,
  optionally (format 3), ``+ [schema_version]`` or ``+ [schema_version,
  schema_document]``: the version of the table's schema document the row was written
  under, and the document itself on a row that introduces it (:func:`schema_document`).
  A row without them (every row of format 2) takes its table's version as the changefeed
  knows it;
* compensations (DML with ``"rollback": true``): ``+ [rid]``
  (:data:`COMPENSATED_RID`), code has the :data:`COMPENSATION` bit;
* ``CUT`` (PostgreSQL: a subtransaction rolled back): ``+ [first, end]``
  (:data:`CUT_FIRST`, :data:`CUT_END`): the rows of its transaction with ordinals
  ``first..end-1`` are dropped. It has the ``COMPENSATION`` bit: it cancels rows;
* begin, commit, rollback: ``+ [tm]`` (:data:`END_TM`).

``lwn`` and ``close`` are not stored as records: they move the thread's progress, or mark
it closed, which the block summary carries.

**Blocks.** A source turns a run of one thread's records into one queue block::

    record 0        the block summary (JSON), see :class:`BlockSummary`
    records 1..n    the records, grouped by transaction: each group holds one XID's
                    records in input order; groups appear in order of first appearance.
                    A run of ``n`` records behind a MessagePack array header of ``n`` is
                    one array of them: :func:`decode_records` decodes a group in one call.

The summary says which record format the block's records use (``"f"``); a queue written
with one this version does not read is refused with a clear error instead of being
misread. Format 3 adds the optional schema fields of a row; blocks of format 2 (rows
without them) are read as they are. It says, per
group, where it is and what it holds (begin, end records, row and compensation counts),
the thread's progress after the block (``"p"``), and (``"c": true``, only when so) that
the thread is closed after the block: its last record is a ``close``. Blocks without
``"c"`` are of open threads. The dispatcher reads only summaries while tailing; it
decodes a transaction's records only at commit, and only its own groups.

If a ``begin`` follows an end record of the same XID (XID reuse), a new group starts,
so a group never mixes two transactions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Protocol

import msgspec
import orjson

from ..errors import OlrBufferError

# -- op codes ------------------------------------------------------------------------------

BEGIN, INSERT, UPDATE, DELETE, DDL, COMMIT, ROLLBACK, LWN, CLOSE = 1, 2, 3, 4, 5, 6, 7, 8, 9
COMPENSATION = 16  # or'ed into INSERT/UPDATE/DELETE
TRUNCATE, COPY_ROW = 12, 13  # PostgreSQL source only
CUT = COMPENSATION | 14  # PostgreSQL source only: a range of rows of its transaction rolled back

OP_CODES = {  # the input's op names
    "begin": BEGIN,
    "insert": INSERT,
    "update": UPDATE,
    "delete": DELETE,
    "ddl": DDL,
    "commit": COMMIT,
    "rollback": ROLLBACK,
    "lwn": LWN,
    "close": CLOSE,
}
MARKER_CODES = frozenset((LWN, CLOSE))  # records of the thread, not of a transaction
ROW_CODES = frozenset((INSERT, UPDATE, DELETE, DDL, TRUNCATE, COPY_ROW))
DML_CODES = frozenset((INSERT, UPDATE, DELETE))
# the changefeed's ``op`` column, per row code
CHANGEFEED_OP = {INSERT: "c", UPDATE: "u", DELETE: "d", DDL: "ddl", TRUNCATE: "t", COPY_ROW: "r"}

# -- record fields, by index -----------------------------------------------------------------

CODE, SCN, SUB, SEQUENCE, LINE = 0, 1, 2, 3, 4
# a row
ROW_FIELDS = ("code", "scn", "sub", "sequence", "line", "tm", "owner", "table", "obj", "rid", "before", "after", "sql",
              "schema_version", "schema_document")
TM, OWNER, TABLE, OBJ, RID, BEFORE, AFTER, SQL = range(5, 13)
SCHEMA_VERSION, SCHEMA_DOCUMENT = 13, 14  # optional (a row may end after SQL or SCHEMA_VERSION)
COMPENSATED_RID = 5  # a compensation: the rid of the row it cancels
CUT_FIRST, CUT_END = 5, 6  # a cut: the row ordinals it drops, first..end-1
END_TM = 5  # begin, commit, rollback: the record's tm

# a block holds at most this many records, or records of this many bytes (the unit of
# queue I/O and compression; ``--block-records``)
DEFAULT_BLOCK_RECORDS = 4096
DEFAULT_BLOCK_BYTES = 1 << 20

INFINITE_SCN = 1 << 63  # a watermark above every SCN: releases every end (end of a replay)
# 1: records as JSON arrays (olr-buffer 0.1.0); 2: MessagePack arrays; 3: rows may end with
# their schema version (and document)
RECORD_FORMAT = 3
READABLE_FORMATS = (2, 3)


# -- building records -------------------------------------------------------------------------
# A record is ``[code, scn, sub, sequence, line, *payload]``; a source hands the payload to
# :meth:`BlockBuilder.add`. These build each kind of payload, so that the layout above is
# written down once. (The redo reader's and the PostgreSQL reader's fast loops write the
# same lists inline; the tests hold them to these: tests/test_changes.py.)


def row_payload(tm: int | None, owner: str, table: str, obj: int | None, rid: str | None,
                before: str | None, after: str | None, sql: str | None = None) -> list:
    """A row's payload (insert, update, delete, ddl, truncate, a row of the initial copy):
    ``before``/``after`` are JSON text."""
    return [tm, owner, table, obj, rid, before, after, sql]


def schema_fields(version: str, document: str | None = None) -> list:
    """What follows a row's payload when the row names its schema version: the version,
    and the document too on a row that introduces it (:func:`schema_document`)."""
    return [version] if document is None else [version, document]


def compensation_payload(rid: str) -> list:
    """A compensation's payload (code with the :data:`COMPENSATION` bit): the rid of the
    row it cancels."""
    return [rid]


def cut_payload(first: int, end: int) -> list:
    """A :data:`CUT`'s payload: its transaction's rows ``first..end-1`` are dropped."""
    return [first, end]


def end_payload(tm: int | None) -> list:
    """The payload of a begin, commit or rollback: its ``tm``."""
    return [tm]


def record(code: int, scn: int, sub: int, sequence: int, line: int, payload: list) -> list:
    """A whole record, as stored."""
    return [code, scn, sub, sequence, line, *payload]


class RecordError(ValueError):
    """A record that cannot be stored as it is; the message is the reason."""


class RecordFormatError(OlrBufferError):
    """A queue block whose records this version cannot read."""


#: A record (a list) as stored: MessagePack.
encode_record = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


def decode_records(data: bytes | memoryview, count: int) -> list[list]:
    """The ``count`` records in ``data`` (consecutive encoded records), as lists."""
    return _decode(b"\xdd" + count.to_bytes(4, "big") + data)  # array 32: count, then the items


def decode_record(raw: bytes) -> list:
    """One encoded record, as a list ``[code, scn, sub, sequence, line, ...]``."""
    return _decode(raw)


# -- commits -----------------------------------------------------------------------------------


class CommitKey(NamedTuple):
    """Orders end records: ``(scn, thread, sequence, line)``."""

    scn: int
    thread: int
    sequence: int
    line: int


@dataclass(frozen=True, slots=True)
class Commit:
    """A transaction that is safe to publish: its commit record's facts."""

    xid: str
    key: CommitKey
    tm: int | None

    @property
    def scn(self) -> int:
        return self.key.scn


class TransactionSink(Protocol):
    """Where the dispatcher hands committed transactions, whole, in commit order (every
    sink is one: :mod:`olr_buffer.sinks.base`)."""

    def write_transaction(self, commit: Commit, chunks: Iterable[tuple[int, list[list]]]) -> int:
        """Consume ``chunks`` (``(thread, rows)``: runs of rows, each of one redo thread,
        in row order); publish their rows as one transaction.

        Returns the number of rows written; 0 means nothing was written and no ``tx_seq``
        was used.
        """
        ...

    def write_rows(self, rows: list[list], txs: list[tuple[str, CommitKey, int | None, int | list[int], int]]) -> None:
        """Many transactions at once, flat: ``txs`` holds ``(xid, key, tm, thread, n)`` for
        each, ``n > 0`` of its rows, which are the next ``n`` of ``rows``; ``thread`` is the
        redo thread of all of them, or a list of each one's; the same as
        :meth:`write_transaction` for each, in order."""
        ...


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
    two to the same blocks)."""

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
        g.records.append(rec)
        g.rows += 1
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


# -- schema documents ----------------------------------------------------------------------
# A table's shape as a source knows it, in one canonical JSON text that travels in the
# queue on the row that introduces it and is written to the changefeed's metadata
# (docs/formats.md, "Schema documents"). Its version is a hash of that text: the same shape
# gets the same version whenever and however often it is sent, so that a restart writes
# the same documents and names the same versions, and a document is never overwritten.

SCHEMA_FORMAT = 1
SCHEMA_VERSION_LENGTH = 16  # hexadecimal digits of the SHA-256 of the document


@dataclass(frozen=True, slots=True)
class SchemaColumn:
    """One column of a schema document: its name, its type as the source states it, whether
    it may be null (None: unknown), and the Spark type its values read as (a Spark SQL type
    name: ``decimal(12,2)``, ``timestamp``, ``array<bigint>`` ...)."""

    name: str
    type: str
    nullable: bool | None
    spark: str


def schema_document(source: str, owner: str, table: str, columns: Iterable[SchemaColumn],
                    key: Iterable[str] = ()) -> tuple[str, str]:
    """``(version, text)`` of the schema document of ``owner.table`` (``source``: the kind
    of source that states it, ``postgresql`` or ``redo``; ``key``: its key columns, in key
    order)."""
    doc = {
        "format": SCHEMA_FORMAT,
        "source": source,
        "owner": owner,
        "table": table,
        "key": list(key),
        "columns": [{"name": c.name, "type": c.type, "nullable": c.nullable, "spark": c.spark} for c in columns],
    }
    text = orjson.dumps(doc).decode()
    return schema_version(text), text


def schema_version(text: str) -> str:
    """The version of a schema document: the first hexadecimal digits of the SHA-256 of its text."""
    return hashlib.sha256(text.encode()).hexdigest()[:SCHEMA_VERSION_LENGTH]
