"""The changefeed as an Apache Iceberg table too (``--table-format iceberg``,
docs/formats.md): which files make the changefeed when it has an Iceberg table, where its
catalog is, and the glue between the changefeed's writer and compaction and
:class:`~olr_buffer.sinks.parquet.iceberg.IcebergChangefeed`, whose commits are
:mod:`.iceberg.commits`. The sibling of :mod:`.delta_table`.

- **Which files.** An Iceberg changefeed's files are those of the table's current
  snapshot and, after them, files published but not yet committed (a writer killed
  between the PUT and the commit): :func:`.tables.chain_names`. Files a compaction replaced stay
  beside the table (a reader of an older snapshot may need them), out of the chain.
- **Where the table is.** ``_iceberg/metadata/`` beside the part files holds its metadata;
  the catalog is the SQLite file ``_iceberg/catalog.db`` unless ``--iceberg-catalog``
  named another, and the table ``olr_buffer.changefeed`` unless ``--iceberg-table`` did:
  what was given is recorded in the manifest (``iceberg``), so that every later command
  (``status``, ``compact``, ``serve``, the Spark helpers) finds the table without the flags.
- **The format is recorded** as for Delta (:func:`.delta_table.resolve_table_format`).

The Iceberg library is :mod:`.iceberg`, imported, with ``pyiceberg``, only when a
changefeed is an Iceberg changefeed.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import orjson

from ...errors import OlrBufferError
from .iceberg_settings import ICEBERG_DIR, IcebergSettings, default_catalog_uri
from .layout import MANIFEST, Location, PublishedFile, file_mode
from .schema import ARROW_SCHEMA

log = logging.getLogger(__name__)

#: The queue id of commits of a writer that was given no owner (direct use).
ANONYMOUS_APP = "olr-buffer"


def _library() -> Any:
    """The Iceberg library (:mod:`.iceberg`), imported with ``pyiceberg`` only when a
    changefeed is an Iceberg changefeed."""
    from . import iceberg

    return iceberg


def has_table(loc: Location) -> bool:
    """Whether the changefeed has an Iceberg table (its metadata beside the files)."""
    return bool(loc.list(f"{ICEBERG_DIR}/metadata/"))


def settings(loc: Location, given: IcebergSettings | None = None, manifest: dict | None = None) -> IcebergSettings:
    """The table's :class:`IcebergSettings`: what the manifest (``manifest``, else read)
    records, with what is ``given`` instead."""
    if manifest is None:
        raw = loc.read_meta(MANIFEST, "read the manifest")
        manifest = orjson.loads(raw) if raw else None
    recorded = IcebergSettings.from_recorded(manifest.get("iceberg") if isinstance(manifest, dict) else None)
    return recorded.overridden(given) if given is not None else recorded


def open_table(
    loc: Location,
    given: IcebergSettings | None = None,
    *,
    app_id: str | None,
    writer: dict | None = None,
    create: bool,
    modes: bool = True,
    catalog: Any = None,
) -> Any:
    """The changefeed's Iceberg table (created if ``create`` and there is none); ``modes``:
    its metadata gets the changefeed's modes (a writer's; a reader changes nothing);
    ``catalog``: its catalog, opened already (another table's ``catalog``), else opened."""
    table = _library().IcebergChangefeed(
        loc.store,
        ARROW_SCHEMA,
        settings(loc, given),
        app_id=app_id or ANONYMOUS_APP,
        writer=writer,
        create=create,
        local_root=loc.path,
        catalog=catalog,
    )
    if modes:
        apply_log_modes(loc)
    return table


def fence_table(loc: Location, lease: Any, given: IcebergSettings | None = None) -> None:
    """Move the Iceberg table to ``lease``'s generation (a take-over): a snapshot that adds
    nothing, stamped with it, unless the table carries it; from then on an older writer's
    commit fails (:mod:`.fencing`)."""
    writer = {"writer": lease.writer_id, "lease_generation": lease.generation}
    table = open_table(loc, given, app_id=lease.owner, writer=writer, create=False, modes=False)
    if table.fence(lease.generation) is not None:
        apply_commit_modes(loc, table)


def part_file(loc: Location, f: PublishedFile) -> Any:
    """``f`` as the Iceberg sink commits it: size and rows from its footer."""
    return _library().IcebergPart.from_store(loc.store, f.name, f.first, f.last)


def local_part(path: str, f: PublishedFile) -> Any:
    """``f``, still the local file ``path``, as the Iceberg sink commits it."""
    return _library().IcebergPart.from_local(path, f.name, f.first, f.last)


def apply_log_modes(loc: Location) -> None:
    """A local changefeed's ``_iceberg/`` and its files get the changefeed's modes
    (pyiceberg and SQLite write them with the umask's)."""
    if loc.path is None:
        return
    top = os.path.join(loc.path, ICEBERG_DIR)
    fmode = file_mode(loc.mode)
    try:
        for folder, _dirs, files in os.walk(top):
            if os.stat(folder).st_mode & 0o777 != loc.mode:
                os.chmod(folder, loc.mode)
            for name in files:
                full = os.path.join(folder, name)
                if os.stat(full).st_mode & 0o777 != fmode:
                    os.chmod(full, fmode)
    except FileNotFoundError:
        return
    except PermissionError:
        log.warning("%s: cannot set the modes of the Iceberg metadata (not the owner)", top)


def apply_commit_modes(loc: Location, table: Any) -> None:
    """After a commit: its metadata file, manifest list and manifests get the changefeed's
    file mode, on a local changefeed."""
    if loc.path is None:
        return
    fmode = file_mode(loc.mode)
    paths = table.commit_paths()
    for path in paths:
        try:
            if os.stat(path).st_mode & 0o777 != fmode:
                os.chmod(path, fmode)
        except FileNotFoundError:
            continue
        except PermissionError:
            log.warning("%s: cannot set the mode of %s (not the owner)", loc.uri, path)


def table_status(path: str) -> dict[str, Any]:
    """What ``status`` shows of an Iceberg changefeed's table: its catalog, name, current
    snapshot and the last tx_seq it holds (or the one-line error reading it met)."""
    loc = Location(path)
    where = settings(loc)
    doc: dict[str, Any] = {"catalog": where.catalog or default_catalog_uri(loc.path), "table": where.table_name}
    try:
        table = open_table(loc, app_id=None, create=False, modes=False)
        doc.update(snapshot_id=table.snapshot_id, last_tx_seq=table.last_committed())
    except OlrBufferError as exc:
        doc["error"] = str(exc).splitlines()[0]
    return doc
