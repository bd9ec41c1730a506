"""Structured Streaming over a changefeed that grows while the query runs: every row
arrives once, across a stop and a restart from the checkpoint."""

from __future__ import annotations

import time

import pytest

from olr_buffer.sinks.parquet import ChangefeedWriter
from olr_buffer.spark import CHANGEFEED_SCHEMA, stream_changefeed, table_changes
from tests.contract_model import assert_changefeed_equal
from tests.sinks.parquet.workload import ORDERS_DDL, OWNER, TABLE, part_files, publish, spark_rows, transactions

pytestmark = pytest.mark.spark


def test_stream_reads_every_row_once_while_files_are_published(spark, workload, tmp_path):
    live, out, checkpoint = tmp_path / "live", tmp_path / "out", tmp_path / "checkpoint"
    txs = transactions(workload.expected.rows)
    half = len(txs) // 2
    # small files and small row groups: temporary files sit in the directory half-written
    writer = ChangefeedWriter(live, file_rows=150, row_group_rows=32, durable=False)
    for tx in txs[:10]:
        publish(writer, tx)
    writer.flush()

    def start(**trigger):
        return (
            stream_changefeed(spark, str(live), maxFilesPerTrigger=2)
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    def rows_read(q) -> int:
        return sum(p["numInputRows"] for p in q.recentProgress)

    query = start(processingTime="100 milliseconds")
    try:
        _wait_for(lambda: rows_read(query) > 0)  # the query runs and has read the first files
        files = writer.files_published
        for tx in txs[10 : half - 1]:
            publish(writer, tx)
            if writer.files_published > files:  # a file was just published: let the query see it
                files = writer.files_published
                time.sleep(0.15)
        read_meanwhile = rows_read(query)
        publish(writer, txs[half - 1])
        writer.flush()
        query.processAllAvailable()
        first_half_rows = sum(len(tx) for tx in txs[:half])
        assert rows_read(query) == first_half_rows
    finally:
        query.stop()
    # micro-batches ran while files were being published, not only after
    assert 0 < read_meanwhile < first_half_rows
    assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 3

    # published while no query runs: the restarted query takes them from its checkpoint on
    for tx in txs[half:]:
        publish(writer, tx)
    writer.close()
    assert len(part_files(live)) > 10
    query = start(availableNow=True)
    query.awaitTermination(120)
    assert query.exception() is None

    got = spark_rows(spark.read.parquet(str(out)))
    assert_changefeed_equal(got, workload.expected.rows)


def test_stream_options_pass_through_and_table_changes_streams(spark, workload):
    df = stream_changefeed(spark, str(workload.changefeed), maxFilesPerTrigger=1, latestFirst=False)
    assert df.isStreaming
    assert [(f.name, f.dataType) for f in df.schema.fields] == [(f.name, f.dataType) for f in CHANGEFEED_SCHEMA.fields]
    changes = table_changes(spark, df, OWNER, TABLE, ORDERS_DDL)
    assert changes.isStreaming
    assert changes.schema["after"].dataType.fieldNames()[0] == "ORDER_ID"


def _wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_stream_sees_every_row_once_while_olr_buffer_run_publishes(spark, tmp_path):
    """The service follows logs that a writer process is writing; a Structured Streaming
    query reads the changefeed meanwhile; every row arrives once."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from olr_buffer.simulate import simulate
    from tests.contract_model import expected_changefeed, load_changefeed

    root = Path(__file__).resolve().parents[2]
    simulate(tmp_path / "stage", threads=2, transactions=500, seed=21, records_per_file=800, compress_archived=False)
    live, cf, out, checkpoint = (tmp_path / d for d in ("live", "cf", "out", "checkpoint"))
    live.mkdir()
    service = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "run",
            str(live),
            "--queue",
            str(tmp_path / "q"),
            "--changefeed",
            str(cf),
            "--threads",
            "1,2",
            "--flush-interval",
            "0.3",
            "--poll-interval",
            "0.02",
            "--log-level",
            "warning",
        ],
        cwd=root,
    )
    _wait_for(lambda: (cf / "_olr_buffer").is_dir())
    query = (
        stream_changefeed(spark, str(cf), maxFilesPerTrigger=1)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        writer = subprocess.Popen(
            [sys.executable, "-m", "tests.live_writer", str(tmp_path / "stage"), str(live), "--rate", "800"], cwd=root
        )
        # Hold the writer (SIGSTOP) once two files are out, until the query has read two
        # batches: the stream reads while the input is still being written, however slow
        # the machine (a fixed rate and a look at the end depended on the machine's load).
        _wait_for(lambda: len(part_files(cf)) >= 2 or writer.poll() is not None, timeout=120)
        writer.send_signal(signal.SIGSTOP)
        try:
            writing = writer.poll() is None
            if writing:
                _wait_for(lambda: len([p for p in query.recentProgress if p["numInputRows"]]) >= 2, timeout=120)
            batches_while_writing = len([p for p in query.recentProgress if p["numInputRows"]])
        finally:
            writer.send_signal(signal.SIGCONT)
        assert writer.wait(timeout=180) == 0
        expected = expected_changefeed(live)
        _wait_for(lambda: len(load_changefeed(cf)) == len(expected.rows), timeout=60)
        query.processAllAvailable()
    finally:
        query.stop()
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=60) == 0
    assert writing, "the writer finished before the service published two files"
    assert batches_while_writing >= 2  # the stream read while the service was publishing
    assert_changefeed_equal(spark_rows(spark.read.parquet(str(out))), expected.rows)
