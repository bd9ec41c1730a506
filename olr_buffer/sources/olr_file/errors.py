"""Errors of OpenLogReplicator's file-writer source: each bad line is named ``FILE:LINE``."""

from __future__ import annotations

from ...errors import BadInputError

FIX_HINT = (
    "fix the line, or give --dead-letter FILE to set bad lines aside; the same command resumes at that line "
    "(nothing before it is lost)"
)


class OlrFileError(BadInputError):
    """Bad input in OpenLogReplicator's output: ``FILE:LINE: reason`` (exit 3). Everything
    before the line is kept; fixed, the same command resumes at it."""

    def __init__(self, path: str, line: int | None, reason: str, *, hint: str | None = FIX_HINT) -> None:
        super().__init__(path, line, reason, hint=hint)


class LineError(ValueError):
    """A line that cannot be taken, and why (the reader makes it an :class:`OlrFileError`,
    or sets the line aside in the dead-letter file)."""
