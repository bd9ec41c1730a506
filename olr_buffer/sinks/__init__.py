"""sinks: where committed transactions go, one package per kind behind the Sink contract
(:mod:`.base`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import EXIT_USAGE, OlrBufferError
from .base import (
    CanBeTakenOver,
    ChangefeedOwner,
    RecordsRunFrom,
    Sink,
    SinkFigures,
    SinkKind,
    SinkOpening,
    SinkSettings,
    TakesColumns,
    TransactionSink,
)
from .parquet import KIND as PARQUET

#: Every kind of sink, by name.
KINDS: dict[str, SinkKind] = {
    PARQUET.name: PARQUET,
}


class UnknownSinkError(OlrBufferError):
    """A kind of sink that is not in the table."""

    exit_code = EXIT_USAGE


def kind_named(name: str) -> SinkKind:
    """The kind of sink called ``name``; :class:`UnknownSinkError` if none is."""
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownSinkError(f"{name}: not a kind of sink olr-buffer writes (one of: {', '.join(KINDS)})") from None


def open_sink(kind: str, target: str, settings: SinkSettings, flags: Mapping[str, Any]) -> Sink:
    """The sink of kind ``kind`` writing ``target``, with ``settings`` and its own options
    from ``flags`` (:attr:`SinkKind.options`)."""
    k = kind_named(kind)
    return k.build(target, settings, k.options(flags))


__all__ = [
    "RecordsRunFrom",
    "TakesColumns",
    "CanBeTakenOver",
    "KINDS",
    "ChangefeedOwner",
    "Sink",
    "SinkFigures",
    "SinkKind",
    "SinkOpening",
    "SinkSettings",
    "TransactionSink",
    "UnknownSinkError",
    "kind_named",
    "open_sink",
]
