"""The changefeed's table, whatever its format: which part files make the changefeed when
it is a Delta (:mod:`.delta_table`) or an Iceberg (:mod:`.iceberg_table`) table. Every
reader (status, compaction, serve, mirror, the Spark helpers) asks here."""

from __future__ import annotations

from typing import Any

from . import delta_table, iceberg_table
from .layout import Location


def table_format(loc: Location) -> str | None:
    """``delta`` or ``iceberg`` if the changefeed has such a table, None if it has none."""
    if delta_table.has_table(loc):
        return "delta"
    if iceberg_table.has_table(loc):
        return "iceberg"
    return None


def glue(kind: str) -> Any:
    """The module that joins the changefeed to its ``kind`` of table (``delta``:
    :mod:`.delta_table`, ``iceberg``: :mod:`.iceberg_table`): the same functions in each."""
    return iceberg_table if kind == "iceberg" else delta_table


def chain_names(loc: Location) -> set[str] | None:
    """The part files that make the changefeed if it has a table: those of the table's
    current version and those published after it (not yet committed); None if it has
    none (a plain Parquet changefeed: every part file)."""
    names = delta_table.chain_names(loc)
    if names is None:
        names = iceberg_table.chain_names(loc)
    return names
