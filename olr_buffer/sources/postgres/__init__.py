"""The PostgreSQL source: logical replication (pgoutput, streamed in-progress transactions)
into the same queue as the redo-file source. See docs/postgresql.md."""

from .connection import PostgresError, safe_uri
from .reader import PostgresReader
from .source import KIND, PostgresSource
from .state import STATE_KEY, PostgresState

__all__ = ["KIND", "STATE_KEY", "PostgresError", "PostgresReader", "PostgresSource", "PostgresState", "safe_uri"]
