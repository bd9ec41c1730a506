"""The Source contract: the only door between the runtime and a source.

A source reads a database's changes (redo log files, a PostgreSQL replication slot, ...)
and appends them to the queue as blocks of change records (:mod:`olr_buffer.changes`),
from readers that its runner (:mod:`olr_buffer.sources.runner`) runs in threads. The
runtime drives it through that runner and nothing else.

Its **resume state** is its own: a typed, versioned document (:class:`ResumeState`) that
the source writes in the same queue write as the blocks it covers (so a crash can neither
lose nor repeat a record), under metadata keys that start with its ``state_prefix``. The
runtime reads those keys back and hands them to :meth:`Source.prepare`; it never looks
inside. ``olr-buffer status`` asks each kind of source to describe what it finds there
(:attr:`SourceKind.status`).

A new source is one package under ``sources/`` that provides a :class:`SourceKind`, and
one line in the scheme table of :mod:`olr_buffer.sources`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..changes import CommitKey
from ..errors import EXIT_USAGE, OlrBufferError
from ..txbuffer.metadata import StoredDocument, decode_document, encode_document


class SourceUsageError(OlrBufferError):
    """A source asked for something it cannot do (a location no source reads, ``replay``
    of a stream, ``run`` with no thread in play): a usage error."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class SourceSettings:
    """What the runtime gives every source, whatever it reads."""

    block_records: int  # records per queue block at most
    block_bytes: int  # bytes of a block's records at most
    # run the readers in child processes (another core), else in threads; None: the source
    # decides (the redo source reads a small replay in threads: starting processes costs more)
    processes: bool | None = True
    dead_letter: str | None = None  # bad records go to this file instead of stopping the run
    on_append: Callable[[], None] = lambda: None  # called after each append: wakes the dispatcher
    #: the runner's stop: readers stop at a block boundary once it is set
    stop: threading.Event = field(default_factory=threading.Event)


@dataclass
class SourceFigures:
    """A source's running figures, for progress lines, summaries and metrics."""

    records_read: int = 0  # records appended to the queue by this process
    quarantined: int = 0  # bad records written to the dead-letter file by this process


@dataclass(frozen=True)
class Metric:
    """One figure of a source's own for the service's metrics (``olr_buffer_<name>``)."""

    name: str
    kind: str  # "gauge" or "counter"
    help: str
    value: float


@dataclass(frozen=True)
class Acknowledgement:
    """How far the changefeed holds the source's commits: what the runner tells every
    source (:meth:`Source.acknowledge`) after each round of the dispatcher, and once
    before its readers start (the changefeed's last commit)."""

    #: the last commit the sink accepted: nothing at or below it can be published any more
    published: CommitKey | None
    #: the last commit the sink made durable: what may be confirmed upstream (a
    #: replication slot, an OpenLogReplicator sender), so that the source discards it
    durable: CommitKey | None


@dataclass(frozen=True)
class Reader:
    """One reader of a source: ``run()`` reads, appending to the queue, until the input
    ends (``replay``) or the runner's stop (:attr:`SourceSettings.stop`) is set. The
    runner runs it in a thread of its own named ``name``; what it raises stops the run."""

    name: str
    run: Callable[[], None]
    thread: int = 1  # the queue thread it writes


class Source(Protocol):
    """A source, as its runner (:class:`olr_buffer.sources.runner.SourceRunner`) drives it:
    ``prepare``; ``acknowledge`` the changefeed's position; run each of ``readers`` in a
    thread; ``acknowledge`` after each round of the dispatcher; ``figures`` for progress
    and metrics. The runner owns the threads, the stop (``settings.stop``), the errors
    (what a reader raises) and the order of it all. A reader may run its work in a child
    process (:func:`~olr_buffer.sources.runner.run_child`).

    Beyond these, a source may have the optional members of :class:`Identified`,
    :class:`Measured`, :class:`Sized`, :class:`Closes` and :class:`RedoThreads`; the
    runner uses what it finds. ``docs/examples/lines_source.py`` is a whole one."""

    #: What it reads, for logs and errors: a directory, a URI without its password.
    name: str
    #: The prefix of the queue metadata keys its resume state is stored under (it appends
    #: its state with the blocks it covers: ``queue.append(records, {key: state})``).
    state_prefix: bytes

    def prepare(self, threads: list[int] | None, resume: Mapping[bytes, bytes]) -> list[int]:
        """Look at the input and restore the resume state the runtime read from the queue
        (``resume``: the keys under ``state_prefix``); return the queue threads in play,
        whose progress makes the watermark (``threads``, if the user gave them; a source
        of one stream: ``[1]``)."""
        ...

    def readers(self, follow: bool, poll_interval: float) -> list[Reader]:
        """Its readers: to the end of the input (``replay``), or following it until the
        stop (``run``), looking for more every ``poll_interval`` seconds."""
        ...

    def acknowledge(self, ack: Acknowledgement) -> None:
        """The changefeed holds every commit up to ``ack`` (called from the runner's
        thread, while the readers run: keep it cheap, hand the value over)."""
        ...

    def figures(self) -> SourceFigures:
        """Its running figures (cheap: the service's metrics ask every second)."""
        ...


