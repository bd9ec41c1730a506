"""The Sink contract: the only door between the pipeline (and the dispatcher) and where
committed transactions go.

The dispatcher hands a sink whole transactions, in commit order
(:class:`TransactionSink`, the part of the contract it sees: the dispatcher imports this
module and nothing else of ``sinks``). The pipeline opens the sink, makes it publish what it
holds at each checkpoint, and stores the sink's **position document** (what it has made
durable, what it needs to check on restart) in the queue, in the same write as the
dispatcher's checkpoint, under the sink's own metadata key; it hands the document back
when the sink opens, and never looks inside. ``olr-buffer status`` asks the sink's kind
to describe it (:attr:`SinkKind.status`).

The runtime builds a sink through its kind (:func:`olr_buffer.sinks.open_sink`), with what it
gives every sink (:class:`SinkSettings`) and the sink's own options (an object of its kind's
own class, :attr:`SinkKind.options`, with that kind's defaults).

A new sink is one package under ``sinks/`` that provides a :class:`SinkKind`, and one line
in the table of :mod:`olr_buffer.sinks`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..changes import Commit, CommitKey

if TYPE_CHECKING:
    import pyarrow as pa

    from ..store import LeaseTiming, OutageRetry


@dataclass(frozen=True)
class SinkSettings:
    """What the runtime gives every sink, whatever it writes."""

    durable: bool = True  # fsync what it publishes
    #: an output that cannot be reached: retried (``run``), or the run fails (None: ``replay``)
    retry: OutageRetry | None = None
    #: a local directory of the queue's for the temporary files of an output on object storage
    staging: str | None = None
    #: the queue's id, recorded as the holder of the output's lease (None: a new queue)
    lease_owner: str | None = None
    #: the times of the output's lease: length, renewal, clock skew (None: the defaults)
    lease_timing: LeaseTiming | None = None
    #: a local output under the lease too, instead of a lock (a standby's: a lock cannot be
    #: taken from a process that hangs, a lease expires)
    lease_local: bool = False


@dataclass(frozen=True, slots=True)
class ChangefeedOwner:
    """Who writes a changefeed: the queue's id and, for a source that has one (a
    PostgreSQL database and slot), the source's identity."""

    queue_id: str
    source_id: str | None = None

    def describe(self) -> str:
        return f"queue {self.queue_id}" + (f" (source {self.source_id})" if self.source_id else "")


@dataclass(frozen=True)
class SinkOpening:
    """What :meth:`Sink.open` found: whether the changefeed is adopted from another queue
    (its commits count as published), and what this queue published to it after its last
    checkpoint (lost from the counters by a crash)."""

    adopting: bool
    published_since_checkpoint: tuple[int, int] = (0, 0)  # transactions, rows
    #: what the output records of where a new queue reads its source from (see
    #: :class:`RecordsRunFrom`): per queue thread, a log sequence; None: nothing recorded
    run_from: Mapping[int, int] | None = None


@dataclass
class SinkFigures:
    """A sink's running figures, for summaries and metrics."""

    files_published: int = 0  # files the changefeed holds (those it held when opened included)
    latencies: Sequence[float] = field(default_factory=tuple)  # commit-to-visible, recent transactions, seconds
    # an object store that could not be reached (olr-buffer run retries): outages met,
    # calls tried again, and how long the current outage has lasted (0: none)
    store_outages: int = 0
    store_retries: int = 0
    store_outage_seconds: float = 0.0
    # made durable (published) by this process: counted when a file is published, not
    # when the dispatcher hands a transaction over
    transactions_published: int = 0
    rows_published: int = 0
    # published transactions whose commit tm was later than the publication time (the
    # source's clock ahead of this machine's): not in ``latencies``, which are never negative
    clock_ahead: int = 0
    # an output with a lease (a changefeed on object storage): its generation, and how
    # long this writer may still count on it without renewing it (None: no lease)
    lease_generation: int | None = None
    lease_seconds_left: float | None = None
    # handed over by the dispatcher, then dropped unpublished by this process (abandon):
    # the next run publishes them again, from the queue
    transactions_dropped: int = 0
    # (object storage) how long after this writer's last renewal another writer may take
    # the lease over (its ttl plus the clocks' skew allowed for; None: no lease)
    lease_expiry: tuple[float, float] | None = None


class TransactionSink(Protocol):
    """Where the dispatcher hands committed transactions, whole, in commit order (every
    :class:`Sink` is one)."""

    def write_transaction(self, commit: Commit, chunks: Iterable[tuple[int, list[list]]]) -> int:
        """Consume ``chunks`` (``(thread, rows)``: runs of rows, each of one redo thread,
        in row order); publish their rows as one transaction.

        Returns the number of rows written; 0 means nothing was written and no ``tx_seq``
        was used.
        """
        ...

    def write_rows(self, rows: list[list], txs: list[tuple[str, CommitKey, int | None, int | list[int], int]]) -> None:
        """Many transactions at once, flat: ``txs`` holds ``(xid, key, tm, thread, n)`` for
        each, ``n > 0`` of its rows, which are the next ``n`` of ``rows``; ``thread`` is the
        redo thread of all of them, or a list of each one's; the same as
        :meth:`write_transaction` for each, in order."""
        ...


