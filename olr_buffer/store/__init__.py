"""Where a changefeed's objects live: a local directory or an S3 prefix, behind one small
interface (:class:`Store`), chosen by URI scheme (:func:`open_store`).

The sinks write and read through it; the queue never does (it stays on local disk).
"""

from __future__ import annotations

import importlib
import os
from urllib.parse import unquote, urlsplit

from .base import ObjectInfo, Store, Versioned
from .errors import (
    CallGivenUpError,
    ObjectChangedError,
    ObjectExistsError,
    ObjectNotFoundError,
    StoreAccessError,
    StoreError,
    StoreUnreachableError,
    error_in_text,
    store_state,
)
from .lease import Lease, LeaseHeldError, LeaseLostError, LeaseTiming, WriterFencedError, fenced_error
from .retry import OutageRetry

__all__ = [
    "CallGivenUpError",
    "Lease",
    "LeaseHeldError",
    "LeaseLostError",
    "LeaseTiming",
    "ObjectChangedError",
    "ObjectExistsError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "OutageRetry",
    "Store",
    "StoreAccessError",
    "StoreError",
    "StoreUnreachableError",
    "Versioned",
    "WriterFencedError",
    "error_in_text",
    "fenced_error",
    "is_remote",
    "open_store",
    "store_state",
]

#: URI scheme -> the store class ("module:Class", imported when first used: boto3 loads
#: only for a remote store). A plain path has the scheme "".
SCHEMES = {
    "": "olr_buffer.store.local:LocalStore",
    "file": "olr_buffer.store.local:LocalStore",
    "s3": "olr_buffer.store.s3:S3Store",
    "s3a": "olr_buffer.store.s3:S3Store",
}


def _scheme(uri: str) -> str:
    scheme = urlsplit(uri).scheme if "://" in uri else ""
    return scheme.lower()


def is_remote(uri: str | os.PathLike[str]) -> bool:
    """Whether ``uri`` names an object store rather than a local directory."""
    return _scheme(os.fspath(uri)) not in ("", "file")


def open_store(uri: str | os.PathLike[str], **options) -> Store:
    """The store for ``uri``: a directory (``/path``, ``file:///path``) or
    ``s3://BUCKET/PREFIX``. ``options`` go to the store's class."""
    uri = os.fspath(uri)
    scheme = _scheme(uri)
    target = SCHEMES.get(scheme)
    if target is None:
        raise StoreError(
            f"{uri}: unsupported scheme {scheme}://",
            hint="give a directory or s3://BUCKET/PREFIX",
            uri=uri,
        )
    module, _, name = target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if scheme == "file":
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise StoreError(f"{uri}: a file:// URI names a local path (file:///path)", uri=uri)
        uri = unquote(parts.path)
    return cls(uri, **options)
