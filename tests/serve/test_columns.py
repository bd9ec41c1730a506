"""``schema.columns``: every row whose ``schema_version`` has a document carries the
table's columns in OpenLogReplicator's form (name, type, length or precision and scale,
nullable), checked by the tests' own receiver against the changefeed's documents with
the model's mapping (tests/serve/model.py), which shares nothing with serve's."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from olr_buffer.changes import SchemaColumn, schema_document
from olr_buffer.olr_protocol.columns import oracle_column, postgresql_column
from tests.serve.changefeeds import Feed, Row, Tx
from tests.serve.conftest import serving
from tests.serve.model import expected_messages, position
from tests.serve.receiver import Receiver
from tests.serve.test_server import wait_for

ORDERS_V1 = [
    ("ID", "NUMBER(10)", False),
    ("TOTAL", "NUMBER(12, 2)", True),
    ("RATE", "NUMBER", None),
    ("QTY", "INTEGER", True),
    ("N0", "NUMBER(*,0)", True),
    ("F", "FLOAT", True),
    ("BD", "BINARY_DOUBLE", True),
    ("NAME", "VARCHAR2(30 CHAR)", True),
    ("NNAME", "NVARCHAR2(10)", True),
    ("CODE", "CHAR(3)", False),
    ("CREATED", "DATE", True),
    ("AT", "TIMESTAMP(6)", True),
    ("ATZ", "TIMESTAMP(3) WITH TIME ZONE", True),
    ("ALTZ", "TIMESTAMP WITH LOCAL TIME ZONE", True),
    ("DUR", "INTERVAL DAY(2) TO SECOND(6)", True),
    ("TAG", "RAW(16)", True),
    ("BODY", "CLOB", True),
    ("PIC", "BLOB", True),
    ("X", "XMLTYPE", True),
]
ORDERS_V2 = ORDERS_V1 + [("NOTE", "VARCHAR2(30 CHAR)", True)]
ACCOUNTS = [
    ("id", "bigint", False),
    ("balance", "numeric(12,2)", False),
    ("plain", "numeric", True),
    ("owner", "character varying(40)", True),
    ("opened", "timestamp with time zone", True),
    ("day", "date", True),
    ("doc", "jsonb", True),
]


def document(source: str, owner: str, table: str, columns, key=()) -> tuple[str, str]:
    return schema_document(
        source, owner, table, [SchemaColumn(n, t, nullable, "string") for n, t, nullable in columns], key
    )


@pytest.fixture
def typed_changefeed(tmp_path: Path) -> tuple[Path, list[dict], dict]:
    """Three files: SALES.ORDERS (a redo document, then a second version with a column
    more), public.accounts (a PostgreSQL document), HR.EMP (rows that name no version)."""
    v1, d1 = document("redo", "SALES", "ORDERS", ORDERS_V1, ["ID"])
    v2, d2 = document("redo", "SALES", "ORDERS", ORDERS_V2, ["ID"])
    va, da = document("postgresql", "public", "accounts", ACCOUNTS, ["id"])
    feed = Feed(tmp_path / "cf")
    order = {"ID": 1, "TOTAL": 12.5, "CREATED": "2024-07-23 11:43:19"}
    feed.publish(
        [
            Tx(
                "x1",
                100,
                [
                    Row(
                        op="ddl",
                        scn=99,
                        owner="SALES",
                        table="ORDERS",
                        rid=None,
                        after=None,
                        sql="CREATE TABLE ORDERS (...)",
                        schema=(v1, d1),
                    ),
                    Row(scn=100, owner="SALES", table="ORDERS", after=order, schema=(v1, None)),
                    Row(scn=100, after={"ID": 1}),
                ],
            ),
            Tx(
                "x2",
                100,
                [
                    Row(
                        op="r",
                        scn=100,
                        owner="public",
                        table="accounts",
                        obj=16384,
                        rid='{"id":1}',
                        after={"id": 1, "balance": 5},
                        schema=(va, da),
                    )
                ],
            ),
        ]
    )
    feed.publish(
        [
            Tx(
                "x3",
                104,
                [
                    Row(op="u", scn=103, owner="SALES", table="ORDERS", before=order, after=order, schema=(v1, d1)),
                    Row(
                        op="t",
                        scn=104,
                        owner="public",
                        table="accounts",
                        obj=16384,
                        rid=None,
                        after=None,
                        schema=(va, da),
                    ),
                ],
            ),
        ]
    )
    feed.publish(
        [
            Tx(
                "x4",
                110,
                [
                    Row(
                        op="ddl",
                        scn=109,
                        owner="SALES",
                        table="ORDERS",
                        rid=None,
                        after=None,
                        sql="ALTER TABLE ORDERS ADD (NOTE VARCHAR2(30 CHAR))",
                        schema=(v2, d2),
                    ),
                    Row(
                        op="d", scn=110, owner="SALES", table="ORDERS", before={"ID": 1}, after=None, schema=(v2, None)
                    ),
                    Row(op="u", scn=110, before={"ID": 1}, after={"ID": 2}),
                ],
            ),
        ]
    )
    rows, documents = feed.rows(), feed.documents()
    feed.close()
    assert set(documents) == {v1, v2, va}
    return tmp_path / "cf", rows, documents


def test_every_row_that_names_a_schema_version_carries_its_columns(typed_changefeed):
    cf, rows, documents = typed_changefeed
    everything = expected_messages(rows, "ORCL", documents)
    with_columns = [m for m in everything if "columns" in m["payload"][0].get("schema", {})]
    assert len(with_columns) == 7 and len([m for m in everything if "schema" in m["payload"][0]]) == 9
    with serving(cf) as server:
        with Receiver(*server.address) as r:  # SynchDB's handshake
            r.synchdb_handshake()
            got = r.messages(len(everything))
            assert got == everything
            r.confirm(*position(got[3]))
            assert r.confirmed() == position(got[3])
        wait_for(lambda: server.conn is None, what="the server noticing the closed connection")
        with Receiver(*server.address) as r:  # a stream that resumes: its first row has them too
            r.synchdb_handshake()
            rest = r.messages(len(everything) - 4)
            assert rest == everything[4:]
    # the form a receiver reads: OpenLogReplicator's keys, in its order
    orders = next(m for m in with_columns if m["payload"][0]["schema"]["table"] == "ORDERS")
    columns = orders["payload"][0]["schema"]["columns"]
    assert [list(c) for c in columns[:3]] == [["name", "type", "precision", "scale", "nullable"]] * 3
    assert list(columns[7]) == ["name", "type", "length", "nullable"] and list(columns[10]) == [
        "name",
        "type",
        "nullable",
    ]
    assert columns[2] == {"name": "RATE", "type": "number", "precision": -1, "scale": -1, "nullable": True}


def test_a_schema_document_that_is_missing_closes_the_stream_naming_it(typed_changefeed, caplog):
    cf, rows, documents = typed_changefeed
    everything = expected_messages(rows, "ORCL", documents)
    (version,) = [v for v, d in documents.items() if d["source"] == "postgresql"]
    (cf / "_olr_buffer" / "schemas" / f"{version}.json").unlink()
    before = next(i for i, m in enumerate(everything) if m["payload"][0].get("schema", {}).get("table") == "accounts")
    with caplog.at_level(logging.ERROR, logger="olr_buffer.serve"), serving(cf) as server:
        for _ in range(2):  # the server stays up for the next connection
            wait_for(lambda: server.conn is None, what="the server noticing the closed connection")
            with Receiver(*server.address) as r:
                r.synchdb_handshake()
                got = []
                while (m := r.message(timeout=10)) is not None:
                    got.append(m)
                assert got == everything[: len(got)] and len(got) <= before  # no row of it goes without them
    errors = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.ERROR]
    assert len(errors) == 2 and all(f"schemas/{version}.json: missing" in e for e in errors), errors


@pytest.mark.parametrize(
    "text, column",
    [
        ("NUMBER", {"type": "number", "precision": -1, "scale": -1}),
        ("number(5)", {"type": "number", "precision": 5, "scale": 0}),
        ("NUMBER ( 38 , 10 )", {"type": "number", "precision": 38, "scale": 10}),
        ("NUMBER(5,-2)", {"type": "number", "precision": 5, "scale": -2}),
        ("NUMBER(*)", {"type": "number", "precision": -1, "scale": -1}),
        ("NUMBER(*,2)", {"type": "number", "precision": -1, "scale": 2}),
        ("DECIMAL(9,3)", {"type": "number", "precision": 9, "scale": 3}),
        ("SMALLINT", {"type": "number", "precision": -1, "scale": 0}),
        ("FLOAT(10)", {"type": "number", "precision": 10, "scale": -1}),
        ("REAL", {"type": "number", "precision": 63, "scale": -1}),
        ("DOUBLE PRECISION", {"type": "number", "precision": 126, "scale": -1}),
        ("BINARY_FLOAT", {"type": "binary_float"}),
        ("VARCHAR2(50 BYTE)", {"type": "varchar2", "length": 50}),
        ("VARCHAR(20)", {"type": "varchar2", "length": 20}),
        ("NCHAR(2)", {"type": "char", "length": 2}),
        ("CHAR", {"type": "char", "length": 1}),
        ("CHAR(10 CHAR)", {"type": "char", "length": 10}),
        ("TIMESTAMP", {"type": "timestamp", "length": 11}),
        ("TIMESTAMP(9) WITH TIME ZONE", {"type": "timestamp with time zone", "length": 13}),
        ("timestamp(6) with local time zone", {"type": "timestamp with local time zone", "length": 11}),
        ("INTERVAL YEAR(4) TO MONTH", {"type": "interval year to month", "length": 5}),
        ("INTERVAL DAY TO SECOND", {"type": "interval day to second", "length": 11}),
        ("RAW(2000)", {"type": "raw", "length": 2000}),
        ("LONG RAW", {"type": "long raw"}),
        ("LONG", {"type": "long"}),
        ("NCLOB", {"type": "clob"}),
        ("UROWID", {"type": "urowid", "length": 4000}),
        ("ROWID", {"type": "unknown"}),
        ("SDO_GEOMETRY", {"type": "unknown"}),
    ],
)
def test_oracle_types_take_openlogreplicators_names_and_figures(text, column):
    assert oracle_column("C", text, None) == {"name": "C", **column, "nullable": True}
    assert oracle_column("C", text, False)["nullable"] is False


@pytest.mark.parametrize(
    "text, column",
    [
        ("integer", {"type": "integer"}),
        ("numeric(5,-2)", {"type": "numeric(5,-2)", "precision": 5, "scale": -2}),
        ("character(3)", {"type": "character(3)", "length": 3}),
        ("bit varying(8)", {"type": "bit varying(8)", "length": 8}),
        ("numeric(6,2)[]", {"type": "numeric(6,2)[]"}),
        ("uuid", {"type": "uuid"}),
    ],
)
def test_postgresql_types_keep_their_names(text, column):
    assert postgresql_column("c", text, True) == {"name": "c", **column, "nullable": True}