class Sink(TransactionSink, Protocol):
    """What the pipeline calls of a sink, beside what the dispatcher calls."""

    #: Where it writes, for logs and errors.
    path: str
    #: The queue metadata key its position document is stored under.
    position_key: bytes

    def open(
        self, owner: ChangefeedOwner, stored: bytes | None, *, queue: str, adopt: bool, legacy: Any = None
    ) -> SinkOpening:
        """Check that ``owner`` (the queue at ``queue``) may write here, given the
        position document the runtime stored at the queue's last checkpoint (``stored``;
        ``legacy``: the position an older version kept in the dispatcher's checkpoint),
        and record ``owner``; raise a one-line error if it may not (``adopt``: a queue
        rebuilt from the same input may take over another queue's output)."""
        ...

    @property
    def last_commit(self) -> CommitKey | None:
        """The key of the last commit made durable (the first run: what it found)."""
        ...

    @property
    def next_tx_seq(self) -> int:
        """The ``tx_seq`` the next transaction gets."""
        ...

    def pending_since(self) -> float | None:
        """``time.monotonic()`` when the oldest transaction not yet durable was handed
        over; None when every one is."""
        ...

    def flush(self) -> object:
        """Make every transaction handed over durable (publish it); what it returns, if
        anything, is not used."""
        ...

    def position(self) -> bytes:
        """Its position document now, for the runtime to store with the checkpoint."""
        ...

    def figures(self) -> SinkFigures: ...

    def abandon(self) -> None:
        """Drop what is not durable: the next run hands it over again."""
        ...

    def release(self, remove_if_unused: bool = False) -> None:
        """Drop what is not durable and let go of the output (locks, leases);
        ``remove_if_unused``: a refused run removes an output it made and never used."""
        ...


@runtime_checkable
class RecordsRunFrom(Protocol):
    """Optional: a sink that records, with what it publishes, where a new queue that
    adopts its output reads the source from (``run_from``: per queue thread, the log
    sequence of the first record it must read again; docs/formats.md, the manifest). It
    hands the record back in :attr:`SinkOpening.run_from`."""

    def note_run_from(self, run_from: Mapping[int, int], through: CommitKey | None) -> None:
        """``run_from`` is valid once every commit up to ``through`` (the last one handed
        over; None: any) is durable: record it with the first publication that holds them
        (threads it leaves out keep what was recorded)."""
        ...


@runtime_checkable
class CanBeTakenOver(Protocol):
    """Optional: a sink whose output another writer can take over while it runs (a lease
    renewed in the background, which a standby takes over from a writer paused past it).
    ``run`` calls :meth:`check_held` at each turn of its loop, so that a writer taken over
    stops even while it has nothing to publish."""

    def check_held(self) -> None:
        """Raise the error a publication of this writer would now meet (the one-line
        error naming who took the output over), if the sink found its output taken over;
        otherwise nothing (no call to the output: it looks at what the sink knows)."""
        ...


@runtime_checkable
class TakesColumns(Protocol):
    """Optional: a sink that takes rows as Arrow columns (``olr_buffer.changes.ROW_SCHEMA``,
    a row a row), as the dispatcher reads them back, without a Python list a row:
    :meth:`write_columns`, and, in :meth:`TransactionSink.write_transaction`'s chunks, a
    record batch in place of a list of rows. The same rows give the same output either way."""

    def write_columns(
        self, rows: pa.RecordBatch, txs: Sequence[tuple[str, CommitKey, int | None, int | list[int], int]]
    ) -> None:
        """:meth:`TransactionSink.write_rows` with ``rows`` as columns."""
        ...


@dataclass(frozen=True)
class SinkKind:
    """One kind of sink, as the table of :mod:`olr_buffer.sinks` lists it."""

    name: str
    #: build(target, settings, options): the sink writing ``target``, ``options`` an object
    #: made by :attr:`options`
    build: Callable[[str, SinkSettings, Any], Sink]
    #: the metadata key of its position document
    position_key: bytes
    #: what ``status`` shows of it: (stored position, legacy position, the queue's id) ->
    #: the ``changefeed`` document of ``status --json``
    status: Callable[[bytes | None, Any, str | None], dict]
    #: that document as a line of text
    status_line: Callable[[dict], str]
    #: its own options (for ``build``, with its defaults) from the values of the changefeed
    #: options ``replay`` and ``run`` take (by their Python names: ``file_rows``,
    #: ``changefeed_mode`` ...); one it does not take is ignored, one not given keeps its default
    options: Callable[[Mapping[str, Any]], Any] = lambda flags: None
