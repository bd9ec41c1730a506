"""Errors of the changefeed."""

from __future__ import annotations

from ...errors import OlrBufferError, WriterHeldError


class ChangefeedError(OlrBufferError):
    """The changefeed directory cannot be written or is not what it should be."""


class ChangefeedCorruptError(ChangefeedError):
    """Published files break the changefeed's invariants (gap, overlap, unreadable footer)."""


class ChangefeedLockedError(ChangefeedError, WriterHeldError):
    """Another process writes the changefeed (or compacts it in place)."""


class ChangefeedOwnerError(ChangefeedError):
    """The changefeed was written by another queue or source, or is behind its queue's record of it."""


class ChangefeedReadError(OlrBufferError, ValueError):
    """A Spark helper was asked for something the changefeed cannot give as asked."""


class UnknownTableError(ChangefeedReadError):
    """No row of the changefeed belongs to the table asked for."""
