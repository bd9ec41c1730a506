"""Running to the end of the input: ``olr-buffer replay``."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..changes import INFINITE_SCN
from ..sources import SourceAt, locate
from .assemble import Pipeline, Progress, RunSummary
from .options import PipelineOptions
from .running import running


def replay(
    input_dir: str | SourceAt,
    queue_dir: str,
    changefeed_dir: str,
    options: PipelineOptions | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    progress_every: float = 0.5,
) -> RunSummary:
    """Read every log file of ``input_dir`` to its end through the queue, publish every
    committed transaction, return the summary. Resumes where a killed run stopped. An
    input the source cannot replay (no log files) is refused before anything is created."""
    source = locate(input_dir)
    source.check_replay()
    return Pipeline(source, queue_dir, changefeed_dir, options).run(run_to_end, on_progress, progress_every)


def run_to_end(
    pipeline: Pipeline, on_progress: Callable[[Progress], None] | None = None, progress_every: float = 0.5
) -> RunSummary:
    """Read every log file to its end, publish every committed transaction."""
    p = pipeline
    source, dispatcher = p.source, p.dispatcher
    progress = Progress()
    if p.new_threads:
        # a thread new to this queue, whose records lie at or below a commit published
        # without it, is refused (run counts them as late and warns; a replay, which
        # takes its input as complete, would drop committed transactions)
        source.refuse_below(dispatcher.strict | p.new_threads, dispatcher.published_through)
    with running(p, follow=False):
        last_report = 0.0
        while True:
            n = dispatcher.poll()
            p.tell_published()
            now = time.monotonic()
            if on_progress and now - last_report >= progress_every:
                last_report = now
                p.fill_progress(progress)
                on_progress(progress)
            p.maybe_checkpoint()
            if n:
                continue
            if not source.alive():
                if dispatcher.poll() == 0 and dispatcher.position >= p.queue.next_index:
                    break
                continue
            p.appended.wait(0.2)
            p.appended.clear()
        source.join()
        if source.error() is None:
            # the input is complete: every thread has written everything
            dispatcher.publish_ready(INFINITE_SCN)
        # also after bad input: what was accepted is published and checkpointed
        p.checkpoint()
    if on_progress:
        p.fill_progress(progress)
        on_progress(progress)
    error = source.error()
    if error is not None:
        raise error
    return p.summary()
