"""What a run of the runtime is given: :class:`PipelineOptions`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..changes import DEFAULT_BLOCK_BYTES, DEFAULT_BLOCK_RECORDS
from ..store import LeaseTiming
from ..txbuffer import DEFAULT_SEGMENT_BYTES

#: The options of :class:`PipelineOptions` that are the sink's own: handed to its kind
#: (:attr:`olr_buffer.sinks.SinkKind.options`), which takes those it knows.
SINK_FLAGS = ("file_rows", "changefeed_mode", "table_format", "iceberg_catalog", "iceberg_table")


@dataclass
class PipelineOptions:
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    block_records: int = DEFAULT_BLOCK_RECORDS
    block_bytes: int = DEFAULT_BLOCK_BYTES
    durable: bool = True
    checkpoint_seconds: float = 5.0
    retain_segments: int = 0
    retain_seconds: float = 0.0
    # the sink: its kind (olr_buffer.sinks.KINDS) and its own options (SINK_FLAGS; None: its default)
    sink: str = "parquet"
    file_rows: int | None = None  # rows per changefeed file, about
    changefeed_mode: int | None = None  # the changefeed directory's mode; files get it without x bits
    table_format: str | None = None  # parquet, delta or iceberg; None: the changefeed's own (a new one: parquet)
    iceberg_catalog: str | None = None  # an Iceberg changefeed's catalog URI (None: recorded, else beside it)
    iceberg_table: str | None = None  # its table NS.NAME (None: recorded, else olr_buffer.changefeed)
    # service (follow mode)
    threads: list[int] | None = None  # threads in play; None: those with files at start
    flush_seconds: float = 1.0  # a transaction is published at most this long after it is safe
    poll_seconds: float = 0.1  # how often an idle reader looks for new lines and files (see reader_poll_seconds)
    dead_letter: str | None = None  # quarantine bad records in this file instead of stopping
    # run the source's readers in child processes (both cores); False: threads of this
    # process; None: the source decides (the redo source reads a small replay in threads)
    reader_processes: bool | None = None
    adopt_changefeed: bool = False  # take over a changefeed written by another (lost) queue of the same input
    source_id: str | None = None  # the source's identity, checked beside the queue's (PostgreSQL: system id, slot)
    stall_seconds: float = 60.0  # warn once about a thread in play silent (and not closed) this long
    log_summary_seconds: float = 60.0  # run: an INFO line of what was published, this often (0: none)
    store_timeout_seconds: float = 30.0  # run: a store call unanswered this long is an outage (said, counted)
    # retention (opt-in, data loss by choice): abandon a transaction without an end that
    # started this long (source clock) or this many SCNs before the watermark
    transaction_retention_seconds: float | None = None
    transaction_retention_scn: int | None = None
    # the changefeed's lease (on object storage): its length, renewal, clock skew (None: defaults)
    lease: LeaseTiming | None = None
    # run --standby: wait while another service writes the changefeed (looking this often),
    # then take it over (adopting it) and read the source from what it published
    standby: bool = False
    standby_poll_seconds: float = 1.0

    def sink_flags(self) -> dict[str, Any]:
        """The sink's own options that were given (:data:`SINK_FLAGS`, by name)."""
        return {name: getattr(self, name) for name in SINK_FLAGS if getattr(self, name) is not None}


def reader_poll_seconds(opts: PipelineOptions) -> float:
    """How often an idle reader of ``run`` looks for new lines: ``poll_seconds``, or half
    the flush interval if that is shorter (at least 10 ms). A commit waits for a look of
    every thread's reader (the watermark) and then for the flush: a poll as long as the
    flush interval would double the latency asked for."""
    return min(opts.poll_seconds, max(opts.flush_seconds / 2, 0.01))
