"""The PostgreSQL source: logical replication (pgoutput, streamed in-progress transactions)
into the same queue as the redo-file source. See docs/postgresql.md."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from ...txbuffer import TxQueue
from ..group import run_reported
from .connection import PostgresError, safe_uri
from .process import PostgresProcess, ReaderFigures
from .reader import POSITION_KEY, THREAD, PostgresReader

__all__ = ["POSITION_KEY", "PostgresError", "PostgresReader", "PostgresSource", "safe_uri"]


class PostgresSource:
    """The reader of a PostgreSQL database, with the surface the pipeline drives
    (the same as :class:`~olr_buffer.reader.thread_reader.ReaderGroup`'s)."""

    def __init__(
        self,
        queue: TxQueue,
        uri: str,
        published: Callable[[], Any],
        on_append: Callable[[], None] | None = None,
        process: bool = True,
        **options,
    ) -> None:
        """``process``: the reader runs in a child process (:mod:`.process`), else in a thread."""
        self.stop = threading.Event()
        self.reader = PostgresReader(queue, uri, published=published, on_append=on_append, stop=self.stop, **options)
        self._process: PostgresProcess | None = None
        if process:
            self._process = PostgresProcess(
                queue, uri, source_id=None, figures=ReaderFigures(), published=published, on_append=on_append,
                stop=self.stop, options=options,
            )
        self.input_dir = self.reader.server.safe
        self.readers: dict = {}
        self.errors: list[BaseException] = []
        self.on_append = on_append
        self._thread: threading.Thread | None = None
        self.quarantined = 0
        self.bytes_total = 0

    following = True  # a replication stream has no end: the service follows it
    watches_stalls = False  # an idle database is not a stalled redo thread


    @property
    def source_id(self) -> str | None:
        """``postgresql:<system identifier>:<slot>``: which database and slot feed the queue."""
        return self.reader.source_id

    @property
    def figures(self) -> ReaderFigures:
        """The reader's figures: its own, or the last its process sent."""
        return self._process.figures if self._process is not None else ReaderFigures.of(self.reader)

    @property
    def records_read(self) -> int:
        return self.figures.records

    def prepare(self, threads: list[int] | None = None) -> list[int]:
        self.reader.prepare()
        if self._process is not None:
            self._process.source_id = self.reader.source_id
            self._process.figures = ReaderFigures.of(self.reader)
        return [THREAD]

    def start(self, follow: bool = True, poll_interval: float = 0.1) -> None:
        self._thread = threading.Thread(target=self._run, name="reader-postgres", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._process is not None:
            self._process.options["log_level"] = logging.getLogger("olr_buffer.postgres").getEffectiveLevel()
        run_reported(self._process.run if self._process is not None else self.reader.run,
                     self.errors, self.stop, self.on_append)

    def metrics(self) -> list[tuple[str, str, str, list[tuple[str, float]]]]:
        """The source's own figures for the service's metrics: (name, kind, help, samples)."""
        r = self.figures
        return [
            ("postgres_confirmed_lsn", "gauge", "The slot position confirmed to the server (flush LSN).",
             [("", r.confirmed)]),
            ("postgres_server_lsn", "gauge", "The server's WAL position, as of its last message.", [("", r.server_lsn)]),
            ("postgres_lag_bytes", "gauge", "WAL bytes between the confirmed position and the server's.",
             [("", max(0, r.server_lsn - r.confirmed))]),
            ("postgres_streaming_transactions", "gauge", "In-progress transactions being streamed by the server.",
             [("", r.streaming)]),
            ("postgres_reconnects_total", "counter", "Reconnections to the server.", [("", r.reconnects)]),
        ]

    def add_new_threads(self) -> list[int]:
        return []

    def check_floor(self, threads, published_scn: int | None) -> None:
        """One stream, in commit order: nothing can arrive below a published commit."""

    class _Floor:
        value = -1

    published_scn = _Floor()  # the redo readers' floor; unused here

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def close(self) -> None:
        pass
