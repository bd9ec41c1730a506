"""Errors of the input: each names the file, the line and the reason, on one line."""

from __future__ import annotations

import errno

from ...errors import EXIT_BAD_INPUT, EXIT_ERROR, OlrBufferError


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


class InputUnreadableError(InputError):
    """The input cannot be read (its permissions, an I/O error): the environment, not bad
    input (exit 1, which a supervisor retries). Once it is readable, the same command
    resumes there."""

    exit_code = EXIT_ERROR

    def __init__(self, path: str, line: int | None, doing: str, exc: OSError) -> None:
        reason = (exc.strerror or str(exc)).splitlines()[0].lower()
        if exc.errno in (errno.EACCES, errno.EPERM):
            hint = "the input directory and its log files must be readable by this user; the same command resumes"
        else:
            hint = "check the disk of the input; the same command resumes"
        super().__init__(path, line, f"cannot {doing}: {reason}", hint=hint)
