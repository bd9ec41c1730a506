"""The S3 store against moto's server: conditional writes on the wire, multipart uploads,
settings from the AWS variables, and one typed, one-line error per failure kind."""

from __future__ import annotations

import http.server
import os
import socket
import threading
from contextlib import contextmanager

import pytest

from olr_buffer.store import (
    ObjectExistsError,
    StoreAccessError,
    StoreUnreachableError,
    open_store,
)
from olr_buffer.store.s3 import S3Settings, S3Store, parse_s3_uri
from tests.s3_server import SECRET_KEY, free_port


def test_create_is_one_conditional_put(s3_uri, s3_env):
    """The refusal comes from the server (412 on If-None-Match), not from a look first."""
    store = S3Store(s3_uri)
    sent = []
    store.client.meta.events.register(
        "before-send.s3.PutObject",
        lambda request, **_: sent.append((request.method, request.headers.get("If-None-Match"))),
    )
    store.create("part-a.parquet", b"1")
    with pytest.raises(ObjectExistsError, match=r"s3://t-\w+/changefeed/part-a.parquet: already exists"):
        store.create("part-a.parquet", b"2")
    assert sent == [("PUT", b"*"), ("PUT", b"*")] or sent == [("PUT", "*"), ("PUT", "*")]
    store.check_conditional_writes()  # moto refuses an overwrite: the probe passes


def test_a_retried_create_whose_answer_was_lost_is_not_an_error(s3_uri, s3_env):
    """botocore retries a PUT whose answer it lost; the retry meets the object the first
    attempt made (412): its token tells that it is this call's own."""
    store = S3Store(s3_uri)
    real = store.client.put_object

    def applied_then_retried(**kwargs):
        real(**kwargs)  # applied, answer lost ...
        return real(**kwargs)  # ... the retry: 412

    store.client.put_object = applied_then_retried
    store.create("part-a.parquet", b"mine")
    assert store.read("part-a.parquet") == b"mine"
    store.client.put_object = real
    with pytest.raises(ObjectExistsError):  # another call's create is refused as ever
        store.create("part-a.parquet", b"mine")


def test_a_create_tried_again_by_its_caller_with_its_token_is_not_an_error(s3_uri, s3_env, tmp_path):
    """After an outage its caller does not know whether a create went in: tried again
    with the same token, the object there is recognised as its own; another create of
    the name is refused as ever."""
    store = S3Store(s3_uri)
    src = tmp_path / "part.parquet"
    src.write_bytes(b"complete file")
    store.create_from_file("part-a.parquet", src, token="write-1")
    assert store.create_from_file("part-a.parquet", src, token="write-1").size == len(b"complete file")
    with pytest.raises(ObjectExistsError):
        store.create_from_file("part-a.parquet", src, token="write-2")
    with pytest.raises(ObjectExistsError):
        store.create_from_file("part-a.parquet", src)


def test_a_large_file_goes_up_whole_as_a_conditional_multipart_upload(s3_uri, s3_env, tmp_path):
    store = S3Store(s3_uri, multipart_threshold=6 << 20, part_size=5 << 20)
    src = tmp_path / "big.parquet"
    data = os.urandom(11 << 20)
    src.write_bytes(data)
    store.create_from_file("part-big.parquet", src)
    assert store.read("part-big.parquet") == data
    other = tmp_path / "other"
    other.write_bytes(os.urandom(7 << 20))
    with pytest.raises(ObjectExistsError):
        store.create_from_file("part-big.parquet", other)
    assert store.read("part-big.parquet") == data
    uploads = s3_env.client().list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
    assert uploads == []  # the refused upload was aborted


def test_clear_staging_aborts_unfinished_uploads(s3_uri, s3_env):
    store = S3Store(s3_uri)
    client = s3_env.client()
    client.create_multipart_upload(Bucket=store.bucket, Key=store.key("part-half.parquet"))
    assert store.clear_staging() == ["part-half.parquet (unfinished upload)"]
    assert client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []) == []
    assert not store.exists("part-half.parquet")


