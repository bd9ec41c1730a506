"""sources: what reads a database's changes into the queue, one package per kind behind
the Source contract (:mod:`.base`), chosen by the scheme of the location ``run`` and
``replay`` are given (:data:`SCHEMES`), and driven by its runner (:mod:`.running`)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class SourceAt:
    """The location ``run`` or ``replay`` was given, resolved once (:func:`locate`) to the
    kind of source that reads it and that source's own options: what the runtime checks,
    opens and names the source's positions by, without looking at the location again."""

    location: str  # as given: a directory, ``file://DIR``, a URI
    kind: SourceKind
    options: Mapping[str, Any] = field(default_factory=dict)

    def check_location(self) -> None:
        """A location the source cannot read (a URI that does not parse): one line."""
        self.kind.check_location(self.location)

    def check_replay(self) -> None:
        """``replay``: an input the source cannot replay, refused before anything is made."""
        self.kind.check_replay(self.location)

    def check_new_run(self, threads: list[int] | None) -> None:
        """``run`` on a new queue: what the source would refuse at start, refused before
        anything is made."""
        self.kind.check_new_run(self.location, threads)

    def open(self, queue: TxQueue, settings: SourceSettings) -> SourceRunner:
        """The runner of the source, appending to ``queue``."""
        location = self.location
        if scheme_of(location) == "file":
            location = location[len("file://") :]
        return SourceRunner(self.kind.build(location, queue, settings, **self.options), settings)


def locate(
    location: str | SourceAt, *, flags: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None
) -> SourceAt:
    """``location`` resolved to its source (:class:`UnknownSourceError` for a scheme no
    source reads); ``flags``: ``run``'s source flags, each kind taking those it knows
    (:attr:`SourceKind.options`); ``options``: the source's own options, as they are. A
    :class:`SourceAt` is returned as it is."""
    if isinstance(location, SourceAt):
        return location
    kind = kind_of(location)
    own = dict(kind.options(flags)) if flags is not None else {}
    own.update(options or {})
    return SourceAt(location, kind, own)


def open_source(location: str, queue: TxQueue, settings: SourceSettings, **options) -> SourceRunner:
    """The runner of the source that reads ``location`` (a directory, ``file://DIR``, a
    URI), appending to ``queue``. ``options``: the source's own."""
    return locate(location, options=options).open(queue, settings)


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
    "SourceAt",
    "SourceKind",
    "SourceRunner",
    "SourceSettings",
    "SourceUsageError",
    "UnknownSourceError",
    "kind_in_status",
    "kind_of",
    "kinds",
    "locate",
    "open_source",
    "queue_status",
    "scheme_of",
    "status_lines",
]
