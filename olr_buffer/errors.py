"""The root of every error olr-buffer raises on purpose.

Each package derives its own errors from :class:`OlrBufferError`. An error carries the
facts an operator needs (file, line, queue index, XID, ...) as attributes and an
optional hint saying what to do about it. ``str(error)`` is one line.
"""

from __future__ import annotations

from typing import Any


class OlrBufferError(Exception):
    """Base class of olr-buffer's errors: a one-line message, structured facts, a hint."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, **facts: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.facts = facts

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} (hint: {self.hint})"
        return self.message

    def __reduce__(self):
        # Every subclass pickles whole, whatever its constructor takes: a reader process
        # sends the error itself to the parent.
        return _restore_error, (type(self), self.args, self.__dict__)


def _restore_error(cls: type, args: tuple, state: dict) -> OlrBufferError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(state)
    return exc
