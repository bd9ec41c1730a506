"""The JSON messages that follow ``REPLICATE``: their field names and op names (named
once, here, for both directions), and :class:`MessageBuilder`, which makes them from the
changefeed's rows.

A message is one JSON document (docs/formats.md, "Network protocol")::

    {"scn":S,"tm":T,"c_scn":C,"c_idx":I,"xid":"X","db":"D","payload":[{...}]}

with the fields in OpenLogReplicator's order. A transaction is a ``begin`` message, one
message per row, and a ``commit`` message. ``(c_scn, c_idx)`` increases strictly over
the whole stream: ``c_idx`` counts from 0 the messages that share a ``c_scn``, across
transactions too, so a position depends on the changefeed's content only, not on how it
is cut into files.

A row's payload entry is ``{"op", "schema": {"owner", "table", "obj", "columns"}, "rid",
"before", "after", "sql"}``: ``before``/``after`` are the changefeed's JSON text, embedded as it is;
a key whose value is null in the changefeed (``obj``, ``rid``, ``before``, ``after``,
``sql``, ``tm``), and an ``owner`` that is the empty string (no owner named), is left out,
as OpenLogReplicator leaves out what it does not have. A
PostgreSQL ``r`` row (initial copy) is ``c``; a ``t`` row (TRUNCATE) is a ``ddl`` whose
``sql`` is ``TRUNCATE TABLE "owner"."table"``. ``schema.columns`` is the table's columns
in OpenLogReplicator's form (:mod:`.columns`), from the schema document of the row's
``schema_version``, on every row that names one (as OpenLogReplicator's format option
``"schema": 3`` gives them): a receiver finds them on whichever row it reads first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from .columns import columns_text
from .errors import StreamError
from .framing import LONG_LENGTH, frame_header, pack_length

# -- field names: the message ------------------------------------------------------------
SCN = "scn"
TM = "tm"
C_SCN = "c_scn"
C_IDX = "c_idx"
XID = "xid"
DB = "db"
PAYLOAD = "payload"
# ... and the forms OpenLogReplicator's format options give them (read by a receiver,
# :mod:`.received`): SCN as hex text, time as text, XID as a number, the redo thread
SCNS = "scns"
TMS = "tms"
XIDN = "xidn"
RTH = "rth"
# -- field names: a payload entry --------------------------------------------------------
OP = "op"
SCHEMA = "schema"
OWNER = "owner"
TABLE = "table"
OBJ = "obj"
RID = "rid"
BEFORE = "before"
AFTER = "after"
SQL = "sql"
NUM = "num"  # OpenLogReplicator's ordinal of the row in its transaction (format option message 2)
SCHEMA_COLUMNS = "columns"  # OpenLogReplicator's column list of the table (format option schema 1)
# -- ops ---------------------------------------------------------------------------------
OP_BEGIN = "begin"
OP_COMMIT = "commit"
OP_INSERT = "c"
OP_UPDATE = "u"
OP_DELETE = "d"
OP_DDL = "ddl"
OP_CHECKPOINT = "chkpt"  # OpenLogReplicator's checkpoint (heartbeat) message: no transaction
ROW_OPS = (OP_INSERT, OP_UPDATE, OP_DELETE, OP_DDL)

#: The changefeed's ``op`` -> the message's: PostgreSQL's initial copy (``r``) is an
#: insert, its TRUNCATE (``t``) a DDL statement.
CHANGEFEED_OPS = {"c": OP_INSERT, "u": OP_UPDATE, "d": OP_DELETE, "ddl": OP_DDL, "r": OP_INSERT, "t": OP_DDL}
#: The changefeed's columns a builder reads (``schema_version`` where the file has it).
COLUMNS = (
    "tx_seq",
    "c_scn",
    "c_tm",
    "xid",
    "op",
    "scn",
    "tm",
    "owner",
    "table",
    "obj",
    "rid",
    "before",
    "after",
    "sql",
    "schema_version",
)
_VERSION = COLUMNS.index("schema_version")


class Position(NamedTuple):
    """A message's place in the stream: ``(c_scn, c_idx)``, ordered as a tuple."""

    c_scn: int
    c_idx: int


_STREAM_START = Position(0, 0)


def truncate_sql(owner: str, table: str) -> str:
    """The DDL text of a PostgreSQL TRUNCATE row: ``TRUNCATE TABLE "owner"."table"``."""
    return 'TRUNCATE TABLE "{}"."{}"'.format(owner.replace('"', '""'), table.replace('"', '""'))


