"""runtime: the queue, a source, the dispatcher, a sink and the checkpoint cycle put
together (:mod:`.assemble`) and run: to the end of the input (:mod:`.replay`, ``olr-buffer
replay``) or until stopped (:mod:`.follow`, ``olr-buffer run``). The source is called in one
place (:mod:`.source_calls`)."""

from .assemble import CHANGEFEED_STAGING, Pipeline, Progress, RunSummary
from .follow import changefeed_at, follow, run_service
from .options import PipelineOptions, reader_poll_seconds
from .replay import replay, run_to_end
from .running import quiet_gc

__all__ = [
    "CHANGEFEED_STAGING",
    "Pipeline",
    "PipelineOptions",
    "Progress",
    "RunSummary",
    "changefeed_at",
    "follow",
    "quiet_gc",
    "reader_poll_seconds",
    "replay",
    "run_service",
    "run_to_end",
]
