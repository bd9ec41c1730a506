"""Seeded, reproducible RAC workload generator writing the redo-op log input format.

`simulate` writes what a capture process (an OpenLogReplicator-style redo parser) would
write for an Oracle RAC database: one JSON Lines file per redo thread and log sequence,
``redo_<thread>_<sequence>.jsonl``, the archived (older) sequences zstd-compressed as
``redo_<thread>_<sequence>.jsonl.zst``.  The format is in docs/formats.md, "Input".

The workload is a discrete-event simulation driven by one ``random.Random(seed)``, so the
same arguments always produce byte-identical files.  It contains, interleaved:

* ordinary committed transactions (inserts, updates and deletes on a handful of tables,
  with full ``before``/``after`` row images, strings with non-ASCII text, ints, floats,
  nulls; updates and deletes only touch rows inserted earlier, with the right images);
* rolled-back transactions (some write compensation records before the ``rollback``);
* partial rollbacks (rollback to savepoint: ``"rollback": true`` records that undo the
  latest rows of the transaction, same ``rid``), and fully compensated transactions
  (committed with nothing left, so never emitted);
* distributed transactions whose rows span two threads (begin and commit on one);
* commits at equal SCNs on different threads;
* long transactions (open across several log switches) and large ones (hundreds to
  thousands of rows; ``large_tx_rows`` adds one more of exactly that many rows);
* DDL transactions, a few transactions without ``begin`` at the very start (they began
  before the input), ``lwn`` heartbeats on every thread, and one thread that goes idle
  for a while but keeps writing ``lwn``;
* on request, instances that shut down: ``rolling_restarts`` closes each thread in turn
  (a ``close`` record) and opens it again later, ``close_thread_at`` closes the highest
  thread for the rest of the input. While a thread is closed, the records its sessions
  would write go to the lowest open thread (the sessions moved); a thread opens again
  with an ``lwn`` above every SCN written so far. Off by default: the same seed then
  gives the same files as without these options.

SCNs come from one global clock that never goes back, so within a thread ``(scn, sub)``
never decreases (``sub`` counts records that share an SCN within a thread and is omitted
when 0).  After an ``lwn N`` the clock moves past ``N``, so the heartbeat's promise holds.
"""

from __future__ import annotations

import heapq
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import zstandard

from .errors import OlrBufferError
from .fsutil import atomic_write

__all__ = ["OutputNotEmptyError", "SimulationStats", "simulate"]

Row = dict[str, Any]
"""A row image: column name to value."""

_FILE_RE = re.compile(r"^redo_\d+_\d+\.jsonl(\.zst)?$")

# Clock steps drawn before each record: often 0 (records sharing an SCN), mostly small.
_STEPS = (0, 0, 1, 1, 1, 1, 1, 2, 3, 5)

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

_FIRST_NAMES = (
    "Anna",
    "José",
    "Zoë",
    "Łukasz",
    "Søren",
    "Ярослав",
    "美咲",
    "Olivia",
    "Noah",
    "Chloé",
    "Jürgen",
    "Siobhán",
    "İlkay",
    "Priya",
    "Kofi",
    "Mateus",
    "Ōta",
    "Ngozi",
)
_LAST_NAMES = (
    "Müller",
    "García",
    "Nowak",
    "O'Brien",
    "Smith",
    "Dubois",
    "Иванова",
    "山田",
    "Kowalczyk",
    "Rossi",
    "Ødegaard",
    "Nguyễn",
    "Silva",
    "Andersson",
    "Öztürk",
)
_CITIES = (
    "Kraków",
    "München",
    "São Paulo",
    "Zürich",
    "Reykjavík",
    "東京",
    "Москва",
    "Paris",
    "Lisboa",
    "Oslo",
    "Genève",
    "Malmö",
)
_STATUSES = ("NEW", "PAID", "SHIPPED", "DELIVERED", "CANCELLED")
_NOTES = (
    "Lieferung an Büro — 2. Stock",
    "call before delivery",
    "fragile ☂",
    "Zahlung per Überweisung",
    "gift wrap 🎁",
    "entrega rápida",
    "請求書を同封",
    'quote "urgent"',
    "back\\slash and tab\tinside",
)
_WAREHOUSES = ("WAW1", "FRA2", "GRU1", "NRT3", "OSL1")
_DDL_TEMPLATES = (
    "ALTER TABLE {o}.{t} ADD (EXTRA_{n} VARCHAR2(40))",
    "CREATE INDEX {o}.IX_{t}_{n} ON {o}.{t} (UPDATED_AT)",
    "COMMENT ON TABLE {o}.{t} IS 'Überarbeitet, Version {n}'",
    "ALTER TABLE {o}.{t} MODIFY (NOTE VARCHAR2(400))",
    "GRANT SELECT ON {o}.{t} TO REPORTING",
)


def _b64(value: int, width: int) -> str:
    """Encode ``value`` in Oracle's ROWID base-64 alphabet, ``width`` characters."""
    chars = []
    for _ in range(width):
        chars.append(_B64[value & 63])
        value >>= 6
    return "".join(reversed(chars))


