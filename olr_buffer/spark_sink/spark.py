"""Kept for code written against it: the Spark helpers are :mod:`olr_buffer.spark`."""

from ..spark import changefeed_schema, infer_schema, read_changefeed, snapshot, stream_changefeed, table_changes

__all__ = ["changefeed_schema", "infer_schema", "read_changefeed", "snapshot", "stream_changefeed", "table_changes"]
