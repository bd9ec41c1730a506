"""The OpenLogReplicator source behind the Source contract (:mod:`olr_buffer.sources.base`):
``olr://HOST:PORT/DATABASE``, a sender of OpenLogReplicator's network protocol (an
OpenLogReplicator, another ``olr-buffer serve``), read by one receiver (queue thread 1)
in a child process (``settings.processes``) or a thread."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ...txbuffer import TxQueue
from ..base import Metric, SourceKind, SourceSettings
from ..stream import StreamSource, replay_refused
from .location import parse_location
from .process import OlrProcess, ReceiverFigures
from .receiver import MAX_MESSAGE_BYTES, THREAD, OlrReceiver
from .state import PREFIX, Position, load_columns, load_state, status, status_lines


class OlrSource(StreamSource):
    """One sender, read by one receiver. ``options``: ``start_scn``, ``max_message_bytes``
    and the receiver's own."""

    state_prefix = PREFIX
    thread_name = "reader-olr"

    def __init__(self, uri: str, queue: TxQueue, settings: SourceSettings, **options) -> None:
        self.location = parse_location(uri)
        super().__init__(settings)
        self.uri = uri
        self.name = self.location.uri
        self.queue = queue
        self.options = dict(options, block_records=settings.block_records, block_bytes=settings.block_bytes)
        self.receiver: OlrReceiver | None = None
        self._process: OlrProcess | None = None

    @property
    def source_id(self) -> str | None:
        """``olr:<database>``: the database whose changes feed the queue (whichever sender,
        an OpenLogReplicator or a stand-by one, sends them)."""
        return f"olr:{self.location.database}"

    def _published(self) -> Position | None:
        """What the receiver may confirm: the changefeed's last durable commit, whose key
        is ``(c_scn, 1, 0, c_idx)``."""
        key = self.durable
        return None if key is None else (key.scn, key.line)

    def prepare(self, threads: list[int] | None, resume: Mapping[bytes, bytes]) -> list[int]:
        state = load_state(resume)
        columns = load_columns(resume)
        s = self.settings
        self.receiver = OlrReceiver(
            self.queue,
            self.location,
            state=state,
            columns=columns,
            published=self._published,
            on_append=s.on_append,
            stop=s.stop,
            **self.options,
        )
        if s.processes is not False:
            self._process = OlrProcess(
                self.queue,
                self.uri,
                state=state,
                columns=columns,
                figures=ReceiverFigures.of(self.receiver),
                published=self._published,
                on_append=s.on_append,
                stop=s.stop,
                options=self.options,
            )
        return [THREAD]

    def reader_body(self) -> Callable[[], None]:
        assert self.receiver is not None
        if self._process is None:
            return self.receiver.run
        self._process.options["log_level"] = logging.getLogger("olr_buffer.olr").getEffectiveLevel()
        return self._process.run

    def reader_figures(self) -> ReceiverFigures:
        if self._process is not None:
            return self._process.figures
        return ReceiverFigures.of(self.receiver) if self.receiver is not None else ReceiverFigures()

    def metrics(self) -> list[Metric]:
        r = self.reader_figures()
        confirmed = r.confirmed or (0, 0)
        received = r.received or (0, 0)
        return [
            Metric("olr_confirmed_c_scn", "gauge", "The c_scn last confirmed to the sender.", confirmed[0]),
            Metric("olr_confirmed_c_idx", "gauge", "The c_idx last confirmed to the sender.", confirmed[1]),
            Metric("olr_received_c_scn", "gauge", "The c_scn of the last message received.", received[0]),
            Metric(
                "olr_lag_scn",
                "gauge",
                "SCNs between the last message received and the position confirmed.",
                max(0, received[0] - confirmed[0]),
            ),
            Metric("olr_messages_total", "counter", "Messages received (every run).", r.messages),
            Metric("olr_transactions_total", "counter", "Transactions received (every run).", r.transactions),
            Metric(
                "olr_checkpoint_messages_total",
                "counter",
                "OpenLogReplicator checkpoint messages, ignored.",
                r.checkpoints,
            ),
            Metric("olr_reconnects_total", "counter", "Connections to the sender made again.", r.reconnects),
        ]


def build(uri: str, queue: TxQueue, settings: SourceSettings, **options) -> OlrSource:
    return OlrSource(uri, queue, settings, **options)


def refuse_replay(uri: str) -> None:
    """A stream has no end to replay to: ``replay`` is for redo log files."""
    raise replay_refused(parse_location(uri).uri, "an OpenLogReplicator sender")


def options(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The receiver's options from ``run``'s flags."""
    out: dict[str, Any] = {"start_scn": flags.get("start_scn") or 0}
    if flags.get("max_message_size") is not None:
        out["max_message_bytes"] = flags["max_message_size"]
    if flags.get("accept_gap"):
        out["accept_gap"] = True
    return out


def check_location(uri: str) -> None:
    """A URI that is not ``olr://HOST:PORT/DATABASE`` is a usage error (exit 2), found
    before any directory is made or any sender is tried."""
    parse_location(uri)


KIND = SourceKind("olr", build, status, "olr", status_lines, refuse_replay, options, check_location)

__all__ = ["KIND", "MAX_MESSAGE_BYTES", "OlrSource", "build"]
