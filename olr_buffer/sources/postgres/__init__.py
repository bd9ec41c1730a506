"""The PostgreSQL source: logical replication (pgoutput, streamed in-progress transactions)
into the same queue as the redo-file source. See docs/postgresql.md."""

from .compiled import INSERT_STEP
from .connection import PostgresError, safe_uri
from .reader import PostgresReader
from .slots import DroppedSlot, drop_slot
from .source import KIND, PostgresSource
from .state import STATE_KEY, PostgresState

__all__ = [
    "INSERT_STEP",
    "KIND",
    "STATE_KEY",
    "DroppedSlot",
    "PostgresError",
    "PostgresReader",
    "PostgresSource",
    "PostgresState",
    "drop_slot",
    "safe_uri",
]
