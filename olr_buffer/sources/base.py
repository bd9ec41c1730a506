"""The Source contract: the only door between the pipeline and a source.

A source reads a database's changes (redo log files, a PostgreSQL replication slot, ...)
and appends them to the queue as blocks of change records (:mod:`olr_buffer.changes`),
from threads or child processes of its own (:mod:`olr_buffer.sources.runner`). The
pipeline drives it through :class:`Source` and nothing else.

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

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol

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


class Source(Protocol):
    """What the pipeline may call of a source (and what :class:`olr_buffer.pipeline.Pipeline`
    calls, in this order: ``prepare``, ``refuse_below``, ``start``; then, in its loop,
    ``errors``, ``alive``, ``on_published``, ``closed_through``, ``new_threads``; at the
    end ``stop``, ``join``, ``close``)."""

    #: What it reads, for logs and errors: a directory, a URI without its password.
    name: str
    #: The prefix of the queue metadata keys its resume state is stored under.
    state_prefix: bytes
    #: Errors of its readers, for the main thread to raise (the first one).
    errors: list[BaseException]
    #: Whether a thread in play that writes nothing holds the watermark back (redo files:
    #: ``run`` warns about a stalled thread; a replication stream's idle server does not).
    watches_stalls: bool

    def prepare(self, threads: list[int] | None, resume: Mapping[bytes, bytes]) -> list[int]:
        """Look at the input and restore the resume state the runtime read from the queue
        (``resume``: the keys under ``state_prefix``); return the threads in play, whose
        progress makes the watermark (``threads``, if the user gave them)."""
        ...

    @property
    def source_id(self) -> str | None:
        """The identity of what it reads, recorded in the changefeed beside the queue's
        (after :meth:`prepare`); None where the queue's id binds it (files)."""
        ...

    def refuse_below(self, threads: Iterable[int], published: CommitKey | None) -> None:
        """From now on, a record of ``threads`` at or below ``published`` (the
        changefeed's last commit) is bad input, refused before it reaches the queue."""
        ...

    def start(self, follow: bool, poll_interval: float) -> None:
        """Start reading: to the end of the input (``replay``), or following it until
        :meth:`stop` (``run``), looking for more every ``poll_interval`` seconds."""
        ...

    @property
    def following(self) -> bool:
        """Whether it follows its input (``run``) rather than reads it to its end."""
        ...

    def alive(self) -> bool:
        """Whether any of its readers still runs."""
        ...

    def on_published(self, accepted: CommitKey | None, durable: CommitKey | None) -> None:
        """The last commit the sink accepted (nothing at or below it can be published any
        more) and the last it made durable (what may be confirmed upstream)."""
        ...

    def closed_through(self) -> dict[int, int]:
        """The watermark it vouches for beyond the records: per closed thread, the queue
        index below which its reader confirmed it still closed."""
        ...

    def new_threads(self) -> list[int]:
        """Following: threads whose input appeared since the start (not in play), now read."""
        ...

    def threads(self) -> dict[int, bool]:
        """Every thread it reads (in play or not), and whether its input was read to its
        end (``replay``)."""
        ...

    def figures(self) -> SourceFigures:
        """Its running figures (cheap: the service's metrics ask every second)."""
        ...

    def input_size(self) -> tuple[int, int] | None:
        """``(bytes read, bytes in all)`` of an input that has a size (files: a replay's
        progress and ETA); None for a stream."""
        ...

    def metrics(self) -> list[Metric]:
        """Its own figures for the service's metrics."""
        ...

    def stop(self) -> None:
        """Ask the readers to stop at a block boundary."""
        ...

    def join(self) -> None:
        ...

    def close(self) -> None:
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
    check_new_run: Callable[[str, "list[int] | None"], None] = lambda location, threads: None
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


def decode_state(cls: type, key: bytes, value: bytes, where: str = "queue") -> Any:
    """The ``cls`` document stored under ``key``, or a one-line error."""
    return decode_document(cls, key, value, where)
