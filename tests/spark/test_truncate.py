"""A truncate (``op = 't'``, contract section 4: every earlier row of its table is gone) in
``snapshot`` and in the change-data-feed view, with a real Spark, on a changefeed written
by the real writer with the rows the PostgreSQL source publishes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olr_buffer.changes import COPY_ROW, DELETE, INSERT, TRUNCATE, UPDATE, Commit, CommitKey
from olr_buffer.sinks.parquet import ChangefeedReadError, ChangefeedWriter
from olr_buffer.spark import read_changefeed, snapshot, stream_changefeed, table_changes

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT, v STRING"


def _row(
    code: int, lsn: int, table: str, key: int | None = None, before: dict | None = None, after: dict | None = None
) -> list:
    rid = None if key is None else json.dumps({"id": key})
    return [
        code,
        lsn,
        0,
        1,
        lsn,
        None,
        "public",
        table,
        16384,
        rid,
        None if before is None else json.dumps(before),
        None if after is None else json.dumps(after),
        None,
    ]


def _c(lsn, table, key, v="a"):
    return _row(INSERT, lsn, table, key, after={"id": key, "v": v})


def _u(lsn, table, key, v):
    return _row(UPDATE, lsn, table, key, before={"id": key}, after={"id": key, "v": v})


def _d(lsn, table, key):
    return _row(DELETE, lsn, table, key, before={"id": key})


def _t(lsn, table):
    return _row(TRUNCATE, lsn, table)


#: tx_seq: rows (what a PostgreSQL source publishes for these statements)
TRANSACTIONS = [
    [
        _row(COPY_ROW, 10, "items", 1, after={"id": 1, "v": "a"}),  # 0: initial copy
        _row(COPY_ROW, 10, "items", 2, after={"id": 2, "v": "b"}),
    ],
    [_c(20, "items", 3), _c(21, "other", 1)],  # 1
    [_t(30, "items")],  # 2: TRUNCATE items
    [_c(40, "items", 4, "x"), _u(41, "items", 4, "y")],  # 3
    [_c(50, "items", 5), _t(51, "items"), _c(52, "items", 6)],  # 4: a reload in one transaction
    [_c(60, "items", 7), _d(61, "items", 6), _c(62, "other", 2)],  # 5
]


@pytest.fixture(scope="module")
def cf(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("truncate") / "cf"
    writer = ChangefeedWriter(path, durable=False, file_rows=4)
    for i, rows in enumerate(TRANSACTIONS):
        lsn = rows[-1][1] + 5
        writer.write_transaction(Commit(str(700 + i), CommitKey(lsn, 1, 1, lsn), lsn * 1000), [(1, rows)])
    writer.close()
    return str(path)


def _ids(df) -> dict[int, str]:
    return {r.id: r.v for r in df.collect()}


def test_snapshot_ends_every_row_before_a_truncate(spark, cf):
    # the case: two rows, TRUNCATE, one row: the table holds that one
    as_of_3 = read_changefeed(spark, cf).where("tx_seq <= 3")
    assert _ids(snapshot(spark, as_of_3, "public", "items", SCHEMA, key="id")) == {4: "y"}
    assert _ids(snapshot(spark, cf, "public", "items", SCHEMA, key="id")) == {7: "a"}
    assert {r.rid for r in snapshot(spark, cf, "public", "items").collect()} == {'{"id": 7}'}
    assert _ids(snapshot(spark, cf, "public", "items", SCHEMA)) == {7: "a"}  # keyed by rid, typed
    # before any truncate, and another table: untouched
    as_of_1 = read_changefeed(spark, cf).where("tx_seq <= 1")
    assert _ids(snapshot(spark, as_of_1, "public", "items", SCHEMA, key="id")) == {1: "a", 2: "b", 3: "a"}
    assert _ids(snapshot(spark, cf, "public", "other", SCHEMA, key="id")) == {1: "a", 2: "a"}


def test_the_plain_view_keeps_truncates(spark, cf):
    rows = table_changes(spark, cf, "public", "items", SCHEMA).where("op = 't'").orderBy("tx_seq").collect()
    assert [(r.tx_seq, r.op_seq, r.before, r.after) for r in rows] == [(2, 0, None, None), (4, 1, None, None)]


def test_the_change_data_feed_view_refuses_a_truncate_unless_told(spark, cf):
    with pytest.raises(ChangefeedReadError) as refused:
        table_changes(spark, cf, "public", "items", SCHEMA, change_data_feed=True)
    assert str(refused.value).startswith(
        f"{cf}: public.items was truncated 2 times, first at tx_seq 2 (op_seq 0): Delta's change data feed has "
        "no change type for a truncate, and a MERGE of the other changes would keep the rows it removed "
        "(hint: truncates='include' gives each truncate as a row with _change_type 'truncate'"
    )
    assert "\n" not in str(refused.value)
    batch = read_changefeed(spark, cf).where("tx_seq >= 4")  # a DataFrame (a micro-batch) as well
    with pytest.raises(ChangefeedReadError, match=r"^public\.items was truncated at tx_seq 4 \(op_seq 1\): "):
        table_changes(spark, batch, "public", "items", SCHEMA, change_data_feed=True)
    # a range without a truncate, and another table, read as before
    after = table_changes(spark, cf, "public", "items", SCHEMA, change_data_feed=True, starting_tx_seq=5)
    assert sorted((r.id, r._change_type) for r in after.collect()) == [(6, "delete"), (7, "insert")]
    assert table_changes(spark, cf, "public", "other", SCHEMA, change_data_feed=True).count() == 2
    with pytest.raises(ValueError, match="truncates must be one of"):
        table_changes(spark, cf, "public", "items", SCHEMA, change_data_feed=True, truncates="skip")


def _apply(changes: list) -> dict[int, str]:
    """What a target table holds after the changes, applied in order as a MERGE would."""
    table: dict[int, str] = {}
    for r in sorted(changes, key=lambda r: (r._commit_version, r._op_seq, r._change_type != "update_preimage")):
        if r._change_type == "truncate":
            table.clear()
        elif r._change_type in ("insert", "update_postimage"):
            table[r.id] = r.v
        elif r._change_type == "delete":
            table.pop(r.id, None)
    return table


def test_the_change_data_feed_view_gives_truncates_when_asked(spark, cf):
    cdf = table_changes(spark, cf, "public", "items", SCHEMA, change_data_feed=True, truncates="include")
    assert cdf.columns == ["id", "v", "_change_type", "_commit_version", "_commit_timestamp", "_op_seq"]
    truncates = cdf.where("_change_type = 'truncate'").orderBy("_commit_version").collect()
    assert [(r.id, r.v, r._commit_version, r._op_seq) for r in truncates] == [(None, None, 2, 0), (None, None, 4, 1)]
    assert all(r._commit_timestamp is not None for r in truncates)
    changes = cdf.collect()
    # applied in order, they give the table's state, which snapshot gives too
    assert _apply(changes) == _ids(snapshot(spark, cf, "public", "items", SCHEMA, key="id")) == {7: "a"}
    assert _apply([r for r in changes if r._commit_version <= 3]) == {4: "y"}


def test_a_stream_of_the_change_data_feed_view_fails_on_a_truncate(spark, cf, tmp_path: Path):
    def batch(df, batch_id):
        df.collect()

    query = (
        table_changes(spark, stream_changefeed(spark, cf), "public", "items", SCHEMA, change_data_feed=True)
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match=r"public\.items was truncated at tx_seq [24]: Delta's change data feed"):
        query.awaitTermination(120)
