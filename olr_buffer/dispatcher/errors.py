"""Errors of the dispatcher."""

from __future__ import annotations

from ..errors import OlrBufferError


class DispatchError(OlrBufferError):
    """The dispatcher found the queue inconsistent with what it knows."""


def damaged_checkpoint(where: str, exc: Exception) -> DispatchError:
    """A checkpoint document that decodes but lacks what it must hold."""
    return DispatchError(
        f"{where}: the stored dispatcher/checkpoint is damaged: {type(exc).__name__}: {exc}",
        hint="restore the queue directory from a backup, or replay the input into a new queue and changefeed",
    )
