"""The change-record layout is written down once (``olr_buffer.changes``): the builders put
each field at the index the consumers read it from, and the sources' fast loops, which
write the same lists inline, store exactly what the builders build."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from olr_buffer.changes import (
    AFTER,
    BEFORE,
    BEGIN,
    CODE,
    COMMIT,
    COMPENSATED_RID,
    COMPENSATION,
    CUT,
    CUT_END,
    CUT_FIRST,
    END_TM,
    INSERT,
    LINE,
    NIL,
    OBJ,
    OWNER,
    RID,
    ROW_FIELDS,
    SCHEMA_DOCUMENT,
    SCHEMA_VERSION,
    SCN,
    SEQUENCE,
    SQL,
    SUB,
    TABLE,
    TM,
    UPDATE,
    BlockBuilder,
    SchemaColumn,
    compensation_payload,
    cut_payload,
    decode_record,
    encode_record,
    end_payload,
    record,
    row_head,
    row_middle,
    row_payload,
    schema_document,
    schema_fields,
    schema_version,
    str_header,
)
from olr_buffer.sources.redo.files import scan
from olr_buffer.sources.redo.records import parse_line, validate
from olr_buffer.sources.redo.thread_reader import ThreadReader
from olr_buffer.testing import MemoryQueue


def test_the_builders_put_each_field_where_the_consumers_read_it():
    row = record(UPDATE, 10, 2, 3, 4, row_payload(5, "O", "T", 6, "r1", '{"a":1}', '{"a":2}', "sql"))
    assert len(row) == SCHEMA_VERSION  # the schema fields are optional
    named = dict(zip(ROW_FIELDS, row))
    assert named == {
        "code": UPDATE,
        "scn": 10,
        "sub": 2,
        "sequence": 3,
        "line": 4,
        "tm": 5,
        "owner": "O",
        "table": "T",
        "obj": 6,
        "rid": "r1",
        "before": '{"a":1}',
        "after": '{"a":2}',
        "sql": "sql",
    }
    version, text = schema_document("redo", "O", "T", [SchemaColumn("A", "NUMBER(5)", False, "decimal(5,0)")])
    typed_row = row + schema_fields(version, text)
    assert len(typed_row) == len(ROW_FIELDS)
    assert dict(zip(ROW_FIELDS, typed_row))["schema_version"] == typed_row[SCHEMA_VERSION] == version
    assert typed_row[SCHEMA_DOCUMENT] == text and schema_version(text) == version
    assert row + schema_fields(version) == typed_row[:SCHEMA_DOCUMENT]
    assert (row[CODE], row[SCN], row[SUB], row[SEQUENCE], row[LINE]) == (UPDATE, 10, 2, 3, 4)
    assert (row[TM], row[OWNER], row[TABLE], row[OBJ], row[RID], row[BEFORE], row[AFTER], row[SQL]) == (
        5,
        "O",
        "T",
        6,
        "r1",
        '{"a":1}',
        '{"a":2}',
        "sql",
    )
    assert record(INSERT | COMPENSATION, 1, 0, 1, 1, compensation_payload("r9"))[COMPENSATED_RID] == "r9"
    cut = record(CUT, 0, 0, 0, 0, cut_payload(3, 7))
    assert (cut[CUT_FIRST], cut[CUT_END]) == (3, 7)
    assert record(COMMIT, 9, 0, 1, 8, end_payload(123))[END_TM] == 123


def _stored(queue: MemoryQueue) -> list[list]:
    """Every record of ``queue`` but the blocks' summaries (JSON objects), in order."""
    return [decode_record(raw) for _index, raw in queue.tailer(0) if not raw.startswith(b"{")]


def test_the_redo_readers_fast_loop_stores_what_the_builders_build(tmp_path):
    """The chunked reader (its fast loop writes the record lists inline) stores, for every
    kind of line it takes, the record the builders make of the validated line."""
    lines = [
        {"op": "begin", "scn": 1, "xid": "x1", "tm": 100},
        {
            "op": "insert",
            "scn": 2,
            "xid": "x1",
            "owner": "O",
            "table": "T",
            "obj": 7,
            "rid": "r1",
            "after": {"a": 1},
            "tm": 101,
        },
        {
            "op": "update",
            "scn": 3,
            "sub": 1,
            "xid": "x1",
            "owner": "O",
            "table": "T",
            "rid": "r1",
            "before": {"a": 1},
            "after": {"a": 2},
        },
        {"op": "delete", "scn": 4, "xid": "x1", "owner": "O", "table": "T", "rid": "r1", "before": {"a": 2}},
        {"op": "delete", "scn": 5, "xid": "x1", "owner": "O", "table": "T", "rid": "r1", "rollback": True},
        {"op": "ddl", "scn": 6, "xid": "x1", "owner": "O", "table": "T", "sql": "alter table t add c int"},
        {"op": "commit", "scn": 7, "xid": "x1", "tm": 107},
    ]
    text = b"".join(orjson.dumps(d) + b"\n" for d in lines)
    (tmp_path / "redo_1_1.jsonl").write_bytes(text)
    queue = MemoryQueue()
    reader = ThreadReader(queue, str(tmp_path), 1, scan(str(tmp_path))[1], None)
    assert reader.chunked
    reader.read_to_end()
    expected = []
    for n, raw in enumerate(text.splitlines(), start=1):
        code, scn, sub, _xid, payload = validate(parse_line(raw))
        expected.append(record(code, scn, sub, 1, n, payload))
    assert _stored(queue) == expected


