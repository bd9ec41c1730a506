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
import os
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Mapping

from ...errors import OlrBufferError
from ...txbuffer import TxQueue
from ..runner import CONTEXT, LogToParent, ParentStop, PipeAppender, relog, run_child, start_child
from .location import parse_location
from .receiver import OlrReceiver
from .state import OlrState, Position, TableColumns


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
        self.queue = queue
        self.uri = uri
        self.state = state
        self.columns = columns
        self.figures = figures
        self.published = published
        self.on_append = on_append or (lambda: None)
        self.stop = stop
        self.options = dict(options)
        self._shared = SharedPosition()
        self._sent: Position | None = None

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
            (self.uri, self.state, self.columns, self._shared, self.options),
            name="olr-reader-olr",
            label="the OpenLogReplicator receiver process",
            stop=self.stop,
            handle=self._handle,
            died=_died,
            tick=self._update_published,
        )

    def _handle(self, msg: tuple) -> bool:
        kind = msg[0]
        if kind == "append":
            _, value, count, meta, figs = msg
            self.queue.append_encoded(value, count, meta)
            self.figures = figs
            if value is not None:
                self.on_append()
        elif kind == "figures":
            self.figures = msg[1]
        elif kind == "log":
            relog(msg[1])
        return kind == "done"


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


def _child_main(conn, stop_conn, parent_pid, uri, state, columns, shared, options) -> None:
    start_child(parent_pid)
    root = logging.getLogger("olr_buffer")
    root.handlers[:] = [LogToParent(conn)]
    root.setLevel(options.pop("log_level", logging.INFO))
    root.propagate = False
    try:
        receiver = None
        queue = PipeAppender(conn, lambda: ReceiverFigures.of(receiver))
        receiver = _ChildReceiver(queue, parse_location(uri), state=state, columns=columns, published=shared.get,
                                  stop=ParentStop(stop_conn), **options)
        receiver.conn = conn
        receiver.run()
        conn.send(("done",))
    except OlrBufferError as exc:
        try:
            conn.send(("error", exc))
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            conn.send(("crash", f"{type(exc).__name__}: {exc}"))
    except BaseException:  # noqa: BLE001 - reported to the parent, which stops the run
        conn.send(("crash", traceback.format_exc()))
    finally:
        conn.close()
        os._exit(0)
