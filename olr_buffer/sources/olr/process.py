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
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from ...errors import OlrBufferError
from ...txbuffer import TxQueue
from ..base import decode_state
from ..runner import CONTEXT, ChildAppends, PipeAppender, child_main, run_child
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
    def of(cls, r: OlrReceiver) -> "ReceiverFigures":
        return cls(r.records, r.messages, r.transactions, r.checkpoints, r.reconnects, r.confirmed, r.received)


class SharedPosition:
    """A position in shared memory, written by one process and read by another without a
    lock (a killed process could die holding one): ``[version, c_scn, c_idx]``, the
    version odd while a write is under way, so that a read never mixes two positions."""

    def __init__(self) -> None:
        self._a = CONTEXT.Array("q", [0, -1, 0], lock=False)

    def set(self, pos: Position | None) -> None:
        a = self._a
        a[0] += 1
        a[1], a[2] = (-1, 0) if pos is None else pos
        a[0] += 1

    def get(self) -> Position | None:
        a = self._a
        while True:
            v = a[0]
            if v & 1:
                continue
            scn, idx = a[1], a[2]
            if a[0] == v:
                return None if scn < 0 else (scn, idx)


class ReaderProcessDied(OlrBufferError):
    """The child process of the OpenLogReplicator receiver ended without reporting an error."""


class OlrProcess:
    """The parent's side: starts the child, appends what it sends, until it stops."""

    def __init__(
        self,
        queue: TxQueue,
        uri: str,
        *,
        state: OlrState | None,
        columns: dict[bytes, TableColumns],
        figures: ReceiverFigures,
        published: Callable[[], Position | None],
        on_append: Callable[[], None] | None,
        stop: threading.Event,
        options: Mapping,
    ) -> None:
        self.uri = uri
        self.state = state
        self.columns = columns
        self.appends = ChildAppends(queue, figures, on_append)
        self.published = published
        self.stop = stop
        self.options = dict(options)
        self._shared = SharedPosition()
        self._sent: Position | None = None
        # the idle_confirmed of the last state appended: the child confirms a checkpoint once it is stored
        self._stored = SharedPosition()
        self._stored.set(state.idle_confirmed if state is not None else None)

    def _update_published(self) -> None:
        pub = self.published()
        if pub != self._sent:
            self._shared.set(pub)
            self._sent = pub

    def run(self) -> None:
        """Run the child until ``stop`` (then it stops at a block boundary) or an error."""
        self._update_published()
        run_child(
            _child_main,
            (self.uri, self.state, self.columns, self._shared, self._stored, self.options),
            name="olr-reader-olr",
            label="the OpenLogReplicator receiver process",
            stop=self.stop,
            handle=self._handle,
            died=_died,
            tick=self._update_published,
        )

    def _handle(self, msg: tuple) -> bool:
        done = self.appends.handle(msg)
        if msg[0] == "append":  # appended: what its state says is stored
            raw = msg[3].get(STATE_KEY)
            if raw is not None:
                self._stored.set(decode_state(OlrState, STATE_KEY, raw, "the receiver's state").idle_confirmed)
        return done

    @property
    def figures(self) -> ReceiverFigures:
        """The figures the child sent last."""
        return self.appends.figures


def _died(exitcode: int | None) -> ReaderProcessDied:
    return ReaderProcessDied(
        f"the OpenLogReplicator receiver process died (exit code {exitcode})",
        hint="look for an out-of-memory kill in the system log; run the same command again "
             "(it resumes after the last transaction published)",
    )


class _ChildReceiver(OlrReceiver):
    """The receiver of the child: also sends its figures now and then, for the metrics."""

    conn = None
    _figures_sent = 0.0

    def _status(self, sock) -> None:
        super()._status(sock)
        now = time.monotonic()
        if now - self._figures_sent >= 0.5:
            self._figures_sent = now
            self.conn.send(("figures", ReceiverFigures.of(self)))


def _child_main(conn, stop_conn, parent_pid, uri, state, columns, shared, stored, options) -> None:
    def body(stop) -> None:
        receiver = None
        queue = PipeAppender(conn, lambda: ReceiverFigures.of(receiver))
        receiver = _ChildReceiver(queue, parse_location(uri), state=state, columns=columns, published=shared.get,
                                  stored=stored.get, stop=stop, **options)
        receiver.conn = conn
        receiver.run()

    child_main(conn, stop_conn, parent_pid, options.pop("log_level", logging.INFO), body)
