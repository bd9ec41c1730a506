"""Errors of the dispatcher."""

from __future__ import annotations

from ..errors import OlrBufferError


class DispatchError(OlrBufferError):
    """The dispatcher found the queue inconsistent with what it knows."""
