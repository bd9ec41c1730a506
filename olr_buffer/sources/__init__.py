"""sources: what reads a database's changes into the queue, one package per kind behind
the Source contract (:mod:`.base`), chosen by the scheme of the location ``run`` and
``replay`` are given (:data:`SCHEMES`), and driven by its runner (:mod:`.running`)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any

from ..txbuffer import TxQueue
from .base import Acknowledgement, Source, SourceKind, SourceSettings, SourceUsageError
from .running import SourceRunner

#: URI scheme -> the package (under ``olr_buffer.sources``) whose ``KIND`` reads it; a
#: location without a scheme is a directory of redo log files. A package is imported
#: when its scheme is used (a source's client library is not loaded for another's).
SCHEMES: dict[str, str] = {
    "file": ".redo",
    "postgresql": ".postgres",
    "postgres": ".postgres",
    "olr": ".olr",
    "olr+file": ".olr_file",
}

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class UnknownSourceError(SourceUsageError):
    """A location whose scheme no source reads."""


def scheme_of(location: str) -> str | None:
    """The URI scheme of ``location`` (lower case), or None for a plain path."""
    m = _SCHEME.match(location)
    return m.group(1).lower() if m else None


def _kind(package: str) -> SourceKind:
    return importlib.import_module(package, __name__).KIND


def kinds() -> list[SourceKind]:
    """Every kind of source, for ``status`` (which does not know which one filled a queue)."""
    return [_kind(p) for p in dict.fromkeys(SCHEMES.values())]


def kind_of(location: str) -> SourceKind:
    """The kind of source that reads ``location``; :class:`UnknownSourceError` if none."""
    scheme = scheme_of(location)
    try:
        package = SCHEMES["file" if scheme is None else scheme]
    except KeyError:
        raise UnknownSourceError(
            f"{scheme}:// is not a source olr-buffer reads: INPUT_DIR is a directory of redo logs, or one of "
            + ", ".join(f"{s}://" for s in SCHEMES if s != "file")
        ) from None
    return _kind(package)


def open_source(location: str, queue: TxQueue, settings: SourceSettings, **options) -> SourceRunner:
    """The runner of the source that reads ``location`` (a directory, ``file://DIR``, a
    URI), appending to ``queue``. ``options``: the source's own."""
    if scheme_of(location) == "file":
        location = location[len("file://") :]
    return SourceRunner(kind_of(location).build(location, queue, settings, **options), settings)


def queue_status(meta: Mapping[bytes, bytes], now: float) -> dict[str, Any]:
    """What each kind of source shows of its state in a queue's metadata, by its key in
    ``status --json``."""
    out = {}
    for kind in kinds():
        doc = kind.status(meta, now)
        if doc is not None:
            out[kind.status_key] = doc
    return out


def kind_in_status(doc: dict[str, Any]) -> SourceKind:
    """The kind of source whose state a ``status`` document shows (the redo files' when
    none shows any yet): how that queue's positions read."""
    every = kinds()
    return next((kind for kind in every if doc.get(kind.status_key)), every[0])


def status_lines(doc: dict[str, Any]) -> list[str]:
    """The text lines of the sources' parts of a ``status`` document."""
    return [line for kind in kinds() if kind.status_key in doc for line in kind.status_lines(doc[kind.status_key])]


__all__ = [
    "SCHEMES",
    "Acknowledgement",
    "Source",
    "SourceKind",
    "SourceRunner",
    "SourceSettings",
    "SourceUsageError",
    "UnknownSourceError",
    "kind_in_status",
    "kind_of",
    "kinds",
    "open_source",
    "queue_status",
    "scheme_of",
    "status_lines",
]
