"""The changefeed's table, whatever its format: which part files make the changefeed when
it is a Delta (:mod:`.delta_table`) or an Iceberg (:mod:`.iceberg_table`) table, and the
files published after the table's last commit (a writer killed between the PUT and the
commit) committed to it. Every reader (status, compaction, serve, mirror, the Spark
helpers) asks here, and so does the writer."""

from __future__ import annotations

import logging
from typing import Any

from . import delta_table, iceberg_table
from .errors import ChangefeedError
from .layout import Location, PublishedFile
from .schema import parse_part_name

log = logging.getLogger(__name__)

#: How a message names each kind of table.
TABLE_NAMES = {"delta": "Delta", "iceberg": "Iceberg"}


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


def chain_names(loc: Location, table: Any = None) -> set[str] | None:
    """The part files that make the changefeed if it has a table (``table``, else the
    one it has, opened to read): those of the table's current version, then those
    published after it (not yet committed); None if it has none (a plain Parquet
    changefeed: every part file). Files a compaction replaced stay beside the table, out
    of the chain."""
    if table is None:
        kind = table_format(loc)
        if kind is None:
            return None
        table = glue(kind).open_table(loc, app_id=None, create=False, modes=False)
    names = set(table.files())
    following = table.next_tx_seq
    for obj in loc.list("part-"):
        rng = parse_part_name(obj.name)
        if rng is not None and rng[0] >= following:
            names.add(obj.name)
    return names


def commit_pending(loc: Location, kind: str, table: Any, files: list[PublishedFile]) -> int:
    """Commit to ``table`` (of ``kind``), in one commit, the published ``files`` that
    follow its last one (published before a kill, never committed); returns how many.
    Refused if the table holds more than the files (files were removed)."""
    name = TABLE_NAMES[kind]
    following = table.next_tx_seq
    published = files[-1].last + 1 if files else 0
    if following > published:
        raise ChangefeedError(
            f"{loc.uri}: published files are missing: the {name} table holds tx_seq 0..{following - 1}, "
            f"the files {'tx_seq 0..' + str(published - 1) if published else 'no transaction'}",
            hint="put the missing files back (from a backup); the queue cannot publish them again, and readers "
            "may have seen them",
            uri=loc.uri,
        )
    pending = table.uncommitted([glue(kind).part_file(loc, f) for f in files if f.last >= following])
    if pending:
        table.commit(pending)
        glue(kind).apply_log_modes(loc)
        log.info(
            "%s: committed %d published file(s) the %s table lacked (tx_seq %d..%d)",
            loc.uri,
            len(pending),
            name,
            pending[0].first_tx_seq,
            pending[-1].last_tx_seq,
        )
    return len(pending)
