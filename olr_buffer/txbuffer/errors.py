"""Errors of the queue."""

from __future__ import annotations

from ..errors import OlrBufferError


class QueueError(OlrBufferError):
    """Something is wrong with a queue directory."""


class QueueLockedError(QueueError):
    """Another process owns the queue directory."""


class QueueCorruptError(QueueError):
    """A block or segment of the queue cannot be decoded: stop, do not guess."""


class QueueFullError(QueueError):
    """The queue could not store a block: no space in the segment map or on disk."""