@runtime_checkable
class Identified(Protocol):
    """Optional: a source whose input has an identity of its own."""

    @property
    def source_id(self) -> str | None:
        """The identity of what it reads, recorded in the changefeed beside the queue's
        (after :meth:`Source.prepare`); without it, the queue's id binds the input."""
        ...


@runtime_checkable
class Measured(Protocol):
    """Optional: a source with figures of its own for the service's metrics."""

    def metrics(self) -> list[Metric]: ...


@runtime_checkable
class Sized(Protocol):
    """Optional: an input with a size and an end (files)."""

    def input_size(self) -> tuple[int, int] | None:
        """``(bytes read, bytes in all)``: a replay's progress and ETA."""
        ...

    def threads(self) -> dict[int, bool]:
        """Every queue thread it reads, and whether its input was read to its end."""
        ...


@runtime_checkable
class Closes(Protocol):
    """Optional: a source that holds something to release once its readers are done (a
    dead-letter file)."""

    def close(self) -> None: ...


@runtime_checkable
class RedoThreads(Protocol):
    """Optional: a source of several queue threads whose silence holds the watermark
    (redo log files): the runner warns about a stalled one, takes the closes its readers
    vouch for, starts readers for threads that appear, and has late records refused."""

    watches_stalls: bool

    def refuse_below(self, threads: Iterable[int], published: CommitKey | None) -> None:
        """From now on, a record of ``threads`` at or below ``published`` is bad input."""
        ...

    def closed_through(self) -> dict[int, int]:
        """Per closed thread, the queue index below which its reader confirmed it closed."""
        ...

    def new_readers(self) -> list[Reader]:
        """Following: readers of threads whose input appeared since the start."""
        ...


@runtime_checkable
class StartsFrom(Protocol):
    """Optional: a source of log files that a new queue can start reading further on than
    at their first file, where an adopted changefeed says (its ``run_from``: per queue
    thread, the log sequence of the first record still needed, from the ``sequence`` of
    the records in the queue; docs/formats.md). The runtime computes it for the
    changefeed only for such a source."""

    def start_from(self, run_from: Mapping[int, int]) -> None:
        """After :meth:`Source.prepare`, on a new queue: read each thread of ``run_from``
        from the start of that sequence instead of its first file (the earlier ones may
        be gone); log it in one line; a one-line error if that file is not there."""
        ...


#: A source's factory: ``build(location, queue, settings, **options)``; ``queue`` is what
#: it appends to (and reads nothing else of), ``options`` its own command-line options.
SourceFactory = Callable[..., Source]


@dataclass(frozen=True)
class SourceKind:
    """One kind of source, as the scheme table lists it."""

    name: str  # "redo", "postgresql"
    build: SourceFactory
    #: ``status``: what it shows of its state in a queue's metadata, at ``(meta, now)``, a
    #: JSON-able document under ``status_key`` of ``status --json`` (None: it has none there)
    status: Callable[[Mapping[bytes, bytes], float], Any]
    status_key: str
    #: ``status`` as text: the lines of that document
    status_lines: Callable[[Any], list[str]]
    #: ``replay LOCATION``: a check before anything is created that the location holds a
    #: complete input; it raises a one-line error if not (a source that cannot be replayed:
    #: always)
    check_replay: Callable[[str], None]
    #: its own options (for ``build``) from the values of ``run``'s source flags (by their
    #: Python names: ``slot``, ``no_initial_copy`` ...); a flag it does not take is ignored
    options: Callable[[Mapping[str, Any]], dict[str, Any]] = lambda flags: {}
    #: a check of the location before anything is made or reached: a location it cannot
    #: read (a URI that does not parse) raises :class:`SourceUsageError`
    check_location: Callable[[str], None] = lambda location: None
    #: ``run`` on a new queue (none there yet), before it is made: ``(location, threads in
    #: play asked for)``; one it would refuse at start raises here, and leaves nothing behind
    check_new_run: Callable[[str, list[int] | None], None] = lambda location, threads: None
    #: how its positions (the watermark, progress, a commit's ``c_scn``) read in ``status``
    #: and logs: their name, and their text (redo: ``scn`` and the number; PostgreSQL:
    #: ``LSN`` and ``X/Y``)
    position_name: str = "scn"
    format_position: Callable[[int], str] = str
    #: whether its queue threads are worth naming (redo threads); False: one stream, whose
    #: queue thread (1) ``status`` and logs leave out
    shows_threads: bool = True


class ResumeState(StoredDocument):
    """Base of a source's resume state: a typed document with a ``version``
    (:class:`~olr_buffer.txbuffer.metadata.StoredDocument`)."""


def encode_state(state: ResumeState) -> bytes:
    """``state`` in the queue's checksummed envelope, ready to store."""
    return encode_document(state)


_S = TypeVar("_S", bound=ResumeState)


def decode_state(cls: type[_S], key: bytes, value: bytes, where: str = "queue") -> _S:
    """The ``cls`` document stored under ``key``, or a one-line error."""
    return decode_document(cls, key, value, where)


def stored_state(cls: type[_S], meta: Mapping[bytes, bytes], key: bytes, where: str = "queue") -> _S | None:
    """The ``cls`` document stored in a queue's metadata under ``key``, if any."""
    raw = meta.get(key)
    return None if raw is None else decode_state(cls, key, raw, where)
