"""A store under an S3 prefix (AWS S3 and S3-compatible stores), through boto3.

Why boto3 and not ``pyarrow.fs``: pyarrow's S3 filesystem cannot make a conditional
write (it has no ``If-None-Match`` or ``If-Match``), and it uploads through multipart
uploads, so boto3 writes and reads the objects, and ``pyarrow.fs`` serves only
``pyarrow.dataset`` readers (:meth:`S3Store.arrow_filesystem`).

- :meth:`S3Store.create` is one ``PutObject`` with ``If-None-Match: *`` (412: the name is
  taken, nothing written). A file above ``multipart_threshold`` (S3's limit for one PUT
  is 5 GiB) goes up as a multipart upload completed with ``If-None-Match: *``: S3 shows
  it only once complete, whole, so it is atomic too.
- Each conditional write carries a random token in its metadata. If the write was
  applied but its answer lost, botocore's retry gets a 412: the token says whether the
  object there is this call's own (success) or another writer's (the error). A caller
  that tries a create again itself (after an outage) gives the same ``token`` to each try.
- Settings come from the standard variables, as the AWS CLI, boto3 and delta-rs read
  them: credentials (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``, or any other source of boto3's chain), ``AWS_REGION`` (or
  ``AWS_DEFAULT_REGION``), ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (an
  S3-compatible store: path-style addressing), ``AWS_MAX_ATTEMPTS`` (botocore's retries).
"""

from __future__ import annotations

import builtins
import functools
import io
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import boto3
import botocore.exceptions as bex
import pyarrow as pa
import pyarrow.fs as pafs
from botocore.config import Config

from .base import ObjectInfo, Store, Versioned, check_name
from .errors import (
    ObjectChangedError,
    ObjectExistsError,
    ObjectNotFoundError,
    StoreAccessError,
    StoreError,
    StoreUnreachableError,
)
from .local import STAGING

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The metadata key (``x-amz-meta-…``) of a conditional write's token.
TOKEN_KEY = "olr-buffer-write"
SINGLE_PUT_LIMIT = 5 << 30  # S3 refuses a single PUT above 5 GiB
DEFAULT_PART_SIZE = 64 << 20
FOOTER_TAIL = 64 << 10  # bytes fetched from a file's end when it is opened: a Parquet footer
#: Every request has time-outs, so that a store that stops answering fails the call (and
#: ``run`` retries it) instead of blocking it for good: seconds to connect, and without a
#: byte of the answer (boto3 and pyarrow; each of botocore's ``AWS_MAX_ATTEMPTS`` tries);
#: delta-rs: for a whole request, and twice that for its retries of one.
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 30.0

_ACCESS_CODES = {
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "InvalidSecurity",
    "AccountProblem",
    "InvalidObjectState",
    "NotSignedUp",
    "UnauthorizedAccess",
    "Forbidden",
    "403",
}
_REGION_CODES = {"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException", "301"}
_RETRY_CODES = {
    "SlowDown",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "InternalError",
    "ServiceUnavailable",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequests",
    "OperationAborted",
    "ConditionalRequestConflict",
}
_CREDENTIALS_HINT = (
    "check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (or the profile or role in use), "
    "and that they may read and write the bucket"
)


@dataclass(frozen=True, slots=True)
class S3Settings:
    """Region and endpoint, from the standard AWS variables (credentials stay with boto3's
    own chain and are never held here)."""

    region: str | None = None
    endpoint: str | None = None  # e.g. http://127.0.0.1:9000, an S3-compatible store

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> S3Settings:
        region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None
        endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL") or None
        return cls(region, endpoint.rstrip("/") if endpoint else None)

    @property
    def endpoint_shown(self) -> str:
        """The endpoint without any user:password part, for messages."""
        if not self.endpoint:
            return "AWS S3"
        parts = urlsplit(self.endpoint)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, "", ""))


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://BUCKET/PREFIX`` -> (bucket, prefix without slashes at its ends)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("s3", "s3a") or not parts.netloc:
        raise StoreError(f"{uri}: not an S3 URI (s3://BUCKET/PREFIX)", uri=uri)
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise StoreError(f"{parts.scheme}://{parts.hostname}/…: an S3 URI has no user, query or fragment", uri=uri)
    prefix = parts.path.strip("/")
    if prefix:
        check_name(prefix)
    return parts.netloc, prefix


