"""The Parquet changefeed: schema, atomic publication, recovery, compaction (docs/formats.md,
"Output"). The Spark helpers that read it are :mod:`olr_buffer.spark`."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..base import ChangefeedOwner, SinkKind, SinkSettings
from .compaction import CompactionError, CompactionResult, compact
from .errors import (
    ChangefeedCorruptError,
    ChangefeedError,
    ChangefeedLockedError,
    ChangefeedOwnerError,
    ChangefeedReadError,
    UnknownTableError,
)
from .fencing import ManifestHead, fence_previous_writers
from .iceberg_settings import IcebergSettings
from .layout import (
    DEFAULT_MODE,
    META_DIR,
    TABLE_FORMATS,
    Location,
    list_files,
    read_manifest,
    read_schema_document,
    schema_document_path,
)
from .position import POSITION_KEY, ChangefeedPosition, status, status_line
from .schema import ARROW_SCHEMA, COLUMNS, DERIVED_TIMESTAMPS, TIMESTAMP, parse_part_name, part_name
from .tables import chain_names
from .writer import DEFAULT_FILE_ROWS, ChangefeedWriter, PublishedFile


@dataclass(frozen=True)
class ParquetOptions:
    """The Parquet changefeed's own options (``replay`` and ``run`` take them)."""

    file_rows: int = DEFAULT_FILE_ROWS  # rows per file, about (cut at a transaction's end)
    mode: int = DEFAULT_MODE  # the changefeed directory's mode; files get it without x bits
    table_format: str | None = None  # parquet, delta or iceberg; None: the changefeed's own (a new one: parquet)
    iceberg_catalog: str | None = None  # an Iceberg changefeed's catalog URI (None: recorded, else beside it)
    iceberg_table: str | None = None  # its table NS.NAME (None: recorded, else olr_buffer.changefeed)


#: the changefeed options of ``replay`` and ``run`` (Python names) -> ParquetOptions' fields
_FLAGS = {
    "file_rows": "file_rows",
    "changefeed_mode": "mode",
    "table_format": "table_format",
    "iceberg_catalog": "iceberg_catalog",
    "iceberg_table": "iceberg_table",
}


def options(flags: Mapping[str, Any]) -> ParquetOptions:
    """Its options from the changefeed options given (None: not given, the default)."""
    return ParquetOptions(**{field: flags[flag] for flag, field in _FLAGS.items() if flags.get(flag) is not None})


def build(path: str, settings: SinkSettings, opts: ParquetOptions | None = None) -> ChangefeedWriter:
    """The changefeed writer of ``path``."""
    opts = opts or ParquetOptions()
    return ChangefeedWriter(
        path,
        file_rows=opts.file_rows,
        durable=settings.durable,
        mode=opts.mode,
        table_format=opts.table_format,
        iceberg=IcebergSettings(opts.iceberg_catalog, opts.iceberg_table)
        if opts.iceberg_catalog or opts.iceberg_table
        else None,
        retry=settings.retry,
        staging=settings.staging,
        lease_owner=settings.lease_owner,
        lease_timing=settings.lease_timing,
        lease=settings.lease_local or None,
    )


KIND = SinkKind("parquet", build, POSITION_KEY, status, status_line, options)

__all__ = [
    "ARROW_SCHEMA",
    "COLUMNS",
    "DEFAULT_FILE_ROWS",
    "DEFAULT_MODE",
    "Location",
    "TABLE_FORMATS",
    "DERIVED_TIMESTAMPS",
    "META_DIR",
    "list_files",
    "read_manifest",
    "TIMESTAMP",
    "CompactionError",
    "CompactionResult",
    "compact",
    "ChangefeedCorruptError",
    "ChangefeedError",
    "ChangefeedLockedError",
    "ChangefeedOwner",
    "ChangefeedOwnerError",
    "ChangefeedPosition",
    "ChangefeedReadError",
    "ChangefeedWriter",
    "KIND",
    "IcebergSettings",
    "ParquetOptions",
    "POSITION_KEY",
    "PublishedFile",
    "UnknownTableError",
    "parse_part_name",
    "part_name",
    "read_schema_document",
    "schema_document_path",
    "chain_names",
    "ManifestHead",
    "fence_previous_writers",
]
