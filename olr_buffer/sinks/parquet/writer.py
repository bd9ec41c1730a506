"""Writing the changefeed: whole transactions, atomic publication, recovery on open.

Publication of one file::

    1. rows go to ``_olr_buffer/tmp/part-<first>-<pid>.parquet.tmp`` (out of every
       reader's sight: Spark skips ``_`` names, and no ``*.parquet`` glob matches it)
    2. the footer gets the file's range, last commit key and owner; close
    3. the schema documents its rows introduce go to ``_olr_buffer/schemas/`` (each
       written whole and fsynced; the directory fsynced)
    4. fsync it; link it to ``part-<first>-<last>.parquet``; fsync the directory   <- visible, final
    5. record it in ``_olr_buffer/manifest.json`` (write temp, fsync, rename, fsync dir)

Schema versions. A row that names its version (a PostgreSQL row, a redo ``ddl`` record
with ``columns``) keeps it, and one that also carries the document makes that version
its table's current one; a row that names none takes its table's current version (null
if none). The current versions at the end of each file are recovered from the footers
(:func:`~.layout.current_schemas`).

On open, the writer takes the changefeed's lock, deletes its temporary files, reads every
published file's footer (a gapless chain from tx_seq 0) and every page of the newest file
(checksums verified: :func:`~.layout.verify_pages`), and adopts published files that
the manifest lacks: the files are the truth, the manifest an index. A manifest that
records more than the files hold means files were removed: refused. The directory's
layout, lock and metadata are :mod:`.layout`'s.

**On object storage** (``s3://BUCKET/PREFIX``) the same steps run against the store
(:class:`~.layout.Location`): the temporary file is written in a local staging
directory (``staging``; the pipeline gives one under the queue directory), step 3 is one
conditional PUT (``If-None-Match: *``) of the complete file, step 4 one PUT of the
manifest. Instead of the lock, a lease (:class:`~olr_buffer.store.Lease`,
``_olr_buffer/lease.json``) makes one writer per changefeed; it is checked before each
publish. A leased writer (on S3 always; a local directory with ``lease=True``) publishes
through :mod:`.fencing` instead: the file staged, the publication decided by a write of
the manifest conditional on its lease generation, then made visible, so that a writer
paused past its lease publishes nothing once another one took over. A store that cannot be reached fails the call with
:class:`~olr_buffer.store.StoreUnreachableError`, or, given ``retry``
(:class:`~olr_buffer.store.OutageRetry`: ``olr-buffer run``), is retried until it answers.

**A Delta changefeed** (``table_format="delta"``, :mod:`.delta_table`): after step 4, one
Delta commit adds the file with the queue's application transaction; on open, files
published but not committed before a kill are committed (:meth:`ChangefeedWriter.open`).
**An Iceberg changefeed** (``table_format="iceberg"``, :mod:`.iceberg_table`): the same,
one Iceberg snapshot a file, stamped with the queue id and its last tx_seq.
"""

from __future__ import annotations

import bisect
import errno
import itertools
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import itemgetter, sub
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...changes import CHANGEFEED_OP, Commit, CommitKey, RowFieldsError, rows_to_columns, schema_version
from ...errors import OlrBufferError
from ...faults import fault_point
from ...store import Lease, LeaseTiming, OutageRetry, StoreError, WriterFencedError, fenced_error
from ..base import ChangefeedOwner, SinkFigures, SinkOpening
from . import delta_table, iceberg_table, tables
from .errors import ChangefeedCorruptError, ChangefeedError, ChangefeedOwnerError
from .fencing import ManifestHead, fence_previous_writers
from .layout import (  # noqa: F401  (MANIFEST, META_DIR, PUBLISHED_LOG, read_footer: public names)
    DEFAULT_MODE,
    MANIFEST,
    META_DIR,
    PUBLISHED_LOG,
    ChangefeedLock,
    Location,
    PublishedFile,
    apply_mode,
    create_file,
    current_schemas,
    file_mode,
    footer_metadata,
    last_logged,
    list_files,
    local_tmp_dir,
    log_published,
    manifest_document,
    manifest_owner,
    manifest_run_from,
    os_failure,
    prepare_dir,
    read_footer,
    read_manifest,
    remove_own_temporaries,
    remove_staged,
    remove_unused,
    schema_versions,
    set_file_modes,
    verify_pages,
    write_manifest,
    write_schema_documents,
    writer_tmp_basename,
)
from .position import POSITION_KEY, ChangefeedPosition, load_position
from .schema import ARROW_SCHEMA, nanos_to_timestamp, parquet_writer, part_name

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .delta import DeltaChangefeed
    from .iceberg import IcebergChangefeed
    from .iceberg_settings import IcebergSettings

_ROW_NUMBERS: list[pa.Array] = [pa.array([], pa.int64())]


def _owners(owners: pa.Array) -> pa.Array:
    """The ``owner`` column: a row whose source named no owner has the empty string (a
    queue written before the OpenLogReplicator source said so itself held null there)."""
    return pc.fill_null(owners, "") if owners.null_count else owners


def _row_numbers(n: int) -> pa.Array:
    """0, 1, ... n-1 as an Arrow array (a slice of a cached one)."""
    if len(_ROW_NUMBERS[0]) < n:
        _ROW_NUMBERS[0] = pa.array(range(max(n, 1 << 16)), pa.int64())
    return _ROW_NUMBERS[0].slice(0, n)


# changefeed op by record code (codes index this array)
_OP_NAMES = pa.array([CHANGEFEED_OP.get(code) for code in range(max(CHANGEFEED_OP) + 1)], pa.string())

DEFAULT_FILE_ROWS = 1_000_000
DEFAULT_ROW_GROUP_ROWS = 65_536
DEFAULT_ROW_GROUP_BYTES = 16 << 20
_BYTES_STEP = 4096  # rows between two looks at the buffered bytes
_ROW_OVERHEAD = 1024  # bytes a row takes to build a row group besides its images (Python objects, Arrow copies)


_IMAGES = tuple(map(itemgetter, (9, 10, 11, 12)))  # rid, before, after, sql
# the fields of a transaction's entry in write_rows' txs: (xid, key, tm, thread, n)
_TX_XID, _TX_KEY, _TX_TM, _TX_THREAD, _TX_N = map(itemgetter, range(5))
_KEY_SCN = itemgetter(0)
_IMAGE_COLUMNS = ("rid", "before", "after", "sql")