class S3Store(Store):
    """Objects under ``s3://BUCKET/PREFIX``; see the module doc."""

    def __init__(
        self,
        uri: str,
        *,
        settings: S3Settings | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        max_attempts: int | None = None,
        multipart_threshold: int = SINGLE_PUT_LIMIT,
        part_size: int = DEFAULT_PART_SIZE,
        staging: str = STAGING,
    ) -> None:
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.uri = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        self.settings = settings or S3Settings.from_env()
        self.multipart_threshold = min(multipart_threshold, SINGLE_PUT_LIMIT)
        self.part_size = part_size
        self.staging = check_name(staging)
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        retries: dict[str, Any] = {"mode": "standard"}
        if max_attempts is not None:
            retries["max_attempts"] = max_attempts
        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries=retries,
            max_pool_connections=16,
            s3={"addressing_style": "path"} if self.settings.endpoint else {},
        )
        session = boto3.session.Session(region_name=self.settings.region)
        self.region = self.settings.region or session.region_name or "us-east-1"
        self.client = session.client("s3", region_name=self.region, endpoint_url=self.settings.endpoint, config=config)

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r})"

    def location(self, name: str = "") -> str:
        return f"{self.uri}/{name}" if name else self.uri

    def key(self, name: str) -> str:
        check_name(name)
        return f"{self.prefix}/{name}" if self.prefix else name

    def _name(self, key: str) -> str:
        return key[len(self.prefix) + 1 :] if self.prefix else key

    # -- reading ------------------------------------------------------------------------

    def list(self, prefix: str = "", *, recursive: bool = False, folders: bool = False) -> list[ObjectInfo]:
        if prefix:
            folder = prefix.rpartition("/")[0]
            if folder:
                check_name(folder)
        key_prefix = (f"{self.prefix}/" if self.prefix else "") + prefix
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": key_prefix}
        if not recursive:
            args["Delimiter"] = "/"
        staging = self.staging + "/"
        out = []

        def run() -> None:
            for page in self.client.get_paginator("list_objects_v2").paginate(**args):
                for obj in page.get("Contents", ()):
                    name = self._name(_field(obj, "Key"))
                    if name and not name.startswith(staging):
                        out.append(ObjectInfo(name, _field(obj, "Size"), obj.get("ETag")))
                if folders and not recursive:
                    for common in page.get("CommonPrefixes", ()):
                        name = self._name(_field(common, "Prefix"))
                        if name and name != staging and not name.startswith(staging):
                            out.append(ObjectInfo(name, 0))

        self._call(run, "list", prefix)
        out.sort(key=lambda o: o.name)
        return out

    def stat(self, name: str) -> ObjectInfo:
        head = self._call(lambda: self.client.head_object(Bucket=self.bucket, Key=self.key(name)), "read", name)
        return ObjectInfo(name, self._answer_field(head, "ContentLength", "read", name), head.get("ETag"))

    def read(self, name: str) -> bytes:
        return self.read_versioned(name).data

    def read_range(self, name: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""

        def run() -> bytes:
            try:
                resp = self.client.get_object(
                    Bucket=self.bucket, Key=self.key(name), Range=f"bytes={start}-{start + length - 1}"
                )
            except bex.ClientError as exc:
                if _code(exc) == "InvalidRange":  # start at or past the end
                    return b""
                raise
            return resp["Body"].read()

        return self._call(run, "read", name)

    def read_versioned(self, name: str) -> Versioned:
        def run() -> Versioned:
            resp = self.client.get_object(Bucket=self.bucket, Key=self.key(name))
            return Versioned(resp["Body"].read(), _field(resp, "ETag"))

        return self._call(run, "read", name)

    def open_input(self, name: str) -> pa.NativeFile:
        return pa.PythonFile(io.BufferedReader(_S3File(self, name), buffer_size=1 << 20), mode="r")

    # -- writing ------------------------------------------------------------------------

    def create(self, name: str, data: bytes) -> ObjectInfo:
        token = uuid.uuid4().hex
        resp = self._conditional(
            lambda: self.client.put_object(
                Bucket=self.bucket, Key=self.key(name), Body=data, IfNoneMatch="*", Metadata={TOKEN_KEY: token}
            ),
            name,
            token,
            "create",
        )
        return ObjectInfo(name, len(data), resp.get("ETag") if resp else None)

    def create_from_file(self, name: str, path: str | os.PathLike[str], *, token: str | None = None) -> ObjectInfo:
        src = os.fspath(path)
        try:
            size = os.stat(src).st_size
        except OSError as exc:
            raise StoreError(f"{src}: cannot read: {exc.strerror}", path=src) from None
        token = token or uuid.uuid4().hex
        if size > self.multipart_threshold:
            resp = self._create_multipart(name, src, size, token)
        else:

            def put() -> dict:
                with open(src, "rb") as fh:
                    return self.client.put_object(
                        Bucket=self.bucket,
                        Key=self.key(name),
                        Body=fh,
                        ContentLength=size,
                        IfNoneMatch="*",
                        Metadata={TOKEN_KEY: token},
                    )

            resp = self._conditional(put, name, token, "create")
        return ObjectInfo(name, size, resp.get("ETag") if resp else None)

    def _create_multipart(self, name: str, src: str, size: int, token: str) -> dict | None:
        key = self.key(name)
        upload, parts = self._upload(name, src, token)
        try:
            return self._conditional(
                lambda: self.client.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
                ),
                name,
                token,
                "create",
            )
        except BaseException:
            self._abort(name, upload)
            raise

    def _upload(self, name: str, src: str, token: str) -> tuple[str, builtins.list[dict]]:
        """A multipart upload of the local file ``src`` to ``name``, every part sent, not
        completed (nothing is visible): its id and parts. Aborted if a part fails."""
        key = self.key(name)
        upload = self._call(
            lambda: _field(
                self.client.create_multipart_upload(Bucket=self.bucket, Key=key, Metadata={TOKEN_KEY: token}),
                "UploadId",
            ),
            "create",
            name,
        )
        try:
            parts = []
            with open(src, "rb") as fh:
                number = 1
                while True:
                    chunk = fh.read(self.part_size)
                    if not chunk and number > 1:
                        break
                    etag = self._call(functools.partial(self._upload_part, key, upload, number, chunk), "create", name)
                    parts.append({"ETag": etag, "PartNumber": number})
                    number += 1
                    if len(chunk) < self.part_size:
                        break
        except BaseException:
            self._abort(name, upload)
            raise
        return upload, parts

    def _upload_part(self, key: str, upload: str, number: int, chunk: bytes) -> str:
        """Send one part of a multipart upload: its ETag."""
        answer = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number, Body=chunk)
        return _field(answer, "ETag")

    def _abort(self, name: str, upload: str) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key(name), UploadId=upload)
        except Exception:  # noqa: BLE001 - best effort: clear_staging aborts what is left
            log.debug("could not abort the upload of %s", self.location(name))

    def stage_from_file(self, name: str, path: str | os.PathLike[str], *, token: str) -> dict:
        """A multipart upload of the file to ``name``, every part sent, not completed: S3
        shows nothing of it until :meth:`complete_staged`, which any client may call."""
        src = os.fspath(path)
        try:
            size = os.stat(src).st_size
        except OSError as exc:
            raise StoreError(f"{src}: cannot read: {exc.strerror}", path=src) from None
        upload, parts = self._upload(name, src, token)
        return {"upload": upload, "parts": parts, "token": token, "size": size}

    def complete_staged(self, name: str, staged: dict) -> None:
        """``CompleteMultipartUpload`` with ``If-None-Match: *``. An upload completed
        already (by this or another client) is recognised by its token in the object's
        metadata; one that is gone (aborted) and not the object: :class:`ObjectNotFoundError`."""
        key, token = self.key(name), str(staged["token"])
        try:
            self._conditional(
                lambda: self.client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=staged["upload"],
                    MultipartUpload={"Parts": staged["parts"]},
                    IfNoneMatch="*",
                ),
                name,
                token,
                "create",
            )
        except ObjectExistsError:
            raise
        except StoreError:
            # NoSuchUpload (AWS), an internal error (moto), or an outage: the object tells
            if self._written_by(name, token):
                return
            if not self._upload_listed(name, str(staged["upload"])):
                where = self.location(name)
                raise ObjectNotFoundError(
                    f"{where}: its staged upload is gone (aborted) and it was never completed", uri=where
                ) from None
            raise

    def _upload_listed(self, name: str, upload: str) -> bool:
        key = self.key(name)
        found = self._call(
            lambda: self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=key), "list uploads of", name
        )
        return any(u.get("UploadId") == upload and u.get("Key") == key for u in found.get("Uploads", ()))

    def discard_staged(self, name: str, staged: dict) -> None:
        self._abort(name, str(staged["upload"]))

    def replace(self, name: str, data: bytes) -> ObjectInfo:
        resp = self._call(
            lambda: self.client.put_object(Bucket=self.bucket, Key=self.key(name), Body=data), "write", name
        )
        return ObjectInfo(name, len(data), resp.get("ETag"))

    def replace_if(self, name: str, data: bytes, etag: str) -> ObjectInfo:
        token = uuid.uuid4().hex
        resp = self._conditional(
            lambda: self.client.put_object(
                Bucket=self.bucket, Key=self.key(name), Body=data, IfMatch=etag, Metadata={TOKEN_KEY: token}
            ),
            name,
            token,
            "replace",
        )
        return ObjectInfo(name, len(data), resp.get("ETag") if resp else None)

    def delete(self, name: str) -> None:
        self._call(lambda: self.client.delete_object(Bucket=self.bucket, Key=self.key(name)), "delete", name)

    def clear_staging(self) -> builtins.list[str]:
        """Abort the unfinished multipart uploads under the prefix and remove the staging
        objects (the probes of :meth:`check_conditional_writes`)."""
        removed = []
        key_prefix = f"{self.prefix}/" if self.prefix else ""

        def run() -> None:
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=key_prefix)
            for page in pages:
                for up in page.get("Uploads", ()):
                    key = _field(up, "Key")
                    self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=_field(up, "UploadId"))
                    removed.append(f"{self._name(key)} (unfinished upload)")

        self._call(run, "clear unfinished uploads under", "")
        for obj in self._staging_objects():
            self.delete(obj)
            removed.append(obj)
        return removed

    def _staging_objects(self) -> builtins.list[str]:
        key_prefix = self.key(self.staging) + "/"
        names: builtins.list[str] = []

        def run() -> None:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=key_prefix):
                names.extend(self._name(_field(o, "Key")) for o in page.get("Contents", ()))

        self._call(run, "list", self.staging)
        return names

    def check_conditional_writes(self) -> None:
        """Raise :class:`StoreAccessError` unless the store refuses a create over an
        existing object (some S3-compatible stores ignore ``If-None-Match``)."""
        probe = f"{self.staging}/probe-{uuid.uuid4().hex}"
        self.create(probe, b"probe")
        try:
            self.create(probe, b"probe again")
        except ObjectExistsError:
            return
        finally:
            self.delete(probe)
        raise StoreAccessError(
            f"{self.uri}: the store at {self.settings.endpoint_shown} ignores conditional writes (If-None-Match): "
            "it would let a file be overwritten",
            hint="use AWS S3 or an S3-compatible store that supports conditional writes",
            uri=self.uri,
        )

    # -- others' access -----------------------------------------------------------------

    def delta_location(self) -> tuple[str, dict[str, str]]:
        options = {
            "AWS_REGION": self.region,
            "conditional_put": "etag",
            "connect_timeout": _duration(self.connect_timeout),
            "timeout": _duration(self.read_timeout),
            "retry_timeout": _duration(2 * self.read_timeout),
        }
        if self.settings.endpoint:
            options["AWS_ENDPOINT_URL"] = self.settings.endpoint
            if self.settings.endpoint.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        return self.uri, options

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        kwargs: dict[str, Any] = {
            "region": self.region,
            "connect_timeout": self.connect_timeout,
            "request_timeout": self.read_timeout,
        }
        if self.settings.endpoint:
            parts = urlsplit(self.settings.endpoint)
            kwargs["scheme"] = parts.scheme or "https"
            kwargs["endpoint_override"] = parts.netloc.rpartition("@")[2] + parts.path
        return pafs.S3FileSystem(**kwargs), f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    # -- calls and their errors ---------------------------------------------------------

    def _conditional(self, call: Callable[[], dict], name: str, token: str, doing: str) -> dict | None:
        """A conditional write; on 412, the object there is this call's own (a retry of
        a write whose answer was lost: success, None) or another's (the error). A 409
        (another conditional write of the key in flight) is retried."""
        for attempt in range(6):
            try:
                return call()
            except bex.ClientError as exc:
                code = _code(exc)
                if code == "ConditionalRequestConflict" and attempt < 5:
                    time.sleep(0.05 * 2**attempt)
                    continue
                if code not in ("PreconditionFailed", "412"):
                    raise self._error(exc, doing, name) from None
                if self._written_by(name, token):
                    return None
                where = self.location(name)
                if doing == "create":
                    raise ObjectExistsError(
                        f"{where}: already exists (a published object is never overwritten)", uri=where
                    ) from None
                raise ObjectChangedError(f"{where}: changed since it was read", uri=where) from None
            except Exception as exc:  # noqa: BLE001 - mapped to the store's errors
                raise self._error(exc, doing, name) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _written_by(self, name: str, token: str) -> bool:
        try:
            head = self._call(lambda: self.client.head_object(Bucket=self.bucket, Key=self.key(name)), "read", name)
        except ObjectNotFoundError:
            return False
        return head.get("Metadata", {}).get(TOKEN_KEY) == token

    def _answer_field(self, answer: Mapping[str, Any], key: str, doing: str, name: str) -> Any:
        """``answer[key]``; an answer without it: :class:`StoreUnreachableError`."""
        try:
            return _field(answer, key)
        except _MalformedAnswer as exc:
            raise self._error(exc, doing, name) from None

    def _call(self, call: Callable[[], T], doing: str, name: str) -> T:
        try:
            return call()
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped to the store's errors
            raise self._error(exc, doing, name) from None

    def _error(self, exc: BaseException, doing: str, name: str) -> BaseException:
        """The store's error for a boto3 failure: one line, typed, without credentials."""
        if isinstance(exc, StoreError):
            return exc
        where = self.location(name)
        endpoint = self.settings.endpoint_shown
        facts = {"uri": where, "bucket": self.bucket}
        if isinstance(exc, _MalformedAnswer):  # (an answer cut short, or not S3's)
            return StoreUnreachableError(
                f"{where}: cannot {doing}: {endpoint} answered without {exc.field} (a partial or malformed answer)",
                hint="olr-buffer run retries; replay resumes when run again",
                **facts,
            )
        if isinstance(exc, bex.ClientError):
            code = _code(exc)
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
            message = str(exc.response.get("Error", {}).get("Message") or "").splitlines()
            reason = f"{code}" + (f" ({message[0][:200]})" if message and message[0] else "")
            if code in ("NoSuchKey", "404", "NotFound"):
                return ObjectNotFoundError(f"{where}: no such object", **facts)
            if code == "NoSuchBucket":
                return StoreAccessError(
                    f"{where}: cannot {doing}: bucket {self.bucket} does not exist at {endpoint}",
                    hint="create the bucket, or check the bucket name, AWS_ENDPOINT_URL and AWS_REGION",
                    **facts,
                )
            if code == "NoSuchUpload":
                return StoreUnreachableError(f"{where}: cannot {doing}: the upload was aborted", **facts)
            if code in _REGION_CODES:
                return StoreAccessError(
                    f"{where}: cannot {doing}: bucket {self.bucket} is not in region {self.region}: {reason}",
                    hint="set AWS_REGION to the bucket's region",
                    **facts,
                )
            if code in _ACCESS_CODES or status == 403:
                return StoreAccessError(
                    f"{where}: cannot {doing}: access denied by {endpoint}: {reason}", hint=_CREDENTIALS_HINT, **facts
                )
            if code == "InvalidBucketName":
                return StoreAccessError(f"{where}: cannot {doing}: {self.bucket!r} is not a valid bucket name", **facts)
            if code in ("NotImplemented", "501"):
                return StoreAccessError(
                    f"{where}: cannot {doing}: the store at {endpoint} does not implement it: {reason}",
                    hint="olr-buffer needs conditional writes (If-None-Match, If-Match): use AWS S3 or a store "
                    "that supports them",
                    **facts,
                )
            if code in _RETRY_CODES or status >= 500 or status == 429:
                return StoreUnreachableError(
                    f"{where}: cannot {doing}: {endpoint} answered {status} {reason}",
                    hint="olr-buffer run retries; replay resumes when run again",
                    **facts,
                )
            return StoreError(f"{where}: cannot {doing}: {status} {reason}", **facts)
        if isinstance(exc, (bex.NoCredentialsError, bex.PartialCredentialsError, bex.CredentialRetrievalError)):
            return StoreAccessError(
                f"{where}: cannot {doing}: no usable AWS credentials ({_first_line(exc)})",
                hint=_CREDENTIALS_HINT,
                **facts,
            )
        if isinstance(exc, (bex.ConnectionError, bex.HTTPClientError)):  # refused, timeouts, closed, proxy
            return StoreUnreachableError(
                f"{where}: cannot {doing}: {endpoint} did not answer ({_reason(exc)})",
                hint="check the network and AWS_ENDPOINT_URL; olr-buffer run retries, replay resumes when run again",
                **facts,
            )
        if isinstance(exc, OSError):  # the local file of create_from_file
            return StoreError(f"{where}: cannot {doing}: {_first_line(exc)}", **facts)
        return exc