def test_settings_come_from_the_aws_variables():
    env = {"AWS_DEFAULT_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "https://user:pw@minio.example:9000/"}
    s = S3Settings.from_env(env)
    assert s.region == "eu-west-1" and s.endpoint == "https://user:pw@minio.example:9000"
    assert s.endpoint_shown == "https://minio.example:9000"  # no password in messages
    s = S3Settings.from_env({**env, "AWS_REGION": "eu-west-3", "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9"})
    assert (s.region, s.endpoint) == ("eu-west-3", "http://127.0.0.1:9")
    assert S3Settings.from_env({}) == S3Settings(None, None)


def test_region_and_endpoint_reach_delta_and_arrow(s3_uri, s3_env, monkeypatch):
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    store = open_store(s3_uri)
    assert store.region == "eu-central-1"
    uri, options = store.delta_location()
    assert uri == s3_uri
    assert options == {
        "AWS_REGION": "eu-central-1",
        "AWS_ENDPOINT_URL": s3_env.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "conditional_put": "etag",
        "connect_timeout": "10000ms",
        "timeout": "30000ms",
        "retry_timeout": "60000ms",
    }
    fs, root = store.arrow_filesystem()
    assert fs.region == "eu-central-1" and root == s3_uri.removeprefix("s3://")


@pytest.mark.parametrize(
    "uri,expected",
    [
        ("s3://bucket", ("bucket", "")),
        ("s3://bucket/", ("bucket", "")),
        ("s3://bucket/a/b/", ("bucket", "a/b")),
        ("s3a://bucket/a", ("bucket", "a")),
    ],
)
def test_uri(uri, expected):
    assert parse_s3_uri(uri) == expected


# -- errors: one line, typed, no credential -----------------------------------------------


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and SECRET_KEY not in text
    return text


def test_a_missing_bucket_is_an_access_error_naming_it(s3_env):
    store = open_store("s3://no-such-bucket-here/cf")
    with pytest.raises(StoreAccessError) as caught:
        store.create("part-a.parquet", b"x")
    assert "bucket no-such-bucket-here does not exist" in one_line(caught.value)
    assert not caught.value.retryable


def test_bad_credentials_are_an_access_error(s3_auth_server, monkeypatch):
    for name, value in s3_auth_server.env().items():
        monkeypatch.setenv(name, value)
    store = open_store("s3://some-bucket/cf")
    for call in (lambda: store.list(), lambda: store.create("x", b"1"), lambda: store.read("x")):
        with pytest.raises(StoreAccessError) as caught:
            call()
        text = one_line(caught.value)
        assert "access denied" in text and "InvalidAccessKeyId" in text and "AWS_ACCESS_KEY_ID" in text


def test_no_credentials_at_all(s3_env, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(StoreAccessError, match="no usable AWS credentials") as caught:
        open_store("s3://b/cf").list()
    one_line(caught.value)


def test_a_refused_connection_is_unreachable_and_retryable(s3_env, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens
    store = S3Store("s3://b/cf", max_attempts=1)
    with pytest.raises(StoreUnreachableError) as caught:
        store.create("part-a.parquet", b"x")
    text = one_line(caught.value)
    assert "did not answer (connection refused)" in text and caught.value.retryable


@contextmanager
def silent_endpoint():
    """A server that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_timeout_is_unreachable(s3_env, monkeypatch):
    with silent_endpoint() as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        store = S3Store("s3://b/cf", max_attempts=1, read_timeout=0.5, connect_timeout=0.5)
        with pytest.raises(StoreUnreachableError, match="did not answer") as caught:
            store.read("part-a.parquet")
        one_line(caught.value)


def test_delta_rs_gives_up_on_a_store_that_does_not_answer(s3_env, monkeypatch):
    """The store's time-outs reach delta-rs: a Delta table on an endpoint that accepts
    and never answers fails (the caller retries), instead of blocking its caller for
    minutes (delta-rs's own: 30 s a request, retried for 3 minutes)."""
    from deltalake import DeltaTable

    with silent_endpoint() as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        store = S3Store("s3://b/cf", read_timeout=0.5, connect_timeout=0.5)
        uri, options = store.delta_location()
        failed: list[BaseException] = []

        def load() -> None:
            try:
                DeltaTable(uri, storage_options=options)
            except BaseException as exc:  # noqa: BLE001 - what it fails with is the point
                failed.append(exc)

        loading = threading.Thread(target=load, daemon=True)
        loading.start()
        loading.join(timeout=60)  # (about a second with the store's time-outs)
        assert not loading.is_alive(), "delta-rs still waits for the silent endpoint"
        assert failed and "timed out" in str(failed[0]), failed


@contextmanager
def failing_endpoint(status: int):
    class Handler(http.server.BaseHTTPRequestHandler):
        def _fail(self):
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            body = b"<Error><Code>ServiceUnavailable</Code><Message>try later</Message></Error>"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _fail

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_5xx_is_unreachable(s3_env, monkeypatch):
    with failing_endpoint(503) as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        store = S3Store("s3://b/cf", max_attempts=2)
        with pytest.raises(StoreUnreachableError, match="answered 503 ServiceUnavailable") as caught:
            store.create("part-a.parquet", b"x")
        one_line(caught.value)


def answer(status: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """A whole HTTP/1.1 answer, as a server writes it."""
    head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Content-Length": str(len(body))}.items())
    return f"HTTP/1.1 {status}\r\n{head}Connection: close\r\n\r\n".encode() + body


XML = {"Content-Type": "application/xml"}
#: S3's answers with the field every such answer has left out (a body cut short, a
#: server that is not S3): botocore parses them without a word, the field missing
MALFORMED = {
    "create multipart upload": (
        b"?uploads",
        answer(
            "200 OK",
            XML,
            b'<?xml version="1.0" encoding="UTF-8"?>\n<InitiateMultipartUploadResult '
            b'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>b</Bucket><Key>k</Key>'
            b"</InitiateMultipartUploadResult>",
        ),
        "UploadId",
    ),
    "create multipart upload, empty": (b"?uploads", answer("200 OK", XML), "UploadId"),
    "upload part": (b"partNumber=", answer("200 OK", {}), "ETag"),
    "get object": (b"GET /", answer("200 OK", {"Content-Type": "binary/octet-stream"}, b"data"), "ETag"),
    "list": (
        b"list-type=2",
        answer(
            "200 OK",
            XML,
            b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
            b'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><KeyCount>1</KeyCount>'
            b"<IsTruncated>false</IsTruncated><Contents><Size>4</Size></Contents></ListBucketResult>",
        ),
        "Key",
    ),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_an_answer_without_a_field_it_always_has_is_unreachable_and_retried(case, s3_uri, s3_env, tmp_path):
    """A 200 whose body lacks what the operation always answers (moto behind a real HTTP
    proxy that answers one request itself) is the store's retryable error, one line
    naming the object and the missing field, not a KeyError; retried (run), the call
    goes through."""
    from olr_buffer.store import OutageRetry
    from tests.s3_server import TcpProxy

    marker, reply, field = MALFORMED[case]
    faked: list[bytes] = []

    def fake(data: bytes) -> bytes | None:
        line = data.split(b"\r\n", 1)[0]
        if len(faked) < 1 and marker in line and (marker != b"GET /" or b"list-type" not in line):
            faked.append(line)
            return reply
        return None

    data = os.urandom(6 << 20)
    src = tmp_path / "part.parquet"
    src.write_bytes(data)
    open_store(s3_uri).create("part-b.parquet", b"data")  # (what the reads read)
    proxy = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]), fake_reply=fake)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
            store = S3Store(s3_uri, max_attempts=1, multipart_threshold=5 << 20, part_size=5 << 20)
            calls = {
                "create multipart upload": lambda: store.create_from_file("part-a.parquet", src),
                "create multipart upload, empty": lambda: store.stage_from_file("part-a.parquet", src, token="t"),
                "upload part": lambda: store.create_from_file("part-a.parquet", src),
                "get object": lambda: store.read("part-b.parquet"),
                "list": lambda: store.list("part-"),
            }
            with pytest.raises(StoreUnreachableError) as caught:
                calls[case]()
            text = one_line(caught.value)
            assert faked, "the proxy answered nothing itself"
            assert f"{s3_uri}/part-" in text and f"answered without {field} (a partial or malformed answer)" in text
            assert caught.value.retryable
            faked.clear()
            retry = OutageRetry(first=0.01)
            done = retry.call(calls[case], case)
            assert faked and (retry.outages, retry.retries, retry.outage_seconds()) == (1, 1, 0)
    finally:
        proxy.down()
    if case == "get object":
        assert done == b"data"
    elif case == "list":
        assert [o.name for o in done] == ["part-b.parquet"]
    else:
        if case.endswith("empty"):
            S3Store(s3_uri).complete_staged("part-a.parquet", done)
        assert open_store(s3_uri).read("part-a.parquet") == data
    uploads = s3_env.client().list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
    assert uploads == []  # (a failed part's upload aborted)
