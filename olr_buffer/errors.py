"""The root of every error olr-buffer raises on purpose.

Each package derives its own errors from :class:`OlrBufferError`. An error carries the
facts an operator needs (file, line, queue index, XID, ...) as attributes and an
optional hint saying what to do about it. ``str(error)`` is one line.
"""

from __future__ import annotations

from typing import Any

# Exit codes of the ``olr-buffer`` command (docs/operations.md lists them for users).
EXIT_OK = 0
#: The environment or the state: I/O, a queue in use, a damaged queue or changefeed.
EXIT_ERROR = 1
#: The command line: unknown option, missing argument, bad value (click's own code).
EXIT_USAGE = 2
#: The input data: a malformed line, a field of the wrong type, an SCN that goes back, a
#: missing sequence, an input directory without log files.
EXIT_BAD_INPUT = 3
#: Stopped by Ctrl-C (SIGINT) where no clean stop is offered.
EXIT_INTERRUPTED = 130


class OlrBufferError(Exception):
    """Base class of olr-buffer's errors: a one-line message, structured facts, a hint."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, hint: str | None = None, **facts: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.facts = facts

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} (hint: {self.hint})"
        return self.message