def _q(text: str) -> str:
    """``text`` as a JSON string."""
    return orjson.dumps(text).decode()


# Templates (%-format): every field name and op above appears in them through the constants.
_HEAD = '{"' + SCN + '":%d,%s"' + C_SCN + '":%d,"' + C_IDX + '":%d,%s,"' + PAYLOAD + '":[{"' + OP + '":'
_BEGIN_TAIL = '"' + OP_BEGIN + '"}]}'
_COMMIT_TAIL = '"' + OP_COMMIT + '"}]}'
_TM = '"' + TM + '":%d,'
_XID = '"' + XID + '":%s,"' + DB + '":%s'
_SCHEMA = ',"' + SCHEMA + '":'
_RID = ',"' + RID + '":'
_BEFORE = ',"' + BEFORE + '":'
_AFTER = ',"' + AFTER + '":'
_SQL = ',"' + SQL + '":'
_ROW_TAIL = "}]}"


class MessageBuilder:
    """Turns the changefeed's rows, in order, into framed messages.

    Feed it the rows of each file in turn (:meth:`add`, any batches, ``COLUMNS`` at
    least) and call :meth:`end_of_file` after each file: a transaction is never split
    across files, so its ``commit`` message goes out then (or at the first row of the
    next transaction). Messages whose position is below ``start`` are counted but not
    made (a stream that resumes). ``last`` is the position of the last message made,
    ``messages`` and ``transactions`` count what was made. ``documents`` gives the text of
    the schema document of a version (rows that name one get ``schema.columns``; without
    it, none does)."""

    def __init__(
        self, database: str, start: Position = _STREAM_START, documents: Callable[[str], bytes | str] | None = None
    ) -> None:
        self._db = _q(database)
        self.start = start
        self.skipping = start > Position(0, 0)
        self.messages = 0
        self.transactions = 0
        self.bytes = 0
        # the open transaction: its tx_seq, c_scn, tm text and xid/db text
        self._tx: int | None = None
        self._c_scn = -1
        self._c_tm = ""
        self._xid = ""
        self._idx = 0  # c_idx of the next message
        self._last = (-1, -1)  # position of the last message made
        self._schemas: dict[tuple, str] = {}
        self._documents = documents
        self._column_texts: dict[str, str] = {}

    @property
    def last(self) -> Position | None:
        """The position of the last message made, or None."""
        return None if self._last[0] < 0 else Position(*self._last)

    def add(self, batch, start_row: int = 0, max_bytes: int = 1 << 20) -> tuple[bytes, int]:
        """Messages of ``batch``'s rows from ``start_row`` on, framed, until they reach
        about ``max_bytes``; with the index of the first row not made yet (``num_rows``
        when all were)."""
        col = batch.column
        names = batch.schema.names
        # a column the file lacks is None: only schema_version may be absent (filled below)
        cols: list[Any] = [
            (col(name).to_pylist() if start_row == 0 else col(name).slice(start_row).to_pylist())
            if name in names
            else None
            for name in COLUMNS
        ]
        if cols[_VERSION] is None or self._documents is None:  # a file written before schema_version
            cols[_VERSION] = [None] * (batch.num_rows - start_row)
        txs, c_scns, c_tms, xids, ops, scns, tms, owners, tables, objs, rids, befores, afters, sqls, versions = cols
        out: list[bytes] = []
        put = out.append
        dumps = orjson.dumps
        size = made = transactions = 0
        n = len(txs)
        i = 0
        # the state, in locals for the loop (written back below)
        skipping, start, db, schemas = self.skipping, self.start, self._db, self._schemas
        tx_open, c_scn, c_tm_text, xid_text, idx, last = (
            self._tx,
            self._c_scn,
            self._c_tm,
            self._xid,
            self._idx,
            self._last,
        )
        try:
            while i < n:
                tx = txs[i]
                if tx != tx_open:
                    if tx_open is not None:  # the commit of the one before
                        if skipping and (c_scn, idx) < start:
                            idx += 1
                        else:
                            skipping = False
                            text = (_HEAD % (c_scn, c_tm_text, c_scn, idx, xid_text) + _COMMIT_TAIL).encode()
                            put(pack_length(len(text)))
                            put(text)
                            size += len(text) + 4
                            made += 1
                            transactions += 1
                            last = (c_scn, idx)
                            idx += 1
                    tx_c_scn = c_scns[i]
                    if tx_c_scn != c_scn:
                        if tx_c_scn < c_scn:
                            raise StreamError(
                                f"transaction tx_seq {tx} has c_scn {tx_c_scn}, below the c_scn {c_scn} before it: "
                                "the changefeed is not in commit order",
                                tx_seq=tx,
                                c_scn=tx_c_scn,
                            )
                        c_scn = tx_c_scn
                        idx = 0
                    tx_open = tx
                    c_tm = c_tms[i]
                    c_tm_text = "" if c_tm is None else _TM % c_tm
                    xid_text = _XID % (dumps(xids[i]).decode(), db)
                    if skipping and (c_scn, idx) < start:
                        idx += 1
                    else:
                        skipping = False
                        text = (_HEAD % (scns[i], c_tm_text, c_scn, idx, xid_text) + _BEGIN_TAIL).encode()
                        put(pack_length(len(text)))
                        put(text)
                        size += len(text) + 4
                        made += 1
                        last = (c_scn, idx)
                        idx += 1
                if skipping:
                    if (c_scn, idx) < start:
                        idx += 1
                        i += 1
                        continue
                    skipping = False
                owner, table, obj, version = owners[i], tables[i], objs[i], versions[i]
                schema = schemas.get((owner, table, obj, version))
                if schema is None:
                    # an owner the source did not name (the empty string) is left out, as OpenLogReplicator
                    # leaves it out of the schema of an object it cannot name
                    doc = {OWNER: owner, TABLE: table} if owner else {TABLE: table}
                    if obj is not None:
                        doc[OBJ] = obj
                    schema = dumps(doc).decode()
                    if version is not None:
                        schema = schema[:-1] + ',"' + SCHEMA_COLUMNS + '":' + self._columns(version) + "}"
                    if len(schemas) > 100_000:  # a changefeed of very many tables: keep memory flat
                        schemas.clear()
                    schemas[(owner, table, obj, version)] = schema
                op = ops[i]
                op_text = _OP_TEXT.get(op)
                if op_text is None:
                    raise StreamError(
                        f"transaction tx_seq {tx}: op {op!r} is not one the protocol can carry", tx_seq=tx
                    )
                tm = tms[i]
                parts = [
                    _HEAD % (scns[i], c_tm_text if tm is None else _TM % tm, c_scn, idx, xid_text),
                    op_text,
                    _SCHEMA,
                    schema,
                ]
                value = rids[i]
                if value is not None:
                    parts += (_RID, dumps(value).decode())
                value = befores[i]
                if value is not None:
                    parts += (_BEFORE, value)
                value = afters[i]
                if value is not None:
                    parts += (_AFTER, value)
                value = sqls[i] if op != "t" else truncate_sql(owner, table)
                if value is not None:
                    parts += (_SQL, dumps(value).decode())
                parts.append(_ROW_TAIL)
                text = "".join(parts).encode()
                put(pack_length(len(text)) if len(text) < LONG_LENGTH else frame_header(len(text)))
                put(text)
                size += len(text) + 4
                made += 1
                last = (c_scn, idx)
                idx += 1
                i += 1
                if size >= max_bytes:
                    break
        finally:
            self.skipping, self._tx, self._c_scn, self._c_tm, self._xid, self._idx, self._last = (
                skipping,
                tx_open,
                c_scn,
                c_tm_text,
                xid_text,
                idx,
                last,
            )
            self.messages += made
            self.transactions += transactions
            self.bytes += size
        return b"".join(out), start_row + i

    def _columns(self, version: str) -> str:
        """The text of ``schema.columns`` of a schema version (its document read once)."""
        text = self._column_texts.get(version)
        if text is None:
            if len(self._column_texts) > 10_000:
                self._column_texts.clear()
            assert self._documents is not None  # rows name no version without documents (add)
            text = self._column_texts[version] = columns_text(self._documents(version))
        return text

    def end_of_file(self) -> bytes:
        """The ``commit`` message of the file's last transaction (files hold whole
        transactions), or nothing."""
        if self._tx is None:
            return b""
        self._tx = None
        idx = self._idx
        self._idx = idx + 1
        if self.skipping:
            if (self._c_scn, idx) < self.start:
                return b""
            self.skipping = False
        text = (_HEAD % (self._c_scn, self._c_tm, self._c_scn, idx, self._xid) + _COMMIT_TAIL).encode()
        self.messages += 1
        self.transactions += 1
        self.bytes += len(text) + 4
        self._last = (self._c_scn, idx)
        return pack_length(len(text)) + text


_OP_TEXT = {op: f'"{CHANGEFEED_OPS[op]}"' for op in CHANGEFEED_OPS}
