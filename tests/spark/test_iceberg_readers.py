"""An Iceberg changefeed (``--table-format iceberg``) as its readers see it: pyiceberg's
scans, Polars' ``scan_iceberg``, DuckDB over the Arrow pyiceberg returns. Spark here
cannot load the Iceberg runtime jar (no Maven access): the Spark helpers read the plain
Parquet files of the table's current snapshot, which they list with pyiceberg. Before a
compaction they all read exactly the model; after one, they still do, where a plain
Parquet read of the directory would see the replaced files' rows twice."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.sinks.parquet import compact
from olr_buffer.spark import read_changefeed
from tests.contract_model import ModelResult, assert_changefeed_equal, expected_changefeed


def build(root: Path) -> tuple[Path, ModelResult]:
    simulate(root / "in", threads=2, transactions=300, seed=12, records_per_file=300)
    replay(
        str(root / "in"),
        str(root / "q"),
        str(root / "cf"),
        PipelineOptions(file_rows=400, table_format="iceberg", changefeed_mode=0o750),
    )
    return root / "cf", expected_changefeed(root / "in")


@pytest.fixture(scope="module")
def iceberg_changefeed(tmp_path_factory) -> tuple[Path, ModelResult]:
    return build(tmp_path_factory.mktemp("iceberg"))


def load_table(cf: Path):
    """The table as a reader loads it: the SQL catalog in the changefeed's SQLite file
    (olr-buffer names the catalog ``olr_buffer``)."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("olr_buffer", uri=f"sqlite:///{cf}/_iceberg/catalog.db")
    return catalog.load_table("olr_buffer.changefeed")


def _sorted(rows: list[dict]) -> list[dict]:
    for r in rows:
        for col in ("before", "after"):
            r[col] = json.loads(r[col]) if r[col] is not None else None
    rows.sort(key=lambda r: (r["tx_seq"], r["op_seq"]))
    return rows


def test_pyiceberg_polars_and_duckdb_read_the_table(iceberg_changefeed, monkeypatch):
    import duckdb
    import polars as pl

    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # (polars_iceberg is not installed: said once)
    cf, model = iceberg_changefeed
    table = load_table(cf)
    assert_changefeed_equal(_sorted(table.scan().to_arrow().to_pylist()), model.rows)
    assert_changefeed_equal(_sorted(pl.scan_iceberg(table).collect().to_arrow().to_pylist()), model.rows)
    arrow = table.scan(selected_fields=("tx_seq", "op_seq")).to_arrow()  # noqa: F841 - DuckDB finds it by name
    ((count, last),) = duckdb.sql("SELECT count(*), max(tx_seq) FROM arrow").fetchall()
    assert (count, last) == (len(model.rows), model.committed - 1)
    # a filtered scan: the files' tx_seq statistics let pyiceberg skip the others
    tail = table.scan(row_filter=f"tx_seq >= {model.committed - 5}")
    assert len(list(tail.plan_files())) < len(list(table.scan().plan_files()))
    assert {r["tx_seq"] for r in tail.to_arrow().to_pylist()} == set(range(model.committed - 5, model.committed))


def test_the_iceberg_metadata_has_the_changefeed_modes(iceberg_changefeed):
    cf, _ = iceberg_changefeed
    metadata = cf / "_iceberg" / "metadata"
    assert os.stat(metadata).st_mode & 0o777 == 0o750
    assert {os.stat(p).st_mode & 0o777 for p in metadata.iterdir()} == {0o640}


@pytest.mark.spark
def test_spark_reads_an_iceberg_changefeed(spark, iceberg_changefeed):
    cf, model = iceberg_changefeed
    rows = [r.asDict() for r in read_changefeed(spark, str(cf)).drop("c_ts", "ts").collect()]
    assert_changefeed_equal(_sorted(rows), model.rows)
    assert spark.read.parquet(str(cf)).count() == len(model.rows)  # _iceberg/ is skipped


@pytest.fixture(scope="module")
def compacted_iceberg(tmp_path_factory) -> tuple[Path, ModelResult]:
    """An Iceberg changefeed compacted in place: the replaced files stay beside the table.
    (Its own: an Iceberg table's metadata names its files by their full path, so a copy
    of a changefeed is not a table of its own.)"""
    cf, model = build(tmp_path_factory.mktemp("compacted"))
    result = compact(cf, in_place=True, target_rows=1_000_000)  # no promise needed: one snapshot
    assert result.files_after == 1 and result.files_merged > 1
    assert len(list(cf.glob("part-*.parquet"))) == result.files_merged + 1  # nothing deleted
    assert_changefeed_equal(_sorted(load_table(cf).scan().to_arrow().to_pylist()), model.rows)
    return cf, model


@pytest.mark.spark
def test_spark_helpers_read_a_compacted_iceberg_changefeed_through_its_table(spark, compacted_iceberg):
    from pyspark.sql import functions as F

    from olr_buffer.spark import table_changes

    cf, model = compacted_iceberg
    rows = [r.asDict() for r in read_changefeed(spark, str(cf)).drop("c_ts", "ts").collect()]
    assert_changefeed_equal(_sorted(rows), model.rows)  # the merged file's rows, once
    owner, table = next((r["owner"], r["table"]) for r in model.rows if r["op"] in ("c", "u", "d"))
    expected = [r for r in model.rows if (r["owner"], r["table"]) == (owner, table)]
    changes = table_changes(spark, str(cf), owner, table, "ID BIGINT")
    assert changes.count() == len(expected)
    assert changes.agg(F.countDistinct("tx_seq", "op_seq")).first()[0] == len(expected)


@pytest.mark.spark
def test_a_stream_of_an_iceberg_changefeed_reads_each_row_once_across_a_compaction(spark, workload, tmp_path):
    from olr_buffer.sinks.parquet import ChangefeedWriter
    from olr_buffer.spark import stream_changefeed
    from tests.sinks.parquet.workload import publish, spark_rows, transactions

    live, out, checkpoint = tmp_path / "live", tmp_path / "out", tmp_path / "checkpoint"
    txs = transactions(workload.expected.rows)
    third = len(txs) // 3

    def write(part: list) -> None:
        writer = ChangefeedWriter(live, file_rows=150, durable=False, table_format="iceberg")
        for tx in part:
            publish(writer, tx)
        writer.close()

    def stream_all() -> None:
        query = (
            stream_changefeed(spark, str(live), maxFilesPerTrigger=2)
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    write(txs[:third])
    stream_all()
    write(txs[third : 2 * third])
    assert compact(live, in_place=True, target_rows=1_000_000).files_after == 1
    write(txs[2 * third :])
    stream_all()
    assert_changefeed_equal(spark_rows(spark.read.parquet(str(out))), workload.expected.rows)
