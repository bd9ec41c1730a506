"""The root of every error olr-buffer raises on purpose.

Each package derives its own errors from :class:`OlrBufferError`. An error carries the
facts an operator needs (file, line, queue index, XID, ...) as attributes and an
optional hint saying what to do about it. ``str(error)`` is one line.
"""

from __future__ import annotations

import re
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
#: Stopped by SIGTERM where no clean stop is offered (128 + 15, as a shell reports it).
EXIT_TERMINATED = 143


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM by a command that has no clean stop of its own
    (``replay``, ``compact``, ``simulate``): it unwinds as Ctrl-C does, so that what is
    open (a queue transaction, a half-written file) is aborted, not left as it was."""


# C0 and C1 control characters, DEL, and the bidirectional overrides and isolates
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``, ``\\x1b``, ...): data shown
    to a person (status, errors, text logs) can neither forge a line nor drive a terminal."""
    return _UNPRINTABLE.sub(_escape, text)


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
            return printable(f"{self.message} (hint: {self.hint})")
        return printable(self.message)

    def __reduce__(self):
        # Every subclass pickles whole, whatever its constructor takes: a reader process
        # sends the error itself to the parent.
        return _restore_error, (type(self), self.args, self.__dict__)


class BadInputError(OlrBufferError):
    """Bad input at a line of a file (or the file, when ``line`` is None): ``FILE:LINE:
    reason`` (exit 3), with ``path``, ``line`` and ``reason`` as attributes."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: str, line: int | None, reason: str, *, hint: str | None = None) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {reason}", hint=hint, path=path, line=line, reason=reason)
        self.path = path
        self.line = line
        self.reason = reason


class WriterHeldError(OlrBufferError):
    """Another process writes the output (it holds the changefeed's lease or lock): refused,
    or waited for by a standby (``run --standby``)."""


def _restore_error(cls: type[OlrBufferError], args: tuple, state: dict) -> OlrBufferError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(state)
    return exc
