"""sinks: where committed transactions go, one package per kind behind the Sink contract
(:mod:`.base`)."""

from __future__ import annotations

from .base import ChangefeedOwner, Sink, SinkFigures, SinkKind, SinkOpening, TransactionSink
from .parquet import KIND as PARQUET

#: Every kind of sink, by name.
KINDS: dict[str, SinkKind] = {
    PARQUET.name: PARQUET,
}

__all__ = ["KINDS", "ChangefeedOwner", "Sink", "SinkFigures", "SinkKind", "SinkOpening", "TransactionSink"]
