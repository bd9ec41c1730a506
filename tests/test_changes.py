"""The change-record layout is written down once (``olr_buffer.changes``): the builders put
each field at the index the consumers read it from, and the sources' fast loops, which
write the same lists inline, store exactly what the builders build."""

from __future__ import annotations

import orjson

from olr_buffer.changes import (
    AFTER,
    BEFORE,
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
    OBJ,
    OWNER,
    RID,
    ROW_FIELDS,
    SCN,
    SEQUENCE,
    SQL,
    SUB,
    TABLE,
    TM,
    UPDATE,
    compensation_payload,
    cut_payload,
    decode_record,
    end_payload,
    record,
    row_payload,
)
from olr_buffer.sources.redo.files import scan
from olr_buffer.sources.redo.records import parse_line, validate
from olr_buffer.sources.redo.thread_reader import ThreadReader
from olr_buffer.txbuffer import MemoryQueue


def test_the_builders_put_each_field_where_the_consumers_read_it():
    row = record(UPDATE, 10, 2, 3, 4, row_payload(5, "O", "T", 6, "r1", '{"a":1}', '{"a":2}', "sql"))
    assert len(row) == len(ROW_FIELDS)
    named = dict(zip(ROW_FIELDS, row))
    assert named == {"code": UPDATE, "scn": 10, "sub": 2, "sequence": 3, "line": 4, "tm": 5, "owner": "O",
                     "table": "T", "obj": 6, "rid": "r1", "before": '{"a":1}', "after": '{"a":2}', "sql": "sql"}
    assert (row[CODE], row[SCN], row[SUB], row[SEQUENCE], row[LINE]) == (UPDATE, 10, 2, 3, 4)
    assert (row[TM], row[OWNER], row[TABLE], row[OBJ], row[RID], row[BEFORE], row[AFTER], row[SQL]) == (
        5, "O", "T", 6, "r1", '{"a":1}', '{"a":2}', "sql")
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
        {"op": "insert", "scn": 2, "xid": "x1", "owner": "O", "table": "T", "obj": 7, "rid": "r1",
         "after": {"a": 1}, "tm": 101},
        {"op": "update", "scn": 3, "sub": 1, "xid": "x1", "owner": "O", "table": "T", "rid": "r1",
         "before": {"a": 1}, "after": {"a": 2}},
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
