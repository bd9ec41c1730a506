"""The redo-file source: the redo-op input format, its validation, and the readers that
append it to the queue, one per redo thread (docs/formats.md, "Input")."""

from .compiled import READER_LOOP
from .errors import InputError, MissingSequenceError
from .files import CorruptCompressedFile, LogFile, check_contiguous, parse_name, read_stream, scan
from .position import ReaderPosition
from .records import AFTER_MARKER, check_order, decode_line
from .source import KIND, NoThreadsError, RedoSource
from .thread_reader import MAX_LINE_BYTES, ThreadReader

__all__ = [
    "AFTER_MARKER",
    "CorruptCompressedFile",
    "InputError",
    "KIND",
    "LogFile",
    "MAX_LINE_BYTES",
    "MissingSequenceError",
    "READER_LOOP",
    "NoThreadsError",
    "ReaderPosition",
    "RedoSource",
    "ThreadReader",
    "check_contiguous",
    "check_order",
    "decode_line",
    "parse_name",
    "read_stream",
    "scan",
]
