"""The dispatcher's checkpoint document: one typed definition, written by the pipeline
(through :meth:`Dispatcher.checkpoint_state`) and read by the dispatcher on restart and
by ``olr-buffer status``.

It is stored under the queue's metadata key ``dispatcher/checkpoint``
(:data:`~olr_buffer.txbuffer.metadata.CHECKPOINT_KEY`), as JSON inside the checksummed
envelope of :mod:`olr_buffer.txbuffer.metadata`. ``format`` is its version: a document of
another version is refused in one line. Fields added later have defaults, so a document
written before they existed still decodes; unknown fields are ignored.

A transaction is a JSON array (:class:`TransactionState`, ``array_like``), a held one a
pair ``[in_open, transaction]``; see docs/architecture.md, "Checkpoints and cleanup".
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from ..changes import INFINITE_SCN, CommitKey
from ..txbuffer.metadata import CHECKPOINT_KEY, damaged, unseal
from .errors import DispatchError, damaged_checkpoint

CHECKPOINT_FORMAT = 1


@dataclass(slots=True)
class DispatchStats:
    """The dispatcher's cumulative counters (per queue: restored from the checkpoint)."""

    blocks: int = 0
    records: int = 0
    published: int = 0
    rows: int = 0
    rolled_back: int = 0
    no_begin: int = 0
    empty: int = 0
    already_published: int = 0
    extra_ends: int = 0
    late_records: int = 0
    late_transactions: int = 0  # ends that arrived after a later commit was published (threads not in play)
    compensations: int = 0
    unmatched_compensations: int = 0
    abandoned_transactions: int = 0  # dropped by the retention limit (--transaction-retention[-scn])
    abandoned_rows: int = 0  # their rows, never published
    abandoned_records: int = 0  # records of abandoned transactions that came after, not published
    forgotten_records: int = 0  # late records (also in late_records) of an XID not held, at or below the last commit


class TransactionState(msgspec.Struct, array_like=True):
    """An :class:`~olr_buffer.dispatcher.transaction.OpenTransaction`, as stored."""

    xid: str
    first_block: int  # the queue index of its first block: cleanup keeps it
    first_scn: int
    begin_scn: int  # -1: no begin seen
    begin_tm: int | None
    rows: int
    compensations: int
    end_key: CommitKey | None  # its earliest end record, if any
    end_code: int
    end_tm: int | None
    locations: dict[int, list[int]]  # redo thread -> flat (block, start, count) triples
    # added later (absent from older documents): the dispatcher's clock when the retention
    # rule first saw the transaction without a begin tm, its start for that rule
    seen_tm: int | None = None


class HeldTransaction(msgspec.Struct, array_like=True):
    """A transaction the dispatcher holds: open, or ended and waiting for the watermark."""

    in_open: bool  # False: ended, and a newer transaction of the same XID is open
    transaction: TransactionState


class Checkpoint(msgspec.Struct, kw_only=True):
    """The dispatcher's whole state, and what the pipeline adds to it (the threads in
    play, the time)."""

    format: int = CHECKPOINT_FORMAT
    position: int  # the next queue index to read
    progress: dict[int, int]  # threads in play -> P(t)
    other_progress: dict[int, int]  # threads not in play -> their progress
    closed: dict[int, int] = {}  # closed thread -> index of the block that closed it
    top: int = -1  # the highest progress any block showed
    watermark: int | None = None  # None: a document written before it was stored
    transactions: list[HeldTransaction]
    ended: list[str]  # the last XIDs that ended, oldest first
    stats: DispatchStats
    threads: list[int] | None = None  # the threads in play (the pipeline's)
    written: float | None = None  # time.time() when written
    # the changefeed's position, as versions before the sink kept its own position document
    # wrote it here: read once, by the sink (never written now)
    changefeed: dict[str, Any] | None = None
    # the retention rule's clock: the median tm of the last ends acted on (None: not yet)
    clock_tm: int | None = None
    # abandoned transactions, oldest first: [xid, scn]; a later begin of the XID above scn
    # starts a new transaction, any other record of it is an abandoned record
    abandoned: list[tuple[str, int]] = []
    # the tm of the last ends acted on, oldest first: the clock's median is taken of them
    clock_tms: list[int] = []

    def needed_from(self) -> int:
        """The lowest queue index the dispatcher still needs (see :func:`needed_from`)."""
        return needed_from(self.position, (h.transaction.first_block for h in self.transactions))

    def threads_in_play(self) -> list[int]:
        """The threads in play; a document without them: every thread with progress."""
        return self.threads if self.threads is not None else list(self.progress)

    def effective_watermark(self) -> int:
        """The stored watermark, or for an older document, ``min P(t)`` over the threads."""
        if self.watermark is not None:
            return self.watermark
        return min((self.progress.get(t, -1) for t in self.threads_in_play()), default=INFINITE_SCN)


def needed_from(position: int, first_blocks: Iterable[int]) -> int:
    """The tail position, or the first block of the oldest transaction still held:
    segments wholly below it can go."""
    return min(itertools.chain((position,), first_blocks))


class _Version(msgspec.Struct):
    format: int | None = None


_encode = msgspec.json.Encoder().encode


def encode_checkpoint(doc: Checkpoint) -> bytes:
    """The document's JSON (not yet sealed)."""
    return _encode(doc)


def decode_checkpoint(value: bytes, where: str = "queue") -> Checkpoint:
    """The document stored under ``dispatcher/checkpoint``, or a one-line error."""
    body = unseal(CHECKPOINT_KEY, value, where)
    try:
        version = msgspec.json.decode(body, type=_Version).format
    except msgspec.ValidationError as exc:
        raise damaged_checkpoint(where, exc) from None
    except msgspec.DecodeError as exc:
        raise damaged(CHECKPOINT_KEY, where, f"not JSON ({exc})") from None
    if version != CHECKPOINT_FORMAT:
        raise DispatchError(
            f"{where}: the dispatcher checkpoint has format {version!r}; this olr-buffer reads format "
            f"{CHECKPOINT_FORMAT}",
            hint="the queue was written by another version of olr-buffer: use that version to finish it, "
            "or replay the input into a new queue directory",
        )
    try:
        return msgspec.json.decode(body, type=Checkpoint)
    except msgspec.ValidationError as exc:
        raise damaged_checkpoint(where, exc) from None
