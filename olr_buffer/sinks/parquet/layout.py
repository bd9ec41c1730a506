"""The changefeed directory: one owner for its names, lock, listing, footers and metadata.

::

    CF/                                    mode 0700 (``--changefeed-mode``)
      part-<first>-<last>.parquet          published files (mode 0600: the mode without x bits)
      _olr_buffer/                         mode 0700, its files 0600
        LOCK                               flock'ed by the process that writes the changefeed
        manifest.json                      next_tx_seq, last file and commit, owner (queue id)
        published.jsonl                    one line per published file (audit log)
        compaction.json, compactions.jsonl in-place compaction: intent, log
        schemas/<version>.json             schema documents: a table's columns and types
        tmp/                               mode 0700: files being written, renamed into CF/
          part-<first>-<pid>.parquet.tmp               by the writer
          compact-part-<first>-<last>.parquet.tmp      by compaction
          schema-<version>.json.tmp                    a schema document

Temporary files live in ``_olr_buffer/tmp/`` (the same filesystem, so the rename that
publishes one stays atomic): no glob of the top level (``CF/*.parquet``, which DuckDB and
Polars expand to dot-files too) and no ``CF/**/*.parquet`` ever matches one. Versions
before this layout wrote them to the top level as ``.tmp-part-<first>-<pid>.parquet`` and
``.tmp-compact-part-<first>-<last>.parquet``: those are deleted on open as well.

The writer (:class:`~olr_buffer.sinks.parquet.ChangefeedWriter`) and compaction both use
this module, so they agree on every name and on what a valid changefeed is: a gapless
chain of ``part-`` files from tx_seq 0, each footer agreeing with its name and rows.

**One writer at a time.** ``_olr_buffer/LOCK`` is ``flock``'ed by the writer and by an
in-place compaction (and a compaction's output directory), like ``QUEUE_DIR/LOCK``: a
second process is refused with ``CF: changefeed is in use by another process (pid N)``.
The kernel drops the lock when its owner dies. Readers (Spark, ``status``) take no lock.
Inside one process the lock is shared (a compaction may run beside an idle writer of the
same process); two writers of one process are refused.

**Schema documents.** A row's ``schema_version`` names a document in
``_olr_buffer/schemas/`` (docs/formats.md): written whole (temporary file, fsync, rename,
fsync the directory) before the file whose rows name it becomes visible, and never
changed: its name is a hash of its content. Each file's footer lists the tables whose
version changed in it (``olr_buffer.schemas``), so the versions current at the end of the
changefeed are recovered from the footers alone.

**Owner.** The manifest and every file's footer record the identity of the queue that
writes the changefeed (a random id the pipeline stores in the queue's metadata) and,
where the source has one, the source's identity. The pipeline checks it on open.

**Where.** A changefeed is a local directory or an S3 prefix (``s3://BUCKET/PREFIX``):
:class:`Location` is the one seam between the changefeed's algorithms and the
:class:`~olr_buffer.store.Store` that holds it. Listing and checking the chain, reading
footers and pages, reading and writing the manifest, publishing a complete temporary
file under its final name: written once, here, against the store. What only a local
directory has stays local and explicit: the ``flock``, modes (``--changefeed-mode``),
the removal of a refused run's unused directory, the audit log ``published.jsonl``, and
the writing of ``_olr_buffer/`` documents (0600 whatever the directory's mode, their
temporary file beside them). On S3 the temporary files are local (a staging directory
the writer is given), a file is published by one conditional PUT, the manifest is
replaced as one object, one writer is enforced by a lease (:class:`~olr_buffer.store.Lease`)
and there is no audit log (the files, and a Delta table's log, are the record). A writer
that holds the lease publishes through :mod:`.fencing` (staged, decided by a conditional
write of the manifest, then made visible).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import orjson
import pyarrow.parquet as pq

from ... import fsutil, pidlock
from ...changes import CommitKey
from ...errors import OlrBufferError
from ...store import ObjectExistsError, ObjectInfo, ObjectNotFoundError, Store, StoreError, is_remote, open_store
from ..base import ChangefeedOwner
from .errors import ChangefeedCorruptError, ChangefeedError, ChangefeedLockedError
from .schema import META_FIRST, META_LAST, META_LAST_COMMIT, META_ROWS, parse_part_name, part_name

log = logging.getLogger(__name__)

META_DIR = "_olr_buffer"
MANIFEST = "manifest.json"
PUBLISHED_LOG = "published.jsonl"
LOCK = "LOCK"
MANIFEST_FORMAT = 1

# Footer keys of the owner (besides the range keys in schema.py).
META_QUEUE_ID = b"olr_buffer.queue_id"
META_SOURCE_ID = b"olr_buffer.source_id"
# [[owner, table, version], ...]: the tables whose schema version changed in the file, and
# their version at its end
META_SCHEMAS = b"olr_buffer.schemas"
SCHEMAS_DIR = "schemas"  # under META_DIR
_VERSION = re.compile(r"[0-9a-f]{16}")

DEFAULT_MODE = 0o700  # the changefeed directory; its files get the mode without x bits
TABLE_FORMATS = ("parquet", "delta", "iceberg")  # --table-format; recorded in the manifest
META_MODE = 0o700  # _olr_buffer/ is never shared: Spark does not read it
META_FILE_MODE = 0o600  # its files (manifest, logs, intent), whatever the umask

TMP_DIR = "tmp"  # under META_DIR
WRITER_TMP_PREFIX = "part-"
COMPACT_TMP_PREFIX = "compact-"
# Only these temporary names are olr-buffer's own: anything else is left alone.
_OWN_TMP = re.compile(
    r"part-[0-9]{20}-[0-9]+(?:-[0-9a-f]{8})?\.parquet\.tmp|compact-part-[0-9]{20}-[0-9]{20}\.parquet\.tmp"
    r"|schema-[0-9a-f]{16}\.json\.tmp"
)
# ... and these, at the top level, an earlier version's (before TMP_DIR)
_OLD_TMP = re.compile(r"\.tmp-part-[0-9]{20}-[0-9]+\.parquet|\.tmp-compact-part-[0-9]{20}-[0-9]{20}\.parquet")


@dataclass(frozen=True, slots=True)
class PublishedFile:
    name: str
    first: int
    last: int
    rows: int
    last_commit: CommitKey
    owner: ChangefeedOwner | None = None  # None: written before owners were recorded
    # (owner, table, version) of each table whose schema version changed in the file
    schemas: tuple[tuple[str, str, str], ...] = ()


# -- names --------------------------------------------------------------------------------


def is_own_temporary(name: str) -> bool:
    """Whether ``name`` (in ``_olr_buffer/tmp/``) is a temporary file that olr-buffer writes."""
    return _OWN_TMP.fullmatch(name) is not None


def writer_tmp_name(first: int, pid: int) -> str:
    """The writer's temporary file, relative to the changefeed directory."""
    return os.path.join(META_DIR, TMP_DIR, writer_tmp_basename(first, pid))