def _date(r: random.Random) -> str:
    return f"20{r.randint(15, 24):02d}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"


def _timestamp(r: random.Random) -> str:
    return f"{_date(r)} {r.randrange(24):02d}:{r.randrange(60):02d}:{r.randrange(60):02d}"


def _maybe(r: random.Random, value: Any, null_share: float = 0.3) -> Any:
    return None if r.random() < null_share else value


# ---------------------------------------------------------------------------------------
# Statistics and options


class SimulationProgress(NamedTuple):
    """What a progress display of ``simulate`` shows."""

    transactions_ended: int  # committed or rolled back
    transactions_total: int  # that will end (those left open at the end aside)
    records: int  # written so far


@dataclass
class SimulationStats:
    """What `simulate` wrote.

    ``no_begin`` counts the transactions without a ``begin`` (they started before the
    input; all of them commit).  ``committed`` counts every transaction that ends with a
    ``commit`` (with or without ``begin``, emptied by compensation or not); ``emitted`` is
    how many the changefeed must hold (committed, with ``begin``, at least one row left).
    """

    files: int = 0
    records: int = 0
    transactions: int = 0
    committed: int = 0
    rolled_back: int = 0
    no_begin: int = 0
    compensations: int = 0
    distributed: int = 0
    ddl: int = 0
    lwn: int = 0
    rows: int = 0
    emitted: int = 0
    emitted_rows: int = 0
    fully_compensated: int = 0
    open_at_end: int = 0  # transactions without an end when the input ends
    equal_scn_commits: int = 0
    long: int = 0
    large: int = 0
    idle_thread: int | None = None
    closes: int = 0
    reopens: int = 0
    first_scn: int = 0
    last_scn: int = 0

    def describe(self) -> str:
        """What was written, in lines that say what each count is: ``records`` are every
        line of the files, ``lwn`` heartbeats and ``close`` records included, which
        ``replay`` and ``run`` do not count as records (they go to no transaction)."""
        changes = self.records - self.lwn - self.closes
        markers = f"{self.lwn:,} lwn heartbeat(s)" + (f" and {self.closes:,} close record(s)" if self.closes else "")
        return (
            f"{self.files:,} file(s), {self.records:,} records: {changes:,} begins, rows and ends (the records "
            f"replay counts) and {markers}\n"
            f"{self.transactions:,} transactions: {self.committed:,} committed ({self.no_begin:,} of them without a "
            f"begin, {self.fully_compensated:,} left without a row by compensation), {self.rolled_back:,} rolled "
            f"back, {self.open_at_end:,} left open; the changefeed must hold {self.emitted:,} of them "
            f"({self.emitted_rows:,} rows)\n"
            f"among them {self.distributed:,} distributed, {self.long:,} long, {self.large:,} large; "
            f"{self.compensations:,} compensation record(s) (rolled-back transactions' too), {self.ddl:,} ddl, "
            f"{self.equal_scn_commits:,} commit(s) at an SCN another commit has; SCNs {self.first_scn}..{self.last_scn}"
        )


@dataclass(frozen=True)
class _Config:
    threads: int
    transactions: int
    seed: int
    records_per_file: int
    compress_archived: bool
    large_tx_rows: int
    concurrency: int
    no_begin: int
    open_at_end: int
    lwn_every: float
    idle: bool
    rolling_restarts: bool
    close_thread_at: float | None
    start_scn: int
    start_tm: int
    ns_per_scn: int
    zstd_level: int


# ---------------------------------------------------------------------------------------
# Tables and rows


class _RowPool:
    """Committed rows that no open transaction holds: O(1) add, random take."""

    __slots__ = ("_rids", "_pos", "_values")

    def __init__(self) -> None:
        self._rids: list[str] = []
        self._pos: dict[str, int] = {}
        self._values: dict[str, Row] = {}

    def __len__(self) -> int:
        return len(self._rids)

    def add(self, rid: str, row: Row) -> None:
        self._pos[rid] = len(self._rids)
        self._rids.append(rid)
        self._values[rid] = row

    def take(self, rng: random.Random) -> tuple[str, Row]:
        """Remove and return a random row (the caller locks it)."""
        i = rng.randrange(len(self._rids))
        rid = self._rids[i]
        last = self._rids.pop()
        if last != rid:
            self._rids[i] = last
            self._pos[last] = i
        del self._pos[rid]
        return rid, self._values.pop(rid)


Generator = Callable[[random.Random], Any]


