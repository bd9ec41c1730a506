"""The optional ``columns`` of a ``ddl`` record (docs/formats.md): checked like every
field, turned into a schema document that travels with the ``ddl`` row, and the version
every later row of the table takes in the changefeed, whatever redo thread it is in."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from olr_buffer.changes import RecordError, schema_version
from olr_buffer.runtime import replay
from olr_buffer.sources.redo import InputError
from olr_buffer.sources.redo.records import decode_line, parse_line, validate
from olr_buffer.sources.redo.types import spark_type

DDL = {
    "op": "ddl",
    "scn": 5,
    "xid": "x",
    "owner": "SALES",
    "table": "ORDERS",
    "sql": "CREATE TABLE ORDERS (ID NUMBER(10) PRIMARY KEY, TOTAL NUMBER(12,2), CREATED DATE)",
}
COLUMNS = [
    {"name": "ID", "type": "NUMBER(10)", "nullable": False, "key": True},
    {"name": "TOTAL", "type": "NUMBER(12,2)"},
    {"name": "CREATED", "type": "DATE", "nullable": True, "comment": "kept out"},
]


@pytest.mark.parametrize(
    "oracle, spark",
    [
        ("NUMBER", "decimal(38,10)"),
        ("NUMBER(10)", "decimal(10,0)"),
        ("number ( 12 , 2 )", "decimal(12,2)"),
        ("NUMBER(38,9)", "decimal(38,9)"),
        ("NUMBER(5,-2)", "decimal(7,0)"),
        ("NUMBER(2,5)", "decimal(5,5)"),
        ("NUMBER(*,2)", "decimal(38,2)"),
        ("NUMBER(*)", "decimal(38,10)"),
        ("DECIMAL(8,3)", "decimal(8,3)"),
        ("INTEGER", "decimal(38,0)"),
        ("FLOAT(126)", "double"),
        ("BINARY_FLOAT", "float"),
        ("BINARY_DOUBLE", "double"),
        ("VARCHAR2(30 CHAR)", "string"),
        ("NVARCHAR2(10)", "string"),
        ("CHAR(1)", "string"),
        ("CLOB", "string"),
        ("DATE", "timestamp_ntz"),
        ("TIMESTAMP", "timestamp_ntz"),
        ("TIMESTAMP(9)", "timestamp_ntz"),
        ("TIMESTAMP(6) WITH TIME ZONE", "timestamp"),
        ("TIMESTAMP WITH LOCAL TIME ZONE", "timestamp"),
        ("RAW(16)", "binary"),
        ("LONG RAW", "binary"),
        ("BLOB", "binary"),
        ("BOOLEAN", "boolean"),
        ("INTERVAL DAY(2) TO SECOND(6)", "string"),
        ("XMLTYPE", "string"),
    ],
)
def test_oracle_types(oracle, spark):
    assert spark_type(oracle) == spark


def test_columns_become_a_schema_document_on_the_ddl_row():
    raw = json.dumps({**DDL, "columns": COLUMNS}).encode()
    code, scn, sub, xid, payload = decode_line(raw)
    assert payload[:8] == validate(parse_line(raw))[4][:8]
    version, document = payload[8:]
    assert schema_version(document) == version
    assert orjson.loads(document) == {
        "format": 1,
        "source": "redo",
        "owner": "SALES",
        "table": "ORDERS",
        "key": ["ID"],
        "columns": [
            {"name": "ID", "type": "NUMBER(10)", "nullable": False, "spark": "decimal(10,0)"},
            {"name": "TOTAL", "type": "NUMBER(12,2)", "nullable": True, "spark": "decimal(12,2)"},
            {"name": "CREATED", "type": "DATE", "nullable": True, "spark": "timestamp_ntz"},
        ],
    }
    assert validate(parse_line(raw))[4] == payload
    assert len(decode_line(json.dumps({**DDL, "columns": None}).encode())[4]) == 8  # no columns: no version
    assert len(decode_line(json.dumps({**DML_WITH_COLUMNS}).encode())[4]) == 8  # on DML: an unknown field


DML_WITH_COLUMNS = {
    "op": "insert",
    "scn": 5,
    "xid": "x",
    "owner": "O",
    "table": "T",
    "rid": "R",
    "after": {"A": 1},
    "columns": [{"name": "A"}],
}


@pytest.mark.parametrize(
    "columns, reason",
    [
        ({"ID": "NUMBER"}, "field 'columns' must be an array, not an object"),
        ([], "field 'columns' must list at least one column"),
        (["ID"], "field 'columns' item 1 must be an object, not a string"),
        ([{"type": "NUMBER"}], "field 'columns' item 1: 'name' must be a non-empty string"),
        (
            [{"name": "ID", "type": "NUMBER"}, {"name": "X"}],
            "field 'columns' item 2 (X): 'type' must be a non-empty string",
        ),
        (
            [{"name": "ID", "type": "NUMBER"}, {"name": "ID", "type": "DATE"}],
            "field 'columns' item 2: column 'ID' is listed twice",
        ),
        (
            [{"name": "ID", "type": "NUMBER", "nullable": "no"}],
            "field 'columns' item 1 (ID): 'nullable' must be a boolean",
        ),
        ([{"name": "ID", "type": "NUMBER", "key": 1}], "field 'columns' item 1 (ID): 'key' must be a boolean"),
    ],
)
def test_bad_columns_give_the_reason(columns, reason):
    raw = json.dumps({**DDL, "columns": columns}).encode()
    with pytest.raises(RecordError) as info:
        decode_line(raw)
    assert str(info.value) == reason


def write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_rows_after_a_ddl_with_columns_take_its_version_in_every_thread(tmp_path):
    """Thread 1 creates the table (with columns), thread 2 writes it; rows committed before
    the DDL have no version, rows after it have the DDL's, and a second DDL (a column
    added) gives the rows after it a new version, across a second replay too."""
    inp = tmp_path / "in"
    inp.mkdir()

    def tx(xid, scn, *rows):
        return [{"op": "begin", "scn": scn, "xid": xid}, *rows, {"op": "commit", "scn": scn + 5, "xid": xid}]

    def ins(xid, scn, i):
        return {
            "op": "insert",
            "scn": scn,
            "xid": xid,
            "owner": "SALES",
            "table": "ORDERS",
            "rid": f"R{i}",
            "after": {"ID": i, "TOTAL": "1.50"},
        }

    added = COLUMNS + [{"name": "NOTE", "type": "VARCHAR2(100)"}]
    write(
        inp / "redo_1_1.jsonl",
        tx("a", 100, {**DDL, "scn": 101, "xid": "a", "columns": COLUMNS})
        + tx(
            "c",
            300,
            {**DDL, "scn": 301, "xid": "c", "sql": "ALTER TABLE ORDERS ADD (NOTE VARCHAR2(100))", "columns": added},
        )
        + [{"op": "lwn", "scn": 1000}],
    )
    write(
        inp / "redo_2_1.jsonl",
        tx("z", 50, ins("z", 51, 0))
        + tx("b", 200, ins("b", 201, 1), ins("b", 202, 2))
        + tx("d", 400, ins("d", 401, 3))
        + [{"op": "lwn", "scn": 1000}],
    )
    replay(str(inp), str(tmp_path / "q"), str(tmp_path / "cf"))
    rows = [r for p in sorted((tmp_path / "cf").glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]
    v1 = decode_line(json.dumps({**DDL, "columns": COLUMNS}).encode())[4][8]
    v2 = decode_line(json.dumps({**DDL, "columns": added}).encode())[4][8]
    assert [(r["xid"], r["op"], r["schema_version"]) for r in rows] == [
        ("z", "c", None),
        ("a", "ddl", v1),
        ("b", "c", v1),
        ("b", "c", v1),
        ("c", "ddl", v2),
        ("d", "c", v2),
    ]
    documents = tmp_path / "cf" / "_olr_buffer" / "schemas"
    assert sorted(p.stem for p in documents.iterdir()) == sorted([v1, v2])
    # more input of a later period: the version of SALES.ORDERS carries over
    write(inp / "redo_2_2.jsonl", tx("e", 1100, ins("e", 1101, 4)))
    write(inp / "redo_1_2.jsonl", [{"op": "lwn", "scn": 2000}])
    replay(str(inp), str(tmp_path / "q"), str(tmp_path / "cf"))
    last = pq.read_table(sorted((tmp_path / "cf").glob("part-*.parquet"))[-1]).to_pylist()[-1]
    assert (last["xid"], last["schema_version"]) == ("e", v2)


def test_bad_columns_stop_the_run_naming_file_and_line(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    write(
        inp / "redo_1_1.jsonl",
        [{"op": "begin", "scn": 1, "xid": "a"}, {**DDL, "scn": 2, "xid": "a", "columns": [{"name": "ID"}]}],
    )
    with pytest.raises(InputError, match=r"redo_1_1\.jsonl:2: field 'columns' item 1 \(ID\): 'type' must be"):
        replay(str(inp), str(tmp_path / "q"), str(tmp_path / "cf"))
