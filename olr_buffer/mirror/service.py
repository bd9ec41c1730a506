"""``olr-buffer mirror``: follows a changefeed and keeps one Delta table per source table.

Batches of whole published files (a transaction is never split across files), each
table's changes in a batch applied by one commit (:mod:`.table`). Where to start: each
table's own version (the last ``tx_seq`` its commits applied) says what it holds; the
mirror's progress note (``TARGET/_olr_buffer/mirror.json``, written after a batch's
commits) only saves reading again what every table holds already. A note or a table of
another changefeed, or a table ahead of the changefeed, is refused.

Fault points (:mod:`olr_buffer.faults`, for the tests that kill it): ``mirror_before_commit``
and ``mirror_after_commit`` (around a mirror table's commit), ``mirror_after_history_commit``
(its history table's commit, made before its own) and ``mirror_after_progress`` (the
progress note written).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass

import orjson
import pyarrow as pa

from .. import pidlock
from ..faults import fault_point
from ..store import Lease, ObjectNotFoundError, StoreError, is_remote, open_store
from .errors import MirrorError, MirrorTargetError
from .feed import Feed
from .history import SUFFIX as HISTORY_SUFFIX
from .history import HistoryTable
from .rules import Change, TableRules
from .table import MirrorTable, app_id

log = logging.getLogger(__name__)

PROGRESS = "_olr_buffer/mirror.json"
LOCK = "_olr_buffer/mirror.lock"
LEASE = "_olr_buffer/mirror-lease.json"
RETRY_FIRST, RETRY_CAP = 0.5, 30.0  # seconds between tries while a store fails
#: Changefeed rows read into one batch (whole files: a batch may hold more).
BATCH_ROWS = 200_000


@dataclass(slots=True)
class MirrorOptions:
    changefeed: str
    target: str
    tables: set[tuple[str, str]] | None = None
    until_caught_up: bool = False
    poll_seconds: float = 1.0
    batch_rows: int = BATCH_ROWS
    history: bool = False


@dataclass(slots=True)
class MirrorResult:
    """What a run did: transactions read, changes applied, commits made, the last tx_seq."""

    transactions: int = 0
    changes: int = 0
    commits: int = 0
    last_tx_seq: int = -1


class Mirror:
    def __init__(self, options: MirrorOptions) -> None:
        self.options = options
        self.feed = Feed(options.changefeed)
        self.store = open_store(options.target)
        self.queue_id: str | None = None
        self.tables: dict[tuple[str, str], MirrorTable] = {}
        self.histories: dict[tuple[str, str], HistoryTable] = {}
        self.rules: dict[tuple[str, str], TableRules] = {}
        self.scanned = -1  # every table holds every change up to this tx_seq
        self._fd: int | None = None
        self.tick = time.monotonic()  # the loop's last turn (health)
        self.retries = 0  # times a store failed and the mirror tried again
        self._lease: Lease | None = None
        self.result = MirrorResult()

    # -- the selection's progress note ----------------------------------------------------

    @property
    def _selection(self) -> str:
        tables = self.options.tables
        return "*" if tables is None else ",".join(sorted(f"{o}.{t}" for o, t in tables))

    def _read_progress(self) -> dict:
        try:
            data = self.store.read(PROGRESS)
        except ObjectNotFoundError:
            return {}
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def _write_progress(self) -> None:
        doc = self._read_progress()
        scanned = doc.get("scanned")
        if not isinstance(scanned, dict):
            scanned = {}
        scanned[self._selection] = self.scanned
        self.store.replace(PROGRESS, orjson.dumps({"queue_id": self.queue_id, "scanned": scanned}))

    # -- the start ---------------------------------------------------------------------

    def start(self) -> None:
        self.feed.refresh()
        self.queue_id = self.feed.queue_id()
        if self.queue_id is None:
            if not self.feed.files:
                held = [v for v in (self._read_progress().get("scanned") or {}).values() if isinstance(v, int)]
                if held and max(held) >= 0:
                    raise self._ahead(self.options.target, max(held))
                return  # nothing published yet: the changefeed's id comes with its first file
            raise MirrorError(
                f"{self.feed.location.uri}: the changefeed's files name no queue id",
                hint="mirror needs a changefeed written by olr-buffer",
            )
        doc = self._read_progress()
        if doc and doc.get("queue_id") not in (None, self.queue_id):
            raise MirrorError(
                f"{self.options.target}: holds the mirror of another changefeed (queue {doc.get('queue_id')}, "
                f"not {self.queue_id})",
                hint="give another --target",
            )
        scanned = doc.get("scanned", {}).get(self._selection) if isinstance(doc.get("scanned"), dict) else None
        self.scanned = scanned if isinstance(scanned, int) else -1
        if self.scanned > self.feed.last_tx_seq:
            raise self._ahead(self.options.target, self.scanned)
        for obj in self.store.list("", folders=True):
            owner = obj.name.rstrip("/")
            if owner.startswith(("_", ".")):
                continue
            for tobj in self.store.list(f"{owner}/", folders=True):
                name = tobj.name.rstrip("/").rpartition("/")[2]
                if name.endswith(HISTORY_SUFFIX):
                    continue
                if self.options.tables is None or (owner, name) in self.options.tables:
                    self._table(owner, name)

    def _ahead(self, where: str, tx_seq: int) -> MirrorError:
        return MirrorError(
            f"{where}: holds transactions up to tx_seq {tx_seq}, and the changefeed {self.feed.location.uri} ends "
            f"at tx_seq {self.feed.last_tx_seq}: the target is ahead of it",
            hint="a target mirrors one changefeed: give a new --target for a changefeed that was made again",
        )

    def _table(self, owner: str, name: str) -> MirrorTable:
        t = self.tables.get((owner, name))
        if t is None:
            t = MirrorTable(self.options.target, owner, name, app_id(self.queue_id or "", owner, name))
            t.open()
            where = f"{self.options.target.rstrip('/')}/{owner}/{name}"
            self._check(t, where)
            if self.options.history:
                h = HistoryTable(self.options.target, owner, name, t.app)
                h.open()
                self._check(h, f"{where}{HISTORY_SUFFIX}")
                if h.exists and t.version is not None and (h.version or -1) < t.version:
                    raise MirrorError(
                        f"{where}{HISTORY_SUFFIX}: holds transactions up to tx_seq {h.version}, its mirror table up "
                        f"to {t.version}: the history is behind it",
                        hint="move the history table away: a new one starts from the mirror table's rows",
                    )
                self.histories[(owner, name)] = h
            self.tables[(owner, name)] = t
            self.rules[(owner, name)] = TableRules(owner, name, t.schema(), None, self.feed.document)
        return t

    def _check(self, t: MirrorTable, where: str) -> None:
        if t.exists and t.version is None:
            raise MirrorError(
                f"{where}: a Delta table that the mirror of this changefeed (queue {self.queue_id}) did not write",
                hint="give another --target, or move the table away",
            )
        if t.version is not None and t.version > self.feed.last_tx_seq:
            raise self._ahead(where, t.version)

    # -- the loop ----------------------------------------------------------------------

    # -- one mirror per target ----------------------------------------------------------

    def _lock(self) -> None:
        """One mirror process per target: a lock on this host (in the target, or for one
        on object storage in the temporary directory) and, on object storage, the target's
        lease, which mirrors on other hosts respect."""
        target = self.options.target
        if is_remote(target):
            digest = hashlib.sha256(self.store.uri.encode()).hexdigest()[:16]
            path = os.path.join(tempfile.gettempdir(), f"olr-buffer-mirror-{digest}.lock")
        else:
            os.makedirs(os.path.join(target, "_olr_buffer"), exist_ok=True)
            path = os.path.join(target, LOCK)
        try:
            self._fd = pidlock.acquire(path)
        except pidlock.LockHeldError as exc:
            raise MirrorError(
                f"{target}: another mirror (pid {exc.pid}) writes this target",
                hint="one mirror per target: stop the other one first",
            ) from None
        if is_remote(target):
            self._lease = Lease(self.store, LEASE, owner="olr-buffer-mirror")
            self._lease.acquire()
            self._lease.start_keepalive()

    def _unlock(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def run(self, stop: threading.Event | None = None) -> MirrorResult:
        """Follow the changefeed until ``stop`` (or, with ``until_caught_up``, until every
        table holds its last transaction). The service rides out a store that fails (the
        target's or the changefeed's): it says so, waits (0.5 s, doubling up to 30 s) and
        starts again from what the tables hold; the one-shot run stops with the error."""
        stop = stop or threading.Event()
        cf = self.options.changefeed
        if not is_remote(cf) and not os.path.isdir(cf):  # before the target is touched
            raise MirrorError(f"{cf}: no such changefeed directory", path=cf)
        self._lock()
        try:
            delay = None
            while True:
                try:
                    result = self._run(stop)
                except (MirrorTargetError, StoreError) as exc:
                    if self.options.until_caught_up or (isinstance(exc, StoreError) and not exc.retryable):
                        raise
                    delay = RETRY_FIRST if delay is None else min(delay * 2, RETRY_CAP)
                    self.retries += 1
                    log.warning("%s; trying again in %.1fs", exc, delay, extra={"retry_seconds": delay})
                    if _wait(stop, delay, self):
                        return self.result
                    self.tables.clear()
                    self.histories.clear()
                    self.rules.clear()
                    self.queue_id = None
                    continue
                if delay is not None:
                    log.info("the stores answer again")
                return result
        finally:
            self._unlock()

    def _run(self, stop: threading.Event) -> MirrorResult:
        self.start()
        while not stop.is_set():
            self.tick = time.monotonic()
            if self.queue_id is None:
                self.start()
            pending = self.feed.files_after(self.scanned)
            if pending:
                self._batch(pending)
                continue
            if self.options.until_caught_up and not self.feed.refresh():
                break
            if self.options.until_caught_up:
                continue
            _wait(stop, self.options.poll_seconds, self)
            if self.feed.refresh() and self.queue_id is None:
                self.start()
        self.result.last_tx_seq = self.scanned
        return self.result

    def _batch(self, pending) -> None:
        files, rows = [], 0
        for f in pending:
            files.append(f)
            rows += f.rows
            if rows >= self.options.batch_rows:
                break
        started = time.monotonic()
        if len(files) == 1 and files[0].rows > self.options.batch_rows:  # a file larger than a batch: a part of it
            batch, last = self.feed.read_part(files[0], self.options.tables, self.scanned, self.options.batch_rows)
        else:
            parts = [self.feed.read(f, self.options.tables) for f in files]
            batch = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
            last = files[-1].last
        by_table: dict[tuple[str, str], list[Change]] = {}
        if batch.num_rows:
            cols = {name: batch[name].to_pylist() for name in batch.column_names}
            for i in range(batch.num_rows):
                tx_seq = cols["tx_seq"][i]
                if tx_seq <= self.scanned:
                    continue
                key = (cols["owner"][i], cols["table"][i])
                by_table.setdefault(key, []).append(
                    Change(
                        tx_seq,
                        cols["op_seq"][i],
                        cols["c_scn"][i],
                        cols["op"][i],
                        cols["before"][i],
                        cols["after"][i],
                        cols["schema_version"][i],
                        cols["c_tm"][i],
                    )
                )
        plans = []
        for key, table_changes in by_table.items():
            t = self._table(*key)
            if t.version is not None:
                table_changes = [c for c in table_changes if c.tx_seq > t.version]
            if not any(c.op != "ddl" or c.version is not None for c in table_changes):
                continue  # nothing (left) for the table, or DDL that states no columns
            plans.append((t, self.rules[key].plan(table_changes, t.fetch, t.load)))
        commits = changes = 0
        if self._lease is not None and plans:
            self._lease.ensure()
        for t, plan in plans:  # every table's plan made first: a change that cannot be applied stops them all
            h = self.histories.get((t.owner, t.table))
            if h is not None and (h.version is None or h.version < plan.last_tx_seq):
                h.commit_history(plan, t)  # first: a kill after it leaves the history ahead, never behind
                fault_point("mirror_after_history_commit")
            fault_point("mirror_before_commit")
            t.commit(plan)
            fault_point("mirror_after_commit")
            commits += 1
            changes += plan.changes
        prior = self.scanned
        # the figures first: a metrics reader that sees the new position also sees the commits that made it
        self.result.transactions += last - prior
        self.result.changes += changes
        self.result.commits += commits
        self.result.last_tx_seq = last
        self.scanned = last
        self._write_progress()
        fault_point("mirror_after_progress")
        first = max(files[0].first, prior + 1)
        log.info(
            "mirrored tx_seq %d..%d: %d change(s), %d table commit(s) in %.2fs; the changefeed ends at %d",
            first,
            last,
            changes,
            commits,
            time.monotonic() - started,
            self.feed.last_tx_seq,
            extra={"last_tx_seq": last, "changes": changes, "commits": commits, "behind": self.feed.last_tx_seq - last},
        )


def _wait(stop: threading.Event, seconds: float, m: Mirror) -> bool:
    """Wait ``seconds`` (the loop counts as turning meanwhile); whether ``stop`` was set."""
    end = time.monotonic() + seconds
    while not stop.wait(min(1.0, max(0.0, end - time.monotonic()))):
        m.tick = time.monotonic()
        if time.monotonic() >= end:
            return False
    return True


def mirror(options: MirrorOptions, stop: threading.Event | None = None) -> MirrorResult:
    """Run the mirror (see :class:`Mirror`) until ``stop`` is set, or with
    ``until_caught_up`` until every table holds the changefeed's last transaction."""
    return Mirror(options).run(stop)
