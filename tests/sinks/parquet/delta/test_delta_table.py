"""The Delta changefeed (olr_buffer/sinks/delta), on a local directory and on S3 (moto's
server), read back by deltalake: through pyarrow (to_pyarrow_table) and through its own
engine (QueryBuilder, DataFusion's Parquet reader)."""

from __future__ import annotations

import calendar
import json
from datetime import UTC, datetime

import orjson
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from olr_buffer.sinks.parquet.delta import (
    DeltaChainError,
    DeltaChangefeed,
    DeltaConflictError,
    DeltaForeignCommitError,
    DeltaTableMismatchError,
    PartFile,
)
from olr_buffer.sinks.parquet.schema import ARROW_SCHEMA, part_name
from olr_buffer.store import StoreUnreachableError, open_store
from tests.sinks.parquet.delta.parts import ROWS_PER_TX, publish, rows

APP = "queue-5f0c"


def open_table(store) -> DeltaTable:
    uri, options = store.delta_location()
    return DeltaTable(uri, storage_options=options)


def log_entries(store, version: int) -> list[dict]:
    return [json.loads(line) for line in store.read(f"_delta_log/{version:020d}.json").splitlines()]


def tx_seqs_read(store) -> list[int]:
    """tx_seq of every row, as deltalake's two readers see the table (they must agree)."""
    table = open_table(store)
    by_arrow = table.to_pyarrow_table().sort_by([("tx_seq", "ascending"), ("op_seq", "ascending")])
    by_engine = pa.table(QueryBuilder().register("t", table).execute("select tx_seq from t order by tx_seq, op_seq"))
    assert by_engine.column("tx_seq").to_pylist() == by_arrow.column("tx_seq").to_pylist()
    return by_arrow.column("tx_seq").to_pylist()


def expected(first: int, last: int) -> list[int]:
    return [t for t in range(first, last + 1) for _ in range(ROWS_PER_TX)]


def test_the_table_is_created_readable_by_spark_3_5(store):
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    assert dc.version == 0 and dc.next_tx_seq == 0 and dc.last_committed() is None
    table = open_table(store)
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert not protocol.reader_features and not protocol.writer_features
    fields = {f["name"]: f for f in json.loads(table.schema().to_json())["fields"]}
    assert list(fields) == ARROW_SCHEMA.names
    assert fields["tx_seq"]["type"] == "long" and not fields["tx_seq"]["nullable"]
    assert fields["c_ts"]["type"] == "timestamp" and fields["c_ts"]["nullable"]  # not timestamp_ntz (writer 7)
    assert DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP).version == 0  # opened again, not created again


def test_a_commit_adds_the_files_as_they_are_with_the_queues_transaction(store, tmp_path):
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP, writer={"writer": "w1", "lease_generation": 3})
    p0 = publish(store, tmp_path, 0, 4)
    p1 = publish(store, tmp_path, 5, 6)
    before = {o.name: o.size for o in store.list()}
    assert dc.commit([p1, p0]) == 1
    assert {o.name: o.size for o in store.list()} == before  # committed as they are, no rewrite
    assert dc.last_committed() == 6 and dc.next_tx_seq == 7
    assert tx_seqs_read(store) == expected(0, 6)
    entries = log_entries(store, 1)
    [info] = [e["commitInfo"] for e in entries if "commitInfo" in e]
    assert info["olr_buffer.app_id"] == APP and info["olr_buffer.writer"] == "w1"
    assert info["olr_buffer.lease_generation"] == 3
    assert (info["olr_buffer.first_tx_seq"], info["olr_buffer.last_tx_seq"]) == (0, 6)
    assert [e["txn"] for e in entries if "txn" in e] == [{"appId": APP, "version": 6}]
    adds = [e["add"] for e in entries if "add" in e]
    assert [a["path"] for a in adds] == [part_name(0, 4), part_name(5, 6)]
    assert all(a["dataChange"] for a in adds) and [a["size"] for a in adds] == [p0.size, p1.size]
    stats = json.loads(adds[0]["stats"])
    assert stats["numRecords"] == 5 * ROWS_PER_TX
    assert (stats["minValues"]["tx_seq"], stats["maxValues"]["tx_seq"]) == (0, 4)
    assert stats["nullCount"]["before"] == 5 and stats["nullCount"]["sql"] == 15


