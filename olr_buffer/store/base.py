"""The object store interface: the few operations a changefeed needs, with the same
meaning on a local directory and on S3.

Names are relative to the store's root, ``/``-separated (``part-….parquet``,
``_delta_log/00000000000000000001.json``). What a store guarantees:

- :meth:`Store.create` makes an object appear whole or not at all, and never over an
  existing one (local: a hidden temporary file linked into place; S3: one conditional PUT,
  ``If-None-Match: *``).
- :meth:`Store.replace` swaps a small document atomically (readers see the old or the new
  one); :meth:`Store.replace_if` only while the object is still the version read
  (``If-Match``), the compare-and-swap that a lease is built on.
- Reads never see a partial object.
- :meth:`Store.stage_from_file` puts a file in the store without showing it, and
  :meth:`Store.complete_staged`, called by any process holding the handle, makes it the
  object, whole, never over another one (S3: a multipart upload completed with
  ``If-None-Match: *``; local: a file of the staging folder linked into place): a
  publication that one writer decided and another one finishes.
"""

from __future__ import annotations

import builtins
import hashlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from .errors import ObjectNotFoundError, StoreError


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """An object: its name (relative to the store's root), its size in bytes, and its
    version tag where the store gives one cheaply (S3's ETag; a local document's MD5)."""

    name: str
    size: int
    etag: str | None = None


@dataclass(frozen=True, slots=True)
class Versioned:
    """An object's content and the tag of that version (for :meth:`Store.replace_if`)."""

    data: bytes
    etag: str


class Store(ABC):
    """A local directory or an S3 prefix holding named objects; see the module doc."""

    #: The store's location as the user gave it (never with a credential).
    uri: str

    @abstractmethod
    def location(self, name: str = "") -> str:
        """Where ``name`` is, for messages: a path or ``s3://bucket/prefix/name``."""

    # -- reading ------------------------------------------------------------------------

    @abstractmethod
    def list(self, prefix: str = "", *, recursive: bool = False, folders: bool = False) -> list[ObjectInfo]:
        """The objects whose names start with ``prefix``, sorted by name. Without
        ``recursive``, only those in the prefix's own folder (no further ``/`` in the rest
        of the name), as S3 lists with a delimiter; with ``folders`` as well, the folders
        there too, each as its name ending with ``/`` and size 0 (S3's common prefixes).
        A missing root lists nothing."""

    @abstractmethod
    def stat(self, name: str) -> ObjectInfo:
        """The object's size (and tag); :class:`ObjectNotFoundError` if missing."""

    def exists(self, name: str) -> bool:
        try:
            self.stat(name)
        except ObjectNotFoundError:
            return False
        return True

    @abstractmethod
    def read(self, name: str) -> bytes:
        """The whole object."""

    @abstractmethod
    def read_range(self, name: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end of the object)."""

    @abstractmethod
    def read_versioned(self, name: str) -> Versioned:
        """The whole object and the tag of the version read."""

    @abstractmethod
    def open_input(self, name: str) -> pa.NativeFile:
        """A random-access Arrow file over the object (``pyarrow.parquet`` reads a footer
        from it without fetching the whole file)."""

    # -- writing ------------------------------------------------------------------------

    @abstractmethod
    def create(self, name: str, data: bytes) -> ObjectInfo:
        """A new object holding ``data``: whole or not at all, and only if ``name`` does
        not exist (:class:`ObjectExistsError` otherwise, and nothing is written)."""

    @abstractmethod
    def create_from_file(self, name: str, path: str | os.PathLike[str], *, token: str | None = None) -> ObjectInfo:
        """A new object holding the local file ``path``, as :meth:`create` does.
        ``token``: the same for every try of one write (a caller that tries again after
        an unreachable store, not knowing whether its last try went in): the object a
        try made is then recognised as this write's own, not refused as existing."""

    @abstractmethod
    def stage_from_file(self, name: str, path: str | os.PathLike[str], *, token: str) -> dict:
        """Put the local file ``path`` in the store as a staged object for ``name``, not
        visible; returns its handle (JSON values) for :meth:`complete_staged`."""

    @abstractmethod
    def complete_staged(self, name: str, staged: dict) -> None:
        """The staged object ``staged`` becomes ``name``, whole, unless ``name`` exists:
        done (nothing to do) if it is that staged object already, whoever completed it;
        :class:`ObjectExistsError` if it is another object; :class:`ObjectNotFoundError`
        if the staged object is gone and ``name`` is not it."""

    @abstractmethod
    def discard_staged(self, name: str, staged: dict) -> None:
        """Drop a staged object that is not to be completed (best effort)."""

    @abstractmethod
    def replace(self, name: str, data: bytes) -> ObjectInfo:
        """Create or replace a small document atomically."""

    @abstractmethod
    def replace_if(self, name: str, data: bytes, etag: str) -> ObjectInfo:
        """Replace the document only if it is still the version tagged ``etag``:
        :class:`ObjectChangedError` if it has another version now,
        :class:`ObjectNotFoundError` if it is gone (nothing is written either way)."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove the object; a missing one is not an error."""

    # -- others' access -----------------------------------------------------------------

    @abstractmethod
    def delta_location(self) -> tuple[str, dict[str, str]]:
        """The table URI and the storage options that ``deltalake`` needs for this store
        (the options hold no credential: delta-rs reads those from the environment)."""

    @abstractmethod
    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        """A ``pyarrow.fs`` filesystem and the root's path in it, for ``pyarrow.dataset``."""

    def check_conditional_writes(self) -> None:
        """Raise :class:`StoreAccessError` unless :meth:`create` refuses an existing name
        (a local directory always does)."""
        return None

    def clear_staging(self) -> builtins.list[str]:
        """Remove what interrupted writes left behind (temporary files, unfinished
        uploads) and return their names. Only the store's single writer may call it."""
        return []


def content_tag(data: bytes) -> str:
    """The version tag of a local document: its MD5, quoted as S3 gives ETags."""
    return f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'


def check_name(name: str) -> str:
    """``name`` if it is a valid object name: relative, ``/``-separated, no empty, ``.`` or
    ``..`` part (so that no name leaves the store's root)."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name or "\0" in name:
        raise StoreError(f"invalid object name {name!r}", name=name)
    if any(part in ("", ".", "..") for part in name.split("/")):
        raise StoreError(f"invalid object name {name!r}", name=name)
    return name
