"""Errors of the Delta Lake changefeed. A store that cannot be reached or refuses raises
the store's own errors (:mod:`olr_buffer.store.errors`), so a caller has one rule for
retrying whichever layer met the fault."""

from __future__ import annotations

from ....errors import OlrBufferError


class DeltaChangefeedError(OlrBufferError):
    """The Delta table cannot be written as asked."""


class DeltaChainError(DeltaChangefeedError):
    """The files to commit do not continue the table: a gap, an overlap, or a range that
    is committed in part."""


class DeltaConflictError(DeltaChangefeedError):
    """Another writer committed to the table meanwhile, again and again, or removed the
    files a compaction replaces."""


class DeltaTableMismatchError(DeltaChangefeedError):
    """The table at the location is not one the changefeed can write: another schema,
    partitioned, or a protocol this deltalake cannot write."""


class DeltaForeignCommitError(DeltaChangefeedError):
    """A commit to the table that olr-buffer did not write (an append, OPTIMIZE, DELETE
    ... by another program) came while the changefeed was written."""
