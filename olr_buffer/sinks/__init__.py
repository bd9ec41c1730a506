"""sinks: where committed transactions go, one package per kind behind the Sink contract
(:mod:`.base`)."""

from __future__ import annotations

from .base import ChangefeedOwner, Sink, SinkFigures, SinkKind, SinkOpening, TransactionSink
from .parquet import KIND as PARQUET
from .parquet import use_delta


def _delta_library():
    """The Delta Lake library, for the Parquet changefeed's ``--table-format delta``
    (imported, with deltalake, when first used)."""
    from . import delta

    return delta


use_delta(_delta_library)

#: Every kind of sink, by name.
KINDS: dict[str, SinkKind] = {
    PARQUET.name: PARQUET,
}

__all__ = ["KINDS", "ChangefeedOwner", "Sink", "SinkFigures", "SinkKind", "SinkOpening", "TransactionSink"]
