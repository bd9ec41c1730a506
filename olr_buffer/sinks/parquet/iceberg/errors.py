"""Errors of the Iceberg changefeed. A store that cannot be reached or refuses raises the
store's own errors (:mod:`olr_buffer.store.errors`), and so does a catalog that is busy
(a SQLite catalog locked by another process), so a caller has one rule for retrying."""

from __future__ import annotations

from ....errors import OlrBufferError


class IcebergChangefeedError(OlrBufferError):
    """The Iceberg table cannot be written as asked."""


class IcebergChainError(IcebergChangefeedError):
    """The files to commit do not continue the table: a gap, an overlap, or a file that is
    not published."""


class IcebergConflictError(IcebergChangefeedError):
    """Another writer committed to the table meanwhile, again and again, or removed the
    files a compaction replaces."""


class IcebergTableMismatchError(IcebergChangefeedError):
    """The table in the catalog is not one the changefeed can write: another schema,
    partitioned, or at another location."""


class IcebergForeignCommitError(IcebergChangefeedError):
    """A snapshot of the table that olr-buffer did not commit (an append, a delete, a
    rewrite by another program) came while the changefeed was written."""


class IcebergCatalogError(IcebergChangefeedError):
    """The catalog cannot be opened or read: a damaged SQLite file, a wrong URI."""
