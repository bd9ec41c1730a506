"""The changefeed as a Delta Lake table (docs/formats.md), local or on object storage:
published part files committed with the queue's application transaction."""

from __future__ import annotations

from .commits import DELTA_LOG, DeltaChangefeed, PartFile
from .errors import (
    DeltaChainError,
    DeltaChangefeedError,
    DeltaConflictError,
    DeltaForeignCommitError,
    DeltaTableMismatchError,
)
from .stats import delta_stats

__all__ = [
    "DELTA_LOG",
    "DeltaChainError",
    "DeltaChangefeed",
    "DeltaChangefeedError",
    "DeltaConflictError",
    "DeltaForeignCommitError",
    "DeltaTableMismatchError",
    "PartFile",
    "delta_stats",
]
