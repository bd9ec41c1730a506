"""`olr-buffer serve` of a changefeed on S3 (moto's server): it lists and reads the files
through the changefeed's storage seam, with its state in a local --state directory, and
follows files published while it serves; a Delta or Iceberg changefeed after a
compaction (whose replaced files stay beside the table) is served from its table's files."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from olr_buffer.sinks.parquet import compact
from tests.paths import CLI, ROOT
from tests.serve.changefeeds import Feed, random_transactions
from tests.serve.model import expected_messages
from tests.serve.serve_process import ServeProcess

pytestmark = pytest.mark.e2e


def test_serve_reads_a_changefeed_on_s3(s3_uri: str, tmp_path: Path) -> None:
    txs = random_transactions(random.Random(5), 50, share=0.3)
    local = Feed(tmp_path / "cf")
    remote = Feed(s3_uri)
    for part in (txs[:15], txs[15:30]):
        local.publish(part)
        remote.publish(part)
    serve = ServeProcess(s3_uri, "--state", str(tmp_path / "state"))
    try:
        with serve.receiver() as r:
            r.debezium_handshake()
            first = expected_messages(local.rows(), "ORCL")
            assert r.messages(len(first)) == first
            local.publish(txs[30:])  # published while served: followed
            remote.publish(txs[30:])
            everything = expected_messages(local.rows(), "ORCL")
            assert r.messages(len(everything) - len(first)) == everything[len(first) :]
        assert serve.stop() == 0, serve.log
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
        local.close()
        remote.close()
    status = subprocess.run(
        [*CLI, "status", "--changefeed", s3_uri, "--serve-state", str(tmp_path / "state"), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    assert f'"changefeed": "{s3_uri}"' in status.stdout and '"database": "ORCL"' in status.stdout


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_serve_reads_a_compacted_table_changefeed_from_its_table(tmp_path: Path, table_format: str) -> None:
    txs = random_transactions(random.Random(6), 40, share=0.2)
    feed = Feed(tmp_path / "cf")
    feed.writer.close()
    feed.writer = type(feed.writer)(tmp_path / "cf", file_rows=1 << 40, durable=False, table_format=table_format)
    for part in (txs[:10], txs[10:25], txs[25:]):
        feed.publish(part)
    everything = expected_messages(feed.rows(), "ORCL")
    feed.close()
    result = compact(tmp_path / "cf", in_place=True, target_rows=1_000_000)
    assert (result.files_before, result.files_after) == (3, 1)
    assert len(list((tmp_path / "cf").glob("part-*.parquet"))) == 4  # the replaced files stay
    serve = ServeProcess(tmp_path / "cf")
    try:
        with serve.receiver() as r:
            r.debezium_handshake()
            assert r.messages(len(everything)) == everything
        assert serve.stop() == 0, serve.log
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
