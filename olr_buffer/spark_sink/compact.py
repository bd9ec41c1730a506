"""Kept for code written against it: compaction is :func:`olr_buffer.sinks.parquet.compact`."""

from ..sinks.parquet import compact

__all__ = ["compact"]
