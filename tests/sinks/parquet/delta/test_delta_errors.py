"""Faults of the store under a Delta changefeed: the store's own error types, one line,
no credential, whether met by the store's client or by delta-rs."""

from __future__ import annotations

import pytest

from olr_buffer.sinks.parquet.delta import DeltaChangefeed
from olr_buffer.sinks.parquet.schema import ARROW_SCHEMA
from olr_buffer.store import StoreAccessError, StoreUnreachableError, open_store
from tests.s3_server import SECRET_KEY, free_port, start_moto
from tests.sinks.parquet.delta.parts import publish


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and SECRET_KEY not in text and "\x1b" not in text
    return text


def test_a_missing_bucket(s3_env):
    with pytest.raises(StoreAccessError, match="bucket no-such-bucket-x does not exist") as caught:
        DeltaChangefeed(open_store("s3://no-such-bucket-x/cf"), ARROW_SCHEMA, app_id="q")
    one_line(caught.value)


def test_bad_credentials(s3_auth_server, monkeypatch):
    for name, value in s3_auth_server.env().items():
        monkeypatch.setenv(name, value)
    with pytest.raises(StoreAccessError, match="access denied") as caught:
        DeltaChangefeed(open_store("s3://some-bucket/cf"), ARROW_SCHEMA, app_id="q")
    one_line(caught.value)


def test_an_endpoint_that_does_not_answer(s3_env, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(StoreUnreachableError, match="connection refused") as caught:
        DeltaChangefeed(open_store("s3://b/cf"), ARROW_SCHEMA, app_id="q")
    assert caught.value.retryable
    one_line(caught.value)


@pytest.mark.slow
def test_a_store_lost_between_publish_and_commit(s3_env, monkeypatch, tmp_path):
    """Met by the store's client (the commit first checks the files are there) or by
    delta-rs (its object store retries, then fails): the store's retryable error either
    way, and nothing is committed."""
    server = start_moto(tmp_path)
    try:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        store = open_store(f"s3://{server.new_bucket()}/cf")
        dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id="q")
        part = publish(store, tmp_path, 0, 3)
    finally:
        server.stop()
    with pytest.raises(StoreUnreachableError, match=r"did not answer \(connection refused\)") as caught:
        dc.commit([part])
    one_line(caught.value)
    with pytest.raises(
        StoreUnreachableError,
        match=r"cannot read the Delta log: the store did not answer "
        r"\(connection refused\)",
    ) as caught:
        dc.last_committed()
    one_line(caught.value)
