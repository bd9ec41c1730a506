"""A changefeed that `run` has not created yet: Spark's file source needs its directory, so
`stream_changefeed` says so in one line (start `run` first), or waits for it with
`wait_seconds`; a batch read says the same."""

from __future__ import annotations

import time
import types

import pytest

import olr_buffer.spark_sink.reading as spark_helpers
from olr_buffer.sinks.parquet import ChangefeedWriter
from olr_buffer.spark import ChangefeedNotFoundError, read_changefeed, stream_changefeed
from tests.sinks.parquet.workload import publish, transactions

pytestmark = pytest.mark.spark


def test_a_missing_changefeed_is_one_clear_line(spark, tmp_path):
    path = str(tmp_path / "cf")
    for read in (lambda: stream_changefeed(spark, path), lambda: read_changefeed(spark, path)):
        with pytest.raises(ChangefeedNotFoundError) as caught:
            read()
        text = str(caught.value)
        assert "\n" not in text and "PATH_NOT_FOUND" not in text and "Traceback" not in text
        assert text.startswith(
            f"{path}: no changefeed there (yet) (hint: start olr-buffer run (or replay) with "
            f"--changefeed {path} first: it creates the directory"
        )
    with pytest.raises(ChangefeedNotFoundError, match="or give wait_seconds=N to wait for it"):
        stream_changefeed(spark, path)
    t0 = time.monotonic()
    with pytest.raises(ChangefeedNotFoundError, match=r"no changefeed appeared there within 1\.5s"):
        stream_changefeed(spark, path, wait_seconds=1.5)
    assert time.monotonic() - t0 >= 1.4  # it did wait


def test_stream_waits_for_the_changefeed_to_appear(spark, workload, tmp_path, monkeypatch):
    live = tmp_path / "live"
    txs = transactions(workload.expected.rows)[:5]
    naps: list[float] = []

    def nap(seconds: float) -> None:
        """The helper's wait: the first one is when `run` starts and publishes."""
        if not naps:
            writer = ChangefeedWriter(live, file_rows=10, durable=False)
            for tx in txs:
                publish(writer, tx)
            writer.close()
        naps.append(seconds)

    monkeypatch.setattr(spark_helpers, "time", types.SimpleNamespace(monotonic=time.monotonic, sleep=nap))
    df = stream_changefeed(spark, str(live), wait_seconds=60, maxFilesPerTrigger=1)
    assert len(naps) == 1 and 0 < naps[0] <= 1.0  # refused once, waited, then read
    query = df.writeStream.format("memory").queryName("not_yet").trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None
    got = spark.sql("SELECT tx_seq, op_seq FROM not_yet ORDER BY tx_seq, op_seq").collect()
    assert [(r.tx_seq, r.op_seq) for r in got] == [(t, o) for t, tx in enumerate(txs) for o in range(len(tx))]
