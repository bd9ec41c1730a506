"""Errors of ``olr-buffer serve``."""

from __future__ import annotations

from ..errors import OlrBufferError


class ServeError(OlrBufferError):
    """``serve`` cannot start or go on: its state, its address, its changefeed."""


class ServeLockedError(ServeError):
    """Another ``serve`` process serves this changefeed and database name."""


class ServeStateError(ServeError):
    """The receiver's stored position cannot be read or written."""
