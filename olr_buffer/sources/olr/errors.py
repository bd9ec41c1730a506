"""Errors of the OpenLogReplicator source."""

from __future__ import annotations

from ...errors import EXIT_BAD_INPUT, OlrBufferError


class OlrSourceError(OlrBufferError):
    """The sender refuses what the source asks (another database name, a start it cannot
    make), or the queue was filled from another database."""


class OlrStreamError(OlrSourceError):
    """What the sender sent breaks the protocol: a reply out of place, a message that is
    not valid JSON or not of a transaction, a position that goes back (bad input)."""

    exit_code = EXIT_BAD_INPUT