def test_statistics_bound_the_values(store, tmp_path):
    """Spark and delta-rs skip files by them: each bound must hold every value (the
    timestamps are in milliseconds: the maximum rounds up)."""
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    dc.commit([publish(store, tmp_path, 0, 9)])
    data = rows(0, 9)
    [stats] = [json.loads(e["add"]["stats"]) for e in log_entries(store, 1) if "add" in e]
    for name in ("tx_seq", "op_seq", "c_scn", "c_tm", "scn", "tm", "thread", "obj"):
        column = data.column(name)
        assert stats["minValues"][name] == pa.compute.min(column).as_py()
        assert stats["maxValues"][name] == pa.compute.max(column).as_py()
    assert stats["minValues"]["owner"] == stats["maxValues"]["owner"] == "SALES"
    assert "before" not in stats["minValues"]  # long row images: no bounds rather than cut ones
    low_us = pa.compute.min(data.column("ts")).value
    high_us = pa.compute.max(data.column("ts")).value
    assert _micros(stats["minValues"]["ts"]) <= low_us and high_us <= _micros(stats["maxValues"]["ts"])
    assert _micros(stats["maxValues"]["ts"]) - high_us < 1000  # the next millisecond, not more
    assert stats["maxValues"]["ts"].endswith("Z") and len(stats["maxValues"]["ts"]) == 24
    table = open_table(store)
    assert table.to_pyarrow_table(filters=[("tx_seq", "=", 3)]).num_rows == ROWS_PER_TX


def _micros(iso: str) -> int:
    """``2023-11-14T22:13:20.123Z`` -> microseconds since the epoch."""
    t = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (calendar.timegm(t.timetuple()) * 1_000_000) + t.microsecond


def test_a_commit_made_before_is_not_made_again(store, tmp_path):
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    p0 = publish(store, tmp_path, 0, 4)
    assert dc.commit([p0]) == 1
    assert dc.commit([p0]) is None
    again = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)  # a restarted writer
    assert again.commit([p0]) is None and again.version == 1
    assert tx_seqs_read(store) == expected(0, 4)


def test_a_commit_whose_answer_was_lost_is_found_by_the_next_call(store, tmp_path):
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    p0 = publish(store, tmp_path, 0, 4)
    real = DeltaTable.create_write_transaction

    def applied_then_failed(self, *args, **kwargs):
        real(self, *args, **kwargs)
        raise OSError("Generic S3 error: error sending request: connection reset by peer")

    with pytest.MonkeyPatch.context() as mp:  # its own: undoing it keeps the S3 environment
        mp.setattr(DeltaTable, "create_write_transaction", applied_then_failed)
        with pytest.raises(StoreUnreachableError, match="did not answer"):
            dc.commit([p0])
    assert dc.commit([p0]) is None  # it went in: not committed twice
    assert dc.version == 1 and tx_seqs_read(store) == expected(0, 4)


@pytest.mark.parametrize(
    "text",
    [
        "Generic S3 error: error sending request: connection closed before message completed",
        "Generic S3 error: Broken pipe (os error 32)",
    ],
)
def test_a_connection_lost_in_a_commit_is_an_unreachable_store(store, tmp_path, text):
    """What hyper says when the store goes away mid-request is retryable (run waits for
    the store), not a failure of the table."""
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    p0 = publish(store, tmp_path, 0, 4)

    def failed(self, *args, **kwargs):
        raise OSError(text)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DeltaTable, "create_write_transaction", failed)
        with pytest.raises(StoreUnreachableError, match="did not answer"):
            dc.commit([p0])
    assert dc.commit([p0]) == 1


def test_only_published_files_are_committed(store, tmp_path):
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    p0 = publish(store, tmp_path, 0, 4)
    with pytest.raises(DeltaChainError, match="not published: cannot commit it"):
        dc.commit([PartFile("part-missing.parquet", p0.size, 0, 4, p0.rows, p0.stats)])
    with pytest.raises(DeltaChainError, match=f"{p0.size} bytes published, 1 to commit"):
        dc.commit([PartFile(p0.name, 1, 0, 4, p0.rows, p0.stats)])
    assert dc.version == 0


