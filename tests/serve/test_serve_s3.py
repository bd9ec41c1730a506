"""`olr-buffer serve` of a changefeed on S3 (moto's server): it lists and reads the files
through the changefeed's storage seam, with its state in a local --state directory, and
follows files published while it serves; a Delta or Iceberg changefeed after a
compaction (whose replaced files stay beside the table) is served from its table's files."""

from __future__ import annotations

import random
import signal
import subprocess
import time
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


def test_a_second_signal_stops_serve_at_once_against_a_store_that_does_not_answer(
    s3_env, s3_uri: str, tmp_path: Path
) -> None:
    """The changefeed's store stops answering while serve follows it for a receiver (a
    black hole: each look waits 30 s a try, 10 tries): SIGTERM asks for a stop, which
    waits for the look under way; a second SIGTERM stops at once, with one line, exit 0."""
    from tests.s3_server import TcpProxy

    proxy = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]))
    txs = random_transactions(random.Random(7), 10, share=0.3)
    local = Feed(tmp_path / "cf")
    remote = Feed(s3_uri)
    local.publish(txs)
    remote.publish(txs)
    serve = ServeProcess(
        s3_uri, "--state", str(tmp_path / "state"), env={"AWS_ENDPOINT_URL": proxy.endpoint, "AWS_MAX_ATTEMPTS": "10"}
    )

    def wait_for(cond, what: str) -> None:
        deadline = time.monotonic() + 120
        while not cond():
            assert time.monotonic() < deadline and serve.proc.poll() is None, f"{what}:\n{serve.log}"
            time.sleep(0.05)

    try:
        with serve.receiver() as r:
            r.debezium_handshake()
            everything = expected_messages(local.rows(), "ORCL")
            assert r.messages(len(everything)) == everything  # (caught up: serve looks for more)
            proxy.hang()
            wait_for(lambda: proxy.swallowed > 0, "serve never looked at the changefeed again")
            serve.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: "received SIGTERM, stopping" in serve.log, "the first signal is not logged")
            assert serve.proc.poll() is None  # (its look waits for the store: 30 s a try, 10 tries)
            serve.proc.send_signal(signal.SIGTERM)
            try:
                code = serve.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise AssertionError("no stop within 60 s of the second signal:\n" + serve.log) from None
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
            serve.proc.wait()
        proxy.down()
        local.close()
        remote.close()
    serve.collector.join(timeout=10)  # (the whole log: the process is gone)
    assert code == 0, serve.log
    assert "received SIGTERM again, stopping at once" in serve.log, serve.log
    last = [line for line in serve.log.splitlines() if line.startswith("olr-buffer: ")]
    assert last == ["olr-buffer: stopped at once (SIGTERM again): what it waited for is left undone"]
    assert "Traceback" not in serve.log, serve.log


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
