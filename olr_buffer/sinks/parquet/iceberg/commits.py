"""The commits of an Iceberg changefeed's table (:class:`IcebergChangefeed`): its Parquet
files, as published, added to an Apache Iceberg table by snapshots that carry the queue's
id and the last tx_seq they hold. Which files make the changefeed and the glue to the
writer and compaction are :mod:`..iceberg_table`.

Layout: the table's location is the changefeed's root; its metadata (``*.metadata.json``,
manifest lists, manifests) under ``_iceberg/metadata/`` (a ``_`` folder: Spark's Parquet
reader skips it), and, by default, its catalog: a SQL catalog in the SQLite file
``_iceberg/catalog.db`` (a local changefeed; one on object storage names a catalog, a SQLite
file elsewhere or a REST catalog: :class:`IcebergSettings`). The files are added as they
are (no rewrite), with statistics from their footers; they carry no Iceberg field ids, so
the table's ``schema.name-mapping.default`` maps their columns by name.

**One commit per publish**: a fast append whose snapshot summary carries
``olr_buffer.app_id`` (the queue id) and ``olr_buffer.last_tx_seq`` (the last tx_seq the
table holds after it), as Delta's ``txn`` does. Every snapshot olr-buffer commits is
stamped, compactions too, so the current snapshot always says where the table ends, and
expiring older snapshots loses nothing. Before it, the committer checks, on the snapshot
it commits against, that the files continue the table; the catalog swaps the table's
metadata only if no other commit came first (pyiceberg asserts the branch's snapshot id:
``CommitFailedException``), and then the snapshot is read again and checked again. So two
writers never both commit a range, and a range is never committed twice.

**Restart:** the current snapshot's ``olr_buffer.last_tx_seq`` is where the table ends; a
file published but not committed before a kill has a higher range:
:meth:`IcebergChangefeed.uncommitted` finds it among the files listed, and
:meth:`IcebergChangefeed.commit` adds it. A commit whose answer was lost is recognised the
same way: the table's last tx_seq covers it.

**Compaction** is one snapshot: the merged files added and the files they replace
removed. pyiceberg (0.12) writes no ``replace`` snapshot: it is an ``overwrite`` whose rows
are the same (stamped ``olr_buffer.compaction``). No file is deleted: a reader of an older
snapshot may need it (expiring snapshots and removing orphan files is the user's).

**Fencing** (a writer under the changefeed's lease, :mod:`..fencing`). Every snapshot a
leased writer commits carries ``olr_buffer.lease_generation``. A take-over
(:meth:`IcebergChangefeed.fence`) commits a snapshot that adds nothing, stamped with the
new generation (and where the table ends, as every snapshot is). An older writer's commit,
made against a snapshot from before it, fails (pyiceberg asserts the branch's snapshot id:
table properties cannot be asserted, a snapshot can), and reading the table past it, as
after every conflict, meets the later generation: it stops with
:class:`~olr_buffer.store.WriterFencedError` instead of trying again (the manifests its
failed try wrote stay under ``_iceberg/metadata/``, named by no snapshot: no reader sees
them). A table opened after the fence is refused at once.

**Other writers.** Each snapshot the committer reads past must carry
``olr_buffer.app_id``; one that does not (another program's append, delete, rewrite)
raises :class:`IcebergForeignCommitError`, naming it.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from ....faults import fault_point
from ....store import Store, StoreError, StoreUnreachableError, error_in_text, fenced_error
from ..iceberg_settings import ICEBERG_DIR, IcebergSettings, default_catalog_uri
from ..table_chain import check_merge, commit_parts, following_parts
from .errors import (
    IcebergCatalogError,
    IcebergChainError,
    IcebergChangefeedError,
    IcebergConflictError,
    IcebergForeignCommitError,
    IcebergTableMismatchError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

METADATA_DIR = f"{ICEBERG_DIR}/metadata"
CATALOG_NAME = "olr_buffer"
COMMIT_ATTEMPTS = 10  # commits tried against a table that other commits keep moving
PREFIX = "olr_buffer."
APP_ID = f"{PREFIX}app_id"
LAST_TX_SEQ = f"{PREFIX}last_tx_seq"
#: The lease generation of the writer that made a snapshot (a leased writer's, a fence's).
LEASE_GENERATION = f"{PREFIX}lease_generation"
NAME_MAPPING = "schema.name-mapping.default"
METADATA_PATH = "write.metadata.path"
#: pyiceberg's own retry of a commit that lost the race rebases the append onto the new
#: snapshot: the range would be committed twice. Off: the committer looks again itself.
NO_COMMIT_RETRY = {"commit.retry.num-retries": "0"}

#: Iceberg's type (as pyiceberg prints it) of each Arrow type the changefeed writes.
_ICEBERG_TYPES = {
    pa.int64(): "long",
    pa.int32(): "int",
    pa.string(): "string",
    pa.timestamp("us", tz="UTC"): "timestamptz",
}


@dataclass(frozen=True, slots=True)
class IcebergPart:
    """A published part file: its name (relative to the table's location), size in bytes,
    range of transactions and rows, and its footer (the data file's statistics come from
    it: the file is not read again to commit it)."""

    name: str
    size: int
    first_tx_seq: int
    last_tx_seq: int
    rows: int
    footer: pq.FileMetaData = field(compare=False, repr=False)

    @classmethod
    def from_local(cls, path: str | os.PathLike[str], name: str, first: int, last: int) -> IcebergPart:
        """From the local file that is (or will be) published as ``name``."""
        meta = pq.read_metadata(path)
        return cls(name, os.stat(path).st_size, first, last, meta.num_rows, meta)

    @classmethod
    def from_store(cls, store: Store, name: str, first: int, last: int) -> IcebergPart:
        """From the published object's footer (one ranged read on S3)."""
        with store.open_input(name) as f:
            size = f.size()
            meta = pq.read_metadata(f)
        return cls(name, size, first, last, meta.num_rows, meta)


class IcebergChangefeed:
    """The Iceberg table of the changefeed in ``store``, written for the queue ``app_id``;
    see the module doc. Opening creates the table with ``schema`` (the changefeed's Arrow
    schema) if there is none and ``create``, and checks an existing one. ``writer``: facts
    recorded in each snapshot's summary (a host, a pid, a lease generation). ``catalog``:
    the catalog ``settings`` name, opened already (:attr:`catalog` of another table of
    the same changefeed), else opened here."""

    def __init__(
        self,
        store: Store,
        schema: pa.Schema,
        settings: IcebergSettings,
        *,
        app_id: str,
        writer: dict[str, str | int] | None = None,
        create: bool = True,
        local_root: str | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        self.store = store
        self.schema = schema
        self.app_id = app_id
        self.writer = dict(writer or {})
        self.settings = settings
        uri, _ = store.delta_location()
        self.location = f"file://{os.path.abspath(local_root)}" if local_root is not None else uri.rstrip("/")
        self._local_root = local_root
        self.catalog_uri = settings.catalog or default_catalog_uri(local_root)
        if self.catalog_uri is None:
            raise IcebergCatalogError(
                f"{store.location()}: an Iceberg changefeed on object storage needs a catalog: its default, a SQLite "
                "file beside the changefeed, must be local",
                hint="give --iceberg-catalog sqlite:////PATH/catalog.db (a local file) or a REST catalog's URL",
                uri=store.location(),
            )
        self.table_name = settings.table_name
        if "." not in self.table_name:
            raise IcebergCatalogError(
                f"{store.location()}: Iceberg table name {self.table_name!r} is not NS.NAME",
                hint="give --iceberg-table NAMESPACE.NAME",
                uri=store.location(),
            )
        store.list(f"{ICEBERG_DIR}/")  # reachable, and allowed: the store's own one-line errors
        self.catalog = catalog if catalog is not None else self._call(self._open_catalog, "open the Iceberg catalog")
        table = self._call(self._load, "load the Iceberg table")
        if table is None:
            if not create:
                raise IcebergChangefeedError(
                    f"{store.location()}: no Iceberg table {self.table_name} in the catalog {self._catalog_text()}",
                    uri=store.location(),
                )
            table = self._call(self._create, "create the Iceberg table")
        self._table: Table = table
        self._check_table()
        self._vetted: int | None = None  # snapshots after it are checked for other writers' commits
        self._generation: int | None = None  # the table's lease generation: the latest a snapshot carries
        self._last: int | None = None
        self._stale = False
        self._refresh(first=True)

    # -- the catalog and the table ------------------------------------------------------

    def _catalog_text(self) -> str:
        """The catalog's URI without a user or password (for messages)."""
        parts = urlsplit(self.catalog_uri or "")
        if "@" not in parts.netloc:
            return self.catalog_uri or ""
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))

    def _io_properties(self) -> dict[str, str]:
        """pyiceberg's FileIO properties for this store (no credential: pyarrow's S3
        filesystem reads the AWS variables, as boto3 does)."""
        props = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
        if self._local_root is None:
            _, options = self.store.delta_location()
            if options.get("AWS_REGION"):
                props["s3.region"] = options["AWS_REGION"]
            if options.get("AWS_ENDPOINT_URL"):
                props["s3.endpoint"] = options["AWS_ENDPOINT_URL"]
        return props

    def _open_catalog(self) -> Catalog:
        uri = self.catalog_uri
        assert uri is not None
        props = self._io_properties()
        if uri.startswith(("http://", "https://")):
            from pyiceberg.catalog.rest import RestCatalog

            return RestCatalog(CATALOG_NAME, uri=uri, **props)
        from pyiceberg.catalog.sql import SqlCatalog

        if (
            uri.startswith("sqlite:///")
            and self._local_root is not None
            and uri == default_catalog_uri(self._local_root)
        ):
            os.makedirs(os.path.join(self._local_root, ICEBERG_DIR), mode=0o700, exist_ok=True)
        return SqlCatalog(CATALOG_NAME, uri=uri, **props)

    def _load(self) -> Table | None:
        try:
            return self.catalog.load_table(self.table_name)
        except NoSuchTableError:
            return None

    def _create(self) -> Table:
        namespace = self.table_name.rsplit(".", 1)[0]
        try:
            self.catalog.create_namespace(namespace)
        except NamespaceAlreadyExistsError:
            pass
        try:
            table = self.catalog.create_table(
                self.table_name,
                self.schema,
                location=self.location,
                properties={METADATA_PATH: f"{self.location}/{METADATA_DIR}", **NO_COMMIT_RETRY},
            )
        except TableAlreadyExistsError:  # created by another process meanwhile
            return self.catalog.load_table(self.table_name)
        log.info("%s: Iceberg table %s created in %s", self.store.location(), self.table_name, self._catalog_text())
        return table

    def _check_table(self) -> None:
        where = self.store.location()
        table = self._table
        if table.location().rstrip("/") != self.location:
            raise IcebergTableMismatchError(
                f"{where}: the Iceberg table {self.table_name} of {self._catalog_text()} is at {table.location()}, "
                "not at the changefeed",
                hint="give each changefeed a table of its own (--iceberg-table NS.NAME)",
                uri=where,
            )
        if not table.spec().is_unpartitioned():
            raise IcebergTableMismatchError(
                f"{where}: the Iceberg table {self.table_name} is partitioned; the changefeed's files are not",
                hint="give the changefeed a table of its own",
                uri=where,
            )
        theirs = {f.name: f for f in table.schema().fields}
        for column in self.schema:
            other = theirs.pop(column.name, None)
            want = _ICEBERG_TYPES[column.type]
            if other is None or str(other.field_type) != want or (column.nullable and other.required):
                got = "no such column" if other is None else f"{other.field_type}" + (" required" * other.required)
                raise IcebergTableMismatchError(
                    f"{where}: column {column.name} of the Iceberg table {self.table_name} is {got}, the changefeed "
                    f"writes {want}",
                    hint="give the changefeed a table of its own",
                    uri=where,
                )
        required = [name for name, f in theirs.items() if f.required]
        if required:
            raise IcebergTableMismatchError(
                f"{where}: the Iceberg table has required columns the changefeed does not write: {', '.join(required)}",
                uri=where,
            )
        wanted: dict[str, Any] = {k: v for k, v in NO_COMMIT_RETRY.items() if table.properties.get(k) != v}
        if table.name_mapping() is None:  # (a table created by a run killed right after)
            wanted[NAME_MAPPING] = table.schema().name_mapping.model_dump_json()
        if wanted:
            self._table = self._call(
                lambda: table.transaction().set_properties(wanted).commit_transaction(),
                "set the Iceberg table's properties",
            )

    def _refresh(self, first: bool = False) -> None:
        self._table = self._call(self._table.refresh, "read the Iceberg table")
        self._check_foreign(first)
        self._stale = False

    def _check_foreign(self, first: bool) -> None:
        """The snapshots from the last one checked to the current one: raises
        :class:`IcebergForeignCommitError` for the first that another writer made; sets
        where the table ends (the current snapshot's stamp)."""
        current = self._table.current_snapshot()
        if current is None:
            self._last = None
            self._vetted = None
            self._generation = None
            return
        if first:
            self._generation = self._latest_generation(current)
        chain = []
        snapshot: Snapshot | None = current
        while snapshot is not None and snapshot.snapshot_id != self._vetted:
            chain.append(snapshot)
            if first:
                break  # what came before this committer opened the table is not its concern
            parent = snapshot.parent_snapshot_id
            snapshot = self._table.snapshot_by_id(parent) if parent is not None else None
        for snapshot in reversed(chain):
            summary = snapshot.summary
            if summary is None or summary[APP_ID] is None or summary[LAST_TX_SEQ] is None:
                where = self.store.location()
                what = summary.operation.value if summary is not None else "a snapshot without summary"
                raise IcebergForeignCommitError(
                    f"{where}: Iceberg snapshot {snapshot.snapshot_id} of {self.table_name} was committed by another "
                    f"writer ({what}): olr-buffer must be the only writer of a changefeed's table",
                    hint="roll the table back to the snapshot before it (Spark: CALL system.rollback_to_snapshot) and "
                    "start again; do not move the changefeed's own files",
                    uri=where,
                    snapshot_id=snapshot.snapshot_id,
                )
            held = _generation(snapshot)
            if held is not None and (self._generation is None or held > self._generation):
                self._generation = held
        self._check_lease()
        summary = current.summary
        assert summary is not None
        last = int(str(summary[LAST_TX_SEQ]))
        self._last = last if last >= 0 else None  # (a fence of a table that holds nothing: -1)
        self._vetted = current.snapshot_id

    def _latest_generation(self, snapshot: Snapshot | None) -> int | None:
        """The lease generation of ``snapshot`` or, if it carries none (a compaction without
        a lease, a writer without one), of its nearest ancestor that does."""
        while snapshot is not None:
            held = _generation(snapshot)
            if held is not None:
                return held
            parent = snapshot.parent_snapshot_id
            snapshot = self._table.snapshot_by_id(parent) if parent is not None else None
        return None

    def _check_lease(self) -> None:
        """:class:`WriterFencedError` if the table carries a later lease generation than
        this writer's (checked when the table is opened and on each snapshot read past
        after it: no request of its own). A writer without a generation is not fenced."""
        own = self.writer.get("lease_generation")
        if isinstance(own, int) and self._generation is not None and self._generation > own:
            raise fenced_error(self.store, self.store.location(), own)

    def fence(self, generation: int) -> int | None:
        """Commit a snapshot that adds nothing, stamped with lease ``generation`` (a
        take-over; see the module doc), unless the table carries it already; returns the
        new snapshot id, or None. :class:`WriterFencedError` if it carries a later one."""
        for _ in range(COMMIT_ATTEMPTS):
            self._refresh()
            if self._generation is not None and self._generation >= generation:
                if self._generation > generation:
                    raise fenced_error(self.store, self.store.location(), generation)
                return None
            last = self._last if self._last is not None else -1
            summary = self._summary(fence=generation, lease_generation=generation, last_tx_seq=last)
            table = self._table

            def stamp(table: Table = table, summary: dict[str, str] = summary) -> Table:
                tx = table.transaction()
                with tx.update_snapshot(snapshot_properties=summary).fast_append():
                    pass
                return tx.commit_transaction()

            try:
                self._table = self._call(stamp, "fence the Iceberg table")
            except CommitFailedException:
                self._stale = True
                continue  # another commit came first: look again
            except BaseException:
                self._stale = True
                raise
            self._refresh()
            log.info(
                "%s: Iceberg table fenced at lease generation %d (snapshot %d)",
                self.store.location(),
                generation,
                self.snapshot_id,
            )
            return self.snapshot_id
        raise IcebergConflictError(
            f"{self.store.location()}: other commits to the Iceberg table came first {COMMIT_ATTEMPTS} times",
            hint="run one writer per changefeed",
            uri=self.store.location(),
        )

    def _call(self, call: Callable[[], T], doing: str) -> T:
        """``call()`` on the catalog or the table: its errors as the store's or this package's."""
        try:
            return call()
        except (IcebergChangefeedError, StoreError, CommitFailedException):
            raise
        except Exception as exc:  # noqa: BLE001 - pyiceberg, SQLAlchemy, pyarrow, HTTP: one line each
            raise self._error(exc, doing) from None

    # -- what is committed --------------------------------------------------------------

    @property
    def snapshot_id(self) -> int | None:
        snapshot = self._table.current_snapshot()
        return snapshot.snapshot_id if snapshot is not None else None

    @property
    def next_tx_seq(self) -> int:
        """The first tx_seq the next commit must add."""
        if self._stale:
            self._refresh()
        return 0 if self._last is None else self._last + 1

    def last_committed(self) -> int | None:
        """The last tx_seq the table holds (its current snapshot's stamp), read from the
        table as it is now; None if it holds nothing."""
        self._refresh()
        return self._last

    def files(self) -> list[str]:
        """The files of the table's current snapshot (names relative to the location)."""
        return sorted(self._data_files())

    def _data_files(self) -> dict[str, Any]:
        """Name -> pyiceberg DataFile of the current snapshot's files."""
        table = self._table
        out = {}
        for task in self._call(lambda: list(table.scan().plan_files()), "read the Iceberg table's manifests"):
            out[self._relative(task.file.file_path)] = task.file
        return out

    def _relative(self, path: str) -> str:
        for base in (self.location + "/", self.location.removeprefix("file://") + "/"):
            if path.startswith(base):
                return path[len(base) :]
        return path

    def uncommitted(self, published: Sequence[IcebergPart]) -> list[IcebergPart]:
        """Of the ``published`` files (what a listing found), those that follow the
        table's last commit, in order: published before a kill but never committed."""
        self._refresh()
        return following_parts(
            published, self.next_tx_seq, self.store, table="the Iceberg table", error=IcebergChainError
        )

    # -- commits ------------------------------------------------------------------------

    def commit(self, files: Sequence[IcebergPart]) -> int | None:
        """Add ``files`` (published, contiguous) in one snapshot stamped with the queue id
        and their last tx_seq. Returns the new snapshot id, or None if the table holds
        these files already (committed before, the answer lost: nothing is done); a
        range the table holds in other files is an :class:`IcebergChainError`."""
        files = commit_parts(files, self.store, IcebergChainError)
        if not files:
            return None
        first, last = files[0].first_tx_seq, files[-1].last_tx_seq
        for _ in range(COMMIT_ATTEMPTS):
            if self._stale:
                self._refresh()
            committed = self._last
            if committed is not None and committed >= last:
                held = self._data_files()
                others = [f.name for f in files if f.name not in held]
                if others:  # the range is the table's, from other files: not this commit's, lost
                    raise IcebergChainError(
                        f"{self.store.location()}: cannot commit tx_seq {first}..{last}: the Iceberg table holds "
                        f"them already, in other files than {', '.join(others)}",
                        hint="another writer wrote this table",
                        uri=self.store.location(),
                        first_tx_seq=first,
                        last_tx_seq=last,
                    )
                log.info(
                    "%s: tx_seq %d..%d committed already (the Iceberg table holds up to %d)",
                    self.store.location(),
                    first,
                    last,
                    committed,
                )
                return None
            if first != self.next_tx_seq:
                raise IcebergChainError(
                    f"{self.store.location()}: cannot commit tx_seq {first}..{last}: the Iceberg table holds "
                    + (f"up to tx_seq {committed}" if committed is not None else "no transaction"),
                    hint="another writer wrote this table, or its files were removed",
                    uri=self.store.location(),
                    first_tx_seq=first,
                    last_tx_seq=last,
                )
            base = self.snapshot_id
            fault_point("before_iceberg_commit")
            try:
                self._append(files, self._summary(first_tx_seq=first, last_tx_seq=last, files=len(files)))
            except CommitFailedException:
                self._stale = True  # another commit came first: look again
                continue
            except BaseException:
                self._stale = True  # it may have gone in: the next call looks
                raise
            fault_point("after_iceberg_commit")
            current = self._table.current_snapshot()
            assert current is not None
            if current.parent_snapshot_id == base:
                self._vetted = current.snapshot_id
                self._last = last
            else:
                self._refresh()
            log.info(
                "%s: committed tx_seq %d..%d (%d files) as Iceberg snapshot %d",
                self.store.location(),
                first,
                last,
                len(files),
                current.snapshot_id,
            )
            return current.snapshot_id
        raise IcebergConflictError(
            f"{self.store.location()}: other commits to the Iceberg table came first {COMMIT_ATTEMPTS} times",
            hint="run one writer per changefeed",
            uri=self.store.location(),
        )

    def _append(self, files: Sequence[IcebergPart], summary: dict[str, str]) -> None:
        table = self._table

        def append() -> Table:
            data_files = [self._data_file(table, f) for f in files]
            tx = table.transaction()
            with tx.update_snapshot(snapshot_properties=summary).fast_append() as appending:
                for data_file in data_files:
                    appending.append_data_file(data_file)
            fault_point("iceberg_manifests_written")  # the snapshot's manifests written, the catalog not yet told
            return tx.commit_transaction()

        self._table = self._call(append, "commit to the Iceberg table")

    def _data_file(self, table: Table, f: IcebergPart) -> DataFile:
        """``f`` as an Iceberg data file, its statistics from its footer (as pyiceberg's
        ``parquet_file_to_data_file`` does, without reading the file again)."""
        schema = table.schema()
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=f.footer,
            stats_columns=compute_statistics_plan(schema, table.metadata.properties),
            parquet_column_mapping=parquet_path_to_id_mapping(schema),
        )
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=f"{self.location}/{f.name}",
            file_format=FileFormat.PARQUET,
            partition=statistics.partition(table.spec(), schema),
            file_size_in_bytes=f.size,
            sort_order_id=None,
            spec_id=table.metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )

    def compact_many(self, merges: Sequence[tuple[Sequence[IcebergPart], IcebergPart]]) -> int:
        """One snapshot for several merges (``(removed, added)`` each: contiguous files of
        the table, and the merged file holding the same transactions): the files are
        replaced, none deleted. Returns the new snapshot id."""
        self._refresh()
        present = self._data_files()
        removed_all: list[IcebergPart] = []
        for removed, added in merges:
            removed_all.extend(check_merge(removed, added, self.store, IcebergChainError))
        missing = [f.name for f in removed_all if f.name not in present]
        if missing:
            raise IcebergConflictError(
                f"{self.store.location()}: cannot compact: {', '.join(missing)} not in the Iceberg table (any more)",
                uri=self.store.location(),
            )
        first = min(added.first_tx_seq for _, added in merges)
        last = max(added.last_tx_seq for _, added in merges)
        summary = self._summary(compaction="true", first_tx_seq=first, last_tx_seq=last, files=len(removed_all))
        summary[LAST_TX_SEQ] = str(self._last if self._last is not None else last)  # where the table ends
        table = self._table

        def replace() -> Table:
            data_files = [self._data_file(table, added) for _, added in merges]
            tx = table.transaction()
            with tx.update_snapshot(snapshot_properties=summary).overwrite() as overwriting:
                for f in removed_all:
                    overwriting.delete_data_file(present[f.name])
                for data_file in data_files:
                    overwriting.append_data_file(data_file)
            return tx.commit_transaction()

        try:
            self._table = self._call(replace, "commit a compaction to the Iceberg table")
        except CommitFailedException as exc:
            self._stale = True
            raise IcebergConflictError(
                f"{self.store.location()}: compaction conflicts with another commit: {_first_line(exc)}",
                uri=self.store.location(),
            ) from None
        except BaseException:
            self._stale = True
            raise
        self._refresh()
        snapshot_id = self.snapshot_id
        assert snapshot_id is not None
        log.info(
            "%s: compacted %d files into %d as Iceberg snapshot %d",
            self.store.location(),
            len(removed_all),
            len(merges),
            snapshot_id,
        )
        return snapshot_id

    def commit_paths(self) -> list[str]:
        """The local files the current snapshot's commit wrote: the metadata file, the
        manifest list, its manifests (for their modes)."""
        paths = [self._table.metadata_location]
        snapshot = self._table.current_snapshot()
        if snapshot is not None:
            paths.append(snapshot.manifest_list)
            commit_uuid = os.path.basename(snapshot.manifest_list).rsplit("-", 5)[-5:]
            folder = os.path.dirname(snapshot.manifest_list.removeprefix("file://"))
            paths.extend(glob.glob(os.path.join(folder, f"{'-'.join(commit_uuid).removesuffix('.avro')}-m*.avro")))
        return [p.removeprefix("file://") for p in paths]

    # -- helpers ------------------------------------------------------------------------

    def _summary(self, **facts: Any) -> dict[str, str]:
        summary = {APP_ID: self.app_id}
        summary.update({f"{PREFIX}{k}": str(v) for k, v in self.writer.items()})
        summary.update({f"{PREFIX}{k}": str(v) for k, v in facts.items()})
        return summary

    def _error(self, exc: BaseException, doing: str) -> StoreError | IcebergChangefeedError:
        """The store's error type for a failure the store or the catalog can get over (not
        answering, busy) or that the store refused (:func:`~olr_buffer.store.error_in_text`),
        else an :class:`IcebergChangefeedError`; one line."""
        where = self.store.location()
        text = _first_line(exc)
        lowered = text.lower()
        if "database is locked" in lowered or "database table is locked" in lowered:
            return StoreUnreachableError(
                f"{where}: cannot {doing}: the Iceberg catalog {self._catalog_text()} is locked by another process",
                hint="olr-buffer run retries; replay resumes when run again",
                uri=where,
            )
        if "file is not a database" in lowered or "database disk image is malformed" in lowered:
            return IcebergCatalogError(
                f"{where}: cannot {doing}: the Iceberg catalog {self._catalog_text()} is damaged ({text})",
                hint="restore the catalog file from a backup, or register the table's newest metadata file "
                f"({METADATA_DIR}/*.metadata.json) in a new catalog (docs/operations.md)",
                uri=where,
            )
        if "unable to open database file" in lowered:
            return IcebergCatalogError(
                f"{where}: cannot {doing}: cannot open the Iceberg catalog {self._catalog_text()}",
                hint="check the catalog's path and its directory's permissions",
                uri=where,
            )
        found = error_in_text(text, where, doing, who="the store or the catalog")
        if found is not None:
            return found
        if isinstance(exc, FileNotFoundError):
            return IcebergChangefeedError(
                f"{where}: cannot {doing}: a file of the Iceberg table is missing: {text}",
                hint="the table's metadata or files were removed by hand",
                uri=where,
            )
        return IcebergChangefeedError(f"{where}: cannot {doing}: {text}", uri=where)


def _generation(snapshot: Snapshot) -> int | None:
    """The lease generation ``snapshot`` carries, if any."""
    held = snapshot.summary[LEASE_GENERATION] if snapshot.summary is not None else None
    try:
        return int(str(held)) if held is not None else None
    except ValueError:
        return None


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__
