"""One reading of what another client of the store says when a call failed
(``store.error_in_text``), for the Delta and the Iceberg table alike: the store did not
answer (retry), or refused (the operator must act). The texts are the clients' own, met
here against a port where nothing listens: delta-rs's object store, pyarrow's S3
filesystem (pyiceberg's FileIO), the HTTP client of a REST catalog."""

from __future__ import annotations

import pytest

from olr_buffer.store import StoreAccessError, StoreUnreachableError, error_in_text
from tests.s3_server import free_port

WHERE = "s3://b/cf"


def met(call) -> str:
    """The one-line text of the error ``call()`` raised."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - whatever the client raises: its text is the point
        return " ".join(str(exc).split())
    raise AssertionError("no error")


def delta_rs(port: int) -> None:
    from deltalake import DeltaTable

    DeltaTable(
        "s3://b/cf",
        storage_options={
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "a",
            "AWS_SECRET_ACCESS_KEY": "b",
            "AWS_REGION": "us-east-1",
            "max_retries": "0",
        },
    )


def pyarrow_s3(port: int) -> None:
    from pyarrow import fs

    fs.S3FileSystem(
        endpoint_override=f"127.0.0.1:{port}",
        scheme="http",
        access_key="a",
        secret_key="b",
        region="us-east-1",
        retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=1),
    ).get_file_info("b/cf/x")


def rest_catalog(port: int) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    RestCatalog("olr_buffer", uri=f"http://127.0.0.1:{port}")


@pytest.mark.parametrize("client", [delta_rs, pyarrow_s3, rest_catalog])
def test_a_client_that_met_no_answer_is_the_store_not_answering(client):
    text = met(lambda: client(free_port()))
    found = error_in_text(text, WHERE, "read the table")
    assert isinstance(found, StoreUnreachableError) and found.retryable, text
    assert str(found).startswith(f"{WHERE}: cannot read the table: the store did not answer (")
    assert "\n" not in str(found)


def test_who_did_not_answer_is_named():
    found = error_in_text("Connection refused (os error 111)", WHERE, "load the table", who="the catalog")
    assert isinstance(found, StoreUnreachableError)
    assert "the catalog did not answer (connection refused)" in str(found)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>", "bucket"),
        ("<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>", "access denied (AccessDenied)"),
        ("<Code>SignatureDoesNotMatch</Code>", "access denied (SignatureDoesNotMatch)"),
        ("Client error with status 403 Forbidden: no body", "access denied (403)"),
    ],
)
def test_a_store_that_refused_is_not_retried(text, says):
    found = error_in_text(text, WHERE, "read the table")
    assert isinstance(found, StoreAccessError) and not found.retryable
    assert says in str(found)


def test_a_text_that_says_neither_is_left_to_the_caller():
    assert error_in_text("Schema error: invalid data type for column tx_seq", WHERE, "read the table") is None
