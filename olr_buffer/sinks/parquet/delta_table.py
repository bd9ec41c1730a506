"""The changefeed as a Delta Lake table too (``--table-format delta``, docs/formats.md):
which files make the changefeed when it has a Delta log, and the glue between the
changefeed's writer and compaction and :class:`~olr_buffer.sinks.parquet.delta.DeltaChangefeed`,
whose commits to the table's log are :mod:`.delta.commits`.

- **Which files.** A Delta changefeed's files are those of the table's current snapshot
  and, after them, files published but not yet committed (a writer killed between the
  PUT and the commit): :func:`.tables.chain_names`. Files a compaction replaced stay beside the
  table (a Delta reader of an older version may need them: ``VACUUM`` is the user's), out
  of the chain.
- **The format is recorded.** The manifest records ``table_format``; a changefeed with a
  ``_delta_log/`` is a Delta changefeed even without it (an earlier manifest).
  :func:`resolve_table_format`: without ``--table-format``, a changefeed goes on in the
  format it has (a new one: ``parquet``); ``--table-format parquet`` on a Delta changefeed
  is refused (its table would silently stop getting commits); ``--table-format delta`` on
  a Parquet changefeed makes it a Delta changefeed: its published files are committed as
  they are (no rewrite) by the first commit.
- **Modes.** delta-rs creates ``_delta_log/`` and its files with the umask's modes: on a
  local changefeed they get the changefeed's (:func:`apply_log_modes`).

The Delta Lake library is :mod:`.delta`, imported, with ``deltalake``, only when a
changefeed is a Delta changefeed.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from .errors import ChangefeedError
from .layout import TABLE_FORMATS, Location, PublishedFile, file_mode, manifest_table_format
from .schema import ARROW_SCHEMA

log = logging.getLogger(__name__)


def _library() -> Any:
    """The Delta Lake library (:mod:`.delta`), imported with ``deltalake`` only when a
    changefeed is a Delta changefeed."""
    from . import delta

    return delta


DELTA_LOG = "_delta_log"
#: The application id of commits of a writer that was given no owner (direct use).
ANONYMOUS_APP = "olr-buffer"


class TableFormatError(ChangefeedError):
    """The table format asked for is not the changefeed's."""


def has_table(loc: Location) -> bool:
    """Whether the changefeed has a Delta log."""
    return bool(loc.list(f"{DELTA_LOG}/"))


def resolve_table_format(loc: Location, manifest: dict | None, requested: str | None) -> str:
    """The changefeed's table format from now on (see the module doc; an Iceberg
    changefeed, :mod:`.iceberg_table`, the same way). A changefeed has one table format:
    a Delta changefeed does not become an Iceberg one, nor the other way round."""
    from . import iceberg_table

    if requested is not None and requested not in TABLE_FORMATS:
        raise ValueError(f"table_format must be one of {TABLE_FORMATS}, not {requested!r}")
    recorded = manifest_table_format(manifest)
    if recorded not in ("delta", "iceberg"):
        if has_table(loc):
            recorded = "delta"
        elif iceberg_table.has_table(loc):
            recorded = "iceberg"
    if requested is None:
        return recorded or "parquet"
    if recorded in ("delta", "iceberg") and requested != recorded:
        name = "Delta" if recorded == "delta" else "Iceberg"
        folder = DELTA_LOG if recorded == "delta" else f"{iceberg_table.ICEBERG_DIR}/metadata"
        raise TableFormatError(
            f"{loc.uri}: is a{'n' if recorded == 'iceberg' else ''} {name} changefeed (it has a {folder}/): "
            f"--table-format {requested} would publish files its {name} table never gets",
            hint=f"leave --table-format out, or give --table-format {recorded}",
            uri=loc.uri,
        )
    if requested in ("delta", "iceberg") and recorded == "parquet":
        log.info(
            "%s: a Parquet changefeed becomes a%s %s changefeed: its published files are committed to a new "
            "table as they are",
            loc.uri,
            "n" if requested == "iceberg" else "",
            "Delta" if requested == "delta" else "Iceberg",
        )
    return requested


def open_table(
    loc: Location, *, app_id: str | None, writer: dict | None = None, create: bool, modes: bool = True
) -> Any:
    """The changefeed's Delta table (created if ``create`` and there is none); ``modes``:
    its log's files get the changefeed's modes (a writer's; a reader changes nothing)."""
    table = _library().DeltaChangefeed(
        loc.store, ARROW_SCHEMA, app_id=app_id or ANONYMOUS_APP, writer=writer, create=create
    )
    if modes:
        apply_log_modes(loc)
    return table


def fence_table(loc: Location, lease: Any) -> None:
    """Move the Delta table's log to ``lease``'s generation (a take-over): a commit with
    ``txn(appId = "olr-buffer.lease", version = generation)``, unless the table holds it;
    from then on an older writer's commit fails (:mod:`.fencing`)."""
    writer = {"writer": lease.writer_id, "lease_generation": lease.generation}
    table = _library().DeltaChangefeed(
        loc.store, ARROW_SCHEMA, app_id=lease.owner or ANONYMOUS_APP, writer=writer, create=False
    )
    if table.fence(lease.generation) is not None:
        apply_log_modes(loc)


def part_file(loc: Location, f: PublishedFile) -> Any:
    """``f`` as the Delta sink commits it: size and statistics from its footer."""
    return _library().PartFile.from_store(loc.store, f.name, f.first, f.last)


def local_part(path: str, f: PublishedFile) -> Any:
    """``f``, still the local file ``path``, as the Delta sink commits it."""
    return _library().PartFile.from_local(path, f.name, f.first, f.last)


def apply_log_modes(loc: Location) -> None:
    """A local changefeed's ``_delta_log/`` and its files get the changefeed's modes
    (delta-rs writes them with the umask's)."""
    if loc.path is None:
        return
    folder = os.path.join(loc.path, DELTA_LOG)
    fmode = file_mode(loc.mode)
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                want = loc.mode if entry.is_dir(follow_symlinks=False) else fmode
                if entry.stat(follow_symlinks=False).st_mode & 0o777 != want:
                    os.chmod(entry.path, want)
        if os.stat(folder).st_mode & 0o777 != loc.mode:
            os.chmod(folder, loc.mode)
    except FileNotFoundError:
        return
    except PermissionError:
        log.warning("%s: cannot set the modes of the Delta log (not the owner)", folder)


def apply_commit_modes(loc: Location, version: int | None) -> None:
    """After a commit: its log entry (and a checkpoint delta-rs wrote with it) gets the
    changefeed's file mode, on a local changefeed."""
    if loc.path is None or version is None:
        return
    fmode = file_mode(loc.mode)
    folder = os.path.join(loc.path, DELTA_LOG)
    for name in (f"{version:020d}.json", f"{version:020d}.checkpoint.parquet", "_last_checkpoint"):
        try:
            if os.stat(os.path.join(folder, name)).st_mode & 0o777 != fmode:
                os.chmod(os.path.join(folder, name), fmode)
        except FileNotFoundError:
            continue
        except PermissionError:
            log.warning("%s: cannot set the mode of %s (not the owner)", folder, name)