class _Table:
    """One simulated table: row factory, mutable columns, rid allocator, row pool."""

    def __init__(
        self,
        owner: str,
        name: str,
        obj: int,
        file_no: int,
        make: Callable[[random.Random, int], Row],
        mutable: tuple[tuple[str, Generator], ...],
    ) -> None:
        self.owner = owner
        self.name = name
        self.obj = obj
        self.pool = _RowPool()
        self._make = make
        self._mutable = mutable
        self._prefix = _b64(obj, 6) + _b64(file_no, 3)
        self._next_row = 0
        self._next_key = 1000

    def new_rid(self) -> str:
        """An unused 18-character extended ROWID (object, file, block, row slot)."""
        n = self._next_row
        self._next_row += 1
        return self._prefix + _b64(131 + n // 57, 6) + _b64(n % 57, 3)

    def new_row(self, rng: random.Random) -> Row:
        self._next_key += 1
        return self._make(rng, self._next_key)

    def mutate(self, rng: random.Random, row: Row) -> Row:
        """A copy of ``row`` with one or two non-key columns changed."""
        new = dict(row)
        for _ in range(1 + (rng.random() < 0.4)):
            column, gen = self._mutable[rng.randrange(len(self._mutable))]
            new[column] = gen(rng)
        return new


def _employee(r: random.Random, key: int) -> Row:
    first, last = r.choice(_FIRST_NAMES), r.choice(_LAST_NAMES)
    return {
        "EMPLOYEE_ID": key,
        "FIRST_NAME": first,
        "LAST_NAME": last,
        "EMAIL": f"{key}@example.com",
        "SALARY": round(r.uniform(2500, 15000), 2),
        "DEPARTMENT_ID": r.randrange(10, 120, 10),
        "HIRE_DATE": _date(r),
        "COMMISSION_PCT": _maybe(r, round(r.random() * 0.3, 2), 0.6),
        "MANAGER_ID": _maybe(r, r.randint(100, 999), 0.2),
    }


def _order(r: random.Random, key: int) -> Row:
    return {
        "ORDER_ID": key,
        "CUSTOMER": f"{r.choice(_FIRST_NAMES)} {r.choice(_LAST_NAMES)}",
        "CITY": r.choice(_CITIES),
        "STATUS": "NEW",
        "TOTAL": round(r.uniform(5, 5000), 2),
        "CREATED": _timestamp(r),
        "NOTE": _maybe(r, r.choice(_NOTES), 0.6),
    }


def _order_item(r: random.Random, key: int) -> Row:
    return {
        "ORDER_ID": key // 4,
        "LINE_NO": key % 4 + 1,
        "SKU": f"SKU-{r.randrange(100000):05d}",
        "QTY": r.randint(1, 20),
        "UNIT_PRICE": round(r.uniform(0.5, 900), 2),
        "DISCOUNT": _maybe(r, round(r.random() * 0.25, 3), 0.7),
    }


def _stock(r: random.Random, key: int) -> Row:
    return {
        "SKU": f"SKU-{key:05d}",
        "WAREHOUSE": r.choice(_WAREHOUSES),
        "QTY": r.randint(0, 5000),
        "RESERVED": r.randint(0, 50),
        "UPDATED_AT": _timestamp(r),
    }


def _make_tables() -> tuple[list[_Table], list[float]]:
    """The simulated schema and the cumulative weights of picking each table."""
    tables = [
        _Table(
            "SALES",
            "ORDERS",
            73215,
            7,
            _order,
            (
                ("STATUS", lambda r: r.choice(_STATUSES)),
                ("TOTAL", lambda r: round(r.uniform(5, 5000), 2)),
                ("NOTE", lambda r: _maybe(r, r.choice(_NOTES), 0.5)),
                ("CITY", lambda r: r.choice(_CITIES)),
            ),
        ),
        _Table(
            "SALES",
            "ORDER_ITEMS",
            73216,
            7,
            _order_item,
            (
                ("QTY", lambda r: r.randint(1, 20)),
                ("UNIT_PRICE", lambda r: round(r.uniform(0.5, 900), 2)),
                ("DISCOUNT", lambda r: _maybe(r, round(r.random() * 0.25, 3), 0.5)),
            ),
        ),
        _Table(
            "INV",
            "STOCK",
            74002,
            9,
            _stock,
            (
                ("QTY", lambda r: r.randint(0, 5000)),
                ("RESERVED", lambda r: r.randint(0, 50)),
                ("UPDATED_AT", _timestamp),
            ),
        ),
        _Table(
            "HR",
            "EMPLOYEES",
            73101,
            4,
            _employee,
            (
                ("SALARY", lambda r: round(r.uniform(2500, 15000), 2)),
                ("DEPARTMENT_ID", lambda r: r.randrange(10, 120, 10)),
                ("COMMISSION_PCT", lambda r: _maybe(r, round(r.random() * 0.3, 2), 0.5)),
                ("LAST_NAME", lambda r: r.choice(_LAST_NAMES)),
            ),
        ),
    ]
    return tables, [0.35, 0.70, 0.85, 1.0]


# ---------------------------------------------------------------------------------------
# Transactions


class _Change(NamedTuple):
    """A row of a transaction that is not cancelled (yet)."""

    table: _Table
    rid: str
    op: str
    before: Row | None
    after: Row | None
    thread: int


@dataclass(eq=False)
class _Tx:
    """A simulated transaction and what is left of its plan."""

    ident: int
    xid: str
    home: int
    end: str | None  # "commit", "rollback", or None: left open at the end of the input
    rows_left: int
    has_begin: bool = True
    second: int | None = None  # the other thread of a distributed transaction
    long: bool = False
    large: bool = False
    burst: int = 1
    insert_share: float = 0.45
    savepoint_after: int = -1  # rows done when a rollback to savepoint happens
    compensate_all: bool = False
    ddl_left: int = 0
    begun: bool = False
    done: bool = False
    rows_done: int = 0
    live_rows: int = 0
    last_thread: int = 0
    last_scn: int = -1
    threads_used: set[int] = field(default_factory=set)
    history: list[_Change] = field(default_factory=list)
    original: dict[tuple[_Table, str], Row | None] = field(default_factory=dict)
    current: dict[tuple[_Table, str], Row | None] = field(default_factory=dict)

    @property
    def ready_to_commit(self) -> bool:
        """Only the ``commit`` record is left to write."""
        return (
            self.end == "commit"
            and self.begun
            and not self.rows_left
            and not self.ddl_left
            and not (self.compensate_all and self.history)
        )


_FORCED_KINDS = (
    "rollback",
    "savepoint",
    "full_comp",
    "distributed",
    "ddl",
    "long",
    "large",
    "rollback_comp",
    "distributed_savepoint",
)


# ---------------------------------------------------------------------------------------
# Output


class _ThreadLog:
    """The log files of one redo thread: buffers a sequence, switches every N records."""

    def __init__(
        self, out_dir: Path, thread: int, cfg: _Config, stats: SimulationStats, compressor: zstandard.ZstdCompressor
    ) -> None:
        self.thread = thread
        self.seq = 1
        self.last_scn = -1
        self.last_sub = 0
        self._out_dir = out_dir
        self._per_file = cfg.records_per_file
        self._compress = cfg.compress_archived
        self._compressor = compressor
        self._stats = stats
        self._lines: list[bytes] = []

    def write(self, line: bytes) -> None:
        """Append one encoded record (without its newline), switching logs when full."""
        if len(self._lines) >= self._per_file:
            self.flush(archived=True)
        self._lines.append(line)

    def flush(self, *, archived: bool) -> None:
        """Write the current sequence; an archived one is followed by a new sequence."""
        if not self._lines:
            return
        data = b"\n".join(self._lines) + b"\n"
        name = f"redo_{self.thread}_{self.seq}.jsonl"
        if archived and self._compress:
            data = self._compressor.compress(data)
            name += ".zst"
        atomic_write(str(self._out_dir / name), data, durable=False, tmp=str(self._out_dir / f".{name}.tmp"))
        self._stats.files += 1
        self._stats.records += len(self._lines)
        self._lines = []
        if archived:
            self.seq += 1


# ---------------------------------------------------------------------------------------
# The simulation


class _Simulator:
    """Discrete-event simulation of the workload; see the module docstring."""

    def __init__(self, out_dir: Path, cfg: _Config) -> None:
        self._cfg = cfg
        self._rng = random.Random(cfg.seed)
        self._stats = SimulationStats(first_scn=cfg.start_scn)
        compressor = zstandard.ZstdCompressor(level=cfg.zstd_level)
        self._logs = {t: _ThreadLog(out_dir, t, cfg, self._stats, compressor) for t in range(1, cfg.threads + 1)}
        self._tables, self._table_weights = _make_tables()
        self._clock = cfg.start_scn
        self._min_step = 0
        self._now = 0.0
        self._heap: list[tuple[float, int, _Tx | int]] = []
        self._heap_seq = 0
        self._ready: dict[int, _Tx] = {}
        self._xid_sqn: dict[tuple[int, int], int] = {}
        self._ddl_count = 0
        self._n_regular = cfg.transactions + (1 if cfg.large_tx_rows > 0 else 0)
        self._forced = self._forced_positions()
        self._created = 0
        self._next_ident = 0
        self._active = 0
        self._active_regular = 0
        self._idle_thread = cfg.threads if cfg.idle and cfg.threads >= 2 else None
        self._closed: set[int] = set()
        self._stats.idle_thread = self._idle_thread
        expected_records = max(7 * self._n_regular, 100)
        self._long_gap = max(20.0, min(cfg.records_per_file * cfg.threads / 3.0, expected_records / 6.0))

    # -- driver -------------------------------------------------------------------------

    def run(
        self, on_progress: Callable[[SimulationProgress], None] | None = None, progress_every: float = 0.5
    ) -> SimulationStats:
        """Run the whole workload, write every file, return the statistics; call
        ``on_progress`` every ``progress_every`` seconds and once at the end."""
        steps, last_report = 0, time.monotonic()
        for thread in self._logs:
            self._push(self._rng.uniform(0, self._cfg.lwn_every), thread)
        for _ in range(self._cfg.no_begin):
            self._start(self._plan_no_begin())
        while True:
            while self._created < self._n_regular and self._active_regular < self._cfg.concurrency:
                self._start(self._plan_regular(self._created))
                self._created += 1
            if not self._heap:
                break
            if self._cfg.rolling_restarts or self._cfg.close_thread_at is not None:
                self._sync_closed()
            steps += 1
            if on_progress and not steps & 1023 and time.monotonic() - last_report >= progress_every:
                last_report = time.monotonic()
                on_progress(self._progress())
            due, _, item = heapq.heappop(self._heap)
            self._now = due
            if isinstance(item, int):
                self._heartbeat(item)
            elif not item.done:
                self._step(item)
        self._clock += 1
        for thread, log in self._logs.items():
            if thread not in self._closed:  # a thread closed for good ends with its close
                self._record(thread, "lwn", None, None, advance=False)
                self._stats.lwn += 1
            log.flush(archived=False)
        self._stats.last_scn = self._clock
        if on_progress:
            on_progress(self._progress())
        return self._stats

    def _progress(self) -> SimulationProgress:
        st, cfg = self._stats, self._cfg
        return SimulationProgress(
            st.committed + st.rolled_back, self._n_regular + cfg.no_begin - cfg.open_at_end, st.records
        )

    def _push(self, due: float, item: _Tx | int) -> None:
        self._heap_seq += 1
        heapq.heappush(self._heap, (due, self._heap_seq, item))

    def _reschedule(self, tx: _Tx) -> None:
        mean = self._long_gap if tx.long else float(self._cfg.concurrency)
        self._push(self._now + self._rng.expovariate(1.0 / mean), tx)

    def _is_idle(self, thread: int) -> bool:
        if thread != self._idle_thread:
            return False
        progress = self._created / self._n_regular if self._n_regular else 1.0
        return 0.3 <= progress < 0.45

    def _busy_threads(self) -> list[int]:
        busy = [t for t in self._logs if not self._is_idle(t) and t not in self._closed]
        return busy or [t for t in self._logs if t not in self._closed]

    # -- instances that shut down -------------------------------------------------------

    def _wanted_closed(self) -> set[int]:
        """The threads closed at this point of the workload (never all of them)."""
        cfg = self._cfg
        progress = self._created / self._n_regular if self._n_regular else 1.0
        wanted = set()
        if cfg.rolling_restarts and cfg.threads >= 2:
            window = 0.6 / cfg.threads  # each thread in turn, between 20 % and 80 %
            for i, t in enumerate(sorted(self._logs)):
                start = 0.2 + i * window
                if start <= progress < start + 0.6 * window:
                    wanted.add(t)
        if cfg.close_thread_at is not None and cfg.threads >= 2 and progress >= cfg.close_thread_at:
            wanted.add(cfg.threads)
        if len(wanted) >= cfg.threads:
            wanted = {cfg.threads} if cfg.close_thread_at is not None and progress >= cfg.close_thread_at else set()
        return wanted

    def _sync_closed(self) -> None:
        wanted = self._wanted_closed()
        for t in sorted(wanted - self._closed):
            self._record(t, "close", None, None, advance=False)
            self._closed.add(t)
            self._stats.closes += 1
        for t in sorted(self._closed - wanted):
            self._closed.discard(t)
            # open again above every SCN written so far (SCNs are global)
            self._clock = max(self._clock, self._logs[t].last_scn) + 1
            self._record(t, "lwn", None, None, advance=False)
            self._stats.lwn += 1
            self._stats.reopens += 1
            self._min_step = 1

    def _route(self, thread: int) -> int:
        """The thread a record of ``thread``'s sessions goes to: itself, or the lowest open one."""
        if thread in self._closed:
            return min(t for t in self._logs if t not in self._closed)
        return thread

    # -- planning -----------------------------------------------------------------------

    def _forced_positions(self) -> dict[int, str]:
        """Where the features every workload must show are placed among the transactions."""
        n = self._n_regular
        kinds = list(_FORCED_KINDS)
        forced: dict[int, str] = {}

        def place(pos: int, kind: str) -> None:
            while pos in forced and pos < n - 1:
                pos += 1
            if pos < n and pos not in forced:
                forced[pos] = kind

        if self._cfg.large_tx_rows > 0:
            place(n // 3, "large_exact")
        for j, kind in enumerate(kinds):
            place((j + 1) * n // (len(kinds) + 2), kind)
        return forced

    def _new_xid(self) -> str:
        usn, slot = self._rng.randint(1, 40), self._rng.randrange(0x30)
        sqn = self._xid_sqn.get((usn, slot), 0x400 + self._rng.randrange(0x4000)) + 1
        self._xid_sqn[(usn, slot)] = sqn
        return f"0x{usn:04x}.{slot:03x}.{sqn:08x}"

    def _new_tx(self, rows: int, end: str | None) -> _Tx:
        self._next_ident += 1
        home = self._rng.choice(self._busy_threads())
        return _Tx(self._next_ident, self._new_xid(), home, end, rows)

    def _plan_no_begin(self) -> _Tx:
        tx = self._new_tx(self._rng.randint(1, 5), "commit")
        tx.has_begin = False
        tx.begun = True
        tx.insert_share = 1.0  # its rows are unknown to consumers: it only inserts
        return tx

    def _plan_regular(self, index: int) -> _Tx:
        rng = self._rng
        kind = self._forced.get(index)
        if kind is None:
            kind = self._random_kind()
        if index >= self._n_regular - self._cfg.open_at_end:
            tx = self._new_tx(rng.randint(1, 6), None)
        else:
            tx = self._new_tx(rng.randint(1, 8), "commit")
        if kind in ("rollback", "rollback_comp") and tx.end:
            tx.end = "rollback"
            tx.compensate_all = kind == "rollback_comp" or rng.random() < 0.3
        elif kind in ("savepoint", "distributed_savepoint"):
            tx.rows_left = rng.randint(3, 8)
            tx.savepoint_after = rng.randint(1, tx.rows_left)
        elif kind == "full_comp":
            tx.rows_left = rng.randint(1, 4)
            tx.compensate_all = True
        elif kind == "ddl":
            tx.rows_left = 0
            tx.ddl_left = 1
        elif kind == "long":
            tx.long = True
            tx.rows_left = rng.randint(6, 12)
        elif kind in ("large", "large_exact"):
            tx.large = True
            tx.rows_left = self._cfg.large_tx_rows if kind == "large_exact" else rng.randint(200, 2000)
            tx.burst = 64
            tx.insert_share = 0.8
        if kind.startswith("distributed"):
            others = [t for t in self._busy_threads() if t != tx.home]
            if others:
                tx.second = rng.choice(others)
        return tx

    def _random_kind(self) -> str:
        r = self._rng.random()
        for bound, kind in (
            (0.05, "rollback"),
            (0.11, "savepoint"),
            (0.12, "full_comp"),
            (0.16, "distributed"),
            (0.175, "distributed_savepoint"),
            (0.185, "ddl"),
            (0.195, "long"),
            (0.199, "large"),
        ):
            if r < bound:
                return kind
        return "normal"

    def _start(self, tx: _Tx) -> None:
        self._active += 1
        if not tx.long:
            self._active_regular += 1
        self._stats.transactions += 1
        self._stats.long += tx.long
        self._stats.large += tx.large
        self._stats.no_begin += not tx.has_begin
        # Those without begin started before the input: their records come first.
        delay = self._rng.uniform(0.0, 1.0) if tx.has_begin else 0.0
        self._push(self._now + delay, tx)

    # -- records ------------------------------------------------------------------------

    def _record(
        self,
        thread: int,
        op: str,
        xid: str | None,
        fields: dict[str, Any] | None,
        *,
        advance: bool = True,
        min_step: int = 0,
    ) -> None:
        """Write one record on ``thread`` at the clock (advanced first unless told not)."""
        if advance:
            step = _STEPS[int(self._rng.random() * len(_STEPS))]
            floor = self._min_step if self._min_step > min_step else min_step
            self._clock += step if step > floor else floor
            self._min_step = 0
        scn = self._clock
        log = self._logs[thread]
        sub = log.last_sub + 1 if scn == log.last_scn else 0
        log.last_scn, log.last_sub = scn, sub
        rec: dict[str, Any] = {"op": op, "scn": scn}
        if sub:
            rec["sub"] = sub
        if xid is not None:
            rec["xid"] = xid
        rec["tm"] = self._cfg.start_tm + (scn - self._cfg.start_scn) * self._cfg.ns_per_scn
        if fields:
            rec.update(fields)
        log.write(orjson.dumps(rec))

    def _record_tx(self, tx: _Tx, thread: int, op: str, fields: dict[str, Any] | None, *, advance: bool = True) -> None:
        """Write a record of ``tx``; its records on two threads never share an SCN
        out of row-key order (a switch of thread at an equal SCN advances the clock)."""
        thread = self._route(thread)
        min_step = 1 if thread != tx.last_thread and tx.last_scn == self._clock else 0
        self._record(thread, op, tx.xid, fields, advance=advance, min_step=min_step)
        tx.last_thread, tx.last_scn = thread, self._clock
        tx.threads_used.add(thread)

    def _heartbeat(self, thread: int) -> None:
        """An ``lwn`` at the clock; the next record of any thread gets a larger SCN."""
        if self._active == 0 and self._created >= self._n_regular:
            return
        if thread in self._closed:  # a closed thread writes nothing: its next record opens it
            self._push(self._now + self._cfg.lwn_every, thread)
            return
        if self._logs[thread].last_scn >= self._clock:
            self._clock = self._logs[thread].last_scn + 1
        self._record(thread, "lwn", None, None, advance=False)
        self._stats.lwn += 1
        self._min_step = 1
        jitter = self._rng.uniform(0.8, 1.2)
        self._push(self._now + self._cfg.lwn_every * jitter, thread)

    # -- transaction steps --------------------------------------------------------------

    def _step(self, tx: _Tx) -> None:
        """Do the next part of ``tx``'s plan (or wait while its thread is idle)."""
        if self._is_idle(tx.home):
            self._reschedule(tx)
            return
        if not tx.begun:
            self._record_tx(tx, tx.home, "begin", None)
            tx.begun = True
        elif tx.ddl_left:
            self._ddl(tx)
        elif tx.rows_left:
            for _ in range(min(tx.burst, tx.rows_left)):
                self._dml(tx)
                tx.rows_left -= 1
                tx.rows_done += 1
                if tx.rows_done == tx.savepoint_after:
                    self._compensate(tx, self._rng.randint(1, min(3, len(tx.history))))
        elif tx.compensate_all and tx.history:
            self._compensate(tx, len(tx.history))
        else:
            self._finish(tx)
            return
        if tx.ready_to_commit:
            self._ready[tx.ident] = tx
        self._reschedule(tx)

    def _ddl(self, tx: _Tx) -> None:
        table = self._tables[self._rng.randrange(len(self._tables))]
        self._ddl_count += 1
        template = _DDL_TEMPLATES[self._rng.randrange(len(_DDL_TEMPLATES))]
        sql = template.format(o=table.owner, t=table.name, n=self._ddl_count)
        self._record_tx(tx, tx.home, "ddl", {"owner": table.owner, "table": table.name, "sql": sql})
        tx.ddl_left -= 1
        tx.live_rows += 1
        self._stats.ddl += 1
        self._stats.rows += 1

    def _pick_table(self) -> _Table:
        r = self._rng.random()
        for table, bound in zip(self._tables, self._table_weights):
            if r < bound:
                return table
        return self._tables[-1]

    def _dml_thread(self, tx: _Tx) -> int:
        if tx.second is None or self._is_idle(tx.second):
            return tx.home
        if tx.rows_done == 0 or self._rng.random() < 0.5:
            return tx.second
        return tx.home

    def _pick_row(self, tx: _Tx) -> tuple[_Table, str] | None:
        """A row for an update or delete: one of the transaction's own, or a committed
        row nobody holds (locked until the transaction ends); None: insert instead."""
        rng = self._rng
        r = rng.random()
        if r < 0.15 and tx.history:
            change = tx.history[rng.randrange(len(tx.history))]
            key = (change.table, change.rid)
            if tx.current[key] is not None:
                return key
        if r < tx.insert_share:
            return None
        table = self._pick_table()
        if not table.pool:
            return None
        rid, row = table.pool.take(rng)
        key = (table, rid)
        tx.original[key] = row
        tx.current[key] = row
        return key

    def _dml(self, tx: _Tx) -> None:
        """One insert, update or delete of ``tx``."""
        rng = self._rng
        key = self._pick_row(tx)
        if key is None:
            table = self._pick_table()
            key = (table, table.new_rid())
            tx.original[key] = None
            op, before, after = "insert", None, table.new_row(rng)
        else:
            table = key[0]
            before = tx.current[key]
            assert before is not None
            if rng.random() < 0.25:
                op, after = "delete", None
            else:
                op, after = "update", table.mutate(rng, before)
        tx.current[key] = after
        thread = self._dml_thread(tx)
        self._write_dml(tx, thread, op, key, before, after, compensation=False)
        tx.history.append(_Change(table, key[1], op, before, after, thread))
        tx.live_rows += 1
        self._stats.rows += 1

    def _write_dml(
        self,
        tx: _Tx,
        thread: int,
        op: str,
        key: tuple[_Table, str],
        before: Row | None,
        after: Row | None,
        *,
        compensation: bool,
    ) -> None:
        table, rid = key
        fields: dict[str, Any] = {"owner": table.owner, "table": table.name, "obj": table.obj, "rid": rid}
        if before is not None:
            fields["before"] = before
        if after is not None:
            fields["after"] = after
        if compensation:
            fields["rollback"] = True
        self._record_tx(tx, thread, op, fields)

    def _compensate(self, tx: _Tx, count: int) -> None:
        """Roll back to a savepoint: undo the latest ``count`` rows, newest first."""
        undo = {"insert": "delete", "update": "update", "delete": "insert"}
        for _ in range(count):
            change = tx.history.pop()
            key = (change.table, change.rid)
            # The undo of a change swaps its images: an insert is undone by a delete.
            thread = tx.home if self._is_idle(change.thread) else change.thread
            self._write_dml(tx, thread, undo[change.op], key, change.after, change.before, compensation=True)
            tx.current[key] = change.before
            tx.live_rows -= 1
            self._stats.compensations += 1

    def _finish(self, tx: _Tx) -> None:
        """Write the end record (perhaps with a second commit at the same SCN on another
        thread), release the rows, retire the transaction."""
        self._ready.pop(tx.ident, None)
        if tx.end is None:
            self._stats.open_at_end += 1
            self._retire(tx)
            return
        self._record_tx(tx, tx.home, tx.end, None)
        self._retire(tx)
        if tx.end == "commit" and (not self._stats.equal_scn_commits or self._rng.random() < 0.05):
            partner = self._find_partner(tx)
            if partner is not None:
                self._ready.pop(partner.ident)
                self._record_tx(partner, partner.home, "commit", None, advance=False)
                self._retire(partner)
                self._stats.equal_scn_commits += 1
        # Rows released here may be touched next: only at a larger SCN.
        self._min_step = 1

    def _find_partner(self, tx: _Tx) -> _Tx | None:
        for candidate in self._ready.values():
            if candidate.home != tx.home and not self._is_idle(candidate.home):
                return candidate
        return None

    def _retire(self, tx: _Tx) -> None:
        """Bookkeeping at the end of a transaction: statistics and row locks."""
        tx.done = True
        self._active -= 1
        if not tx.long:
            self._active_regular -= 1
        stats = self._stats
        if len(tx.threads_used) > 1:
            stats.distributed += 1
        if tx.end == "rollback":
            stats.rolled_back += 1
            for (table, rid), row in tx.original.items():
                if row is not None:
                    table.pool.add(rid, row)
        elif tx.end == "commit":
            stats.committed += 1
            if not tx.has_begin:
                return  # its rows never reach consumers: keep them out of later work
            if tx.live_rows:
                stats.emitted += 1
                stats.emitted_rows += tx.live_rows
            else:
                stats.fully_compensated += 1
            for (table, rid), row in tx.current.items():
                if row is not None:
                    table.pool.add(rid, row)


# ---------------------------------------------------------------------------------------
# Entry point


class OutputNotEmptyError(OlrBufferError, FileExistsError):
    """The output directory already holds redo log files, and overwriting was not asked for."""


def _prepare_dir(out_dir: Path, overwrite: bool) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    existing = sorted(p for p in out_dir.iterdir() if _FILE_RE.match(p.name))
    if existing and not overwrite:
        raise OutputNotEmptyError(
            f"{out_dir} already holds redo log files ({existing[0].name}, ...)",
            hint="use another directory, or delete them first: --overwrite (overwrite=True from Python)",
            path=str(out_dir),
        )
    for path in existing:
        path.unlink()


def simulate(
    out_dir: str | os.PathLike[str],
    *,
    threads: int = 3,
    transactions: int = 2000,
    seed: int = 0,
    records_per_file: int = 5000,
    compress_archived: bool = True,
    large_tx_rows: int = 0,
    concurrency: int = 24,
    no_begin: int = 3,
    open_at_end: int = 0,
    lwn_every: float = 64.0,
    idle_thread: bool = True,
    rolling_restarts: bool = False,
    close_thread_at: float | None = None,
    start_scn: int = 5_000_000_000,
    start_tm: int = 1_717_200_000_000_000_000,
    ns_per_scn: int = 1_000_000,
    zstd_level: int = 3,
    overwrite: bool = False,
    on_progress: Callable[[SimulationProgress], None] | None = None,
) -> SimulationStats:
    """Write a seeded RAC workload in the redo-op log format into ``out_dir``.

    :param threads: redo threads (RAC instances), numbered 1..threads.
    :param transactions: regular transactions (with ``begin``); ``no_begin`` more without
        ``begin`` come first, and ``large_tx_rows > 0`` adds one of that many rows.
    :param seed: the seed; equal arguments give byte-identical files.
    :param records_per_file: log switch after this many records of a thread.
    :param compress_archived: write every sequence but the last of each thread as
        ``.jsonl.zst``.
    :param concurrency: regular transactions open at a time (long ones come on top).
    :param open_at_end: the last this-many transactions never end (no commit/rollback).
    :param lwn_every: mean distance between two ``lwn`` of a thread, in simulation steps
        (about one record each).
    :param idle_thread: the highest thread (if more than one) writes nothing but ``lwn``
        while 30–45 % of the transactions get started.
    :param rolling_restarts: close each thread in turn (``close``) and open it again later,
        between 20 % and 80 % of the transactions started: a rolling restart of the instances.
    :param close_thread_at: close the highest thread (if more than one) once this share of
        the transactions was started, for the rest of the input: its last record is ``close``.
    :param start_scn: the first SCN; ``tm`` is ``start_tm + (scn - start_scn) * ns_per_scn``.
    :param overwrite: delete redo files already in ``out_dir`` instead of refusing.
    :param on_progress: called about every half second, and once at the end.
    :returns: counts of what was written.
    """
    if threads < 1 or transactions < 0 or records_per_file < 1 or large_tx_rows < 0:
        raise ValueError("threads and records_per_file must be >= 1, counts >= 0")
    if concurrency < 1 or no_begin < 0 or open_at_end < 0 or lwn_every <= 0:
        raise ValueError("concurrency must be >= 1, lwn_every > 0, counts >= 0")
    if not 0 <= start_scn < 2**62:
        raise ValueError("start_scn out of range")
    cfg = _Config(
        threads=threads,
        transactions=transactions,
        seed=seed,
        records_per_file=records_per_file,
        compress_archived=compress_archived,
        large_tx_rows=large_tx_rows,
        concurrency=concurrency,
        no_begin=no_begin,
        open_at_end=min(open_at_end, transactions),
        lwn_every=lwn_every,
        idle=idle_thread,
        rolling_restarts=rolling_restarts,
        close_thread_at=close_thread_at,
        start_scn=start_scn,
        start_tm=start_tm,
        ns_per_scn=ns_per_scn,
        zstd_level=zstd_level,
    )
    path = Path(out_dir)
    _prepare_dir(path, overwrite)
    return _Simulator(path, cfg).run(on_progress)
