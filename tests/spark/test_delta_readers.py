"""A Delta changefeed (``--table-format delta``) as its readers see it. Spark here cannot
load the Delta jars (no Maven access): it reads the plain Parquet files of a local Delta
changefeed, as ``read_changefeed`` does; deltalake, Polars (``read_delta``, through
deltalake) and DuckDB (over deltalake's Arrow dataset) read the Delta log. Before a
compaction they all read exactly the model; after one, Delta readers still do, and a
plain Parquet read of the directory would see the replaced files' rows twice, so the
Spark helpers read a Delta changefeed's files from its log."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.sinks.parquet import compact
from olr_buffer.spark import read_changefeed, spark_path
from tests.contract_model import ModelResult, assert_changefeed_equal, expected_changefeed


@pytest.fixture(scope="module")
def delta_changefeed(tmp_path_factory) -> tuple[Path, ModelResult]:
    root = tmp_path_factory.mktemp("delta")
    simulate(root / "in", threads=2, transactions=300, seed=12, records_per_file=300)
    replay(
        str(root / "in"),
        str(root / "q"),
        str(root / "cf"),
        PipelineOptions(file_rows=400, table_format="delta", changefeed_mode=0o750),
    )
    return root / "cf", expected_changefeed(root / "in")


def _sorted(rows: list[dict]) -> list[dict]:
    for r in rows:
        for col in ("before", "after"):
            r[col] = json.loads(r[col]) if r[col] is not None else None
    rows.sort(key=lambda r: (r["tx_seq"], r["op_seq"]))
    return rows


def _deltalake_rows(cf: Path) -> list[dict]:
    from deltalake import DeltaTable

    return _sorted(DeltaTable(str(cf)).to_pyarrow_table().to_pylist())


def test_deltalake_polars_and_duckdb_read_the_table(delta_changefeed):
    import duckdb
    import polars as pl
    from deltalake import DeltaTable

    cf, model = delta_changefeed
    assert_changefeed_equal(_deltalake_rows(cf), model.rows)
    assert_changefeed_equal(_sorted(pl.read_delta(str(cf)).to_arrow().to_pylist()), model.rows)
    dataset = DeltaTable(str(cf)).to_pyarrow_dataset()  # noqa: F841 - DuckDB finds it by its name
    ((count, last),) = duckdb.sql("SELECT count(*), max(tx_seq) FROM dataset").fetchall()
    assert (count, last) == (len(model.rows), model.committed - 1)


def test_the_delta_log_has_the_changefeed_modes(delta_changefeed):
    cf, _ = delta_changefeed
    log = cf / "_delta_log"
    assert os.stat(log).st_mode & 0o777 == 0o750
    assert {os.stat(p).st_mode & 0o777 for p in log.iterdir()} == {0o640}


@pytest.mark.spark
def test_spark_reads_a_delta_changefeed(spark, delta_changefeed):
    cf, model = delta_changefeed
    rows = [r.asDict() for r in read_changefeed(spark, str(cf)).drop("c_ts", "ts").collect()]
    assert_changefeed_equal(_sorted(rows), model.rows)
    assert spark.read.parquet(str(cf)).count() == len(model.rows)  # _delta_log/ is skipped


@pytest.fixture(scope="module")
def compacted_delta(delta_changefeed, tmp_path_factory) -> tuple[Path, ModelResult]:
    """The Delta changefeed compacted in place: the replaced files stay beside the table."""
    src, model = delta_changefeed
    cf = tmp_path_factory.mktemp("compacted") / "cf"
    shutil.copytree(src, cf)
    result = compact(cf, in_place=True, target_rows=1_000_000)  # no promise needed: one Delta commit
    assert result.files_after == 1 and result.files_merged > 1
    assert len(list(cf.glob("part-*.parquet"))) == result.files_merged + 1  # nothing deleted
    assert_changefeed_equal(_deltalake_rows(cf), model.rows)
    return cf, model


@pytest.mark.spark
def test_spark_helpers_read_a_compacted_delta_changefeed_through_its_log(spark, compacted_delta):
    from pyspark.sql import functions as F

    from olr_buffer.spark import snapshot, table_changes

    cf, model = compacted_delta
    rows = [r.asDict() for r in read_changefeed(spark, str(cf)).drop("c_ts", "ts").collect()]
    assert_changefeed_equal(_sorted(rows), model.rows)  # the merged file's rows, once
    owner, table = next((r["owner"], r["table"]) for r in model.rows if r["op"] in ("c", "u", "d"))
    expected = [r for r in model.rows if (r["owner"], r["table"]) == (owner, table)]
    changes = table_changes(spark, str(cf), owner, table, "ID BIGINT")
    assert changes.count() == len(expected)
    assert changes.agg(F.countDistinct("tx_seq", "op_seq")).first()[0] == len(expected)
    state = snapshot(spark, str(cf), owner, table)
    assert state.count() == state.select("rid").distinct().count()


@pytest.mark.spark
def test_a_stream_of_a_delta_changefeed_reads_each_row_once_across_a_compaction(spark, workload, tmp_path):
    from olr_buffer.sinks.parquet import ChangefeedWriter
    from olr_buffer.spark import stream_changefeed
    from tests.sinks.parquet.workload import publish, spark_rows, transactions

    live, out, checkpoint = tmp_path / "live", tmp_path / "out", tmp_path / "checkpoint"
    txs = transactions(workload.expected.rows)
    third = len(txs) // 3

    def write(part: list) -> None:
        writer = ChangefeedWriter(live, file_rows=150, durable=False, table_format="delta")
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
    # every file merged into one (dataChange = false): the stream has read most of its rows
    assert compact(live, in_place=True, target_rows=1_000_000).files_after == 1
    write(txs[2 * third :])
    stream_all()
    assert_changefeed_equal(spark_rows(spark.read.parquet(str(out))), workload.expected.rows)


def test_spark_names_s3_as_s3a():
    assert spark_path("s3://bucket/cf") == "s3a://bucket/cf"
    assert spark_path("s3a://bucket/cf") == "s3a://bucket/cf"
    assert spark_path("/data/cf") == "/data/cf"