def test_a_schema_document_is_canonical_and_its_version_is_its_hash():
    """The same shape gives the same text and version whenever it is built (a restart
    writes the same documents); any difference gives another version."""
    cols = [SchemaColumn("id", "integer", False, "int"), SchemaColumn("amount", "numeric(12,2)", True, "decimal(12,2)")]
    version, text = schema_document("postgresql", "public", "orders", cols, key=["id"])
    assert (version, text) == schema_document("postgresql", "public", "orders", list(cols), key=("id",))
    assert orjson.loads(text) == {
        "format": 1,
        "source": "postgresql",
        "owner": "public",
        "table": "orders",
        "key": ["id"],
        "columns": [
            {"name": "id", "type": "integer", "nullable": False, "spark": "int"},
            {"name": "amount", "type": "numeric(12,2)", "nullable": True, "spark": "decimal(12,2)"},
        ],
    }
    assert len(version) == 16 and int(version, 16) >= 0
    others = {
        schema_document("postgresql", "public", "orders2", cols, key=["id"])[0],
        schema_document("postgresql", "public", "orders", cols[:1], key=["id"])[0],
        schema_document("postgresql", "public", "orders", cols)[0],
        schema_document(
            "postgresql",
            "public",
            "orders",
            [cols[0], SchemaColumn("amount", "numeric(14,2)", True, "decimal(14,2)")],
            key=["id"],
        )[0],
    }
    assert version not in others and len(others) == 4


def test_queues_of_format_2_are_read_and_others_refused_in_one_line():
    """Format 3 adds optional fields at the end of a row: a block of format 2 (its rows
    end at ``sql``) is read as it is; another format is refused, saying which are read."""
    import pytest

    from olr_buffer.changes import READABLE_FORMATS, RECORD_FORMAT, RecordFormatError, read_summary

    assert RECORD_FORMAT == 3 and READABLE_FORMATS == (2, 3)
    assert read_summary(orjson.dumps({"f": 2, "t": 1, "p": 5, "g": []})).progress == 5
    with pytest.raises(RecordFormatError, match="records of format 4; this olr-buffer reads formats 2 and 3"):
        read_summary(orjson.dumps({"f": 4, "t": 1, "p": 5, "g": []}))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**63 - 1),
    st.text(max_size=40),
    st.text(max_size=40),
    st.one_of(st.none(), st.integers(0, 2**32)),
    st.one_of(st.none(), st.text(max_size=300)),
    st.one_of(st.text(max_size=300), st.integers(0, 70_000).map(lambda n: "\u00e9" * n)),
    st.lists(st.text(max_size=300), max_size=2),
)
def test_row_from_encoded_parts_is_the_encoded_record(scn, owner, table, obj, rid, after, schema):
    """A row record put together from encoded parts (``row_head``, ``row_middle``,
    ``str_header``: the PostgreSQL reader's inserts) is the record's own encoding, and the
    builder's ``add_encoded_row`` builds what ``add`` builds."""
    fields = record(INSERT, scn, 0, 0, 0, row_payload(None, owner, table, obj, rid, None, after) + schema)

    def text(s: str | None) -> bytes:
        return NIL if s is None else str_header(len(s.encode())) + s.encode()

    parts = [row_head(INSERT, len(fields)), encode_record(scn), row_middle(owner, table, obj), text(rid), NIL]
    parts += [text(after), NIL, *(text(s) for s in schema)]
    assert b"".join(parts) == encode_record(fields)
    a, b = BlockBuilder(1), BlockBuilder(1)
    for builder in (a, b):
        builder.add(BEGIN, scn, 0, "x", 0, 0, [None])
    a.add(INSERT, scn, 0, "x", 0, 0, fields[5:])
    b.add_encoded_row(scn, "x", b"".join(parts))
    a.add(INSERT, scn, 0, "y", 0, 0, fields[5:])  # a row that opens its group
    b.add_encoded_row(scn, "y", b"".join(parts))
    assert (a.count, a.nbytes, a.progress) == (b.count, b.nbytes, b.progress)
    assert a.build() == b.build()
