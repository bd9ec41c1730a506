"""What both ways of running an assembled :class:`~.assemble.Pipeline` share: the source
started with the garbage collector quiet, and stopped on any error."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .options import reader_poll_seconds

if TYPE_CHECKING:
    from .assemble import Pipeline


@contextmanager
def quiet_gc() -> Iterator[None]:
    """The cyclic garbage collector costs several times the parsing on hot loops; our
    structures are acyclic, so it runs rarely while a job runs."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(200_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


@contextmanager
def running(pipeline: Pipeline, follow: bool) -> Iterator[None]:
    """The source started (to the end of the input, or following it) with the garbage
    collector quiet; on any error the source is stopped and joined and the sink's
    unpublished file dropped (the next run publishes it again) before it goes on."""
    source = pipeline.source
    with quiet_gc():
        source.start(follow=follow, poll_interval=reader_poll_seconds(pipeline.options))
        try:
            yield
        except BaseException:
            source.stop()
            pipeline.sink.abandon()
            raise
