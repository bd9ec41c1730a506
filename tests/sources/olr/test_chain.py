"""End to end: ``simulate`` -> ``run`` (redo files) -> changefeed A -> ``serve`` ->
``run olr://`` -> changefeed B. B holds the same transactions, rows and columns as A,
for every column that OpenLogReplicator's protocol carries (contracts sections 6 and 7).

What does not travel, and what B holds instead:

* ``sub``: not in the messages; 0.
* ``thread``: ``serve`` sends no ``rth``; 1.
* ``tm`` of a row: ``serve`` sends the row's ``tm``, or the commit's when the row has
  none; so B's is A's ``tm``, else A's ``c_tm``.

The rest (``tx_seq``, ``op_seq``, ``c_scn``, ``c_tm``, ``xid``, ``op``, ``scn``, ``owner``,
``table``, ``obj``, ``rid``, ``before``, ``after`` (the same JSON text, byte for byte),
``sql``) is the same. The schema documents travel too, as ``schema.columns``: B's rows
name a version where A's do, with the same columns and Spark types; the versions differ,
and the last test says exactly why.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.contract_model import check_changefeed_layout, expected_changefeed, load_changefeed
from tests.paths import CLI, ROOT
from tests.serve.serve_process import ServeProcess
from tests.sources.olr.processes import service_log, start_run, stop
from tests.sources.olr.service import raw_column, transactions, wait_for

pytestmark = pytest.mark.e2e

SAME = (
    "tx_seq",
    "op_seq",
    "c_scn",
    "c_tm",
    "xid",
    "op",
    "scn",
    "owner",
    "table",
    "obj",
    "rid",
    "before",
    "after",
    "sql",
)


def test_redo_files_through_serve_to_run_olr_give_the_same_changefeed(tmp_path):
    sim = subprocess.run(
        [
            *CLI,
            "simulate",
            str(tmp_path / "in"),
            "--threads",
            "3",
            "--transactions",
            "600",
            "--seed",
            "35",
            "--large-tx-rows",
            "3000",
            "--start-time",
            "2024-06-01T00:00:00Z",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert sim.returncode == 0, sim.stderr
    expected = max(r["tx_seq"] for r in expected_changefeed(tmp_path / "in").rows) + 1
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    redo = start_run(str(tmp_path / "in"), tmp_path / "a")
    serve = None
    olr = None
    try:
        # A grows while serve streams it and B receives
        wait_for(lambda: transactions(tmp_path / "a" / "cf") > 0 or redo.poll() is not None, 120, "A's first file")
        assert redo.poll() is None, service_log(tmp_path / "a")
        serve = ServeProcess(tmp_path / "a" / "cf")
        olr = start_run(f"olr://127.0.0.1:{serve.port}/ORCL", tmp_path / "b")

        wait_for(
            lambda: transactions(tmp_path / "a" / "cf") == expected or redo.poll() is not None,
            180,
            "A holding every transaction of the input",
        )
        wait_for(
            lambda: transactions(tmp_path / "b" / "cf") == expected or olr.poll() is not None,
            180,
            "B holding every transaction of A",
        )
    finally:
        codes = {}
        for name, proc in (("olr", olr), ("serve", serve.proc if serve else None), ("redo", redo)):
            if proc is not None:
                codes[name] = stop(proc) if proc.poll() is None else proc.returncode
    assert codes == {"olr": 0, "serve": 0, "redo": 0}, (codes, service_log(tmp_path / "b"))
    a = load_changefeed(tmp_path / "a" / "cf")
    b = load_changefeed(tmp_path / "b" / "cf")
    assert len(a) == len(b) and len(a) > 3000
    for i, (x, y) in enumerate(zip(a, b)):
        for column in SAME:
            assert x[column] == y[column], f"row {i} (tx_seq {x['tx_seq']}): {column} {y[column]!r} != {x[column]!r}"
        assert y["sub"] == 0 and y["thread"] == 1, y
        assert y["tm"] == (x["tm"] if x["tm"] is not None else x["c_tm"]), (i, x["tm"], x["c_tm"], y["tm"])
    assert {x["thread"] for x in a} == {1, 2, 3}, "A is RAC: its threads do not travel"
    for column in ("before", "after"):
        assert raw_column(tmp_path / "b" / "cf", column) == raw_column(tmp_path / "a" / "cf", column)
    check_changefeed_layout(tmp_path / "b" / "cf")


# -- types through the chain -----------------------------------------------------------------

ORDERS_V1 = [
    {"name": "ID", "type": "NUMBER(10)", "nullable": False, "key": True},
    {"name": "TOTAL", "type": "NUMBER(12, 2)"},
    {"name": "RATE", "type": "NUMBER"},
    {"name": "CREATED", "type": "DATE"},
    {"name": "AT", "type": "TIMESTAMP(6) WITH TIME ZONE"},
    {"name": "TAG", "type": "RAW(4)"},
    {"name": "NAME", "type": "NVARCHAR2(10)", "nullable": True},
]
ORDERS_V2 = ORDERS_V1 + [{"name": "NOTE", "type": "VARCHAR2(20 CHAR)"}]
ITEMS = [
    {"name": "SKU", "type": "VARCHAR2(12)", "nullable": False, "key": True},
    {"name": "QTY", "type": "INTEGER"},
    {"name": "W", "type": "FLOAT"},
]
# what OpenLogReplicator's columns say of each type, in Oracle's words (B's documents)
RESPELLED = {
    "NUMBER(12, 2)": "NUMBER(12,2)",
    "INTEGER": "NUMBER(*,0)",
    "FLOAT": "FLOAT(126)",
    "TIMESTAMP(6) WITH TIME ZONE": "TIMESTAMP WITH TIME ZONE",
    "NVARCHAR2(10)": "VARCHAR2(10)",
    "VARCHAR2(20 CHAR)": "VARCHAR2(20)",
}
ORDER = {
    "ID": 7,
    "TOTAL": "1234567890.50",
    "RATE": 0.125,
    "CREATED": "2024-07-23 11:43:19",
    "AT": "2024-07-23T11:43:19.123456+02:00",
    "TAG": "DEADBEEF",
    "NAME": "\u00fcn\u00ef",
}


def typed_input(path) -> int:
    """Redo files of two threads: SALES.ORDERS typed by a ddl with columns, then changed
    by another (a second version), SALES.ITEMS typed in thread 2, HR.EMP never typed."""

    def rec(op, scn, xid, **kw):
        return {"op": op, "scn": scn, "xid": xid, **kw}

    orders = {"owner": "SALES", "table": "ORDERS"}
    t1 = [
        rec("begin", 10, "x1"),
        rec("ddl", 11, "x1", **orders, sql="CREATE TABLE ORDERS (...)", columns=ORDERS_V1),
        rec("insert", 12, "x1", **orders, rid="AAAR1", after=ORDER),
        rec("commit", 13, "x1"),
        rec("begin", 20, "x2"),
        rec("insert", 21, "x2", owner="HR", table="EMP", rid="AAAE1", after={"ID": 1}),
        rec("commit", 22, "x2"),
        rec("begin", 40, "x4"),
        rec("ddl", 41, "x4", **orders, sql="ALTER TABLE ORDERS ADD (NOTE VARCHAR2(20 CHAR))", columns=ORDERS_V2),
        rec("update", 42, "x4", **orders, rid="AAAR1", before={"ID": 7}, after={**ORDER, "NOTE": "n"}),
        rec("commit", 43, "x4"),
        {"op": "lwn", "scn": 60},
    ]
    t2 = [
        rec("begin", 30, "x3"),
        rec("insert", 31, "x3", **orders, rid="AAAR2", after={**ORDER, "ID": 8}),
        rec("commit", 32, "x3"),
        rec("begin", 50, "x5"),
        rec("ddl", 51, "x5", owner="SALES", table="ITEMS", sql="CREATE TABLE ITEMS (...)", columns=ITEMS),
        rec("insert", 52, "x5", owner="SALES", table="ITEMS", rid="AAAI1", after={"SKU": "A-1", "QTY": 3, "W": 0.5}),
        rec("commit", 53, "x5"),
        {"op": "lwn", "scn": 60},
    ]
    path.mkdir()
    for thread, records in ((1, t1), (2, t2)):
        (path / f"redo_{thread}_1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return 5


def documents(cf) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (cf / "_olr_buffer" / "schemas").glob("*.json")}


def test_schema_documents_travel_through_serve_to_run_olr(spark, tmp_path):
    """A's documents (redo) come to B (OpenLogReplicator) as ``schema.columns``: B's rows
    name a version exactly where A's do, one of B's for each of A's, with the same
    columns, nullability (unknown: true, as OpenLogReplicator's columns always say) and
    Spark types, so ``typed()`` reads both alike. The versions differ, as the documents'
    text does: ``source`` is ``olr``; ``key`` is empty (OpenLogReplicator's columns name
    no key); each ``type`` is what OpenLogReplicator's figures say of it, in Oracle's words
    (``NUMBER(12, 2)`` becomes ``NUMBER(12,2)``, ``INTEGER`` ``NUMBER(*,0)``, a
    timestamp's fractional digits and a length's ``CHAR`` are not in them); and a
    ``TIMESTAMP WITH TIME ZONE`` reads as ``string`` from OpenLogReplicator, whose forms of
    it carry the zone's name."""
    from olr_buffer.spark import typed

    n = typed_input(tmp_path / "in")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    redo = start_run(str(tmp_path / "in"), tmp_path / "a")
    serve = olr = None
    try:
        wait_for(lambda: transactions(tmp_path / "a" / "cf") == n or redo.poll() is not None, 120, "A")
        serve = ServeProcess(tmp_path / "a" / "cf")
        olr = start_run(f"olr://127.0.0.1:{serve.port}/ORCL", tmp_path / "b")
        wait_for(lambda: transactions(tmp_path / "b" / "cf") == n or olr.poll() is not None, 120, "B")
    finally:
        codes = {}
        for name, proc in (("olr", olr), ("serve", serve.proc if serve else None), ("redo", redo)):
            if proc is not None:
                codes[name] = stop(proc) if proc.poll() is None else proc.returncode
    assert codes == {"olr": 0, "serve": 0, "redo": 0}, (codes, service_log(tmp_path / "b"))
    cf_a, cf_b = tmp_path / "a" / "cf", tmp_path / "b" / "cf"
    a, b = load_changefeed(cf_a), load_changefeed(cf_b)
    docs_a, docs_b = documents(cf_a), documents(cf_b)
    assert len(docs_a) == len(docs_b) == 3
    pairs = {(x["schema_version"], y["schema_version"]) for x, y in zip(a, b, strict=True)}
    assert (None, None) in pairs  # HR.EMP: no document in A, none in B
    pairs.discard((None, None))
    assert len(pairs) == 3 and len(dict(pairs)) == 3 and set(dict(pairs).values()) == set(docs_b)
    for va, vb in pairs:
        da, db = docs_a[va], docs_b[vb]
        assert va != vb and da["source"] == "redo" and db["source"] == "olr" and da["key"] and db["key"] == []
        assert (db["owner"], db["table"]) == (da["owner"], da["table"])
        for ca, cb in zip(da["columns"], db["columns"], strict=True):
            assert cb["name"] == ca["name"] and cb["nullable"] == (ca["nullable"] is not False)
            assert cb["type"] == RESPELLED.get(ca["type"], ca["type"]), (ca, cb)
            assert cb["spark"] == ("string" if ca["type"].endswith("WITH TIME ZONE") else ca["spark"]), (ca, cb)
    for table in ("ORDERS", "ITEMS"):
        ta = [r.asDict(recursive=True) for r in typed(spark, str(cf_a), "SALES", table).orderBy("tx_seq").collect()]
        tb = [r.asDict(recursive=True) for r in typed(spark, str(cf_b), "SALES", table).orderBy("tx_seq").collect()]
        for x, y in zip(ta, tb, strict=True):
            for image in ("before", "after"):
                if x[image] is not None and "AT" in x[image]:
                    assert y[image]["AT"] == (None if x[image]["AT"] is None else ORDER["AT"])
                    x[image]["AT"] = y[image]["AT"]
            assert {k: x[k] for k in ("op", "before", "after")} == {k: y[k] for k in ("op", "before", "after")}
