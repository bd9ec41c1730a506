"""The PostgreSQL source behind the Source contract (:mod:`olr_buffer.sources.base`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ...txbuffer import TxQueue
from ..base import Metric, SourceKind, SourceSettings, SourceUsageError
from ..stream import StreamSource, replay_refused
from .connection import redact, safe_uri
from .process import PostgresProcess, ReaderFigures
from .reader import THREAD, PostgresReader
from .state import STATE_KEY, load_state, lsn_text, status, status_lines


class PostgresSource(StreamSource):
    """One database's logical replication slot, read by one reader (queue thread 1) in a
    child process (``settings.processes``) or a thread. ``options``: the reader's own
    (slot, publication, initial_copy, streaming, ...)."""

    state_prefix = STATE_KEY
    thread_name = "reader-postgres"

    def __init__(self, uri: str, queue: TxQueue, settings: SourceSettings, **options) -> None:
        super().__init__(settings)
        self.uri = uri
        self.name = safe_uri(uri)
        self.queue = queue
        self.options = dict(options, block_records=settings.block_records, block_bytes=settings.block_bytes)
        self.reader: PostgresReader | None = None
        self._process: PostgresProcess | None = None

    @property
    def source_id(self) -> str | None:
        """``postgresql:<system identifier>:<slot>``: which database and slot feed the queue."""
        return self.reader.source_id if self.reader is not None else None

    def prepare(self, threads: list[int] | None, resume: Mapping[bytes, bytes]) -> list[int]:
        state = load_state(resume)
        s = self.settings
        self.reader = PostgresReader(
            self.queue,
            self.uri,
            state=state,
            published=lambda: self.durable,
            on_append=s.on_append,
            stop=s.stop,
            **self.options,
        )
        self.reader.prepare()
        if s.processes is not False:
            self._process = PostgresProcess(
                self.queue,
                self.uri,
                source_id=self.reader.source_id,
                state=state,
                figures=ReaderFigures.of(self.reader),
                published=self._published_lsn,
                on_append=s.on_append,
                stop=s.stop,
                options=self.options,
            )
        return [THREAD]

    def _published_lsn(self) -> tuple[int] | None:
        """What the child may confirm: the changefeed's last durable commit LSN."""
        key = self.durable
        return None if key is None else (key.scn,)

    def reader_body(self) -> Callable[[], None]:
        assert self.reader is not None
        if self._process is None:
            return self.reader.run
        self._process.options["log_level"] = logging.getLogger("olr_buffer.postgres").getEffectiveLevel()
        return self._process.run

    def reader_figures(self) -> ReaderFigures:
        """The reader's figures: its own, or the last its process sent."""
        if self._process is not None:
            return self._process.figures
        return ReaderFigures.of(self.reader) if self.reader is not None else ReaderFigures()

    def metrics(self) -> list[Metric]:
        r = self.reader_figures()
        return [
            Metric(
                "postgres_confirmed_lsn", "gauge", "The slot position confirmed to the server (flush LSN).", r.confirmed
            ),
            Metric("postgres_server_lsn", "gauge", "The server's WAL position, as of its last message.", r.server_lsn),
            Metric(
                "postgres_lag_bytes",
                "gauge",
                "WAL bytes between the confirmed position and the server's.",
                max(0, r.server_lsn - r.confirmed),
            ),
            Metric(
                "postgres_streaming_transactions",
                "gauge",
                "In-progress transactions being streamed by the server.",
                r.streaming,
            ),
            Metric("postgres_reconnects_total", "counter", "Reconnections to the server.", r.reconnects),
        ]


def build(uri: str, queue: TxQueue, settings: SourceSettings, **options) -> PostgresSource:
    return PostgresSource(uri, queue, settings, **options)


def refuse_replay(uri: str) -> None:
    """A replication stream has no end to replay to: ``replay`` is for redo log files."""
    raise replay_refused(safe_uri(uri), "a PostgreSQL source")


#: How long a standby that took the changefeed over waits for the slot to be free (s).
STANDBY_SLOT_WAIT = 120.0


def options(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The reader's options from ``run``'s flags."""
    return dict(
        slot=flags["slot"],
        publication=flags["publication"],
        initial_copy=not flags["no_initial_copy"],
        streaming=not flags["no_streaming"],
        # a standby takes the slot when the service it took over from lets it go: at the
        # latest when the server ends that connection (wal_sender_timeout, 60 s by default)
        **({"slot_wait": STANDBY_SLOT_WAIT} if flags.get("standby") else {}),
    )


def check_uri(uri: str) -> None:
    """A URI that libpq cannot parse, or whose port is not a number, is a usage error
    (exit 2), found before any directory is made or any server is tried."""
    import psycopg2
    import psycopg2.extensions

    try:
        params = psycopg2.extensions.parse_dsn(uri)
    except psycopg2.ProgrammingError as exc:
        raise SourceUsageError(redact(str(exc).strip().splitlines()[0])) from None
    ports = str(params.get("port", "")).split(",")
    bad = [p for p in ports if p.strip() and not p.strip().isdigit()]
    if bad:
        raise SourceUsageError(f"port {bad[0]!r} is not a number")


KIND = SourceKind(
    "postgresql",
    build,
    status,
    "postgresql",
    status_lines,
    refuse_replay,
    options,
    check_uri,
    position_name="LSN",
    format_position=lsn_text,
    shows_threads=False,
)
