"""The changefeed as an Apache Iceberg table (docs/formats.md), local or on object storage:
published part files committed with snapshots that carry the queue's id and last tx_seq."""

from __future__ import annotations

from ..iceberg_settings import DEFAULT_TABLE, ICEBERG_DIR, IcebergSettings, default_catalog_uri
from .commits import IcebergChangefeed, IcebergPart
from .errors import (
    IcebergCatalogError,
    IcebergChainError,
    IcebergChangefeedError,
    IcebergConflictError,
    IcebergForeignCommitError,
    IcebergTableMismatchError,
)

__all__ = [
    "DEFAULT_TABLE",
    "ICEBERG_DIR",
    "IcebergCatalogError",
    "IcebergChainError",
    "IcebergChangefeed",
    "IcebergChangefeedError",
    "IcebergConflictError",
    "IcebergForeignCommitError",
    "IcebergPart",
    "IcebergSettings",
    "IcebergTableMismatchError",
    "default_catalog_uri",
]
