"""The runner's side of a source (:class:`SourceRunner`): what the runtime calls. The
source gives readers (:class:`~olr_buffer.sources.base.Source`); the runner runs each in a
thread, owns the stop and the errors, and delivers the acknowledgement. A reader that
works in a child process uses :mod:`olr_buffer.sources.runner`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from ..changes import CommitKey
from ..errors import EXIT_BAD_INPUT
from .base import (
    Acknowledgement,
    Closes,
    Identified,
    Measured,
    Metric,
    Reader,
    RedoThreads,
    Sized,
    Source,
    SourceFigures,
    SourceSettings,
    StartsFrom,
)


def run_reported(
    body: Callable[[], None],
    errors: list[BaseException],
    stop: threading.Event,
    on_append: Callable[[], None] | None,
    *,
    stop_on_input_error: bool = True,
) -> None:
    """Run a reader's ``body`` in its thread: an error is handed to the main thread
    (appended to ``errors``) and stops the other readers (bad input, exit code 3, only if
    ``stop_on_input_error``); the main thread is woken (``on_append``) either way."""
    try:
        body()
    except BaseException as exc:
        errors.append(exc)
        if stop_on_input_error or getattr(exc, "exit_code", None) != EXIT_BAD_INPUT:
            stop.set()
    finally:
        if on_append:
            on_append()


class SourceRunner:
    """The runner's side of a :class:`~olr_buffer.sources.base.Source`: what the runtime
    calls. It runs the source's readers in threads (:func:`run_reported`), owns the stop
    (``settings.stop``) and the errors (``errors``: the first one is raised by the
    runtime), delivers the :class:`~olr_buffer.sources.base.Acknowledgement`, and gives
    the runtime what the source's optional members say (or what a source without them
    means: no identity, no size, one stream that holds nothing back)."""

    def __init__(self, source: Source, settings: SourceSettings) -> None:
        self.source = source
        self.settings = settings
        self.name = source.name
        self.state_prefix = source.state_prefix
        #: errors of its readers, for the runtime to raise (the first one)
        self.errors: list[BaseException] = []
        self.following = False  # reading to the end (replay), or following (run)
        self._stop = settings.stop
        self._threads: list[threading.Thread] = []
        self._in_play: list[int] = []
        self._redo = source if isinstance(source, RedoThreads) else None
        self._sized = source if isinstance(source, Sized) else None
        #: whether a thread in play that writes nothing holds the watermark back (redo
        #: files: ``run`` warns about a stalled thread; a stream's idle server does not)
        self.watches_stalls = bool(self._redo is not None and self._redo.watches_stalls)

    def prepare(self, threads: list[int] | None, resume: Mapping[bytes, bytes]) -> list[int]:
        self._in_play = self.source.prepare(threads, resume)
        return self._in_play

    @property
    def source_id(self) -> str | None:
        return self.source.source_id if isinstance(self.source, Identified) else None

    @property
    def starts_from(self) -> bool:
        """Whether it can start further on in its input (:class:`StartsFrom`)."""
        return isinstance(self.source, StartsFrom)

    def start_from(self, run_from: Mapping[int, int]) -> None:
        """A new queue: start where ``run_from`` says (a source that cannot: from the start)."""
        if isinstance(self.source, StartsFrom):
            self.source.start_from(run_from)

    def refuse_below(self, threads: Iterable[int], published: CommitKey | None) -> None:
        """From now on, a record of ``threads`` at or below ``published`` (the changefeed's
        last commit) is refused (redo threads; a stream comes in commit order from where it
        stopped); the source is acknowledged that position."""
        if self._redo is not None:
            self._redo.refuse_below(threads, published)
        self.source.acknowledge(Acknowledgement(published, published))

    def start(self, follow: bool, poll_interval: float) -> None:
        """Start a thread per reader. Offline, the other readers read on after bad input
        (their records are accepted, and what the failing thread's progress allows is
        published); following, an error stops them all."""
        self.following = follow
        for reader in self.source.readers(follow, poll_interval):
            self._start(reader)

    def _start(self, reader: Reader) -> None:
        t = threading.Thread(
            target=run_reported,
            args=(reader.run, self.errors, self._stop, self.settings.on_append),
            kwargs={"stop_on_input_error": self.following},
            name=reader.name,
            daemon=True,
        )
        self._threads.append(t)
        t.start()

    def acknowledge(self, ack: Acknowledgement) -> None:
        self.source.acknowledge(ack)

    def new_threads(self) -> list[int]:
        """Following: the queue threads whose input appeared since the start (not in
        play), whose readers are started now."""
        if self._redo is None:
            return []
        new = self._redo.new_readers()
        for reader in new:
            self._start(reader)
        return [r.thread for r in new]

    def closed_through(self) -> dict[int, int]:
        return self._redo.closed_through() if self._redo is not None else {}

    def threads(self) -> dict[int, bool]:
        """Every thread it reads, and whether its input was read to its end."""
        if self._sized is not None:
            return self._sized.threads()
        return {t: False for t in self._in_play}

    def input_size(self) -> tuple[int, int] | None:
        return self._sized.input_size() if self._sized is not None else None

    def figures(self) -> SourceFigures:
        return self.source.figures()

    def metrics(self) -> list[Metric]:
        return self.source.metrics() if isinstance(self.source, Measured) else []

    def alive(self) -> bool:
        """Whether any of its readers still runs."""
        return any(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        """Ask the readers to stop at a block boundary."""
        self._stop.set()

    def join(self) -> None:
        for t in self._threads:
            t.join()

    def close(self) -> None:
        if isinstance(self.source, Closes):
            self.source.close()
