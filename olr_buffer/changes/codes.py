"""The numbers of the change-record format: op codes, a record's fields by index, and
the format's version (the layout: :mod:`olr_buffer.changes`)."""

from __future__ import annotations

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
ROW_FIELDS = (
    "code",
    "scn",
    "sub",
    "sequence",
    "line",
    "tm",
    "owner",
    "table",
    "obj",
    "rid",
    "before",
    "after",
    "sql",
    "schema_version",
    "schema_document",
)
TM, OWNER, TABLE, OBJ, RID, BEFORE, AFTER, SQL = range(5, 13)
SCHEMA_VERSION, SCHEMA_DOCUMENT = 13, 14  # optional (a row may end after SQL or SCHEMA_VERSION)
COMPENSATED_RID = 5  # a compensation: the rid of the row it cancels
CUT_FIRST, CUT_END = 5, 6  # a cut: the row ordinals it drops, first..end-1
END_TM = 5  # begin, commit, rollback: the record's tm

# 1: records as JSON arrays (olr-buffer 0.1.0); 2: MessagePack arrays; 3: rows may end with
# their schema version (and document)
RECORD_FORMAT = 3
READABLE_FORMATS = (2, 3)