class _Segments(NamedTuple):
    """The transaction segments of a row group's rows, a list a field (see
    :meth:`ChangefeedWriter._append_rows`)."""

    seqs: list[int]
    ns: list[int]
    scns: list[int]
    tms: list[int | None]
    xids: list[str]
    op0s: list[int]
    threads: list

    def add(self, txs: Sequence[tuple], ends: list[int], k0: int, k1: int, a: int, b: int, seq0: int) -> None:
        """Rows ``a`` to ``b`` (not included) of ``txs``'s rows, one transaction's after
        another's (``ends``: where each ends), which are those of ``txs[k0:k1]``, the
        transaction ``txs[i]`` taking tx_seq ``seq0 + i``. Taken a list at a time, not a
        transaction at a time, while ``txs`` is fresh in the CPU's caches."""
        part = txs[k0:k1] if k0 or k1 < len(txs) else txs
        self.seqs.extend(range(seq0 + k0, seq0 + k1))
        ns = self.ns
        if k1 - k0 == 1:
            ns.append(b - a)
        else:  # the first from row a on, the last up to row b, the others whole
            ns.append(ends[k0] - a)
            ns.extend(map(sub, ends[k0 + 1 : k1 - 1], ends[k0 : k1 - 2]))
            ns.append(b - ends[k1 - 2])
        self.op0s.append(a - ends[k0 - 1] if k0 else a)
        self.op0s.extend(repeat(0, k1 - k0 - 1))
        self.scns.extend(map(_KEY_SCN, map(_TX_KEY, part)))
        self.tms.extend(map(_TX_TM, part))
        self.xids.extend(map(_TX_XID, part))
        self.threads.extend(map(_TX_THREAD, part))

    def clear(self) -> None:
        for values in self:
            values.clear()


def _threads(
    threads: list, ns: list[int], op0s: list[int], per_segment: Callable[[list, pa.DataType], pa.Array]
) -> pa.Array:
    """The ``thread`` column of segments of ``ns`` rows: ``threads`` holds each one's, or,
    for a transaction of several threads, a list of each of its rows' (its rows in the
    segment from ``op0s`` on): those rows' values are put in by one mask."""
    several = list(map(isinstance, threads, repeat(list)))
    if not any(several):
        return per_segment(threads, pa.int32())
    which = list(compress(range(len(threads)), several))
    values = list(threads)
    for i in which:
        values[i] = 0
    own = chain.from_iterable(threads[i][op0s[i] : op0s[i] + ns[i]] for i in which)
    return pc.replace_with_mask(
        per_segment(values, pa.int32()), per_segment(several, pa.bool_()), pa.array(list(own), pa.int32())
    )


def _column_bytes(rows: pa.RecordBatch) -> int:
    """The estimate of :func:`_buffered_bytes` for rows as columns: the same fixed part
    per row (measured: with less, row groups of narrow rows grow, and so does the peak
    RSS of writing them) and the bytes of their images."""
    return _ROW_OVERHEAD * rows.num_rows + sum(rows.column(i).nbytes for i in _IMAGE_COLUMNS)


def _buffered_bytes(recs: list[list]) -> int:
    """An estimate of the memory ``recs`` take to buffer and turn into a row group: a
    fixed part per row and the characters of its images (rid, before, after, sql).
    (A pass in C over the rows for each image: ``filter(None, ...)`` drops the ``None``
    ones, whose length counts 0, as an empty one does.)"""
    return _ROW_OVERHEAD * len(recs) + sum([sum(map(len, filter(None, map(image, recs)))) for image in _IMAGES])


_CHAIN_HINT = (
    "if an in-place compaction was interrupted, run `olr-buffer compact --in-place "
    "--i-know-no-reader-is-running` again to finish it; otherwise files were removed or edited by hand"
)


