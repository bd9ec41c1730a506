"""Every call the runtime makes of a source, in one place: the runtime reaches a source
only through :class:`SourceCalls` (and the checks of :class:`olr_buffer.sources.SourceAt`
before a run is made), through the source's runner (:class:`olr_buffer.sources.SourceRunner`,
which speaks the Source contract of :mod:`olr_buffer.sources.base`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ..changes import CommitKey
from ..sources import Acknowledgement, SourceAt, SourceKind, SourceRunner, SourceSettings
from ..txbuffer import TxQueue


class SourceCalls:
    """The source ``source`` into ``queue``, as the runtime drives it: opened
    with the settings every source gets, prepared from its resume state in the queue,
    started, told what was published, stopped and closed."""

    def __init__(
        self,
        source: SourceAt,
        queue: TxQueue,
        *,
        block_records: int,
        block_bytes: int,
        processes: bool | None,
        dead_letter: str | None,
        on_append: Callable[[], None],
    ) -> None:
        settings = SourceSettings(
            block_records=block_records,
            block_bytes=block_bytes,
            processes=processes,
            dead_letter=dead_letter,
            on_append=on_append,
        )
        self.queue = queue
        self.source: SourceRunner = source.open(queue, settings)
        self.kind: SourceKind = source.kind  # how its positions read in logs

    # -- what it is ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def source_id(self) -> str | None:
        return self.source.source_id

    @property
    def following(self) -> bool:
        return self.source.following

    @property
    def watches_stalls(self) -> bool:
        return self.source.watches_stalls

    # -- before the start ----------------------------------------------------------------

    def prepare(self, threads: list[int] | None) -> list[int]:
        """Restore its resume state from the queue; the threads in play."""
        return self.source.prepare(threads, self.queue.meta_items(self.source.state_prefix))

    @property
    def starts_from(self) -> bool:
        """Whether it can start further on in its input (a changefeed's ``run_from``)."""
        return self.source.starts_from

    def start_from(self, run_from: Mapping[int, int]) -> None:
        """A new queue adopting a changefeed: start where the changefeed's ``run_from`` says."""
        self.source.start_from(run_from)

    def refuse_below(self, threads: Iterable[int], published: CommitKey | None) -> None:
        self.source.refuse_below(threads, published)

    # -- running -------------------------------------------------------------------------

    def start(self, follow: bool, poll_interval: float) -> None:
        self.source.start(follow=follow, poll_interval=poll_interval)

    def alive(self) -> bool:
        return self.source.alive()

    def error(self) -> BaseException | None:
        """The first error of its readers, if any."""
        errors = self.source.errors
        return errors[0] if errors else None

    def tell_published(self, accepted: CommitKey | None, durable: CommitKey | None) -> None:
        """What the sink accepted and what it made durable."""
        self.source.acknowledge(Acknowledgement(accepted, durable))

    def closed_through(self) -> dict[int, int]:
        return self.source.closed_through()

    def new_threads(self) -> list[int]:
        return self.source.new_threads()

    def stop(self) -> None:
        """Ask the readers to stop at a block boundary, and wait for them."""
        self.source.stop()
        self.source.join()

    def join(self) -> None:
        """Wait for the readers to finish (the end of the input)."""
        self.source.join()

    # -- figures -------------------------------------------------------------------------

    def threads(self) -> dict[int, bool]:
        return self.source.threads()

    def input_size(self) -> tuple[int, int] | None:
        return self.source.input_size()

    def figures(self):
        return self.source.figures()

    def metrics(self):
        return self.source.metrics()

    def close(self) -> None:
        self.source.close()
