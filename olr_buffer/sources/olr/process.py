"""The OpenLogReplicator receiver in a child process: reading and decoding the messages
on another core than the dispatcher and the changefeed writer.

As for the other sources, a child forked by :mod:`olr_buffer.sources.runner` runs the
receiver (:class:`~.receiver.OlrReceiver`); its queue is a pipe: each block, encoded and
compressed in the child, goes to the parent with the receiver's state, and the parent
appends both in one LMDB write. What goes the other way: the position of the
changefeed's last durable commit (what the child may confirm to the sender), in shared
memory the parent keeps up to date, and the stop, by closing a pipe.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ...errors import OlrBufferError
from ...txbuffer import TxQueue
from ..base import decode_state
from ..runner import PipeAppender, child_main
from ..stream import FiguresToParent, SharedPosition, StreamProcess
from .location import parse_location
from .receiver import OlrReceiver
from .state import STATE_KEY, OlrState, Position, TableColumns


@dataclass
class ReceiverFigures:
    """The receiver's figures the service reports (metrics, summary)."""

    records: int = 0
    messages: int = 0
    transactions: int = 0
    checkpoints: int = 0
    reconnects: int = 0
    confirmed: Position | None = None
    received: Position | None = None

    @classmethod
    def of(cls, r: OlrReceiver) -> ReceiverFigures:
        return cls(r.records, r.messages, r.transactions, r.checkpoints, r.reconnects, r.confirmed, r.received)


class ReaderProcessDied(OlrBufferError):
    """The child process of the OpenLogReplicator receiver ended without reporting an error."""


class OlrProcess(StreamProcess):
    """The parent's side: starts the child, appends what it sends, until it stops; it
    also tells the child which state the queue stored last (``_stored``)."""

    name = "olr-reader-olr"
    label = "the OpenLogReplicator receiver process"
    died_error = ReaderProcessDied
    resumes = "it resumes after the last transaction published"
    width = 2  # (c_scn, c_idx)

    def __init__(self, queue: TxQueue, uri: str, *, columns: dict[bytes, TableColumns], **common: Any) -> None:
        """``common``: :class:`~olr_buffer.sources.stream.StreamProcess`'s (``state``: an
        :class:`OlrState`; ``published``: a position, ``(c_scn, c_idx)``)."""
        super().__init__(queue, uri, **common)
        self.columns = columns
        # the idle_confirmed of the last state appended: the child confirms a checkpoint once it is stored
        self._stored = SharedPosition(2)
        self._stored.set(self.state.idle_confirmed if self.state is not None else None)

    def child_args(self) -> tuple:
        return (self.uri, self.state, self.columns, self._stored, self.options)

    def handle(self, msg: tuple) -> bool:
        done = self.appends.handle(msg)
        if msg[0] == "append":  # appended: what its state says is stored
            raw = msg[3].get(STATE_KEY)
            if raw is not None:
                self._stored.set(decode_state(OlrState, STATE_KEY, raw, "the receiver's state").idle_confirmed)
        return done


class _ChildReceiver(OlrReceiver):
    """The receiver of the child: also sends its figures now and then, for the metrics."""

    figures_to_parent: FiguresToParent

    def _status(self, sock) -> None:
        super()._status(sock)
        self.figures_to_parent.send()


def _child_main(conn, stop_conn, parent_pid, shared, uri, state, columns, stored, options) -> None:
    def body(stop) -> None:
        receiver: _ChildReceiver | None = None

        def figures() -> ReceiverFigures:
            assert receiver is not None  # the queue appends once the receiver runs
            return ReceiverFigures.of(receiver)

        queue = PipeAppender(conn, figures)
        receiver = _ChildReceiver(
            queue,
            parse_location(uri),
            state=state,
            columns=columns,
            published=shared.get,
            stored=stored.get,
            stop=stop,
            **options,
        )
        receiver.figures_to_parent = FiguresToParent(conn, lambda: ReceiverFigures.of(receiver))
        receiver.run()

    child_main(conn, stop_conn, parent_pid, options.pop("log_level", logging.INFO), body)


OlrProcess.target = _child_main
