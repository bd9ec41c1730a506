"""Types from OpenLogReplicator: the ``schema.columns`` a sender gives become the tables'
schema documents (the builder the other sources use, ``source`` ``olr``), every later row
of the table names its version, each transaction carries the documents its rows name
(after a restart too, when the sender does not send the columns again), and ``typed()``
reads a changefeed filled from OpenLogReplicator, with the values in its default forms."""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal

import pytest

from olr_buffer.changes import ROW_CODES, SCHEMA_DOCUMENT, SCHEMA_VERSION, SchemaColumn, schema_document
from olr_buffer.sources.olr import OlrStreamError
from olr_buffer.sources.olr.state import load_columns, load_state
from olr_buffer.sources.olr_types import ColumnsError, column_type, schema_columns
from olr_buffer.testing import MemoryQueue
from tests.sources.olr.service import service, transactions, wait_for
from tests.sources.olr.standin import StandIn
from tests.sources.olr.streams import COLUMNS, Form, messages, workload
from tests.sources.olr.test_receiver import commit_positions, receiving, records


@pytest.mark.parametrize(
    "column, oracle, spark",
    [
        ({"type": "number", "precision": -1, "scale": -1}, "NUMBER", "decimal(38,10)"),
        ({"type": "number", "precision": 10, "scale": 0}, "NUMBER(10)", "decimal(10,0)"),
        ({"type": "number", "precision": 12, "scale": 2}, "NUMBER(12,2)", "decimal(12,2)"),
        ({"type": "number", "precision": -1, "scale": 0}, "NUMBER(*,0)", "decimal(38,0)"),
        ({"type": "number", "precision": 5, "scale": -2}, "NUMBER(5,-2)", "decimal(7,0)"),
        ({"type": "number", "precision": 2, "scale": 5}, "NUMBER(2,5)", "decimal(5,5)"),
        ({"type": "number", "precision": 126, "scale": -1}, "FLOAT(126)", "double"),
        ({"type": "binary_float"}, "BINARY_FLOAT", "float"),
        ({"type": "binary_double"}, "BINARY_DOUBLE", "double"),
        ({"type": "varchar2", "length": 40}, "VARCHAR2(40)", "string"),
        ({"type": "char", "length": 3}, "CHAR(3)", "string"),
        ({"type": "date"}, "DATE", "timestamp_ntz"),
        ({"type": "timestamp", "length": 11}, "TIMESTAMP", "timestamp_ntz"),
        ({"type": "timestamp with local time zone", "length": 11}, "TIMESTAMP WITH LOCAL TIME ZONE", "timestamp"),
        ({"type": "timestamp with time zone", "length": 13}, "TIMESTAMP WITH TIME ZONE", "string"),
        ({"type": "interval day to second", "length": 11}, "INTERVAL DAY TO SECOND", "string"),
        ({"type": "raw", "length": 16}, "RAW(16)", "binary"),
        ({"type": "long raw"}, "LONG RAW", "binary"),
        ({"type": "blob"}, "BLOB", "binary"),
        ({"type": "clob"}, "CLOB", "string"),
        ({"type": "urowid", "length": 4000}, "UROWID(4000)", "string"),
        ({"type": "unknown"}, "UNKNOWN", "string"),
    ],
)
def test_openlogreplicators_columns_take_oracles_types_and_spark_types(column, oracle, spark):
    assert column_type({"name": "C", **column, "nullable": True}) == (oracle, spark)


def test_the_oracle_types_go_back_to_the_same_columns_through_serve():
    """serve makes OpenLogReplicator's columns of an Oracle document: an olr document's
    types give the columns they were made from (a changefeed re-served)."""
    from olr_buffer.olr_protocol.columns import oracle_column

    for (_, _), columns in COLUMNS.items():
        for c in columns:
            oracle, _ = column_type(c)
            assert oracle_column(c["name"], oracle, c["nullable"]) == c


