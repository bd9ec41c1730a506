"""table_changes and snapshot against a reference computed in plain Python from the
contract model's rows of the same workload."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from olr_buffer.spark import snapshot, table_changes
from tests.contract_model import load_input
from tests.sinks.parquet.workload import ORDERS_DDL, ORDERS_JSON_OPTIONS, OWNER, TABLE, reference_snapshot

pytestmark = pytest.mark.spark

FIELDS = [c.split()[0] for c in ORDERS_DDL.split(", ")]


def typed(image: dict[str, Any] | None) -> dict[str, Any] | None:
    """An image as from_json with ORDERS_DDL gives it: the schema's fields, typed."""
    if image is None:
        return None
    out = {f: image.get(f) for f in FIELDS}
    if out["CREATED"] is not None:
        out["CREATED"] = datetime.strptime(out["CREATED"], "%Y-%m-%d %H:%M:%S")
    return out


def as_ts(nanos: int | None) -> datetime | None:
    """What Spark gives for a nanosecond time as a timestamp (session time zone UTC)."""
    return None if nanos is None else datetime(1970, 1, 1) + timedelta(microseconds=nanos // 1000)


def test_the_table_has_every_kind_of_change(workload):
    rows = [r for r in workload.expected.rows if (r["owner"], r["table"]) == (OWNER, TABLE)]
    ops = Counter(r["op"] for r in rows)
    assert ops["c"] > 50 and ops["u"] > 50 and ops["d"] > 10
    # a row id inserted again after a delete
    seen: dict[str, str] = {}
    reinserted = set()
    for r in rows:
        if r["op"] == "c" and seen.get(r["rid"]) == "d":
            reinserted.add(r["rid"])
        seen[r["rid"]] = r["op"]
    assert len(reinserted) >= 2
    # compensation records in published transactions, from the simulator and by hand
    published = {r["xid"] for r in rows}
    compensations = [
        rec
        for rec in load_input(workload.input)
        if rec.data.get("rollback") is True and rec.data.get("table") == TABLE and rec.data["xid"] in published
    ]
    assert len(compensations) >= 5
    assert any(rec.data["xid"].startswith("0x00ee") for rec in compensations)
    assert any(not rec.data["xid"].startswith("0x00ee") for rec in compensations)


def test_table_changes_parses_before_and_after(spark, workload):
    df = table_changes(spark, str(workload.changefeed), OWNER, TABLE, ORDERS_DDL, json_options=ORDERS_JSON_OPTIONS)
    assert df.columns == [
        "tx_seq",
        "op_seq",
        "c_scn",
        "c_tm",
        "xid",
        "op",
        "scn",
        "sub",
        "tm",
        "thread",
        "owner",
        "table",
        "obj",
        "rid",
        "before",
        "after",
        "sql",
        "c_ts",
        "ts",
        "schema_version",
    ]
    assert df.schema["after"].dataType.simpleString().startswith("struct<ORDER_ID:bigint,")
    got = [r.asDict(recursive=True) for r in df.orderBy("tx_seq", "op_seq").collect()]
    want = [
        {
            **r,
            "before": typed(r["before"]),
            "after": typed(r["after"]),
            "c_ts": as_ts(r["c_tm"]),
            "ts": as_ts(r["tm"]),
            "schema_version": None,
        }
        for r in workload.expected.rows
        if (r["owner"], r["table"]) == (OWNER, TABLE)
    ]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == w, (g["tx_seq"], g["op_seq"])


def test_snapshot_by_rid_without_schema(spark, workload):
    df = snapshot(spark, str(workload.changefeed), OWNER, TABLE)
    assert df.columns == ["rid", "after"]
    got = {r.rid: json.loads(r.after) for r in df.collect()}
    want = reference_snapshot(workload.expected.rows, OWNER, TABLE)
    assert len(got) == len(want) > 100
    assert got == want


def test_snapshot_by_rid_with_schema(spark, workload):
    df = snapshot(spark, str(workload.changefeed), OWNER, TABLE, ORDERS_DDL, json_options=ORDERS_JSON_OPTIONS)
    assert df.columns == ["rid", *FIELDS]
    got = {r.rid: {f: r[f] for f in FIELDS} for r in df.collect()}
    want = {rid: typed(image) for rid, image in reference_snapshot(workload.expected.rows, OWNER, TABLE).items()}
    assert got == want


def test_snapshot_by_primary_key(spark, workload):
    df = snapshot(
        spark, str(workload.changefeed), OWNER, TABLE, ORDERS_DDL, key=["ORDER_ID"], json_options=ORDERS_JSON_OPTIONS
    )
    assert df.columns == FIELDS
    got = {(r.ORDER_ID,): r.asDict() for r in df.collect()}
    reference = reference_snapshot(workload.expected.rows, OWNER, TABLE, ["ORDER_ID"])
    want = {k: typed(image) for k, image in reference.items()}
    assert got == want
    # the hand-written sequence: 900001 and 900005 live in reused row ids, 900002 was
    # deleted, 900003 (a key moved by an update) deleted, 900004 rolled back
    assert {(900001,), (900005,)} <= got.keys()
    assert not {(900002,), (900003,), (900004,)} & got.keys()


def test_snapshot_key_needs_schema(spark, workload):
    with pytest.raises(ValueError, match="needs the table's schema"):
        snapshot(spark, str(workload.changefeed), OWNER, TABLE, key="ORDER_ID")
    with pytest.raises(ValueError, match="not in the schema"):
        snapshot(spark, str(workload.changefeed), OWNER, TABLE, "ORDER_ID BIGINT", key=["ID"])