class _S3File(io.RawIOBase):
    """A read-only, seekable view of an object: its last ``FOOTER_TAIL`` bytes are
    fetched when opened (the object's size comes with them, and a Parquet footer is
    read from them without another request); other ranges on demand."""

    def __init__(self, store: S3Store, name: str) -> None:
        super().__init__()
        self._store, self._name, self._pos = store, name, 0
        key = store.key(name)

        def tail() -> tuple[int, bytes]:
            try:
                resp = store.client.get_object(Bucket=store.bucket, Key=key, Range=f"bytes=-{FOOTER_TAIL}")
            except bex.ClientError as exc:
                if _code(exc) != "InvalidRange":
                    raise
                return 0, b""  # an empty object
            data = resp["Body"].read()
            total = resp.get("ContentRange", "").rpartition("/")[2]
            return (int(total) if total.isdigit() else len(data)), data

        self._size, self._tail = store._call(tail, "read", name)
        self._tail_start = self._size - len(self._tail)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self._size - self._pos)
        if n <= 0:
            return 0
        if self._pos >= self._tail_start:
            off = self._pos - self._tail_start
            data = self._tail[off : off + n]
        else:
            data = self._store.read_range(self._name, self._pos, n)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


class _MalformedAnswer(Exception):
    """An answer of the store without a field it always has: cut short, or not S3's."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


def _field(answer: Mapping[str, Any], key: str) -> Any:
    """``answer[key]`` of an answer of boto3's; :class:`_MalformedAnswer` without it (botocore
    leaves out what the answer lacks: a 200 whose body was cut is ``{}``)."""
    try:
        return answer[key]
    except (KeyError, TypeError):
        raise _MalformedAnswer(key) from None


def _duration(seconds: float) -> str:
    """Seconds as delta-rs reads a duration (``30000ms``)."""
    return f"{max(1, round(seconds * 1000))}ms"


def _code(exc: bex.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code") or "")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _reason(exc: BaseException) -> str:
    """What went wrong with a connection, short: refused, a timeout, a reset."""
    text = f"{exc} {getattr(exc, 'kwargs', {}).get('error', '')}"
    for needle, reason in (
        ("refused", "connection refused"),
        ("Read timeout", "read timed out"),
        ("Connect timeout", "connect timed out"),
        ("reset", "connection reset"),
        ("Name or service not known", "unknown host"),
        ("nodename nor servname", "unknown host"),
        ("Temporary failure in name resolution", "unknown host"),
    ):
        if needle in text:
            return reason
    if isinstance(exc, bex.EndpointConnectionError):
        return "cannot connect"
    return type(exc).__name__
