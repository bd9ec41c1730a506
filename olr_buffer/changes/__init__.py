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

The package's modules hold, each, one part of it: :mod:`.codes` (op codes, fields by index,
the format's version), :mod:`.payloads` (building and encoding records), :mod:`.blocks`
(building blocks, reading their summaries), :mod:`.columns` (rows as Arrow columns, from
lists or straight from encoded records: the compiled ``recscan.pyx`` and its reference),
:mod:`.commits` (the order of commits) and :mod:`.schemas` (schema documents). Import
the names from here, the package's face.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .blocks import (
    DEFAULT_BLOCK_BYTES,
    DEFAULT_BLOCK_RECORDS,
    BlockBuilder,
    BlockSummary,
    Group,
    RecordFormatError,
    read_summary,
)
from .codes import (
    AFTER,
    BEFORE,
    BEGIN,
    CHANGEFEED_OP,
    CLOSE,
    CODE,
    COMMIT,
    COMPENSATED_RID,
    COMPENSATION,
    COPY_ROW,
    CUT,
    CUT_END,
    CUT_FIRST,
    DDL,
    DELETE,
    DML_CODES,
    END_TM,
    INSERT,
    LINE,
    LWN,
    MARKER_CODES,
    OBJ,
    OP_CODES,
    OWNER,
    READABLE_FORMATS,
    RECORD_FORMAT,
    RID,
    ROLLBACK,
    ROW_CODES,
    ROW_FIELDS,
    SCHEMA_DOCUMENT,
    SCHEMA_VERSION,
    SCN,
    SEQUENCE,
    SQL,
    SUB,
    TABLE,
    TM,
    TRUNCATE,
    UPDATE,
)
from .commits import INFINITE_SCN, Commit, CommitKey
from .payloads import (
    NIL,
    STR_HEADERS,
    RecordError,
    compensation_payload,
    cut_payload,
    decode_record,
    decode_records,
    encode_record,
    end_payload,
    record,
    row_head,
    row_middle,
    row_payload,
    schema_fields,
    str_header,
)
from .schemas import SCHEMA_FORMAT, SCHEMA_VERSION_LENGTH, SchemaColumn, schema_document, schema_version

if TYPE_CHECKING:
    from .columns import (
        READ_BACK_STEP,
        ROW_COLUMNS,
        ROW_SCHEMA,
        RowColumns,
        RowFieldsError,
        python_row_columns,
        row_columns,
        rows_to_columns,
    )


def __getattr__(name: str) -> Any:
    """The names of :mod:`.columns` (rows as Arrow columns), loaded on first use: the
    readers, and their processes, use the format without loading pyarrow."""
    if name in __all__:
        from . import columns

        return getattr(columns, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    # codes
    "AFTER",
    "BEFORE",
    "BEGIN",
    "CHANGEFEED_OP",
    "CLOSE",
    "CODE",
    "COMMIT",
    "COMPENSATED_RID",
    "COMPENSATION",
    "COPY_ROW",
    "CUT",
    "CUT_END",
    "CUT_FIRST",
    "DDL",
    "DELETE",
    "DML_CODES",
    "END_TM",
    "INSERT",
    "LINE",
    "LWN",
    "MARKER_CODES",
    "OBJ",
    "OP_CODES",
    "OWNER",
    "READABLE_FORMATS",
    "RECORD_FORMAT",
    "RID",
    "ROLLBACK",
    "ROW_CODES",
    "ROW_FIELDS",
    "SCHEMA_DOCUMENT",
    "SCHEMA_VERSION",
    "SCN",
    "SEQUENCE",
    "SQL",
    "SUB",
    "TABLE",
    "TM",
    "TRUNCATE",
    "UPDATE",
    # payloads
    "NIL",
    "STR_HEADERS",
    "RecordError",
    "compensation_payload",
    "cut_payload",
    "decode_record",
    "decode_records",
    "encode_record",
    "end_payload",
    "record",
    "row_head",
    "row_middle",
    "row_payload",
    "schema_fields",
    "str_header",
    # blocks
    "DEFAULT_BLOCK_BYTES",
    "DEFAULT_BLOCK_RECORDS",
    "BlockBuilder",
    "BlockSummary",
    "Group",
    "RecordFormatError",
    "read_summary",
    # columns
    "READ_BACK_STEP",
    "ROW_COLUMNS",
    "ROW_SCHEMA",
    "RowColumns",
    "RowFieldsError",
    "python_row_columns",
    "row_columns",
    "rows_to_columns",
    # commits
    "INFINITE_SCN",
    "Commit",
    "CommitKey",
    # schemas
    "SCHEMA_FORMAT",
    "SCHEMA_VERSION_LENGTH",
    "SchemaColumn",
    "schema_document",
    "schema_version",
]
