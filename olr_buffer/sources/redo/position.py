"""The redo source's resume state: one position per redo thread, stored in the queue in
the same write as the records it covers, under ``reader/<thread>``; and what ``status``
shows of it."""

from __future__ import annotations

from collections.abc import Mapping

from ...changes import INFINITE_SCN
from ..base import ResumeState, decode_state, encode_state

#: The queue metadata keys of the redo source: ``reader/<thread>``.
POSITION_PREFIX = b"reader/"


class ReaderPosition(ResumeState):
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
        return encode_state(self)

    @classmethod
    def decode(cls, value: bytes) -> ReaderPosition:
        return decode_state(cls, b"reader position", value)


def position_key(thread: int) -> bytes:
    return POSITION_PREFIX + str(thread).encode()


def load_positions(meta: Mapping[bytes, bytes]) -> dict[int, ReaderPosition]:
    """Every reader position found in a queue's metadata, by thread."""
    out = {}
    for k, v in meta.items():
        if k.startswith(POSITION_PREFIX):
            pos = ReaderPosition.decode(v)
            out[pos.thread] = pos
    return out


def status(meta: Mapping[bytes, bytes], now: float) -> dict:
    """``readers`` in ``status``: each redo thread's position and progress."""
    positions = load_positions(meta)
    return {
        str(t): {
            "sequence": p.sequence,
            "offset": p.offset,
            "line": p.line,
            "last_scn": p.scn,
            "progress": "complete" if p.progress >= INFINITE_SCN else p.progress,
            "finished": p.finished,
            "closed": p.closed,
        }
        for t, p in sorted(positions.items())
    }


def status_lines(doc: dict) -> list[str]:
    return [
        f"reader thread {t}: sequence {r['sequence']} line {r['line']} (byte {r['offset']}), "
        f"last scn {r['last_scn']}, progress {r['progress']}{', finished' if r['finished'] else ''}"
        for t, r in doc.items()
    ]
