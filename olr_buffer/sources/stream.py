"""What the sources of one stream (PostgreSQL, OpenLogReplicator) do the same way: the
source (:class:`StreamSource`: one reader, the acknowledged durable commit), its reader's
cycle (:class:`StreamReader`: blocks appended with the state, flushed when due, the
connection made again with a backoff) and the parent's side of its child process
(:class:`StreamProcess`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..changes import (
    DEFAULT_BLOCK_BYTES,
    DEFAULT_BLOCK_RECORDS,
    BlockBuilder,
    CommitKey,
)
from ..errors import OlrBufferError
from ..txbuffer import TxQueue
from .base import Acknowledgement, Reader, SourceFigures, SourceSettings, SourceUsageError
from .runner import CONTEXT, ChildAppends, run_child


def replay_refused(where: str, what: str) -> SourceUsageError:
    """``replay`` of a stream (``what`` at ``where``): a stream has no end to replay to;
    ``replay`` is for redo log files."""
    return SourceUsageError(
        f"{where}: replay reads a directory of redo log files to its end; {what} is followed",
        hint="use olr-buffer run with this URI",
    )


class StreamSource:
    """The base of a source of one stream (the PostgreSQL and OpenLogReplicator sources):
    one reader (queue thread 1), in a child process (:class:`StreamProcess`) or a thread,
    that confirms upstream what the changefeed made durable (``durable``, which
    :meth:`acknowledge` keeps: the reader, or its child through a
    :class:`SharedPosition`, reads it at its next status). A subclass gives
    :meth:`reader_body` and :meth:`reader_figures`."""

    thread_name = "reader"

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self.durable: CommitKey | None = None  # the changefeed's last durable commit: what may be confirmed

    def reader_body(self) -> Callable[[], None]:
        raise NotImplementedError

    def reader_figures(self) -> Any:
        """The reader's figures (its own, or the last its child process sent), with at
        least ``records``."""
        raise NotImplementedError

    def readers(self, follow: bool, poll_interval: float) -> list[Reader]:
        return [Reader(self.thread_name, self.reader_body())]

    def acknowledge(self, ack: Acknowledgement) -> None:
        if ack.durable is not None:
            self.durable = ack.durable

    def figures(self) -> SourceFigures:
        return SourceFigures(records_read=self.reader_figures().records)


class SharedPosition:
    """A position of ``width`` numbers (a first one below 0: none) in shared memory,
    written by one process and read by another without a lock (a killed process could
    die holding one): ``[version, *position]``, the version odd while a write is under
    way, so that a read never mixes two positions."""

    def __init__(self, width: int = 1) -> None:
        self._none = [-1] + [0] * (width - 1)
        self._a = CONTEXT.Array("q", [0, *self._none], lock=False)

    def set(self, pos: Sequence[int] | None) -> None:
        a = self._a
        a[0] += 1
        a[1:] = self._none if pos is None else list(pos)
        a[0] += 1

    def get(self) -> tuple[int, ...] | None:
        a = self._a
        while True:
            v = a[0]
            if v & 1:
                continue
            pos = tuple(a[1:])
            if a[0] == v:
                return None if pos[0] < 0 else pos


class StreamProcess:
    """The parent's side of a stream source's reader in a child process: it starts the
    child (``target(conn, stop_conn, parent_pid, shared, *child_args)``, which ends with
    :func:`child_main`), appends what it sends (:class:`ChildAppends`), and keeps
    ``shared`` (:class:`SharedPosition`) at ``published()``, the position the child may
    confirm, until ``stop``. A subclass sets ``target``, ``name``, ``label``, ``width``,
    ``died_error`` and ``resumes``."""

    target: Callable[..., None]
    name = "olr-reader"
    label = "the reader process"
    width = 1

    def __init__(
        self,
        queue: TxQueue,
        uri: str,
        *,
        state: Any,
        figures: Any,
        published: Callable[[], Sequence[int] | None],
        on_append: Callable[[], None] | None,
        stop: threading.Event,
        options: Mapping,
    ) -> None:
        """``uri``: what the child reads; ``state``: the resume state it starts from;
        ``figures``: the reader's, until the child sends its own."""
        self.uri = uri
        self.state = state
        self.appends = ChildAppends(queue, figures, on_append)
        self.published = published
        self.stop = stop
        self.options = dict(options)
        self.shared = SharedPosition(self.width)
        self._sent: Sequence[int] | None = None

    def child_args(self) -> tuple:
        return ()

    #: what a child that dies without a word is (an OlrBufferError), and how the same
    #: command goes on after it
    died_error: type[OlrBufferError] = OlrBufferError
    resumes = "it resumes from the queue"

    def died(self, exitcode: int | None) -> OlrBufferError:
        return self.died_error(
            f"{self.label} died (exit code {exitcode})",
            hint=f"look for an out-of-memory kill in the system log; run the same command again ({self.resumes})",
        )

    def handle(self, msg: tuple) -> bool:
        return self.appends.handle(msg)

    def _update_published(self) -> None:
        pub = self.published()
        if pub != self._sent:
            self.shared.set(pub)
            self._sent = pub

    def run(self) -> None:
        """Run the child until ``stop`` (then it stops at a block boundary) or an error."""
        self._update_published()
        run_child(
            type(self).target,
            (self.shared, *self.child_args()),
            name=self.name,
            label=self.label,
            stop=self.stop,
            handle=self.handle,
            died=self.died,
            tick=self._update_published,
        )

    @property
    def figures(self) -> Any:
        """The figures the child sent last."""
        return self.appends.figures


