"""The PostgreSQL reader in a child process: decoding on another core than the dispatcher.

The reader (:class:`~olr_buffer.sources.postgres.reader.PostgresReader`: the replication
connection, pgoutput decoding, records and blocks) is Python; in the service's process
it would share one interpreter lock with the dispatcher and the changefeed writer. As for
the redo-file readers, a child process forked by :mod:`olr_buffer.sources.runner` runs
it; its queue is a pipe: each block, encoded and
compressed in the child, goes to the parent with the reader's state, and the parent
appends both in one LMDB write, as the reader in a thread does. The parent stays the
only writer of the queue.

What goes the other way: the changefeed's last durable commit LSN, in a shared value
the parent keeps up to date (the reader confirms to the server only what is published),
and the stop, by closing a pipe (no lock a killed process could leave held). The child
dies with its parent (``PR_SET_PDEATHSIG``); a child that dies is a one-line error of the
service. The child's log records are logged again by the parent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ...errors import OlrBufferError
from ...txbuffer import TxQueue
from ..runner import PipeAppender, child_main
from ..stream import FiguresToParent, StreamProcess
from .reader import PostgresReader


@dataclass
class ReaderFigures:
    """The reader's figures the service reports (metrics, summary)."""

    records: int = 0
    confirmed: int = 0
    server_lsn: int = 0
    reconnects: int = 0
    streaming: int = 0  # in-progress transactions being streamed by the server

    @classmethod
    def of(cls, reader) -> ReaderFigures:
        return cls(
            reader.records,
            reader.confirmed,
            reader.server_lsn,
            reader.reconnects,
            sum(1 for t in reader.txns.values() if t.streamed),
        )


class ReaderProcessDied(OlrBufferError):
    """The child process of the PostgreSQL reader ended without reporting an error."""


class PostgresProcess(StreamProcess):
    """The parent's side: starts the child, appends what it sends, until it stops."""

    name = "olr-reader-postgres"
    label = "the PostgreSQL reader process"
    died_error = ReaderProcessDied
    resumes = "it restarts from the last block in the queue"
    width = 1  # the commit LSN

    def __init__(self, queue: TxQueue, uri: str, *, source_id: str | None, **common: Any) -> None:
        """``common``: :class:`~olr_buffer.sources.stream.StreamProcess`'s (``state``: a
        :class:`PostgresState`; ``published``: ``(commit LSN,)``)."""
        super().__init__(queue, uri, **common)
        self.source_id = source_id

    def child_args(self) -> tuple:
        return (self.uri, self.source_id, self.state, self.options)


class _PipeQueue(PipeAppender):
    """The child's queue: appends that go to the parent with the reader's figures."""

    def __init__(self, conn) -> None:
        super().__init__(conn, self._figures)
        self.reader: PostgresReader | None = None

    def _figures(self) -> ReaderFigures:
        assert self.reader is not None  # the queue appends once the reader runs
        return ReaderFigures.of(self.reader)


class _Published:
    """What the reader reads of the changefeed's last commit: its LSN (``scn``)."""

    __slots__ = ("scn",)

    def __init__(self, scn: int) -> None:
        self.scn = scn


def _child_main(conn, stop_conn, parent_pid, shared, uri, source_id, state, options) -> None:
    def published_lsn():
        v = shared.get()
        return None if v is None else _Published(v[0])

    def body(stop) -> None:
        queue = _PipeQueue(conn)
        reader = _ChildReader(queue, uri, state=state, published=published_lsn, stop=stop, **options)
        queue.reader = reader
        reader.figures_to_parent = FiguresToParent(conn, lambda: ReaderFigures.of(reader))
        reader.source_id = source_id
        reader.run()

    child_main(conn, stop_conn, parent_pid, options.pop("log_level", logging.INFO), body)


class _ChildReader(PostgresReader):
    """The reader of the child: also sends its figures with the status updates (at least
    every second), for the service's metrics."""

    figures_to_parent: FiguresToParent

    def _status(self, stream, received, idle_lsn=None):
        super()._status(stream, received, idle_lsn)
        self.figures_to_parent.send()


PostgresProcess.target = _child_main