def test_files_must_continue_the_table(store, tmp_path):
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    dc.commit([publish(store, tmp_path, 0, 4)])
    with pytest.raises(DeltaChainError, match="holds up to tx_seq 4"):
        dc.commit([publish(store, tmp_path, 6, 7)])  # a gap
    with pytest.raises(DeltaChainError, match="does not follow"):
        dc.commit([publish(store, tmp_path, 5, 5), publish(store, tmp_path, 7, 8)])
    with pytest.raises(DeltaChainError, match="the queue committed up to 4"):
        dc.commit([publish(store, tmp_path, 3, 9, name="part-overlap.parquet")])  # committed in part
    assert dc.version == 1 and tx_seqs_read(store) == expected(0, 4)


def test_files_published_but_not_committed_are_found_on_restart(store, tmp_path):
    """A writer killed between publishing files and committing them: the next one finds
    them after the queue's version and commits them, once."""
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    parts = [publish(store, tmp_path, 0, 2), publish(store, tmp_path, 3, 5), publish(store, tmp_path, 6, 6)]
    dc.commit(parts[:1])
    # ... killed here; a new writer lists the published files and reads their footers
    restarted = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    assert restarted.last_committed() == 2
    listed = [PartFile.from_store(store, p.name, p.first_tx_seq, p.last_tx_seq) for p in parts]
    assert listed == parts  # the footer gives what the local file gave
    pending = restarted.uncommitted(listed)
    assert [p.name for p in pending] == [parts[1].name, parts[2].name]
    assert restarted.commit(pending) == 2
    assert restarted.uncommitted(listed) == []
    assert tx_seqs_read(store) == expected(0, 6)


def test_a_writer_of_another_queue_cannot_commit_over(store, tmp_path):
    """Two writers on one snapshot: the one that comes second finds the table moved on
    and refuses, whatever its queue."""
    a = DeltaChangefeed(store, ARROW_SCHEMA, app_id="queue-a")
    b = DeltaChangefeed(store, ARROW_SCHEMA, app_id="queue-b")
    a.commit([publish(store, tmp_path, 0, 4)])
    with pytest.raises(DeltaChainError, match="holds up to tx_seq 4"):
        b.commit([publish(store, tmp_path, 0, 2, name="part-b-0-2.parquet")])
    b.commit([publish(store, tmp_path, 5, 6)])  # adopted: it goes on from there
    assert tx_seqs_read(store) == expected(0, 6)


def test_a_stale_writer_of_the_same_queue_never_commits_twice(store, tmp_path):
    a = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    b = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    a.commit([publish(store, tmp_path, 0, 4)])
    assert b.commit([publish(store, tmp_path, 0, 4, name="part-again.parquet")]) is None
    with pytest.raises(DeltaChainError, match="the queue committed up to 4"):
        b.commit([publish(store, tmp_path, 3, 7, name="part-3-7.parquet")])
    assert tx_seqs_read(store) == expected(0, 4)


def test_compaction_is_one_commit_that_changes_no_data(store, tmp_path):
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    parts = [publish(store, tmp_path, 0, 1), publish(store, tmp_path, 2, 4), publish(store, tmp_path, 5, 5)]
    for p in parts:
        dc.commit([p])
    dc.commit([publish(store, tmp_path, 6, 6)])
    merged = publish(store, tmp_path, 0, 5, name="part-00000000000000000000-00000000000000000005.c1.parquet")
    version = dc.compact(parts, merged)
    assert version == 5
    entries = log_entries(store, version)
    removes = [e["remove"] for e in entries if "remove" in e]
    adds = [e["add"] for e in entries if "add" in e]
    assert sorted(r["path"] for r in removes) == sorted(p.name for p in parts)
    assert [a["path"] for a in adds] == [merged.name]
    assert not any(r["dataChange"] for r in removes) and not adds[0]["dataChange"]
    assert not any("txn" in e for e in entries)
    assert sorted(dc.files()) == sorted([merged.name, part_name(6, 6)])
    assert tx_seqs_read(store) == expected(0, 6)
    assert all(store.exists(p.name) for p in parts)  # not deleted: older versions still read them
    assert dc.last_committed() == 6 and dc.next_tx_seq == 7
    with pytest.raises(DeltaConflictError, match="not in the Delta table"):
        dc.compact(parts, merged)
    with pytest.raises(DeltaChainError, match="the files it replaces hold"):
        dc.compact([merged], publish(store, tmp_path, 0, 4, name="part-short.parquet"))


