"""Errors of OpenLogReplicator's file-writer source: each bad line is named ``FILE:LINE``."""

from __future__ import annotations

from ...errors import EXIT_BAD_INPUT, OlrBufferError

FIX_HINT = (
    "fix the line, or give --dead-letter FILE to set bad lines aside; the same command resumes at that line "
    "(nothing before it is lost)"
)


class OlrFileError(OlrBufferError):
    """Bad input in OpenLogReplicator's output: ``FILE:LINE: reason`` (exit 3). Everything
    before the line is kept; fixed, the same command resumes at it."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: str, line: int | None, reason: str, *, hint: str | None = FIX_HINT) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {reason}", hint=hint, path=path, line=line, reason=reason)
        self.path = path
        self.line = line
        self.reason = reason


class LineError(ValueError):
    """A line that cannot be taken, and why (the reader makes it an :class:`OlrFileError`,
    or sets the line aside in the dead-letter file)."""