class FiguresToParent:
    """A child's reader sends its figures to the parent (for the service's metrics) at
    most every half second: :meth:`send` from its status step."""

    def __init__(self, conn, figures: Callable[[], object]) -> None:
        self._conn = conn
        self._figures = figures
        self._sent = 0.0

    def send(self) -> None:
        now = time.monotonic()
        if now - self._sent >= 0.5:
            self._sent = now
            self._conn.send(("figures", self._figures()))


class BlockWriter:
    """How a reader of one stream writes the queue: records go to the block of the queue
    thread in use (``builder``; :meth:`_use` switches), appended with the reader's state
    (``state()`` under ``state_key``, and ``_pending_meta``: what else is not stored yet)
    in one write when full, when it has waited ``flush_seconds`` (:meth:`flush_due`), now
    and then for the state alone (:meth:`store_due`) and when a connection ends."""

    state_key: bytes

    def __init__(
        self,
        queue: Any,
        *,
        thread: int,
        on_append: Callable[[], None] | None = None,
        block_records: int = DEFAULT_BLOCK_RECORDS,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        stop: Any = None,
        flush_seconds: float = 0.1,
    ) -> None:
        self.queue = queue
        self.on_append = on_append
        self.block_records = block_records
        self.block_bytes = block_bytes
        self.stop = stop or threading.Event()
        self.flush_seconds = flush_seconds
        self.builder = BlockBuilder(thread)
        self.builders: dict[int, BlockBuilder] = {thread: self.builder}
        self._pending_meta: dict[bytes, bytes] = {}  # metadata not stored yet: with the next append
        self._pending_since = 0.0  # when the builder's first record came
        self._state_written = 0.0  # when the state was last appended
        self.records = 0  # appended by this process

    def state(self) -> Any:
        """The reader's resume state as it is now (it has ``encode()``)."""
        raise NotImplementedError

    def _appended(self) -> None:
        """After an append: what the state said is stored."""

    def _append(self) -> None:
        """Append what the builder holds, with the state (and the metadata not stored
        yet), in one write."""
        b = self.builder
        records = b.build() if b.count else []
        meta = {self.state_key: self.state().encode()}
        if self._pending_meta:
            meta.update(self._pending_meta)
        self.queue.append(records, meta)
        self._pending_meta = {}
        self._appended()
        self._state_written = time.monotonic()
        self.records += b.count
        b.reset()
        self._pending_since = 0.0
        if self.on_append and records:
            self.on_append()

    def _use(self, thread: int) -> None:
        """Make ``thread``'s builder the one records go to: what the other holds is
        appended first (with the state as it is: the callers change the state after)."""
        if self.builder.thread != thread:
            if self.builder.count:
                self._append()
            b = self.builders.get(thread)
            if b is None:
                b = self.builders[thread] = BlockBuilder(thread)
            self.builder = b

    def _add_record(
        self, code: int, scn: int, xid: str, seq: int, line: int, payload: list, may_close: bool = True
    ) -> None:
        """Add a record; a full block is appended, with the state as it is now: the
        callers change the state before adding the record that goes with the change."""
        b = self.builder
        if not b.count:
            self._pending_since = time.monotonic()
        b.add(code, scn, 0, xid, seq, line, payload)
        if may_close and (b.count >= self.block_records or b.nbytes >= self.block_bytes):
            self._append()

    def flush_due(self, now: float) -> bool:
        """Whether the builder holds records that have waited ``flush_seconds``."""
        return bool(self.builder.count) and now - self._pending_since >= self.flush_seconds

    def store_due(self, now: float, changed: bool, after: float) -> bool:
        """Whether to append the state alone: ``changed`` (what ``status`` shows) and
        ``after`` seconds since the last append, or 30 s in any case."""
        return (changed and now - self._state_written >= after) or now - self._state_written >= 30.0

    def _append_held(self) -> None:
        """A connection ends: what the builder holds goes to the queue (unless the queue
        fails: its own error wins)."""
        if self.builder.count:
            try:
                self._append()
            except Exception:  # noqa: BLE001 - the queue's own error wins below
                pass