def test_a_vacuum_between_commits_goes_by_and_another_writers_commit_stops_the_committer(store, tmp_path):
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    parts = [publish(store, tmp_path, 0, 1), publish(store, tmp_path, 2, 4)]
    for p in parts:
        dc.commit([p])
    # olr-buffer's compaction (another committer), then VACUUM (which writes two commits)
    DeltaChangefeed(store, ARROW_SCHEMA, app_id="olr-buffer").compact(
        parts, publish(store, tmp_path, 0, 4, name="part-00000000000000000000-00000000000000000004.c1.parquet")
    )
    table = open_table(store)
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert [h["operation"] for h in open_table(store).history(2)] == ["VACUUM END", "VACUUM START"]
    assert dc.commit([publish(store, tmp_path, 5, 6)]) == 6
    # an append of another program: the next commit stops, naming it
    uri, options = store.delta_location()
    write_deltalake(uri, rows(7, 7), mode="append", storage_options=options)
    with pytest.raises(
        DeltaForeignCommitError,
        match=r"Delta version 7 was committed by another writer \(WRITE by delta-rs.*, 1 file\(s\) "
        r"added\).*restore the table to version 6",
    ):
        dc.commit([publish(store, tmp_path, 7, 8)])
    assert open_table(store).version() == 7  # nothing committed after it


def test_the_queues_version_survives_checkpoints(store, tmp_path):
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP, configuration={"delta.checkpointInterval": "2"})
    for t in range(5):
        dc.commit([publish(store, tmp_path, t, t)])
    assert any(o.name.endswith(".checkpoint.parquet") for o in store.list("_delta_log/"))
    again = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    assert again.last_committed() == 4 and again.next_tx_seq == 5
    assert tx_seqs_read(store) == expected(0, 4)


def test_a_table_of_something_else_is_refused(store, tmp_path):
    uri, options = store.delta_location()
    write_deltalake(uri, pa.table({"id": [1, 2]}), storage_options=options)
    with pytest.raises(DeltaTableMismatchError, match="has no column tx_seq: it is not a changefeed's table"):
        DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)


def test_a_partitioned_or_retyped_table_is_refused(tmp_path):
    other = ARROW_SCHEMA.set(ARROW_SCHEMA.get_field_index("thread"), pa.field("thread", pa.int64(), nullable=False))
    DeltaTable.create(str(tmp_path / "a"), other)
    with pytest.raises(
        DeltaTableMismatchError,
        match="column thread of the Delta table is long not null, the changefeed writes integer not null",
    ):
        DeltaChangefeed(open_store(tmp_path / "a"), ARROW_SCHEMA, app_id=APP)
    DeltaTable.create(str(tmp_path / "b"), ARROW_SCHEMA, partition_by=["owner"])
    with pytest.raises(DeltaTableMismatchError, match="partitioned by owner"):
        DeltaChangefeed(open_store(tmp_path / "b"), ARROW_SCHEMA, app_id=APP)


def test_delta_stats_of_a_file_without_rows(tmp_path):
    from olr_buffer.sinks.parquet.delta import delta_stats
    from tests.sinks.parquet.delta.parts import write_local

    write_local(tmp_path / "empty.parquet", rows(0, -1))
    import pyarrow.parquet as pq

    stats = orjson.loads(delta_stats(pq.read_metadata(tmp_path / "empty.parquet")))
    assert stats["numRecords"] == 0 and stats["minValues"] == {} and stats["nullCount"]["tx_seq"] == 0