class ChangefeedWriter:
    """Appends whole transactions to the changefeed directory; see the module doc. The
    Parquet changefeed's :class:`~olr_buffer.sinks.base.Sink`.

    ``path``: a directory, or ``s3://BUCKET/PREFIX``. ``file_rows``: a file is published
    once it holds at least this many rows (at a transaction boundary: a transaction is
    never split). ``flush()`` publishes what is buffered whatever its size. ``mode``: the
    directory's mode (its files get it without the x bits), 0700 by default; an existing
    directory is given it. The writer holds the changefeed's lock (on object storage, its
    lease) until :meth:`close` or :meth:`release`.

    ``table_format``: ``parquet``, ``delta`` or ``iceberg``; None: the changefeed's own (a
    new one: parquet); ``iceberg``: the catalog and table of an Iceberg changefeed
    (:class:`~.iceberg_settings.IcebergSettings`; None: those it records, else the
    defaults). On object storage: ``staging``, the local directory of temporary files (a
    new temporary directory if None), ``lease_owner`` the queue id recorded in the lease
    (a restart of the same queue on this host takes a lease its killed run left),
    ``lease_timing`` the lease's times (None: :class:`~olr_buffer.store.LeaseTiming`'s defaults),
    ``retry`` what to do when the store cannot be reached (None: fail).

    ``lease``: a local directory is written under the lease too, instead of the ``flock``
    (a standby on the same host or on a shared directory; every writer of that directory
    must then use it); on object storage it always is. ``lease_options``: keyword
    arguments of the :class:`~olr_buffer.store.Lease` (``ttl``, ``skew``, ...). A leased
    writer fences the writers before it when it opens and makes every publication
    conditional on its lease generation (:mod:`.fencing`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        file_rows: int = DEFAULT_FILE_ROWS,
        row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        durable: bool = True,
        compression: str = "zstd",
        mode: int = DEFAULT_MODE,
        table_format: str | None = None,
        iceberg: IcebergSettings | None = None,
        staging: str | os.PathLike[str] | None = None,
        lease_owner: str | None = None,
        lease_timing: LeaseTiming | None = None,
        retry: OutageRetry | None = None,
        lease: bool | None = None,
        lease_options: dict | None = None,
    ) -> None:
        self.location = Location(path, mode=mode, durable=durable)
        self.path = self.location.uri
        self.file_rows = file_rows
        self.row_group_rows = row_group_rows
        self.row_group_bytes = row_group_bytes
        self.durable = durable
        self.compression = compression
        self.mode = mode
        self.file_mode = file_mode(mode)
        self.retry = retry
        self.table_format = "parquet"  # (resolved by _recover)
        self._requested_format = table_format
        self._iceberg = iceberg
        self._table: DeltaChangefeed | IcebergChangefeed | None = None  # its table (Delta, Iceberg), once opened
        self._catalog: Any = None  # an Iceberg table's catalog, opened once (by the recovery, else by _open_table)
        self._table_created = False
        self.next_tx_seq = 0
        self.last_commit: CommitKey | None = None
        self.last_c_scn: int | None = None
        self.files_published = 0
        self.owner: ChangefeedOwner | None = None  # the queue (and source) that writes it
        # the manifest's run_from (per redo thread, the log sequence a new queue reads from:
        # valid for what is published), and one noted, waiting for the commit it needs
        self.run_from: dict[int, int] | None = None
        self._run_from_next: tuple[dict[int, int], CommitKey | None] | None = None
        self._found: list[tuple[int, int, int, str | None]] = []  # see published_since
        self._last_file: PublishedFile | None = None
        # schema versions: (owner, table) -> version, as of the last published file, and
        # now (with the open file's rows); the open file's changes; documents to write
        # before it is published; the versions whose documents the changefeed holds
        self._published_schemas: dict[tuple[str, str], str] = {}
        self._schemas: dict[tuple[str, str], str] = {}
        self._file_schemas: dict[tuple[str, str], str] = {}
        self._documents: dict[str, str] = {}
        self._known_versions: set[str] = set()
        self._lock: ChangefeedLock | Lease | None
        self._head: ManifestHead | None = None  # a leased writer's conditional manifest
        self._staging_made = False
        timing = lease_timing or LeaseTiming()
        lease_kwargs = {
            "owner": lease_owner,
            "info": {"changefeed": self.path},
            "ttl": timing.ttl,
            "skew": timing.skew,
            "renew_seconds": timing.renew,
            "watch": retry.watched if retry is not None else None,  # (the keepalive's renewals: run's outages)
            **(lease_options or {}),
        }
        if self.location.path is not None:  # a local directory: flock (or the lease), modes
            self.created = prepare_dir(self.path, mode)  # (see release)
            self._tmp_dir = local_tmp_dir(self.path)
            if lease:
                self._lock = Lease(self.location.store, **lease_kwargs)
            else:
                self._lock = ChangefeedLock(self.path, writer=True)
        else:  # object storage: a lease, a local staging directory
            # (made by this writer: no manifest and no published file there yet)
            self.created = self._store_call(self._no_changefeed_yet, "look at the changefeed")
            self._tmp_dir = self._staging_dir(staging)
            self._lock = Lease(self.location.store, **lease_kwargs)
        try:
            if isinstance(self._lock, Lease):
                # a store that ignores If-None-Match would let a file (or the lease) be overwritten
                self._store_call(self.location.store.check_conditional_writes, "try a conditional write")
                self._store_call(self._lock.acquire, "take the changefeed's lease")
                self._lock.start_keepalive()
                lease_held = self._lock
                # before the position is read: nothing an older writer does is published after it
                self._head = self._store_call(
                    lambda: fence_previous_writers(self.location, lease_held, self._iceberg),
                    "fence the changefeed's earlier writers",
                )
                fault_point("after_take_over")
            if self.location.path is not None:
                apply_mode(self.path, mode)
            self._recover()
        except BaseException:
            self._release_lock(forget=self.created)
            if self._staging_made:
                shutil.rmtree(self._tmp_dir, ignore_errors=True)
            raise
        # the open file
        self._writer: pq.ParquetWriter | None = None
        self._pending_write: _BackgroundWrite | None = None  # the row group being written
        self._tmp_path: str | None = None
        self._file_first = self.next_tx_seq
        self._file_rows = 0
        self._file_last_commit: CommitKey | None = None
        # buffered rows of the open file (not yet in a row group): as columns (_pieces),
        # then as lists (_recs: always after every piece)
        self._pieces: list[pa.RecordBatch] = []
        self._piece_rows = 0
        self._recs: list[list] = []
        self._nbytes = 0  # estimated bytes of _pieces and _recs[:_counted]
        self._counted = 0
        # the transaction segments of the buffered rows (a transaction's rows in the row
        # group): per segment its tx_seq, rows, c_scn, c_tm, xid, op_seq of its first row and
        # redo thread (a list of each of its transaction's rows where it has several)
        self._tx = _Segments([], [], [], [], [], [], [])
        self.buffered_since = 0.0  # monotonic time the open file got its first transaction
        self._file_c_tms: list[int | None] = []
        # commit-to-visible latency of recently published transactions, in seconds (from c_tm)
        self.latencies: deque[float] = deque(maxlen=10_000)
        self.clock_ahead = 0  # published transactions whose commit tm was later than their publication
        self.transactions_published = 0
        self.rows_published = 0
        self.transactions_dropped = 0  # handed over, then dropped unpublished (abandon)

    # -- recovery ----------------------------------------------------------------------

    def _recover(self) -> None:
        loc = self.location
        manifest = self._store_call(lambda: read_manifest(loc), "read the manifest")
        if loc.path is not None:
            for name in remove_own_temporaries(self.path):  # a killed writer's, or compaction's
                log.info("deleted unpublished temporary file %s", name)
        else:
            for name in remove_staged(self._tmp_dir):
                log.info("deleted unpublished temporary file %s", name)
            for name in self._store_call(loc.store.clear_staging, "clear unfinished uploads"):
                log.info("%s: cleared %s", self.path, name)
        self.table_format = self._store_call(
            lambda: delta_table.resolve_table_format(loc, manifest, self._requested_format), "look for a table"
        )
        if self.table_format == "iceberg":
            # what the manifest records, with what was given instead
            self._iceberg = iceberg_table.settings(loc, self._iceberg, manifest or {})
        names = None  # a Delta or Iceberg changefeed: the files of its table, and those published after them
        if self.table_format in ("delta", "iceberg"):
            doing = "read the Delta log" if self.table_format == "delta" else "read the Iceberg table"
            names = self._store_call(lambda: self._table_chain(loc), doing)
        files = self._store_call(lambda: list_files(loc, hint=_CHAIN_HINT, names=names), "list the changefeed")
        if files:
            # the others: footers only (their reading costs)
            self._store_call(lambda: verify_pages(loc, files[-1].name), "read the newest file")
        # (first tx_seq, transactions, rows, queue id) of each file found: see published_since
        self._found = [(f.first, f.last - f.first + 1, f.rows, f.owner.queue_id if f.owner else None) for f in files]
        self.files_published = len(files)
        self.next_tx_seq = files[-1].last + 1 if files else 0
        recorded = manifest.get("next_tx_seq") if manifest else None
        if not isinstance(recorded, int) or isinstance(recorded, bool):
            recorded = None
        if recorded is not None and recorded > self.next_tx_seq:
            raise ChangefeedCorruptError(
                f"{self.path}: published files are missing: the manifest records tx_seq 0..{recorded - 1}, "
                f"the files hold {_tx_range(self.next_tx_seq)}",
                hint="put the missing files back (from a backup); the queue cannot publish them again, and "
                "readers may have seen them",
                path=self.path,
            )
        if loc.path is not None:
            set_file_modes(self.path, files, self.file_mode)
        self._known_versions = self._store_call(lambda: schema_versions(loc), "list the schema documents")
        self._published_schemas = current_schemas(files)
        lost = sorted(set(self._published_schemas.values()) - self._known_versions)
        if lost:
            raise ChangefeedCorruptError(
                f"{self.path}: schema document(s) missing from {META_DIR}/schemas/: {', '.join(lost)}",
                hint="rows of the changefeed name them: put them back (from a backup, or from the directory "
                "the changefeed was copied from)",
                path=self.path,
            )
        self._schemas = dict(self._published_schemas)
        self.owner = manifest_owner(manifest) or (files[-1].owner if files else None)
        # (a manifest behind the files: its run_from describes an earlier state, still valid)
        self.run_from = manifest_run_from(manifest) if files else None
        self._published = files  # for the Delta table's recovery (open)
        if not files:
            if manifest is not None and (
                delta_table.manifest_table_format(manifest) != self.table_format
                or (self._iceberg_recorded() and manifest.get("iceberg") != self._iceberg_recorded())
            ):
                self._write_manifest()  # the format asked for, recorded
            return
        self._last_file = files[-1]
        self.last_commit = files[-1].last_commit
        self.last_c_scn = self.last_commit.scn
        if (
            recorded != self.next_tx_seq
            or delta_table.manifest_table_format(manifest) != self.table_format
            or (self._iceberg_recorded() and manifest.get("iceberg") != self._iceberg_recorded())
        ):
            adopted = [f for f in files if f.first >= (recorded or 0)]
            if self._head is not None:  # the audit log after the conditional manifest: never by a fenced writer
                self._write_manifest()
            # a crash may come between log and manifest (the audit log: a local changefeed's)
            logged = last_logged(self.path, len(adopted)) if loc.path is not None else set()
            for f in adopted:
                log.info("adopting published file %s missing from the manifest", f.name)
                if f.name not in logged and loc.path is not None:
                    log_published(self.path, f, self.durable)
            if self._head is None:
                self._write_manifest()

    def _table_chain(self, loc: Location) -> set[str] | None:
        """The files of a Delta (Iceberg) changefeed's table and those published after
        them; None if it has no table yet. An Iceberg table is in the catalog given, else
        the one the manifest records: opened here, and kept for the writer's table."""
        glue = tables.glue(self.table_format)
        if not glue.has_table(loc):
            return None
        if self.table_format == "iceberg":
            table = iceberg_table.open_table(loc, self._iceberg, app_id=None, create=False, modes=False)
            self._catalog = table.catalog
        else:
            table = delta_table.open_table(loc, app_id=None, create=False, modes=False)
        return tables.chain_names(loc, table)

    def _iceberg_recorded(self) -> dict[str, str] | None:
        """What the manifest records of an Iceberg changefeed's catalog and table."""
        if self.table_format != "iceberg" or self._iceberg is None:
            return None  # (resolved by _recover)
        return self._iceberg.recorded() or None

    def _staging_dir(self, staging: str | os.PathLike[str] | None) -> str:
        """The local directory of temporary files of a changefeed on object storage."""
        if staging is None:
            self._staging_made = True
            return tempfile.mkdtemp(prefix="olr-buffer-staging-")
        return os.fspath(staging)  # made with the first temporary file (a refused run leaves none)

    def _given_up(self) -> bool:
        """Whether run's retry gave the store up while stopping: no more calls to it (they
        would wait for it), what is unfinished is left as a kill would leave it."""
        return self.retry is not None and self.retry.given_up is not None

    def _store_call(self, call, what: str):
        """``call()``; a store that cannot be reached: retried if this writer has a
        ``retry`` (run), raised otherwise (replay: resumable)."""
        if self.retry is None:
            return call()
        return self.retry.call(call, what)

    def _write_manifest(self, pending: dict | None = None) -> None:
        """Record the published files in the manifest; a leased writer: conditionally, with
        ``pending``, the publication it decides (see :mod:`.fencing`)."""
        nxt = self._run_from_next
        if nxt is not None and (nxt[1] is None or (self.last_commit is not None and nxt[1] <= self.last_commit)):
            self.run_from = {**(self.run_from or {}), **nxt[0]}
            self._run_from_next = None
        head = self._head
        if head is not None:
            doc = manifest_document(
                self.files_published,
                self._last_file,
                self.owner,
                table_format=self.table_format,
                iceberg=self._iceberg_recorded(),
                run_from=self.run_from,
            )
            if pending is not None:
                doc["pending"] = pending
            self._store_call(lambda: head.write(doc), "write the manifest")
            return
        self._store_call(
            lambda: write_manifest(
                self.location,
                self.files_published,
                self._last_file,
                self.owner,
                self.durable,
                table_format=self.table_format,
                iceberg=self._iceberg_recorded(),
                run_from=self.run_from,
            ),
            "write the manifest",
        )

    def note_run_from(self, run_from: Mapping[int, int], through: CommitKey | None) -> None:
        """Record ``run_from`` in the manifest once every commit up to ``through`` is
        published (:class:`~olr_buffer.sinks.base.RecordsRunFrom`): with the publication
        that holds them, never with one before (it would say that a transaction published
        after it was still to be read from a later file)."""
        self._run_from_next = (dict(run_from), through)

    def _no_changefeed_yet(self) -> bool:
        loc = self.location
        return loc.read_meta(MANIFEST, "read the manifest") is None and not loc.list("part-")

    def _release_lock(self, forget: bool = False) -> None:
        """Release the lock (the lease); ``forget``: a lease this writer took on a prefix
        that held no changefeed goes too (a refused run leaves nothing behind)."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        if isinstance(lock, Lease):
            self._release_lease(lock)
        else:
            lock.release()
        # (a lease this writer never took is another writer's: left alone; and so are the
        # manifest and the lease of a writer that took the changefeed over meanwhile)
        head = self._head
        if forget and isinstance(lock, Lease) and lock.generation and head is not None and not self._given_up():
            try:
                if head.superseded():
                    return
                self.location.delete(f"{META_DIR}/{MANIFEST}")  # the manifest the fence made
                self.location.delete(lock.name)
            except OlrBufferError as exc:
                log.warning("%s: cannot remove the lease this run took: %s", self.path, exc)

    def published_since(self, queue_id: str, tx_seq: int) -> tuple[int, int]:
        """Transactions and rows of the files found when this writer opened that the queue
        ``queue_id`` wrote from ``tx_seq`` on: what it published after its last checkpoint
        (or without one) and before it stopped, which its counters lost with a crash."""
        tx = rows = 0
        for first, n, r, owner in self._found:
            if first >= tx_seq and owner == queue_id:
                tx += n
                rows += r
        return tx, rows

    # -- the Sink contract ---------------------------------------------------------------

    position_key = POSITION_KEY

    def open(
        self, owner: ChangefeedOwner, stored: bytes | None, *, queue: str, adopt: bool = False, legacy=None
    ) -> SinkOpening:
        """:meth:`check_owner` against the position stored at the queue's last checkpoint
        (``stored``, or ``legacy``: the dispatcher's checkpoint's, from an older version),
        then :meth:`bind`; and what this queue published after that checkpoint (or without
        one) and before it stopped, which its counters lost with a crash."""
        recorded = load_position(stored, legacy)
        since = (recorded.next_tx_seq or 0) if recorded is not None else 0
        adopting = self.check_owner(
            owner, queue=queue, queue_next_tx_seq=None if recorded is None else since, adopt=adopt
        )
        self.bind(owner)
        if self.table_format in ("delta", "iceberg"):
            self._open_table()
        return SinkOpening(
            adopting, (0, 0) if adopting else self.published_since(owner.queue_id, since), run_from=self.run_from
        )

    def position(self) -> bytes:
        where = os.path.abspath(self.path) if self.location.path is not None else self.path
        return ChangefeedPosition(
            path=where, next_tx_seq=self.next_tx_seq, last_c_scn=self.last_c_scn, files=self.files_published
        ).encode()

    def pending_since(self) -> float | None:
        return self.buffered_since if self._file_rows else None

    def check_held(self) -> None:
        """:class:`WriterFencedError` once a renewal of the lease (its keepalive's, while
        nothing is published) found it taken over: the error a publication would meet,
        naming the new holder (from the lease). See :class:`~olr_buffer.sinks.base.CanBeTakenOver`."""
        lease = self._lock
        if isinstance(lease, Lease) and lease.taken_over:
            raise fenced_error(self.location.store, self.location.where(), lease.generation)

    def figures(self) -> SinkFigures:
        r = self.retry
        figures = SinkFigures(
            self.files_published,
            self.latencies,
            transactions_published=self.transactions_published,
            rows_published=self.rows_published,
            clock_ahead=self.clock_ahead,
            transactions_dropped=self.transactions_dropped,
        )
        if r is not None:
            figures.store_outages, figures.store_retries = r.outages, r.retries
            figures.store_outage_seconds = r.outage_seconds()
        lease = self._lock
        if isinstance(lease, Lease):
            figures.lease_generation, figures.lease_seconds_left = lease.generation, lease.remaining()
            figures.lease_expiry = (lease.ttl, lease.skew)
        return figures

    # -- the Delta table ---------------------------------------------------------------

    def _open_table(self) -> None:
        """Open (or create) the Delta or Iceberg table, its commits carrying the owner's
        queue id, and commit the files published but not committed before a kill (in one
        commit)."""
        if self._table is not None:
            return
        loc = self.location
        writer: dict = {"host": socket.gethostname(), "pid": os.getpid()}
        if isinstance(self._lock, Lease):
            writer.update(writer=self._lock.writer_id, lease_generation=self._lock.generation)
        app_id = self.owner.queue_id if self.owner else None
        if self.table_format == "iceberg":
            existed = self._store_call(lambda: iceberg_table.has_table(loc), "look for an Iceberg table")
            self._table = self._store_call(
                lambda: iceberg_table.open_table(
                    loc, self._iceberg, app_id=app_id, writer=writer, create=True, catalog=self._catalog
                ),
                "open the Iceberg table",
            )
        else:
            existed = self._store_call(lambda: delta_table.has_table(loc), "look for a Delta log")
            self._table = self._store_call(
                lambda: delta_table.open_table(loc, app_id=app_id, writer=writer, create=True), "open the Delta table"
            )
        self._table_created = not existed
        kind = self.table_format
        self._store_call(
            lambda: tables.commit_pending(loc, kind, self._table, self._published),
            f"commit published files to the {tables.TABLE_NAMES[kind]} table",
        )
        self._published = []

    # -- owner -------------------------------------------------------------------------

    def check_owner(
        self, owner: ChangefeedOwner, *, queue: str, queue_next_tx_seq: int | None, adopt: bool = False
    ) -> bool:
        """Whether ``owner`` (the queue at ``queue``, whose checkpoint records
        ``queue_next_tx_seq``, None if it has none) may write this changefeed; raises
        :class:`ChangefeedOwnerError` if not. Returns True when the changefeed is adopted
        from another queue: the commits it holds are then skipped as already published.

        Refused: a changefeed behind the queue's record of it (files removed), even with
        ``adopt``; a changefeed written by another queue or source, or one that recorded
        no owner taken by a queue without a checkpoint, unless ``adopt``. A changefeed
        that recorded no owner and a queue with a checkpoint: the queue that wrote it.
        """
        if queue_next_tx_seq is not None and self.next_tx_seq < queue_next_tx_seq:
            raise ChangefeedOwnerError(
                f"{self.path}: changefeed is behind its queue: it holds {_tx_range(self.next_tx_seq)}, "
                f"the queue {queue} has published tx_seq 0..{queue_next_tx_seq - 1} to it",
                hint="published files were removed, or this is not the queue's changefeed: put the files back, "
                "or start again with a new queue and an empty changefeed",
                path=self.path,
                queue=queue,
            )
        recorded = self.owner
        if recorded == owner:
            return False
        if self.next_tx_seq == 0:
            if recorded is not None:
                log.info(
                    "%s: empty changefeed of %s now written by %s", self.path, recorded.describe(), owner.describe()
                )
            return False
        if recorded is None and queue_next_tx_seq is not None:
            log.info("%s: recording %s as the changefeed's writer", self.path, owner.describe())
            return False
        wrote = recorded.describe() if recorded else "a queue that did not record its id"
        if not adopt:
            raise ChangefeedOwnerError(
                f"{self.path}: changefeed was written by {wrote}; {queue} is {owner.describe()}",
                hint="give each queue its own changefeed; if this queue was rebuilt from the same input after "
                "the changefeed's queue was lost, run again with --adopt-changefeed (docs/failure-scenarios.md)",
                path=self.path,
                queue=queue,
                changefeed_owner=recorded,
                owner=owner,
            )
        if recorded is not None and recorded.source_id is not None and recorded.source_id != owner.source_id:
            raise ChangefeedOwnerError(
                f"{self.path}: changefeed was written from source {recorded.source_id}; {queue} reads "
                f"{owner.source_id or 'redo log files'}: a changefeed is adopted only from the same source",
                hint="give each source its own changefeed",
                path=self.path,
                queue=queue,
                changefeed_owner=recorded,
                owner=owner,
            )
        log.warning(
            "%s: adopting the changefeed written by %s for %s: its %d transactions (commits up to %s) "
            "count as published, and the queue's commits up to there are skipped",
            self.path,
            wrote,
            owner.describe(),
            self.next_tx_seq,
            tuple(self.last_commit or ()),
        )
        return True

    def bind(self, owner: ChangefeedOwner) -> None:
        """Record ``owner`` as the changefeed's writer (manifest now, footers from now on;
        on object storage the lease too, so that a restart of this queue takes at once a
        lease its killed run left)."""
        lease = self._lock
        if isinstance(lease, Lease) and lease.owner != owner.queue_id:
            lease.owner = owner.queue_id
            self._store_call(lease.renew, "renew the changefeed's lease")
        if self.owner == owner:
            return
        self.owner = owner
        self._write_manifest()

    # -- writing -----------------------------------------------------------------------

    def write_transaction(self, commit: Commit, chunks: Iterable[tuple[int, list[list]]]) -> int:
        """One transaction whose rows come in ``chunks``: ``(thread, rows)``, runs of rows
        of one redo thread, in order. Row groups are written as they fill; returns the
        rows written (0: nothing, and no ``tx_seq`` taken)."""
        key, tm, xid = commit.key, commit.tm, commit.xid
        total = 0  # rows of this transaction so far
        for thread, rows in chunks:
            if rows:
                self._append_rows(rows, [(xid, key, tm, thread, total + len(rows))], off=total)
                total += len(rows)
        if not total:
            return 0
        self._end_transaction(commit, total)
        return total

    def write_transactions(self, items: list[tuple[Commit, int, list[list]]]) -> list[int]:
        """Many transactions at once, each ``(commit, thread, rows)`` with all rows of one
        redo thread, in order; same result as :meth:`write_transaction` for each."""
        out = [len(rows) for _, _, rows in items]
        txs = [(c.xid, c.key, c.tm, thread, len(rows)) for c, thread, rows in items if rows]
        if txs:
            self.write_rows(list(itertools.chain.from_iterable(rows for _, _, rows in items)), txs)
        return out

    def write_columns(
        self, rows: pa.RecordBatch, txs: Sequence[tuple[str, CommitKey, int | None, int | list[int], int]]
    ) -> None:
        """:meth:`write_rows` with the rows as columns (``olr_buffer.changes.ROW_SCHEMA``)."""
        self.write_rows(rows, txs)

    def write_rows(
        self, rows: list[list] | pa.RecordBatch, txs: Sequence[tuple[str, CommitKey, int | None, int | list[int], int]]
    ) -> None:
        """Many transactions at once, flat: ``txs`` holds ``(xid, key, tm, thread, n)`` for
        each, ``n > 0`` of its rows, which are the next ``n`` of ``rows``; ``thread`` is
        the redo thread of all of them, or a list of each one's. Same result as
        :meth:`write_transaction` for each, in order: a file is published once it holds
        ``file_rows`` rows, at a transaction boundary; a row group holds at most
        ``row_group_rows`` rows and closes once its rows reach ``row_group_bytes``, looked
        at every ``_BYTES_STEP`` rows at most."""
        ends = list(accumulate(map(_TX_N, txs)))  # rows up to each transaction's end
        if (ends[-1] if ends else 0) != len(rows):
            raise ValueError(f"write_rows: {len(rows)} rows for transactions of {ends[-1] if ends else 0} rows")
        i = r = 0
        while i < len(txs):
            # the transactions up to the one that fills the open file
            j = min(bisect.bisect_left(ends, r + self.file_rows - self._file_rows, lo=i), len(txs) - 1)
            part = txs[i : j + 1]
            m = ends[j] - r
            self._append_rows(rows[r : r + m] if r or m < len(rows) else rows, part)
            i = j + 1
            r += m
            if not self._file_rows:
                self.buffered_since = time.monotonic()
            self._file_c_tms.extend(map(_TX_TM, part))
            self.next_tx_seq += len(part)
            self._file_rows += m
            self._file_last_commit = part[-1][1]
            if self._file_rows >= self.file_rows:
                self.flush()

    def _append_rows(self, rows: list[list] | pa.RecordBatch, txs: Sequence[tuple], off: int = 0) -> None:
        """Buffer ``rows`` (lists, or columns) of the transactions ``txs`` (taking tx_seq
        from ``next_tx_seq`` on), writing row groups as they fill. ``off``: rows of the
        first transaction buffered already (its ``n`` counts them; a transaction written in
        chunks)."""
        recs, segs = self._recs, self._tx
        group = self.row_group_rows
        seq0 = self.next_tx_seq
        columns = isinstance(rows, pa.RecordBatch)
        ends = list(accumulate(map(_TX_N, txs)))  # each transaction's end, from the first's first row
        k = 0  # the transaction of the next row
        pos, total = 0, len(rows)
        while pos < total:
            stop = pos + min(group - len(recs) - self._piece_rows, _BYTES_STEP, total - pos)
            if columns:
                assert isinstance(rows, pa.RecordBatch)  # (for mypy)
                if recs:  # the lists before it, as columns: the pieces stay in row order
                    self._recs_to_piece()
                piece = rows.slice(pos, stop - pos) if pos or stop < total else rows
                self._pieces.append(piece)
                self._piece_rows += stop - pos
                self._nbytes += _column_bytes(piece)
            else:
                recs.extend(rows[pos:stop] if pos or stop < total else rows)
            a, b = off + pos, off + stop
            last = bisect.bisect_left(ends, b, lo=k)  # the transaction of row b - 1
            segs.add(txs, ends, k, last + 1, a, b, seq0)
            k = last + 1 if ends[last] == b else last
            pos = stop
            if len(recs) + self._piece_rows >= group or self._group_full():
                self._write_row_group()

    def _end_transaction(self, commit: Commit, rows: int) -> None:
        """A transaction of ``rows`` rows (> 0) is in the open file: it took ``next_tx_seq``."""
        if not self._file_rows:
            self.buffered_since = time.monotonic()
        self._file_c_tms.append(commit.tm)
        self.next_tx_seq += 1
        self._file_rows += rows
        self._file_last_commit = commit.key
        if self._file_rows >= self.file_rows:
            self.flush()

    def _recs_to_piece(self) -> None:
        """The rows buffered as lists become the last piece of columns."""
        self._group_full()  # (their bytes counted)
        self._pieces.append(self._columns(self._recs))
        self._piece_rows += len(self._recs)
        self._recs.clear()
        self._counted = 0

    def _columns(self, recs: list[list]) -> pa.RecordBatch:
        try:
            return rows_to_columns(recs)
        except RowFieldsError as exc:
            raise ChangefeedError(f"{self.path}: {exc}") from None

    def _group_full(self) -> bool:
        """Whether the buffered rows reach ``row_group_bytes`` (each row counted once)."""
        recs = self._recs
        if len(recs) > self._counted:  # a slice: islice would walk the counted rows again
            self._nbytes += _buffered_bytes(recs[self._counted :])
            self._counted = len(recs)
        return self._nbytes >= self.row_group_bytes

    def _write_row_group(self, background: bool = True) -> None:
        """Write the buffered rows as a row group of the open file (opened first if need
        be), by a thread of its own (``background``) or in this one; either way its error
        is raised by :meth:`_wait_write`."""
        if not self._recs and not self._pieces:
            return
        batch = self._batch()
        if self._writer is None:
            if self._lock is None:
                raise ChangefeedError(f"{self.path}: the changefeed writer is closed")
            self._tmp_path = os.path.join(
                self._tmp_dir,
                writer_tmp_basename(self._file_first, os.getpid(), uuid.uuid4().hex[:8] if self._head else None),
            )
            try:
                if self.location.path is None:
                    os.makedirs(self._tmp_dir, mode=0o700, exist_ok=True)
                create_file(self._tmp_path, self.file_mode)
                self._writer = parquet_writer(self._tmp_path, self.compression)
            except OSError as exc:
                error = os_failure(exc, self._tmp_path, "create a changefeed file")
                self.abandon()
                raise error from None
        self._wait_write()
        self._pending_write = _BackgroundWrite(self._writer, batch, background)
        self._recs.clear()
        self._pieces.clear()
        self._piece_rows = 0
        self._tx.clear()
        self._nbytes = self._counted = 0

    def _wait_write(self) -> None:
        """Wait for the row group being written; its I/O error is raised here."""
        pending, self._pending_write = self._pending_write, None
        if pending is not None:
            try:
                pending.result()
            except OSError as exc:
                self._io_failed(exc, "writing")
            fault_point("after_row_group")

    def _batch(self) -> pa.Table:
        # The columns of the commit (tx_seq, c_scn, c_tm, xid) hold one value per
        # transaction segment: run-end encoded, then decoded by Arrow, not per row in Python.
        seqs, ns, scns, tms, xids, op0s, threads = self._tx
        ends = list(accumulate(ns))
        total = ends[-1]
        run_ends = pa.array(ends, pa.int32())

        def per_segment(values: Sequence, type_: pa.DataType) -> pa.Array:
            return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(run_ends, pa.array(values, type_)))

        # op_seq: the row's place in its transaction = op_seq0 + (row - the segment's first row)
        first_rows = per_segment(list(map(sub, op0s, accumulate(ns, initial=0))), pa.int64())
        op_seq = pc.add(_row_numbers(total), first_rows)
        # the rows' own columns (the schema fields are null where a row ends before them),
        # in the pieces they came in: not copied into one
        if self._recs:
            self._recs_to_piece()
        row = pa.Table.from_batches(self._pieces)
        i64, s = pa.int64(), pa.string()
        c_tm, row_tm = per_segment(tms, i64), row.column("tm")
        arrays = [
            per_segment(seqs, i64),
            op_seq,
            per_segment(scns, i64),
            c_tm,
            per_segment(xids, s),
            _OP_NAMES.take(row.column("code")),
            row.column("scn"),
            row.column("sub"),
            row_tm,
            _threads(threads, ns, op0s, per_segment),
            _owners(row.column("owner")),
            row.column("table"),
            row.column("obj"),
            row.column("rid"),
            row.column("before"),
            row.column("after"),
            row.column("sql"),
            nanos_to_timestamp(c_tm),
            nanos_to_timestamp(row_tm),
            self._versions(row, total),
        ]
        return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)

    def _versions(self, row: pa.Table, n: int) -> pa.Array | pa.ChunkedArray:
        """The ``schema_version`` column of ``row`` (the buffered rows' columns), in row
        order: a row's own version, or else its table's current one; a row that carries its
        document makes its version current (see the module doc)."""
        version_column, document_column = row.column("schema_version"), row.column("schema_document")
        schemas = self._schemas
        documents = document_column.to_pylist() if document_column.null_count < n else None
        if version_column.null_count == n and not schemas:
            return pa.nulls(n, pa.string())
        if version_column.null_count == 0 and documents is None:  # each row its own version
            self._check_versions(pc.unique(version_column).to_pylist())
            return version_column
        versions = version_column.to_pylist()
        introduced = list(compress(range(n), documents)) if documents is not None else []
        owners, tables = row.column("owner").to_pylist(), row.column("table").to_pylist()
        if None in versions and (schemas or introduced):  # rows that take their table's version, in order
            out = list(versions)
            for i, version in enumerate(out):
                if version is None:
                    out[i] = schemas.get((owners[i], tables[i]))
                elif documents is not None and documents[i] is not None:
                    self._introduce(owners[i], tables[i], version, documents[i])
            versions = out
        elif documents is not None:  # (introduced is empty without documents)
            for i in introduced:
                version = versions[i]
                assert version is not None  # no row here takes its table's version
                self._introduce(owners[i], tables[i], version, documents[i])
        self._check_versions(versions)
        return pa.array(versions, pa.string())

    def _check_versions(self, versions: Iterable[str | None]) -> None:
        """Every version named must have had its document (known, or carried by a row)."""
        unknown = {v for v in set(versions) if v is not None} - self._known_versions - self._documents.keys()
        if unknown:
            raise ChangefeedError(
                f"{self.path}: rows name schema version(s) {', '.join(sorted(unknown))} whose document no row carried",
                hint="the queue was written by another program or is damaged",
            )

    def _introduce(self, owner: str, table: str, version: str, document: str) -> None:
        """A row carries the schema document of ``version``: it is written before the file
        is published (unless the changefeed holds it), and is its table's version from now on."""
        if version not in self._known_versions and version not in self._documents:
            if schema_version(document) != version:
                raise ChangefeedError(
                    f"{self.path}: a row of {owner}.{table} names schema version {version}, but the document it "
                    f"carries has version {schema_version(document)}",
                    hint="the queue was written by another program or is damaged",
                )
            self._documents[version] = document
        key = (owner, table)
        if self._schemas.get(key) != version:
            self._schemas[key] = version
            self._file_schemas[key] = version

    def flush(self) -> PublishedFile | None:
        """Publish the open file, if it holds any transaction.

        If the disk fails (full, read-only), the temporary file is removed and
        :class:`ChangefeedError` raised: nothing is half-published, and the transactions
        are published again by the next run (the checkpoint does not cover them).
        """
        if not self._file_rows:
            return None
        try:
            return self._publish()
        except OSError as exc:
            self._io_failed(exc, "publishing")

    def _io_failed(self, exc: OSError, doing: str) -> NoReturn:
        where = self._tmp_path or self.path
        self.abandon()
        full = getattr(exc, "errno", None) == errno.ENOSPC or "No space left" in str(exc)
        raise ChangefeedError(
            f"{where}: {'no space left on device' if full else 'I/O error'} {doing} the changefeed: "
            f"{str(exc).splitlines()[0]}",
            hint="free disk space, then run the same command again" if full else "check the changefeed directory",
            path=where,
        ) from None

    def _publish(self) -> PublishedFile:
        # the last row group in this thread: it would be waited for at once, and a thread
        # of its own costs more than it saves there (one a file at a short --flush-interval)
        self._write_row_group(background=False)
        self._wait_write()
        first, last = self._file_first, self.next_tx_seq - 1
        last_commit = self._file_last_commit
        assert self._writer is not None and self._tmp_path is not None and last_commit is not None
        published = PublishedFile(
            part_name(first, last),
            first,
            last,
            self._file_rows,
            last_commit,
            self.owner,
            tuple((o, t, v) for (o, t), v in self._file_schemas.items()),
        )
        self._writer.add_key_value_metadata(footer_metadata(published))
        self._writer.close()
        self._writer = None
        # (not fsynced here: the store syncs it before it is linked or staged, and a second
        # fsync of a clean file costs a device flush as long as the first, on the path to visible)
        if self._documents:  # (most files carry none: no call to the store for them)
            try:
                self._store_call(
                    lambda: write_schema_documents(self.location, self._documents, self.durable),
                    "write a schema document",
                )  # before any row names them
            except (OlrBufferError, OSError):
                self.abandon()
                raise
            self._known_versions.update(self._documents)
            self._documents.clear()
        fault_point("after_tmp_written")
        # a Delta changefeed: the add action's size and statistics, from the local footer
        part = None
        if self.table_format == "delta":
            part = delta_table.local_part(self._tmp_path, published)
        elif self.table_format == "iceberg":
            part = iceberg_table.local_part(self._tmp_path, published)
        self._publish_file(published)
        # visible: from here on the file is published, whatever fails next
        now_ns = time.time_ns()
        for tm in self._file_c_tms:
            if tm is None:
                continue
            if tm > now_ns:  # the source's clock ahead of this one: no latency can be told
                self.clock_ahead += 1
            else:
                self.latencies.append((now_ns - tm) / 1e9)
        self._file_c_tms.clear()
        self.transactions_published += last - first + 1
        self.rows_published += self._file_rows
        self.files_published += 1
        self.last_commit = last_commit
        self.last_c_scn = last_commit.scn
        self._last_file = published
        self._published_schemas.update(self._file_schemas)
        self._file_schemas.clear()
        self._file_first = self.next_tx_seq
        self._file_rows = 0
        self._file_last_commit = None
        fault_point("after_rename")
        log.debug(
            "published %s: tx_seq %d..%d, %d rows",
            published.name,
            first,
            last,
            published.rows,
            extra={
                "file": published.name,
                "first_tx_seq": first,
                "last_tx_seq": last,
                "rows": published.rows,
                "c_scn": last_commit.scn,
            },
        )
        if part is not None:
            self._commit_to_table(part)
        if self._head is not None:  # the audit log after the conditional manifest: never by a fenced writer
            self._write_manifest()
        if self.location.path is not None:  # the audit log: a local changefeed's
            log_published(self.path, published, self.durable)
        if self._head is None:
            self._write_manifest()
        return published

    def _publish_file(self, published: PublishedFile) -> None:
        """The complete temporary file becomes ``published`` (a link, or one conditional
        PUT), the lease checked first on object storage. If it cannot be, the open file
        is dropped (:meth:`abandon`) and the error raised: its transactions are published
        again by the next run."""
        tmp = self._tmp_path
        assert tmp is not None
        token = uuid.uuid4().hex  # each try of this publication: a try that went in unanswered is known as ours
        try:
            if isinstance(self._lock, Lease):
                self._store_call(self._lock.ensure, "renew the changefeed's lease")
            if self._head is not None:
                self._publish_fenced(tmp, published.name, token)
            else:
                self._store_call(lambda: self.location.publish(tmp, published.name, token), f"publish {published.name}")
        except (OlrBufferError, OSError):
            self.abandon()
            raise
        self._tmp_path = None

    def _publish_fenced(self, tmp: str, name: str, token: str) -> None:
        """A leased writer's publication (:mod:`.fencing`): staged in the store, decided
        by a conditional write of the manifest, then made visible."""
        store = self.location.store
        fault_point("before_stage")
        try:
            staged = self._store_call(lambda: store.stage_from_file(name, tmp, token=token), f"stage {name}")
        except OlrBufferError:
            head = self._head
            if (
                head is not None and not self._given_up() and head.superseded()
            ):  # the new holder removed the temporary file
                raise head.fenced() from None
            raise
        fault_point("after_stage")
        try:
            self._write_manifest(pending={"name": name, "staged": staged})
        except WriterFencedError:
            store.discard_staged(name, staged)
            raise
        fault_point("after_decide")
        try:
            self._store_call(lambda: store.complete_staged(name, staged), f"publish {name}")
        except OlrBufferError:
            head = self._head
            if (
                head is not None and not self._given_up() and head.superseded()
            ):  # finished by the new holder, then replaced
                raise head.fenced() from None
            raise
        try:
            os.unlink(tmp)  # (locally, a second name of the published file)
        except OSError:
            pass

    def _commit_to_table(self, part) -> None:
        """One Delta (Iceberg) commit adding the published file, with the queue's
        transaction (stamp)."""
        self._open_table()
        table = self._table
        assert table is not None  # opened just above
        kind = tables.TABLE_NAMES[self.table_format]
        version = self._store_call(lambda: table.commit([part]), f"commit {part.name} to the {kind} table")
        if self.table_format == "iceberg":
            if version is not None:
                iceberg_table.apply_commit_modes(self.location, table)
        else:
            delta_table.apply_commit_modes(self.location, version)

    @property
    def buffered_rows(self) -> int:
        """Rows handed over but not yet published."""
        return self._file_rows

    def close(self) -> None:
        """Publish what is buffered, then release the changefeed's lock."""
        if self._lock is None:
            return
        self.flush()
        self.release()

    def release(self, remove_if_unused: bool = False) -> None:
        """Drop what is not published and release the changefeed's lock (the writer is
        done; the transactions it held are published again by the next run).
        ``remove_if_unused``: a directory this writer made, where nothing is published,
        is removed (:func:`remove_unused`): a refused run leaves nothing behind."""
        self.abandon()
        lock, self._lock = self._lock, None
        if lock is None:
            return
        unused = remove_if_unused and self.created and self.files_published == 0 and self.next_tx_seq == 0
        if isinstance(lock, Lease) and lock.taken_over:
            unused = False  # (the changefeed is the new holder's now: its manifest, its lease)
        try:
            if unused and self._table_created and not self._given_up():
                self._remove_table()
            if isinstance(lock, Lease):
                self._release_remote(lock, unused)
            elif unused:
                remove_unused(self.path, lock)
        finally:
            if isinstance(lock, Lease):
                self._release_lease(lock)
            else:
                lock.release()

    def _release_lease(self, lease: Lease) -> None:
        """Release the lease; with ``retry`` (run), within its time when stopping: a store
        that was given up on while stopping is not asked (the lease expires by itself)."""
        if self.retry is None:
            lease.release()
        elif self._given_up():
            lease.abandon()  # (said with what the stop left undone)
        else:
            try:
                self._store_call(lease.release, "release the changefeed's lease")
            except StoreError as exc:
                lease.abandon()
                log.warning("cannot release the changefeed's lease (%s): it expires by itself", exc)

    def _release_remote(self, lease: Lease, unused: bool) -> None:
        """Release the lease; a changefeed this run made and never used: its objects (the
        manifest, the lease) are removed. The staging directory goes, if empty."""
        try:
            if unused and not self._given_up():
                lease.release()
                for name in (f"{META_DIR}/{MANIFEST}", lease.name):
                    self.location.delete(name)
        except OlrBufferError as exc:
            log.warning("%s: cannot remove what this run made: %s", self.path, exc)
        if self._staging_made:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
        else:
            try:
                os.rmdir(self._tmp_dir)
            except OSError:
                pass

    def _remove_table(self) -> None:
        """The Delta table this writer created, with nothing committed: its log goes (an
        Iceberg table stays: its catalog holds it)."""
        if self.table_format == "iceberg":
            return
        store = self.location.store
        try:
            for obj in store.list(f"{delta_table.DELTA_LOG}/", recursive=True):
                store.delete(obj.name)
            if self.location.path is not None:
                shutil.rmtree(os.path.join(self.location.path, delta_table.DELTA_LOG), ignore_errors=True)
        except OlrBufferError as exc:
            log.warning("%s: cannot remove the unused Delta log: %s", self.path, exc)

    def abandon(self) -> None:
        """Drop the unpublished file (its transactions will be published again on restart)."""
        self.transactions_dropped += self.next_tx_seq - self._file_first
        pending, self._pending_write = self._pending_write, None
        if pending is not None:
            pending.join()  # its error, if any, does not matter: the file is dropped
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # pragma: no cover - best effort on an error path
                pass
            self._writer = None
        if self._tmp_path and os.path.exists(self._tmp_path):
            os.unlink(self._tmp_path)
        self._recs.clear()
        self._pieces.clear()
        self._piece_rows = 0
        self._tx.clear()
        self._nbytes = self._counted = 0
        self.next_tx_seq = self._file_first
        self._file_rows = 0
        self._file_last_commit = None
        self._file_c_tms.clear()
        self._documents.clear()
        self._file_schemas.clear()
        self._schemas = dict(self._published_schemas)


class _BackgroundWrite:
    """One row group written to the open file by a thread of its own: Parquet encoding
    and compression run without the GIL, so the dispatcher goes on meanwhile. The writer
    keeps at most one in flight and waits for it before the next one, before closing the
    file and before dropping it. Not ``background``: written here and now, its error kept
    for :meth:`result` all the same (the last row group of a file, waited for at once)."""

    __slots__ = ("_thread", "_error")

    def __init__(self, writer: pq.ParquetWriter, batch: pa.Table, background: bool = True) -> None:
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if not background:
            self._run(writer, batch)
            return
        self._thread = threading.Thread(target=self._run, args=(writer, batch), name="changefeed-write", daemon=True)
        self._thread.start()

    def _run(self, writer: pq.ParquetWriter, batch: pa.Table) -> None:
        try:
            writer.write_table(batch, row_group_size=batch.num_rows)
        except BaseException as exc:  # noqa: BLE001 - raised again by result()
            self._error = exc

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def result(self) -> None:
        self.join()
        if self._error is not None:
            raise self._error


def _tx_range(next_tx_seq: int) -> str:
    return f"tx_seq 0..{next_tx_seq - 1}" if next_tx_seq else "no transaction"