class StreamReader(BlockWriter):
    """The cycle a stream's reader shares: it writes the queue as a :class:`BlockWriter`,
    and a lost connection (one of ``connection_lost``) is made again after a backoff that
    doubles up to ``BACKOFF_MAX`` seconds (from 1 s again once one was up:
    ``connected``). A subclass gives ``state_key``, :meth:`state`, :meth:`_session` and
    :meth:`_reconnecting`."""

    BACKOFF_MAX = 30.0  # seconds between two connection attempts at most
    connection_lost: tuple[type[BaseException], ...] = ()

    def __init__(
        self,
        queue: Any,
        *,
        thread: int,
        published: Callable[[], Any] = lambda: None,
        status_interval: float = 1.0,
        **writer: Any,
    ) -> None:
        """``published``: the changefeed's last durable commit (what may be confirmed
        upstream), as the subclass reads it; ``status_interval``: seconds between two
        status messages to the server at most; ``writer``: :class:`BlockWriter`'s."""
        super().__init__(queue, thread=thread, **writer)
        self.published = published
        self.status_interval = status_interval
        self.reconnects = 0
        self.connected = False  # this connection was up (the backoff starts again)

    def run(self) -> None:
        """Read until ``stop``; connect again with a capped backoff; at the end, the state
        as of the stop goes to the queue (for ``status``)."""
        delay = 1.0
        while not self.stop.is_set():
            self.connected = False
            try:
                self._session()
            except StreamStopped:
                break
            except self.connection_lost as exc:
                if self.connected:  # it was up: start the backoff again
                    delay = 1.0
                self.reconnects += 1
                self._reconnecting(exc, delay)
                self.stop.wait(delay)
                delay = min(delay * 2, self.BACKOFF_MAX)
        self._finish()

    def _session(self) -> None:
        """One connection: read until ``stop`` or until it is lost."""
        raise NotImplementedError

    def _reconnecting(self, exc: BaseException, delay: float) -> None:
        """The connection was lost (``exc``): say so; the next try is in ``delay`` s."""
        raise NotImplementedError

    def _finish(self) -> None:
        self._append()


class StreamStopped(Exception):
    """Raised inside a session when ``stop`` is seen: the reader ends."""
