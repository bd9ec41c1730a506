"""Errors of the input: each names the file, the line and the reason, on one line."""

from __future__ import annotations

import errno

from ...errors import EXIT_ERROR, BadInputError


class InputError(BadInputError):
    """Bad input: ``FILE:LINE: reason``. Nothing before it is lost; fix it and run again."""


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