def writer_tmp_basename(first: int, pid: int, token: str | None = None) -> str:
    """The writer's temporary file's name in its temporary directory (``token``: 8 hex
    digits of a leased writer, whose directory another host's writer may share)."""
    return f"{WRITER_TMP_PREFIX}{first:020d}-{pid}{'-' + token if token else ''}.parquet.tmp"


def compact_tmp_name(first: int, last: int) -> str:
    """Compaction's temporary file, relative to the changefeed directory."""
    return os.path.join(META_DIR, TMP_DIR, compact_tmp_basename(first, last))


def compact_tmp_basename(first: int, last: int) -> str:
    return f"{COMPACT_TMP_PREFIX}{part_name(first, last)}.tmp"


def local_tmp_dir(path: str) -> str:
    """Where a local changefeed's temporary files are written (the same filesystem)."""
    return os.path.join(path, META_DIR, TMP_DIR)


def file_mode(dir_mode: int) -> int:
    """The mode of the changefeed's files for a directory mode: without the x bits."""
    return dir_mode & 0o666


# -- errors -------------------------------------------------------------------------------


def os_failure(exc: OSError, path: str, doing: str) -> ChangefeedError:
    """One line for an OS error on the changefeed: ``PATH: cannot DOING: reason``, and
    what to do."""
    if exc.errno == errno.ENOSPC:
        return ChangefeedError(
            f"{path}: cannot {doing}: no space left on device",
            hint="free disk space, then run the same command again",
            path=path,
        )
    reason = (exc.strerror or str(exc)).splitlines()[0]
    if exc.errno in (errno.EROFS, errno.EPERM, errno.EACCES):
        hint = "make the changefeed directory writable by this user (read-only mount, permissions, immutable attribute)"
    else:
        hint = "check the changefeed directory"
    return ChangefeedError(f"{path}: cannot {doing}: {reason}", hint=hint, path=path)


# -- where the changefeed is: the storage seam ---------------------------------------------


