"""The redo-file source: the redo-op input format, its validation, and the readers that
append it to the queue, one per redo thread (docs/formats.md, "Input")."""

from .errors import InputError, MissingSequenceError
from .position import ReaderPosition
from .records import decode_line
from .source import KIND, NoThreadsError, RedoSource
from .thread_reader import ThreadReader

__all__ = [
    "InputError",
    "KIND",
    "MissingSequenceError",
    "NoThreadsError",
    "ReaderPosition",
    "RedoSource",
    "ThreadReader",
    "decode_line",
]
