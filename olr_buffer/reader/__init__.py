"""reader: the redo-op input format, its validation, and the readers that append it to the
queue (one per redo thread); the PostgreSQL source is :mod:`olr_buffer.reader.postgres`."""

from .dead_letters import DeadLetters
from .errors import InputError, MissingSequenceError
from .group import ReaderGroup
from .position import ReaderPosition
from .records import decode_line
from .thread_reader import DEFAULT_BLOCK_BYTES, DEFAULT_BLOCK_RECORDS, ThreadReader

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "DEFAULT_BLOCK_RECORDS",
    "DeadLetters",
    "InputError",
    "MissingSequenceError",
    "ReaderGroup",
    "ReaderPosition",
    "ThreadReader",
    "decode_line",
]