class Location:
    """A changefeed's place: a local directory or ``s3://BUCKET/PREFIX``, and the store
    that holds it. Its methods are the few operations the changefeed's algorithms need,
    each with the changefeed's own one-line errors: on a local directory the same
    messages as ever (``PATH: cannot DOING: reason``, :func:`os_failure`); on object
    storage the store's own typed errors (so that an unreachable store stays retryable).

    ``mode``, ``durable``: a local directory's mode (files without the x bits) and
    whether writes are fsynced."""

    def __init__(self, target: str | os.PathLike[str], *, mode: int = DEFAULT_MODE, durable: bool = True) -> None:
        self.uri = os.fspath(target)
        self.remote = is_remote(self.uri)
        self.mode = mode
        self.durable = durable
        if self.remote:
            self.store: Store = open_store(self.uri)
            self.uri = self.store.uri
            self.path: str | None = None
        else:
            self.path = self.uri
            # temporary files of the store's own writes go where the changefeed's go
            self.store = open_store(self.uri, mode=mode, durable=durable, staging=f"{META_DIR}/{TMP_DIR}")

    def __repr__(self) -> str:
        return f"Location({self.uri!r})"

    def where(self, name: str = "") -> str:
        """A name's place for messages: the path as given, or ``s3://bucket/prefix/name``."""
        if self.path is not None:
            return os.path.join(self.path, name) if name else self.path
        return self.store.location(name)

    def failure(self, exc: StoreError, name: str, doing: str) -> OlrBufferError:
        """The changefeed's error for a store's: on a local directory, ``PATH: cannot
        DOING: reason`` as :func:`os_failure` words it; on object storage the store's own
        (one line, naming the object, typed by what the caller can do)."""
        code = exc.facts.get("errno")
        if self.path is not None and isinstance(code, int):
            return os_failure(OSError(code, os.strerror(code)), self.where(name), doing)
        return exc

    # -- reading ------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether there is a changefeed (a directory; on object storage, any object or
        folder under the prefix)."""
        if self.path is not None:
            return os.path.isdir(self.path)
        try:
            return bool(self.store.list("", folders=True))
        except StoreError as exc:
            raise self.failure(exc, "", "list the changefeed") from None

    def list_top(self) -> list[ObjectInfo]:
        """The objects and folders (their names ending with ``/``) at the top level;
        :class:`ChangefeedError` if there is no changefeed."""
        if self.path is not None and not os.path.isdir(self.path):
            if os.path.lexists(self.path):
                raise os_failure(
                    NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)), self.path, "list the changefeed"
                )
            raise ChangefeedError(f"{self.path}: no such changefeed directory", path=self.path)
        try:
            found = self.store.list("", folders=True)
        except StoreError as exc:
            raise self.failure(exc, "", "list the changefeed") from None
        if not found and self.remote:
            raise ChangefeedError(
                f"{self.uri}: no such changefeed (nothing under the prefix)",
                hint="check the URI; a changefeed is made by replay or run",
                uri=self.uri,
            )
        return found

    def list(self, prefix: str) -> list[ObjectInfo]:
        try:
            return self.store.list(prefix)
        except StoreError as exc:
            raise self.failure(exc, prefix, "list the changefeed") from None

    def open_input(self, name: str, doing: str = "read a changefeed file"):
        """A random-access Arrow file over the object ``name`` (a Parquet reader fetches
        only what it reads: the footer, the pages asked for)."""
        try:
            return self.store.open_input(name)
        except StoreError as exc:
            raise self.failure(exc, name, doing) from None

    def read_meta(self, name: str, doing: str) -> bytes | None:
        """The document ``_olr_buffer/NAME``, or None if there is none."""
        rel = f"{META_DIR}/{name}"
        try:
            return self.store.read(rel)
        except ObjectNotFoundError:
            return None
        except StoreError as exc:
            raise self.failure(exc, rel, doing) from None

    # -- writing ------------------------------------------------------------------------

    def replace_meta(self, name: str, data: bytes) -> None:
        """``_olr_buffer/NAME`` holds ``data`` or its old content, never a mix. Locally
        with its own temporary file beside it and mode ``META_FILE_MODE`` (the store's
        writes take the directory's file mode); on object storage one PUT."""
        rel = f"{META_DIR}/{name}"
        if self.path is not None:
            atomic_write(os.path.join(self.path, META_DIR, name), data, self.durable)
            return
        try:
            self.store.replace(rel, data)
        except StoreError as exc:
            raise self.failure(exc, rel, "write it") from None

    def delete_meta(self, name: str) -> None:
        self.delete(f"{META_DIR}/{name}")

    def publish(self, tmp_path: str, name: str, token: str | None = None) -> int:
        """The complete local temporary file ``tmp_path`` becomes the object ``name``,
        whole, never over an existing one (a local link, fsynced; one conditional PUT);
        then the temporary file is removed. Returns the object's size. ``token``: the
        same for each try of one publication (see :meth:`Store.create_from_file`)."""
        try:
            size = self.store.create_from_file(name, tmp_path, token=token).size
        except ObjectExistsError:
            where = self.where(name)
            raise ChangefeedError(
                f"{where}: already exists: a published file is never overwritten",
                hint="another writer published it: run one writer per changefeed",
                path=where,
            ) from None
        except StoreError as exc:
            raise self.failure(exc, name, "publish a changefeed file") from None
        try:
            os.unlink(tmp_path)  # locally, a second name of the published file
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("%s: cannot delete the temporary file: %s", tmp_path, exc.strerror)
        return size

    def delete(self, name: str) -> None:
        try:
            self.store.delete(name)
        except StoreError as exc:
            raise self.failure(exc, name, "delete it") from None

    def size(self, name: str) -> int | None:
        """The object's size, None if there is none."""
        try:
            return self.store.stat(name).size
        except ObjectNotFoundError:
            return None
        except StoreError as exc:
            raise self.failure(exc, name, "read a changefeed file") from None


def as_location(target: str | os.PathLike[str] | Location, **options) -> Location:
    """``target`` as a :class:`Location` (a path or a URI is opened)."""
    return target if isinstance(target, Location) else Location(target, **options)


# -- directory and lock -------------------------------------------------------------------


def prepare_dir(path: str, mode: int) -> bool:
    """Create the changefeed directory (with ``mode``) and ``_olr_buffer/`` if missing;
    True if the directory was not there. The owner of the lock gives an existing directory
    its mode (:func:`apply_mode`)."""
    meta = os.path.join(path, META_DIR)
    created = False
    try:
        if not os.path.isdir(path):
            created = not os.path.lexists(path)
            os.makedirs(path, mode=mode, exist_ok=True)
        if not os.path.isdir(meta):
            os.mkdir(meta, META_MODE)
    except FileExistsError:
        pass  # another process created it meanwhile
    except OSError as exc:
        raise os_failure(exc, exc.filename or path, "create the changefeed directory") from None
    prepare_tmp_dir(path)
    return created


def prepare_tmp_dir(path: str) -> None:
    """Create ``_olr_buffer/tmp/`` if missing (a changefeed of an earlier version lacks it)."""
    tmp = os.path.join(path, META_DIR, TMP_DIR)
    if os.path.isdir(tmp):
        return
    try:
        os.mkdir(tmp, META_MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise os_failure(exc, tmp, "create the changefeed's temporary directory") from None


def remove_unused(path: str, lock: ChangefeedLock) -> bool:
    """Remove the changefeed directory ``path``, made by this run and holding no published
    file, and release ``lock`` (its writer's, held by nobody else in this process): a run
    refused before it published anything leaves nothing behind. True if removed.

    Only olr-buffer's metadata is removed, under the lock, the lock file last: a process
    that opens the changefeed meanwhile is refused (it is in use), or finds none and makes
    a new one, or stops on a directory gone under it. Anything else in it: it stays."""
    meta = os.path.join(path, META_DIR)
    with _HELD_GUARD:
        entry = _HELD.get(lock._key)
        sole = entry is not None and entry[1] == 1
    try:
        if not sole or set(os.listdir(path)) != {META_DIR}:
            return False
        for name in os.listdir(meta):
            if name != LOCK:
                full = os.path.join(meta, name)
                if os.path.isdir(full) and not os.path.islink(full):
                    os.rmdir(full)  # not if anything is in it
                else:
                    os.unlink(full)
        os.unlink(os.path.join(meta, LOCK))
    except OSError:
        return False
    finally:
        lock.release()
    try:
        os.rmdir(meta)
        os.rmdir(path)
    except OSError:
        return False  # another process made a changefeed there meanwhile
    log.debug("%s: removed the changefeed directory this run made: nothing was published", path)
    return True


def apply_mode(path: str, mode: int) -> None:
    """Give the directory ``mode`` if it has another one (a directory of another owner
    keeps its mode: that owner chose it)."""
    try:
        current = os.stat(path).st_mode & 0o777
        if current != mode:
            os.chmod(path, mode)
            if current & ~mode:
                log.info("%s: mode %04o tightened to %04o (--changefeed-mode to share it)", path, current, mode)
    except PermissionError:
        log.warning("%s: cannot set mode %04o (not the owner); leaving it as it is", path, mode)
    except OSError as exc:
        raise os_failure(exc, path, "set the changefeed's mode") from None


_HELD: dict[str, list] = {}  # lock file's real path -> [fd, holders, a writer holds it]
_HELD_GUARD = threading.Lock()


class ChangefeedLock:
    """``CF/_olr_buffer/LOCK``, ``flock``'ed for the life of this object (see the module
    doc); ``writer=True`` also refuses a second writer of the same process."""

    def __init__(self, path: str, *, writer: bool) -> None:
        self.path = path
        self.writer = writer
        lock_path = os.path.join(path, META_DIR, LOCK)
        try:
            self._key = os.path.realpath(lock_path)
        except OSError:
            self._key = os.path.abspath(lock_path)
        self._held = False
        with _HELD_GUARD:
            entry = _HELD.get(self._key)
            if entry is not None:
                if writer and entry[2]:
                    raise ChangefeedLockedError(
                        f"{path}: changefeed is already open by a writer in this process", path=path
                    )
                entry[1] += 1
                entry[2] = entry[2] or writer
                self._held = True
                return
            try:
                fd = pidlock.acquire(lock_path)
            except pidlock.LockHeldError as held:
                raise ChangefeedLockedError(
                    f"{path}: changefeed is in use by another process (pid {held.pid})",
                    hint="one process writes a changefeed: stop the other one first, or give each queue "
                    "its own changefeed",
                    path=path,
                    pid=held.pid,
                ) from None
            except OSError as exc:
                raise os_failure(exc, lock_path, "lock the changefeed") from None
            _HELD[self._key] = [fd, 1, writer]
            self._held = True

    def release(self) -> None:
        with _HELD_GUARD:
            if not self._held:
                return
            self._held = False
            entry = _HELD[self._key]
            entry[1] -= 1
            if self.writer:
                entry[2] = False
            if entry[1] == 0:
                del _HELD[self._key]
                os.close(entry[0])  # closing drops the flock

    def __del__(self) -> None:
        self.release()


# -- footers and the chain of files -------------------------------------------------------


def footer_metadata(f: PublishedFile) -> dict[bytes, str]:
    """The key-value metadata of ``f``'s footer."""
    meta = {
        META_FIRST: str(f.first),
        META_LAST: str(f.last),
        META_LAST_COMMIT: ",".join(str(x) for x in f.last_commit),
        META_ROWS: str(f.rows),
    }
    if f.owner is not None:
        meta[META_QUEUE_ID] = f.owner.queue_id
        if f.owner.source_id is not None:
            meta[META_SOURCE_ID] = f.owner.source_id
    if f.schemas:
        meta[META_SCHEMAS] = orjson.dumps([list(x) for x in f.schemas]).decode()
    return meta


def read_footer(cf: str | Location, name: str) -> PublishedFile:
    """A published file's range, last commit and owner from its name and footer, checked
    against each other and the row count (one ranged read on object storage)."""
    loc = as_location(cf)
    full = loc.where(name)
    first, last = parse_part_name(name)  # type: ignore[misc]
    try:
        with loc.open_input(name, "read a changefeed file's footer") as f:
            meta = pq.read_metadata(f)
    except (ChangefeedError, StoreError):
        raise
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno is not None:
            raise os_failure(exc, full, "read a changefeed file's footer") from None
        raise ChangefeedCorruptError(f"{full}: unreadable Parquet footer: {_first_line(exc)}", path=full) from None
    except Exception as exc:
        raise ChangefeedCorruptError(f"{full}: unreadable Parquet footer: {_first_line(exc)}", path=full) from None
    kv = meta.metadata or {}
    try:
        f_first, f_last = int(kv[META_FIRST]), int(kv[META_LAST])
        scn, thread, seq, line = (int(x) for x in kv[META_LAST_COMMIT].split(b","))
        rows = int(kv[META_ROWS])
    except (KeyError, ValueError):
        raise ChangefeedCorruptError(
            f"{full}: not a file of this changefeed: its footer lacks olr-buffer's range metadata",
            hint="a file was replaced or copied in by hand: remove it or put the original back",
            path=full,
        ) from None
    if (f_first, f_last) != (first, last) or rows != meta.num_rows:
        raise ChangefeedCorruptError(
            f"{full}: footer says tx_seq {f_first}..{f_last} and {rows} rows; "
            f"the name says {first}..{last}, the file holds {meta.num_rows} rows",
            path=full,
        )
    owner = None
    if META_QUEUE_ID in kv:
        source = kv.get(META_SOURCE_ID)
        owner = ChangefeedOwner(kv[META_QUEUE_ID].decode(), source.decode() if source is not None else None)
    schemas: tuple[tuple[str, str, str], ...] = ()
    if META_SCHEMAS in kv:
        try:
            schemas = tuple(
                (o, t, v)
                for o, t, v in orjson.loads(kv[META_SCHEMAS])
                if isinstance(o, str) and isinstance(t, str) and _VERSION.fullmatch(v)
            )
        except (orjson.JSONDecodeError, TypeError, ValueError):
            raise ChangefeedCorruptError(
                f"{full}: its footer's {META_SCHEMAS.decode()} is not readable", path=full
            ) from None
    return PublishedFile(name, first, last, rows, CommitKey(scn, thread, seq, line), owner, schemas)


def current_schemas(files: list[PublishedFile]) -> dict[tuple[str, str], str]:
    """``(owner, table) -> version`` at the end of ``files`` (in order): each file's footer
    lists the tables whose version changed in it."""
    current: dict[tuple[str, str], str] = {}
    for f in files:
        for owner, table, version in f.schemas:
            current[(owner, table)] = version
    return current


def verify_pages(cf: str | Location, name: str) -> None:
    """Read every page of the published file ``name`` with its checksum verified (files
    written before pages had checksums: decoded only). A damaged file raises
    :class:`ChangefeedCorruptError` naming it. Memory: one column chunk at a time."""
    loc = as_location(cf)
    full = loc.where(name)
    try:
        with loc.open_input(name) as f:
            pf = pq.ParquetFile(f, page_checksum_verification=True)
            columns = pf.schema_arrow.names
            for i in range(pf.num_row_groups):
                for column in columns:
                    pf.read_row_group(i, columns=[column])
    except (ChangefeedError, StoreError):
        raise
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno is not None:
            raise os_failure(exc, full, "read a changefeed file") from None
        raise damaged(full, exc) from None
    except Exception as exc:
        raise damaged(full, exc) from None


def damaged(full: str, exc: BaseException) -> ChangefeedCorruptError:
    """The error for a published file whose pages do not read back as written."""
    return ChangefeedCorruptError(
        f"{full}: damaged data: {_first_line(exc)}",
        hint="the file changed after it was published (disk fault, edited or replaced by hand): put an "
        "intact copy back from a backup; readers may have read wrong rows from it",
        path=full,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def list_files(
    cf: str | Location, *, hint: str | None = None, start: int = 0, names: set[str] | None = None
) -> list[PublishedFile]:
    """The ``part-`` files of the changefeed ``cf`` (a path, a URI or a
    :class:`Location`), every footer read and checked: a gapless chain from tx_seq 0
    (from ``start``, the first tx_seq of a file, when given: a reader that follows the
    changefeed lists only the files it has not seen). Visible names that are not part
    files are refused (Spark would read them as rows of the changefeed). ``names``: only
    these part files make the chain (a Delta table's: files that a compaction replaced
    stay beside it, out of the table)."""
    loc = as_location(cf)
    parts = []
    for obj in loc.list_top():
        name = obj.name.rstrip("/")
        rng = parse_part_name(name) if obj.name == name else None
        if rng is not None:
            if rng[0] >= start and (names is None or name in names):
                parts.append((rng[0], rng[1], name))
        elif names is not None and name in names:
            raise _foreign_table_file(loc, name)
        elif not name.startswith(("_", ".")):
            full = loc.where(name)
            raise ChangefeedCorruptError(
                f"{full}: not a file of this changefeed (Spark would read it with the changefeed's files)",
                hint="move it out of the changefeed"
                + (" directory" if loc.path is not None else "'s prefix")
                + (" (it is not in the Delta table)" if names is not None else ""),
                path=full,
            )
    foreign = sorted(n for n in names or () if parse_part_name(n) is None)
    if foreign:
        raise _foreign_table_file(loc, foreign[0])
    parts.sort()
    files: list[PublishedFile] = []
    expected = start
    for first, last, name in parts:
        if first != expected or last < first:
            raise ChangefeedCorruptError(
                f"{loc.where(name)}: changefeed has a gap or overlap: expected a file starting at tx_seq {expected}",
                hint=hint or "files were removed or edited by hand",
                path=loc.where(name),
            )
        files.append(read_footer(loc, name))
        expected = last + 1
    if names is not None:
        found = {f.name for f in files}
        missing = sorted(n for n in names if n not in found and (parse_part_name(n) or (-1, -1))[0] >= start)
        if missing:
            full = loc.where(missing[0])
            raise ChangefeedCorruptError(
                f"{full}: a file of the Delta table is missing",
                hint="put it back (from a backup): the table's readers need it, and the queue cannot publish it again",
                path=full,
            )
    return files


def _foreign_table_file(loc: Location, name: str) -> ChangefeedCorruptError:
    """The error for a file that the changefeed's Delta table holds and olr-buffer did not write."""
    full = loc.where(name)
    return ChangefeedCorruptError(
        f"{full}: the changefeed's Delta table holds a file olr-buffer did not write: another writer committed to "
        "the table (an append, OPTIMIZE, Z-order, DELETE ...)",
        hint="restore the table to the version before that commit (its history: deltalake's DeltaTable(URI)"
        ".history()), then delete the files it added; moving this file out would break the table "
        '(docs/failure-scenarios.md, "Another writer on a Delta changefeed")',
        path=full,
    )


def remove_own_temporaries(path: str, *, compaction_only: bool = False) -> list[str]:
    """Delete olr-buffer's temporary files of the changefeed at ``path`` (only
    compaction's with ``compaction_only``): those in ``_olr_buffer/tmp/``, and those an
    earlier version left at the top level. Returns their paths relative to ``path``."""
    tmp = os.path.join(META_DIR, TMP_DIR)
    found = [os.path.join(tmp, n) for n in _own_temporaries(os.path.join(path, tmp))]
    found += [n for n in os.listdir(path) if n.startswith(".tmp-") and _OLD_TMP.fullmatch(n)]
    return _delete_temporaries(path, found, compaction_only)


def remove_staged(tmp_dir: str, *, compaction_only: bool = False) -> list[str]:
    """Delete olr-buffer's temporary files in ``tmp_dir``, the local staging directory of
    a changefeed on object storage (only compaction's with ``compaction_only``). Returns
    their paths."""
    removed = _delete_temporaries(tmp_dir, _own_temporaries(tmp_dir), compaction_only)
    return [os.path.join(tmp_dir, n) for n in removed]


def _own_temporaries(folder: str) -> list[str]:
    """The names of olr-buffer's temporary files in ``folder`` (none if it is missing)."""
    try:
        return [n for n in os.listdir(folder) if is_own_temporary(n)]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise os_failure(exc, folder, "list the changefeed's temporary files") from None


def _delete_temporaries(root: str, names: list[str], compaction_only: bool) -> list[str]:
    """Delete each of ``names`` (relative to ``root``; only compaction's with
    ``compaction_only``); returns those deleted."""
    removed = []
    for rel in names:
        if compaction_only and not os.path.basename(rel).startswith((COMPACT_TMP_PREFIX, ".tmp-compact-")):
            continue
        full = os.path.join(root, rel)
        try:
            os.unlink(full)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise os_failure(exc, full, "delete an unpublished temporary file") from None
        removed.append(rel)
    return removed


def set_file_modes(path: str, files: list[PublishedFile], mode: int) -> None:
    """Give published files ``mode`` where they have another one (metadata only: their
    content never changes)."""
    for f in files:
        full = os.path.join(path, f.name)
        try:
            if os.stat(full).st_mode & 0o777 != mode:
                os.chmod(full, mode)
        except PermissionError:
            log.warning("%s: cannot set mode %04o (not the owner)", full, mode)
        except OSError as exc:
            raise os_failure(exc, full, "set a changefeed file's mode") from None


def create_file(path: str, mode: int) -> None:
    """An empty file with exactly ``mode`` (whatever the umask), to be written by Parquet."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


# -- manifest and audit log ---------------------------------------------------------------


def read_manifest(cf: str | Location) -> dict | None:
    """``_olr_buffer/manifest.json``, or None if missing or unreadable (it is an index:
    the files are the truth, and it is rebuilt from them)."""
    loc = as_location(cf)
    data = loc.read_meta(MANIFEST, "read the manifest")
    if data is None:
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        log.warning("%s: unreadable, rebuilding it from the published files", loc.where(f"{META_DIR}/{MANIFEST}"))
        return None
    return doc if isinstance(doc, dict) else None


def manifest_owner(doc: dict | None) -> ChangefeedOwner | None:
    if not doc or not isinstance(doc.get("queue_id"), str):
        return None
    source = doc.get("source_id")
    return ChangefeedOwner(doc["queue_id"], source if isinstance(source, str) else None)


def write_manifest(
    cf: str | Location,
    files: int,
    last: PublishedFile | None,
    owner: ChangefeedOwner | None,
    durable: bool,
    *,
    table_format: str | None = None,
    iceberg: dict[str, str] | None = None,
    run_from: Mapping[int, int] | None = None,
) -> None:
    """Rewrite ``_olr_buffer/manifest.json`` atomically for a changefeed of ``files``
    files ending with ``last``, written by ``owner`` (``table_format``: ``parquet``,
    ``delta`` or ``iceberg``, recorded when known; ``iceberg``: the catalog and table
    names given to an Iceberg changefeed)."""
    loc = as_location(cf, durable=durable)
    doc = manifest_document(files, last, owner, table_format=table_format, iceberg=iceberg, run_from=run_from)
    loc.replace_meta(MANIFEST, orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def manifest_document(
    files: int,
    last: PublishedFile | None,
    owner: ChangefeedOwner | None,
    *,
    table_format: str | None = None,
    iceberg: dict[str, str] | None = None,
    run_from: Mapping[int, int] | None = None,
) -> dict:
    """The manifest of a changefeed of ``files`` files ending with ``last``, written by
    ``owner`` (see :func:`write_manifest`); ``run_from``: per redo thread, the log
    sequence a new queue reads it from (docs/formats.md)."""
    doc: dict[str, object] = {
        "format": MANIFEST_FORMAT,
        "next_tx_seq": last.last + 1 if last else 0,
        "files": files,
        "last_file": last.name if last else None,
        "last_commit": list(last.last_commit) if last else None,
        "last_c_scn": last.last_commit.scn if last else None,
        "queue_id": owner.queue_id if owner else None,
        "source_id": owner.source_id if owner else None,
        "updated": time.time(),
    }
    if table_format is not None:
        doc["table_format"] = table_format
    if iceberg:
        doc["iceberg"] = iceberg
    if run_from:
        doc["run_from"] = {str(t): s for t, s in sorted(run_from.items())}
    return doc


def manifest_run_from(doc: dict | None) -> dict[int, int] | None:
    """The ``run_from`` a manifest records (per redo thread, a log sequence), None if it
    records none or one that does not read as such."""
    value = doc.get("run_from") if doc else None
    if not isinstance(value, dict) or not value:
        return None
    out = {}
    for t, s in value.items():
        if not (isinstance(t, str) and t.isdigit() and isinstance(s, int) and not isinstance(s, bool) and s >= 0):
            return None
        out[int(t)] = s
    return out


def manifest_table_format(doc: dict | None) -> str | None:
    """The table format a manifest records (``parquet``, ``delta``, ``iceberg``), None if none."""
    value = doc.get("table_format") if doc else None
    return value if value in TABLE_FORMATS else None


def log_published(path: str, f: PublishedFile, durable: bool) -> None:
    append_line(
        os.path.join(path, META_DIR, PUBLISHED_LOG),
        {"file": f.name, "first": f.first, "last": f.last, "rows": f.rows, "last_commit": list(f.last_commit)},
        durable,
    )


def last_logged(path: str, n: int) -> set[str]:
    """The file names on the last ``n`` lines of the published log (files are logged in
    order, so a file published but missing from the manifest can only be there)."""
    if not n:
        return set()
    full = os.path.join(path, META_DIR, PUBLISHED_LOG)
    try:
        with open(full, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            want = min(size, 1024 * n + 4096)  # a line is ~150 bytes
            fh.seek(size - want)
            lines = fh.read(want).splitlines()
    except FileNotFoundError:
        return set()
    if want < size:
        lines = lines[1:]  # the first one is probably cut
    names = set()
    for line in lines[-n:]:
        try:
            names.add(orjson.loads(line)["file"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue  # a line cut by a crash while it was written
    return names


def append_line(path: str, doc: dict, durable: bool) -> None:
    """Append ``doc`` as a line to ``path`` (a file of ``_olr_buffer/``: given
    ``META_FILE_MODE``, also if an earlier version left it with another mode)."""
    try:
        with open(fsutil.open_with_mode(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, META_FILE_MODE), "ab") as fh:
            fh.write(orjson.dumps(doc) + b"\n")
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
    except OSError as exc:
        raise os_failure(exc, path, "write it") from None


# -- schema documents ---------------------------------------------------------------------


def schema_document_path(path: str, version: str) -> str:
    """Where the schema document of ``version`` lives in the changefeed at ``path``."""
    return os.path.join(path, META_DIR, SCHEMAS_DIR, f"{version}.json")


def schema_versions(cf: str | Location) -> set[str]:
    """The versions whose schema documents the changefeed holds."""
    loc = as_location(cf)
    prefix = f"{META_DIR}/{SCHEMAS_DIR}/"
    if loc.path is not None:
        folder = os.path.join(loc.path, META_DIR, SCHEMAS_DIR)
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return set()
        except OSError as exc:
            raise os_failure(exc, folder, "list the schema documents") from None
    else:
        names = [o.name[len(prefix) :] for o in loc.list(prefix)]
    return {n[:-5] for n in names if n.endswith(".json") and _VERSION.fullmatch(n[:-5])}


def write_schema_documents(cf: str | Location, documents: dict[str, str], durable: bool) -> None:
    """Write each ``version -> text`` document that the changefeed does not hold yet, whole,
    so that once this returns, a file whose rows name them may become visible: locally a
    temporary file in ``_olr_buffer/tmp/``, fsynced, renamed into ``_olr_buffer/schemas/``,
    the directory fsynced; on object storage one conditional PUT each. A document that is
    there already is left as it is: its name is its content's hash."""
    if not documents:
        return
    loc = as_location(cf)
    if loc.path is None:
        for version, text in documents.items():
            rel = f"{META_DIR}/{SCHEMAS_DIR}/{version}.json"
            try:
                loc.store.create(rel, text.encode())
            except ObjectExistsError:
                continue
            except StoreError as exc:
                raise loc.failure(exc, rel, "write a schema document") from None
        return
    path = loc.path
    meta = os.path.join(path, META_DIR)
    target = os.path.join(meta, SCHEMAS_DIR)
    try:
        if not os.path.isdir(target):
            os.mkdir(target, META_MODE)
            if durable:
                fsutil.fsync_dir(meta)
        for version, text in documents.items():
            final = os.path.join(target, f"{version}.json")
            if os.path.exists(final):
                continue
            tmp = os.path.join(meta, TMP_DIR, f"schema-{version}.json.tmp")
            fsutil.write_file(tmp, text.encode(), durable=durable, mode=META_FILE_MODE)
            os.rename(tmp, final)
        if durable:
            fsutil.fsync_dir(target)
    except OSError as exc:
        raise os_failure(exc, exc.filename or target, "write a schema document") from None


def read_schema_document(cf: str | Location, version: str) -> bytes:
    """The text of the schema document ``version`` of the changefeed."""
    loc = as_location(cf)
    data = loc.read_meta(f"{SCHEMAS_DIR}/{version}.json", "read a schema document")
    if data is None:
        full = loc.where(f"{META_DIR}/{SCHEMAS_DIR}/{version}.json")
        raise ChangefeedCorruptError(
            f"{full}: missing: rows of the changefeed name schema version {version}",
            hint="the changefeed's _olr_buffer/ directory was not copied with it: copy it too",
            path=full,
        )
    return data


def copy_schema_documents(src: str | Location, dst: str | Location, durable: bool) -> None:
    """Copy to ``dst`` the schema documents of ``src`` that it lacks (compaction into
    another changefeed: the rows it copies name them)."""
    missing = sorted(schema_versions(src) - schema_versions(dst))
    write_schema_documents(dst, {v: read_schema_document(src, v).decode() for v in missing}, durable)


# -- durable file operations --------------------------------------------------------------


def publish(cf: str | Location, tmp_path: str, name: str) -> int:
    """The complete, fsynced local temporary file ``tmp_path`` becomes ``name``, whole and
    never over an existing file (:meth:`Location.publish`); returns its size."""
    return as_location(cf).publish(tmp_path, name)


def atomic_write(path: str, data: bytes, durable: bool) -> None:
    """``path`` holds ``data`` or its old content, never a mix; an error names ``path``
    (the temporary file is removed). A file of ``_olr_buffer/``: mode ``META_FILE_MODE``."""
    try:
        fsutil.atomic_write(path, data, durable=durable, mode=META_FILE_MODE)
    except OSError as exc:
        raise os_failure(exc, path, "write it") from None
