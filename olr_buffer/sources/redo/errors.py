"""Errors of the input: each names the file, the line and the reason, on one line."""

from __future__ import annotations

from ...errors import EXIT_BAD_INPUT, OlrBufferError


class InputError(OlrBufferError):
    """Bad input: ``FILE:LINE: reason``. Nothing before it is lost; fix it and run again."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: str, line: int | None, reason: str, *, hint: str | None = None) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {reason}", hint=hint, path=path, line=line, reason=reason)
        self.path = path
        self.line = line
        self.reason = reason


class MissingSequenceError(InputError):
    """A thread's sequences are not contiguous."""
