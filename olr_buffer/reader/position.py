"""A reader's source position, stored in the queue in the same write as the records."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import orjson

from ..txbuffer.errors import QueueCorruptError
from ..txbuffer.metadata import POSITION_PREFIX, POSTGRES_POSITION_KEY, load_json, seal  # noqa: F401 (re-exported)

_PREFIX = POSITION_PREFIX


@dataclass(slots=True)
class ReaderPosition:
    """Where one redo thread's reader is: the next unread byte and line of a sequence.

    ``scn``/``sub`` are the last accepted record's, so that "SCN goes back" is caught
    across restarts and sequences; ``progress`` is the thread's progress P(t); ``closed``
    says that the last record read is a ``close``.
    """

    thread: int
    sequence: int
    offset: int = 0
    line: int = 0
    scn: int = -1
    sub: int = 0
    progress: int = -1
    finished: bool = False  # the end of the thread's input was written to the queue (replay)
    closed: bool = False  # the last record read is a ``close``: the thread is closed

    @property
    def key(self) -> bytes:
        return position_key(self.thread)

    def encode(self) -> bytes:
        return seal(orjson.dumps(asdict(self)))

    @classmethod
    def decode(cls, value: bytes) -> "ReaderPosition":
        doc = load_json(b"reader position", value)
        try:
            return cls(**doc)
        except TypeError as exc:
            raise QueueCorruptError(f"queue: a stored reader position is damaged: {exc}") from None


def position_key(thread: int) -> bytes:
    return _PREFIX + str(thread).encode()


def load_positions(meta: dict[bytes, bytes]) -> dict[int, ReaderPosition]:
    """Every reader position found in a queue's metadata, by thread."""
    out = {}
    for k, v in meta.items():
        if k.startswith(_PREFIX):
            pos = ReaderPosition.decode(v)
            out[pos.thread] = pos
    return out