@pytest.mark.parametrize(
    "text, reason",
    [
        ("{}", "not a non-empty array"),
        ("[]", "not a non-empty array"),
        ("[1]", "item 1 is not an object"),
        ('[{"type":"number"}]', "item 1: 'name' is not a non-empty string"),
        ('[{"name":"A","type":"date"},{"name":"A","type":"date"}]', "item 2: column 'A' twice"),
        ('[{"name":"A"}]', "item 1 (A): 'type' is not a non-empty string"),
        ('[{"name":"A","type":"date","nullable":"yes"}]', "item 1 (A): 'nullable' is not a boolean"),
        ('[{"name":"A","type":"number","precision":"10"}]', "column 'A': 'precision' is not an integer"),
    ],
)
def test_columns_that_are_not_openlogreplicators_are_refused(text, reason):
    with pytest.raises(ColumnsError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        schema_columns(text)


def _document(owner: str, table: str) -> tuple[str, str]:
    return schema_document(
        "olr",
        owner,
        table,
        [SchemaColumn(c["name"], column_type(c)[0], c["nullable"], column_type(c)[1]) for c in COLUMNS[(owner, table)]],
    )


def _check_versions(queue: MemoryQueue) -> int:
    """Every row of a table names its document's version; the first row of each version
    in a transaction carries the document, no other does. Returns the rows that name one."""
    named = 0
    carried: set[tuple[str, str]] = set()
    for _, xid, rec in records(queue):
        if rec[0] not in ROW_CODES:
            continue
        version, document = _document(rec[6], rec[7])
        assert rec[SCHEMA_VERSION] == version, rec
        first = (xid, version) not in carried
        assert (len(rec) > SCHEMA_DOCUMENT) == first, rec
        if first:
            assert rec[SCHEMA_DOCUMENT] == document
            carried.add((xid, version))
        named += 1
    return named


def test_rows_name_their_tables_version_and_each_transaction_carries_its_documents_after_a_restart_too():
    """The columns come once, with each table's first row (OpenLogReplicator's
    ``"schema": 1``); the receiver is restarted after the fifth transaction and gets the
    rest without them: its rows name the same versions, from the queue's metadata."""
    txs = workload(random.Random(21), 24)
    msgs = messages(txs, Form(columns=True))
    commits = commit_positions(msgs)
    cut = next(i for i, m in enumerate(msgs) if b'"op":"commit"' in m and json.loads(m)["c_scn"] == commits[4][0]) + 1
    assert all(b'"columns"' not in m for m in msgs[cut:]) and any(b'"columns"' in m for m in msgs[:cut])
    queue = MemoryQueue()
    published: dict = {}
    with StandIn(msgs, hold_at=cut) as sender:
        with receiving(sender, queue, published) as box:
            wait_for(lambda: box["receiver"].last_commit == commits[4] or "error" in box, what="five transactions")
            published["pos"] = commits[4]
            wait_for(lambda: sender.confirmed == commits[4] or "error" in box, what="their confirm")
        assert "error" not in box
        sender.release()
        columns = load_columns(queue.meta_items(b"olr/"))
        assert len(columns) == 3
        with receiving(sender, queue, published, columns=columns) as box:
            wait_for(lambda: box["receiver"].last_commit == commits[-1] or "error" in box, what="the rest")
        assert "error" not in box
    assert load_state(queue.meta_items(b"olr/")).tables_with_columns == 3
    assert _check_versions(queue) == sum(len(tx.rows) for tx in txs)


def test_columns_that_change_give_the_table_a_new_version():
    base = {"scn": 10, "c_scn": 10, "xid": "0x1.1.1"}

    def msg(idx, payload):
        return json.dumps({**base, "c_idx": idx, "payload": payload}).encode()

    one = [{"name": "A", "type": "number", "precision": 5, "scale": 0, "nullable": False}]
    two = one + [{"name": "B", "type": "date", "nullable": True}]
    row = {"op": "c", "schema": {"owner": "O", "table": "T"}, "after": {"A": 1}}
    msgs = [
        msg(0, [{"op": "begin"}]),
        msg(1, [{**row, "schema": {**row["schema"], "columns": one}}]),
        msg(2, [row]),
        msg(3, [{"op": "ddl", "schema": {"owner": "O", "table": "T", "columns": two}, "sql": "ALTER TABLE ..."}]),
        msg(4, [row]),
        msg(5, [{"op": "commit"}]),
    ]
    queue = MemoryQueue()
    with StandIn(msgs) as sender, receiving(sender, queue, {}) as box:
        wait_for(lambda: box["receiver"].last_commit == (10, 5) or "error" in box, what="the transaction")
    rows = [rec for _, _, rec in records(queue) if rec[0] in ROW_CODES]
    v1, d1 = schema_document("olr", "O", "T", [SchemaColumn("A", "NUMBER(5)", False, "decimal(5,0)")])
    v2, d2 = schema_document(
        "olr",
        "O",
        "T",
        [SchemaColumn("A", "NUMBER(5)", False, "decimal(5,0)"), SchemaColumn("B", "DATE", True, "timestamp_ntz")],
    )
    assert [r[SCHEMA_VERSION:] for r in rows] == [[v1, d1], [v1], [v2, d2], [v2]]


def test_columns_that_are_not_openlogreplicators_stop_the_run_naming_the_message():
    msgs = [
        b'{"scn":9,"c_scn":10,"c_idx":0,"xid":"0x1.1.1","payload":[{"op":"begin"}]}',
        b'{"c_scn":10,"c_idx":1,"xid":"0x1.1.1","payload":[{"op":"c","schema":{"owner":"O","table":"T",'
        b'"columns":[{"name":"A","precision":3}]},"after":{"A":1}}]}',
    ]
    queue = MemoryQueue()
    with StandIn(msgs) as sender, receiving(sender, queue, {}) as box:
        wait_for(lambda: "error" in box, what="the error")
    err = box["error"]
    assert isinstance(err, OlrStreamError) and err.exit_code == 3
    assert "message at c_scn 10 c_idx 1: O.T: schema.columns item 1 (A): 'type' is not a non-empty string" in str(err)
    assert not load_columns(queue.meta_items(b"olr/"))


# -- typed() on a changefeed filled from OpenLogReplicator ----------------------------------

ORDERS = [
    {"name": "ID", "type": "number", "precision": 10, "scale": 0, "nullable": False},
    {"name": "TOTAL", "type": "number", "precision": 12, "scale": 2, "nullable": True},
    {"name": "RATE", "type": "number", "precision": -1, "scale": -1, "nullable": True},
    {"name": "F", "type": "number", "precision": 126, "scale": -1, "nullable": True},
    {"name": "BF", "type": "binary_float", "nullable": True},
    {"name": "CREATED", "type": "date", "nullable": True},
    {"name": "AT", "type": "timestamp", "length": 11, "nullable": True},
    {"name": "ALTZ", "type": "timestamp with local time zone", "length": 11, "nullable": True},
    {"name": "ATZ", "type": "timestamp with time zone", "length": 13, "nullable": True},
    {"name": "NAME", "type": "varchar2", "length": 40, "nullable": True},
    {"name": "CODE", "type": "char", "length": 3, "nullable": True},
    {"name": "TAG", "type": "raw", "length": 4, "nullable": True},
    {"name": "BODY", "type": "clob", "nullable": True},
]
T = 1721735000123456000  # 2024-07-23 11:43:20.123456 UTC, in nanoseconds


def olr_stream() -> list[bytes]:
    """Three transactions as OpenLogReplicator writes them by default (JSON numbers, dates
    and timestamps in nanoseconds, RAW in hex), with ``"schema": 5`` (columns with a
    table's first row of the run, and after a DDL changed it)."""
    after = (
        '{"ID":7,"TOTAL":1234567890.50,"RATE":0.125,"F":1.5,"BF":2.5,"CREATED":1721735000000000000,'
        f'"AT":{T},"ALTZ":{T},"ATZ":"{T},Europe/Warsaw","NAME":"\u00fcn\u00ef","CODE":"ABC","TAG":"DEADBEEF",'
        '"BODY":"text"}'
    )
    out = []

    def tx(c_scn: int, entries: list[str]) -> None:
        out.append(
            f'{{"scn":{c_scn - 1},"tm":{T},"c_scn":{c_scn},"c_idx":0,"xid":"0x1.1.{c_scn}",'
            f'"payload":[{{"op":"begin"}}]}}'.encode()
        )
        for i, e in enumerate(entries, 1):
            out.append(f'{{"c_scn":{c_scn},"c_idx":{i},"xid":"0x1.1.{c_scn}","payload":[{e}]}}'.encode())
        out.append(
            f'{{"c_scn":{c_scn},"c_idx":{len(entries) + 1},"xid":"0x1.1.{c_scn}",'
            f'"payload":[{{"op":"commit"}}]}}'.encode()
        )

    schema = '"schema":{"owner":"SALES","table":"ORDERS","obj":73406'
    tx(100, [f'{{"op":"c",{schema},"columns":{json.dumps(ORDERS)}}},"rid":"AAAR1","after":{after}}}'])
    tx(200, [f'{{"op":"ddl",{schema}}},"sql":"ALTER TABLE ORDERS ADD (NOTE VARCHAR2(10))"}}'])
    notes = ORDERS + [{"name": "NOTE", "type": "varchar2", "length": 10, "nullable": True}]
    tx(
        300,
        [
            f'{{"op":"u",{schema},"columns":{json.dumps(notes)}}},"rid":"AAAR1","before":{{"ID":7}},'
            f'"after":{after[:-1]},"NOTE":"n"}}}}'
        ],
    )
    return out


@pytest.mark.e2e
def test_typed_reads_a_changefeed_filled_from_openlogreplicator(spark, tmp_path):
    from olr_buffer.spark import typed

    with StandIn(olr_stream()) as sender, service(sender.uri, tmp_path):
        wait_for(lambda: transactions(tmp_path / "cf") == 3, 60, "the three transactions")
    cf = str(tmp_path / "cf")
    documents = [json.loads(p.read_text()) for p in (tmp_path / "cf" / "_olr_buffer" / "schemas").glob("*.json")]
    assert sorted(len(d["columns"]) for d in documents) == [13, 14] and {d["source"] for d in documents} == {"olr"}
    df = typed(spark, cf, "SALES", "ORDERS")
    assert {f.name: f.dataType.simpleString() for f in df.schema["after"].dataType.fields} == {
        "ID": "decimal(10,0)",
        "TOTAL": "decimal(12,2)",
        "RATE": "decimal(38,10)",
        "F": "double",
        "BF": "float",
        "CREATED": "timestamp_ntz",
        "AT": "timestamp_ntz",
        "ALTZ": "timestamp",
        "ATZ": "string",
        "NAME": "string",
        "CODE": "string",
        "TAG": "binary",
        "BODY": "string",
        "NOTE": "string",
    }
    rows = {r.op: r for r in df.collect()}
    at = dt.datetime(2024, 7, 23, 11, 43, 20, 123456)
    expected = {
        "ID": Decimal(7),
        "TOTAL": Decimal("1234567890.50"),
        "RATE": Decimal("0.125"),
        "F": 1.5,
        "BF": 2.5,
        "CREATED": dt.datetime(2024, 7, 23, 11, 43, 20),
        "AT": at,
        "ALTZ": at,
        "ATZ": f"{T},Europe/Warsaw",
        "NAME": "\u00fcn\u00ef",
        "CODE": "ABC",
        "TAG": bytearray(b"\xde\xad\xbe\xef"),
        "BODY": "text",
    }
    assert rows["c"].after.asDict() == {**expected, "NOTE": None}  # written under the first version
    assert rows["u"].after.asDict() == {**expected, "NOTE": "n"}
    first = typed(spark, cf, "SALES", "ORDERS", version=rows["c"].schema_version)
    assert "NOTE" not in first.schema["after"].dataType.names
    assert rows["c"].schema_version != rows["u"].schema_version
    assert rows["ddl"].schema_version == rows["c"].schema_version  # the DDL's row: the columns sent before it
