"""Where an Iceberg changefeed's table is (:class:`IcebergSettings`), named without
importing pyiceberg: the command line and the manifest speak of it whatever the format."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

ICEBERG_DIR = "_iceberg"
CATALOG_FILE = f"{ICEBERG_DIR}/catalog.db"
DEFAULT_TABLE = "olr_buffer.changefeed"


@dataclass(frozen=True)
class IcebergSettings:
    """Where the table is: ``catalog``, the catalog's URI (``sqlite:///PATH`` or another
    SQLAlchemy URL: a SQL catalog; ``http(s)://``: a REST catalog; None: the SQLite file
    beside a local changefeed), and ``table``, its name ``NS.NAME`` (None: ``olr_buffer.changefeed``)."""

    catalog: str | None = None
    table: str | None = None

    @property
    def table_name(self) -> str:
        return self.table or DEFAULT_TABLE

    def recorded(self) -> dict[str, str]:
        """What the manifest records (what was given: the defaults follow from the changefeed)."""
        return {k: v for k, v in (("catalog", self.catalog), ("table", self.table)) if v}

    @classmethod
    def from_recorded(cls, doc: Any) -> IcebergSettings:
        doc = doc if isinstance(doc, dict) else {}
        catalog, table = doc.get("catalog"), doc.get("table")
        return cls(catalog if isinstance(catalog, str) else None, table if isinstance(table, str) else None)

    def overridden(self, other: IcebergSettings) -> IcebergSettings:
        """These settings, with what ``other`` gives instead."""
        return IcebergSettings(other.catalog or self.catalog, other.table or self.table)


def default_catalog_uri(root: str | None) -> str | None:
    """The default catalog of a local changefeed at ``root``: the SQLite file beside it
    (None on object storage: a SQLite file must be local)."""
    if root is None:
        return None
    return f"sqlite:///{os.path.join(os.path.abspath(root), CATALOG_FILE)}"
