"""The commits of a Delta changefeed's log (:class:`DeltaChangefeed`): its Parquet files, as
published, added to the table's log by commits that carry the queue's application
transaction. Which files make the changefeed, its recorded format and the glue to the
writer and compaction are :mod:`..delta_table`.

Layout: the table's root is the changefeed's root; ``_delta_log/`` beside the part files
(a ``_`` folder: Spark's Parquet reader skips it). The files are committed as they are,
with add actions (no rewrite), their statistics taken from their footers.

**One commit per publish**, with ``txn(appId = the queue id, version = the last tx_seq it
adds)`` (Delta's idempotent-write mechanism) and ``dataChange = true``. Before it, the
committer checks, on the snapshot it commits against, that the files continue the table
(their first ``tx_seq`` is one past the largest in the table) and that the queue's
version does not cover them already; the commit then goes in only if no other commit came
first (no automatic retry: on a conflict the snapshot is read again and checked again).
So two writers never both commit a range, and a range is never committed twice.

**Restart:** :meth:`DeltaChangefeed.last_committed` is the queue's version in the table;
a file published but not committed before a kill has a higher range:
:meth:`DeltaChangefeed.uncommitted` finds it among the files listed, and
:meth:`DeltaChangefeed.commit` adds it. A commit whose answer was lost is recognised the
same way: the queue's version covers it.

**Compaction** is one commit: the merged file added and the files it replaces removed,
all with ``dataChange = false`` (streaming readers skip it; the rows do not change). No
file is deleted: a reader of an older version may need it (``VACUUM`` is the user's).

**Other writers.** olr-buffer is the table's only writer while it writes: every commit
it reads past (the versions between its own, each time it reads the log again or
commits) is checked, and one that olr-buffer did not write (its ``commitInfo`` has no
``olr_buffer.app_id``) and that adds or removes files or changes the table's metadata or
protocol (an append, OPTIMIZE, Z-order, DELETE, MERGE, RESTORE, a property set) raises
:class:`DeltaForeignCommitError`, naming the version and what it did. A commit that
changes none of that (VACUUM's ``VACUUM START``/``VACUUM END``) is let pass. Commits
made before the committer opened the table are not its concern: the changefeed's own
start-up checks its files.

**Fencing.** A take-over (:meth:`DeltaChangefeed.fence`) commits
``txn(appId = "olr-buffer.lease", version = the new lease generation)``. A commit of a
writer of an older generation then fails: the log version it would write exists (its
snapshot is from before the fence), and reading the log past it (as after every conflict)
meets the later lease version: it stops with :class:`~olr_buffer.store.WriterFencedError`
instead of trying again against the new snapshot. A table opened after the fence is
refused at once (its lease version is checked when it is opened).

**Protocol:** reader version 1, writer version 2, readable by Spark 3.5 with Delta 3.x.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError, DeltaProtocolError, TableNotFoundError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from ....faults import fault_point
from ....store import ObjectNotFoundError, Store, StoreError, error_in_text, fenced_error
from ..table_chain import check_merge, commit_parts, following_parts
from .errors import (
    DeltaChainError,
    DeltaChangefeedError,
    DeltaConflictError,
    DeltaForeignCommitError,
    DeltaTableMismatchError,
)
from .stats import delta_stats

log = logging.getLogger(__name__)

T = TypeVar("T")

DELTA_LOG = "_delta_log"
COMMIT_ATTEMPTS = 10  # commits tried against a table that other commits keep moving
META_PREFIX = "olr_buffer."
#: The application id whose ``txn`` version is the lease generation of the table's writer.
LEASE_APP = "olr-buffer.lease"


@dataclass(frozen=True, slots=True)
class PartFile:
    """A published part file: its name (relative to the table's root), size in bytes,
    range of transactions, rows, and Delta statistics (:func:`delta_stats`)."""

    name: str
    size: int
    first_tx_seq: int
    last_tx_seq: int
    rows: int
    stats: str

    @classmethod
    def from_metadata(cls, name: str, size: int, first: int, last: int, meta: pq.FileMetaData) -> PartFile:
        return cls(name, size, first, last, meta.num_rows, delta_stats(meta))

    @classmethod
    def from_local(cls, path: str | os.PathLike[str], name: str, first: int, last: int) -> PartFile:
        """From the local file that is (or will be) published as ``name``."""
        return cls.from_metadata(name, os.stat(path).st_size, first, last, pq.read_metadata(path))

    @classmethod
    def from_store(cls, store: Store, name: str, first: int, last: int) -> PartFile:
        """From the published object's footer (one ranged read on S3)."""
        with store.open_input(name) as f:
            size = f.size()
            meta = pq.read_metadata(f)
        return cls.from_metadata(name, size, first, last, meta)


class DeltaChangefeed:
    """The Delta table of the changefeed in ``store``, written for the queue ``app_id``;
    see the module doc. Opening creates the table with ``schema`` (the changefeed's Arrow
    schema) if there is none, and checks an existing one. ``writer``: facts recorded in
    each commit's ``commitInfo`` (a writer id, a lease generation)."""

    def __init__(
        self,
        store: Store,
        schema: pa.Schema,
        *,
        app_id: str,
        writer: dict[str, str | int] | None = None,
        configuration: dict[str, str] | None = None,
        create: bool = True,
    ) -> None:
        self.store = store
        self.schema = schema
        self.app_id = app_id
        self.writer = dict(writer or {})
        self.uri, self._options = store.delta_location()
        self._delta_schema = DeltaSchema.from_arrow(schema)
        store.list(f"{DELTA_LOG}/")  # reachable, and allowed: the store's own one-line errors
        table = self._load()
        if table is None:
            if not create:
                raise DeltaChangefeedError(f"{store.location()}: no Delta table here", uri=store.location())
            table = self._create(configuration)
        self._table = table
        self._check_table()
        self._check_lease(self._read(lambda: self._table.transaction_version(LEASE_APP)))
        self._vetted = self.version  # versions after it are checked for other writers' commits
        self._stale = False
        self._next = self._table_next()

    # -- the table ----------------------------------------------------------------------

    def _load(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.uri, storage_options=self._options)
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as exc:
            raise self._error(exc, "open the Delta table") from None

    def _create(self, configuration: dict[str, str] | None) -> DeltaTable:
        try:
            table = DeltaTable.create(
                self.uri,
                self._delta_schema,
                mode="error",
                configuration=configuration,
                storage_options=self._options,
                commit_properties=CommitProperties(custom_metadata=self._commit_info()),
            )
        except (DeltaError, OSError) as exc:
            existing = self._load()  # created by another process meanwhile?
            if existing is None:
                raise self._error(exc, "create the Delta table") from None
            return existing
        log.info("%s: Delta table created (protocol reader 1, writer 2)", self.store.location())
        return table

    def _check_table(self) -> None:
        where = self.store.location()
        meta = self._read(self._table.metadata)
        if meta.partition_columns:
            raise DeltaTableMismatchError(
                f"{where}: the Delta table is partitioned by {', '.join(meta.partition_columns)}; the changefeed's "
                "files are not",
                hint="give the changefeed a location of its own",
                uri=where,
            )
        theirs = {f["name"]: f for f in orjson.loads(self._read(lambda: self._table.schema().to_json()))["fields"]}
        ours = orjson.loads(self._delta_schema.to_json())["fields"]
        for field in ours:
            other = theirs.pop(field["name"], None)
            if other is None:
                raise DeltaTableMismatchError(
                    f"{where}: the Delta table has no column {field['name']}: it is not a changefeed's table",
                    hint="give the changefeed a location of its own",
                    uri=where,
                )
            if other["type"] != field["type"] or (field["nullable"] and not other["nullable"]):
                raise DeltaTableMismatchError(
                    f"{where}: column {field['name']} of the Delta table is {_type_text(other)}, "
                    f"the changefeed writes {_type_text(field)}",
                    uri=where,
                )
        required = [name for name, f in theirs.items() if not f["nullable"]]
        if required:
            raise DeltaTableMismatchError(
                f"{where}: the Delta table has required columns the changefeed does not write: {', '.join(required)}",
                uri=where,
            )

    def _refresh(self) -> None:
        self._read(self._table.update_incremental)
        self._check_foreign()
        self._next = self._table_next()
        self._stale = False

    def _check_foreign(self) -> None:
        """Each version from the last one checked to the snapshot's: raises
        :class:`DeltaForeignCommitError` for the first that another writer made (see the
        module doc)."""
        current = self.version
        while self._vetted < current:
            version = self._vetted + 1
            name = f"{DELTA_LOG}/{version:020d}.json"
            try:
                text = self.store.read(name)
            except ObjectNotFoundError:
                raise DeltaChangefeedError(
                    f"{self.store.location(name)}: version {version} of the Delta table is not in its log",
                    hint="the log was cleaned up while the changefeed was written: keep delta.logRetentionDuration "
                    "(30 days by default)",
                    uri=self.store.location(name),
                ) from None
            self._check_lease(_lease_version(text))
            what = _foreign_commit(text)
            if what is not None:
                where = self.store.location()
                raise DeltaForeignCommitError(
                    f"{where}: Delta version {version} was committed by another writer ({what}): olr-buffer must be "
                    "the only writer of a changefeed's table",
                    hint=f"restore the table to version {version - 1} (deltalake: DeltaTable(URI).restore("
                    f"{version - 1})) and delete the files that commit added, then start again; do not move the "
                    'changefeed\'s own files (docs/failure-scenarios.md, "Another writer on a Delta changefeed")',
                    uri=where,
                    version=version,
                )
            self._vetted = version

    def _read(self, call: Callable[[], T]) -> T:
        """``call()`` on the table (delta-rs reads the log lazily): its errors as the
        store's or this package's."""
        try:
            return call()
        except (DeltaError, OSError) as exc:
            raise self._error(exc, "read the Delta log") from None

    def _table_next(self) -> int:
        """One past the largest tx_seq of the files in the snapshot (0 if it has none),
        from their statistics."""
        adds = self._read(lambda: pa.table(self._table.get_add_actions(flatten=True)))
        if adds.num_rows == 0:
            return 0
        if "max.tx_seq" not in adds.column_names or adds.column("max.tx_seq").null_count:
            raise DeltaTableMismatchError(
                f"{self.store.location()}: a file of the Delta table has no tx_seq statistics: it was not added "
                "by olr-buffer",
                hint="give the changefeed a location of its own",
                uri=self.store.location(),
            )
        return int(pc.max(adds.column("max.tx_seq")).as_py()) + 1

    # -- what is committed --------------------------------------------------------------

    @property
    def version(self) -> int:
        """The table version of the snapshot this committer holds."""
        return self._read(self._table.version)

    @property
    def next_tx_seq(self) -> int:
        """The first tx_seq the next commit must add."""
        if self._stale:
            self._refresh()
        return self._next

    def last_committed(self) -> int | None:
        """The last tx_seq the queue committed to the table (its ``txn`` version), read
        from the table as it is now; None if it committed nothing."""
        self._refresh()
        return self._read(lambda: self._table.transaction_version(self.app_id))

    def files(self) -> list[str]:
        """The files of the table's current snapshot (names relative to the root)."""
        return sorted(self._paths())

    def _paths(self) -> set[str]:
        return set(self._read(lambda: pa.table(self._table.get_add_actions()).column("path").to_pylist()))

    def uncommitted(self, published: Sequence[PartFile]) -> list[PartFile]:
        """Of the ``published`` files (what a listing found), those that follow the
        table's last commit, in order: published before a kill but never committed.
        Files the table holds already are left out; files that overlap it are an error."""
        self._refresh()
        return following_parts(published, self._next, self.store, table="the Delta table", error=DeltaChainError)

    # -- commits ------------------------------------------------------------------------

    def commit(self, files: Sequence[PartFile]) -> int | None:
        """Add ``files`` (published, contiguous) in one commit carrying ``txn(app_id,
        last tx_seq)``. Returns the new table version, or None if the queue's version in
        the table covers them already (committed before: nothing is done)."""
        files = commit_parts(files, self.store, DeltaChainError)
        if not files:
            return None
        first, last = files[0].first_tx_seq, files[-1].last_tx_seq
        now = int(time.time() * 1000)
        actions: list[AddAction | RemoveAction] = [AddAction(f.name, f.size, {}, now, True, f.stats) for f in files]
        info = self._commit_info(first_tx_seq=first, last_tx_seq=last, files=len(files))
        for _ in range(COMMIT_ATTEMPTS):
            if self._stale:
                self._refresh()
            committed = self._read(lambda: self._table.transaction_version(self.app_id))
            if committed is not None and committed >= last:
                log.info(
                    "%s: tx_seq %d..%d committed already (the queue's version is %d)",
                    self.store.location(),
                    first,
                    last,
                    committed,
                )
                self._next = max(self._next, last + 1)
                return None
            if first != self._next or (committed is not None and committed >= first):
                raise DeltaChainError(
                    f"{self.store.location()}: cannot commit tx_seq {first}..{last}: the Delta table holds up to "
                    f"tx_seq {self._next - 1}"
                    + (f", the queue committed up to {committed}" if committed is not None else ""),
                    hint="another writer wrote this table, or its files were removed",
                    uri=self.store.location(),
                    first_tx_seq=first,
                    last_tx_seq=last,
                )
            base = self.version
            fault_point("before_delta_commit")
            try:
                self._table.create_write_transaction(
                    actions,
                    "append",
                    self._delta_schema,
                    commit_properties=CommitProperties(
                        custom_metadata=info,
                        max_commit_retries=0,
                        app_transactions=[Transaction(self.app_id, last)],
                    ),
                )
            except CommitFailedError:
                self._stale = True  # another commit came first: look again
                continue
            except (DeltaError, OSError) as exc:
                self._stale = True  # it may have gone in: the next call looks
                raise self._error(exc, "commit to the Delta table") from None
            fault_point("after_delta_commit")
            self._read(self._table.update_incremental)
            if self.version == base + 1 and self._vetted == base:
                self._vetted = base + 1  # this commit: no other came between
            self._check_foreign()
            if self.version == base + 1:
                self._next = last + 1  # only this commit since the snapshot checked
            else:
                self._next = self._table_next()
            log.info(
                "%s: committed tx_seq %d..%d (%d files) as Delta version %d",
                self.store.location(),
                first,
                last,
                len(files),
                self.version,
            )
            return self.version
        raise DeltaConflictError(
            f"{self.store.location()}: other commits to the Delta table came first {COMMIT_ATTEMPTS} times",
            hint="run one writer per changefeed",
            uri=self.store.location(),
        )

    def _check_lease(self, held: int | None) -> None:
        """:class:`WriterFencedError` if ``held`` (the lease version of the table, or of a
        commit read past) is a later lease generation than this writer's. Checked when the
        table is opened and on each version read past after it (:meth:`_check_foreign`):
        no request of its own. A writer without a generation (a local changefeed's,
        locked) is not fenced."""
        own = self.writer.get("lease_generation")
        if isinstance(own, int) and held is not None and held > own:
            raise fenced_error(self.store, self.store.location(), own)

    def fence(self, generation: int) -> int | None:
        """Commit ``txn(LEASE_APP, generation)`` (a take-over; see the module doc), unless
        the table holds it already; returns the new version, or None."""
        info = self._commit_info(fence=generation)
        for _ in range(COMMIT_ATTEMPTS):
            self._refresh()
            held = self._read(lambda: self._table.transaction_version(LEASE_APP))
            if held is not None and held >= generation:
                if held > generation:
                    raise fenced_error(self.store, self.store.location(), generation)
                return None
            try:
                self._table.create_write_transaction(
                    [],
                    "append",
                    self._delta_schema,
                    commit_properties=CommitProperties(
                        custom_metadata=info,
                        max_commit_retries=0,
                        app_transactions=[Transaction(LEASE_APP, generation)],
                    ),
                )
            except CommitFailedError:
                continue  # another commit came first: look again
            except (DeltaError, OSError) as exc:
                self._stale = True
                raise self._error(exc, "fence the Delta table") from None
            self._refresh()
            log.info(
                "%s: Delta table fenced at lease generation %d (version %d)",
                self.store.location(),
                generation,
                self.version,
            )
            return self.version
        raise DeltaConflictError(
            f"{self.store.location()}: other commits to the Delta table came first {COMMIT_ATTEMPTS} times",
            hint="another writer is still committing: stop it",
            uri=self.store.location(),
        )

    def compact(self, removed: Sequence[PartFile], added: PartFile) -> int:
        """One commit replacing ``removed`` (contiguous files of the table) by ``added``
        (the same transactions, merged), all with ``dataChange = false``. No file is
        deleted. Returns the new table version."""
        return self.compact_many([(removed, added)])

    def compact_many(self, merges: Sequence[tuple[Sequence[PartFile], PartFile]]) -> int:
        """One commit for several merges (:meth:`compact`'s ``(removed, added)`` each):
        a compaction of the changefeed is one Delta commit. Returns the new table version."""
        actions: list[AddAction | RemoveAction] = []
        now = int(time.time() * 1000)
        removed_all: list[PartFile] = []
        for removed, added in merges:
            removed = check_merge(removed, added, self.store, DeltaChainError)
            actions.extend(RemoveAction(f.name, False, now, f.size, {}) for f in removed)
            actions.append(AddAction(added.name, added.size, {}, now, False, added.stats))
            removed_all.extend(removed)
        self._refresh()
        present = self._paths()
        missing = [f.name for f in removed_all if f.name not in present]
        if missing:
            raise DeltaConflictError(
                f"{self.store.location()}: cannot compact: {', '.join(missing)} not in the Delta table (any more)",
                uri=self.store.location(),
            )
        first = min(added.first_tx_seq for _, added in merges)
        last = max(added.last_tx_seq for _, added in merges)
        info = self._commit_info(compaction=True, first_tx_seq=first, last_tx_seq=last, files=len(removed_all))
        try:
            # delta-rs's own conflict check: appends meanwhile are fine, a removal of the same files is not
            self._table.create_write_transaction(
                actions, "append", self._delta_schema, commit_properties=CommitProperties(custom_metadata=info)
            )
        except CommitFailedError as exc:
            self._stale = True
            raise DeltaConflictError(
                f"{self.store.location()}: compaction conflicts with another commit: {_first_line(exc)}",
                uri=self.store.location(),
            ) from None
        except (DeltaError, OSError) as exc:
            self._stale = True
            raise self._error(exc, "commit a compaction to the Delta table") from None
        self._refresh()
        log.info(
            "%s: compacted %d files into %d as Delta version %d",
            self.store.location(),
            len(removed_all),
            len(merges),
            self.version,
        )
        return self.version

    # -- helpers ------------------------------------------------------------------------

    def _commit_info(self, **facts) -> dict:
        info: dict[str, Any] = {f"{META_PREFIX}app_id": self.app_id}
        info.update({f"{META_PREFIX}{k}": v for k, v in self.writer.items()})
        info.update({f"{META_PREFIX}{k}": v for k, v in facts.items()})
        return info

    def _error(self, exc: BaseException, doing: str) -> StoreError | DeltaChangefeedError:
        """The store's error type for a delta-rs failure (its object store says what it
        met in its text: :func:`~olr_buffer.store.error_in_text`), else a
        :class:`DeltaChangefeedError`; one line."""
        where = self.store.location()
        if isinstance(exc, DeltaProtocolError):
            return DeltaTableMismatchError(f"{where}: cannot {doing}: {_first_line(exc)}", uri=where)
        return error_in_text(_clean(str(exc)), where, doing) or DeltaChangefeedError(
            f"{where}: cannot {doing}: {_first_line(exc)}", uri=where
        )


#: The actions of a commit that change what the table holds or how it is read.
_CHANGES = ("add", "remove", "metaData", "protocol", "cdc")


def _foreign_commit(text: bytes) -> str | None:
    """What the commit whose log entry is ``text`` did, if another writer made it and it
    changes the table; None if olr-buffer made it or it changes nothing (VACUUM)."""
    actions = [orjson.loads(line) for line in text.splitlines() if line.strip()]
    info: dict = next((a["commitInfo"] for a in actions if isinstance(a.get("commitInfo"), dict)), {})
    if f"{META_PREFIX}app_id" in info:
        return None
    counts = {kind: sum(1 for a in actions if kind in a) for kind in _CHANGES}
    if not any(counts.values()):
        return None
    by = info.get("engineInfo") or info.get("clientVersion")
    done = [
        f"{counts['add']} file(s) added" if counts["add"] else "",
        f"{counts['remove']} removed" if counts["remove"] else "",
        "metadata changed" if counts["metaData"] else "",
        "protocol changed" if counts["protocol"] else "",
    ]
    return ", ".join(
        [
            f"{info.get('operation') or 'a commit without commitInfo'}" + (f" by {by}" if by else ""),
            *[d for d in done if d],
        ]
    )


def _lease_version(text: bytes) -> int | None:
    """The lease generation a commit's log entry sets (its ``txn`` of ``LEASE_APP``)."""
    for line in text.splitlines():
        if LEASE_APP.encode() in line:
            txn = orjson.loads(line).get("txn")
            if isinstance(txn, dict) and txn.get("appId") == LEASE_APP and isinstance(txn.get("version"), int):
                return txn["version"]
    return None


def _type_text(field: dict) -> str:
    t = field["type"]
    return f"{t if isinstance(t, str) else t.get('type')}{'' if field['nullable'] else ' not null'}"


def _clean(text: str) -> str:
    """delta-rs's error text without its colours and tree drawing, on one line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text).replace("↳", " ")
    return " ".join(text.split())


def _first_line(exc: BaseException) -> str:
    text = _clean(str(exc))
    return text[:300] if text else type(exc).__name__
