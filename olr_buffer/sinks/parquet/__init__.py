"""The Parquet changefeed: schema, atomic publication, recovery, compaction (docs/formats.md,
"Output"). The Spark helpers that read it are :mod:`olr_buffer.spark`."""

from ..base import ChangefeedOwner, SinkKind
from .errors import (
    ChangefeedCorruptError,
    ChangefeedError,
    ChangefeedLockedError,
    ChangefeedOwnerError,
    ChangefeedReadError,
    UnknownTableError,
)
from .compaction import CompactionError, CompactionResult, compact
from .delta_table import chain_names
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
from .writer import DEFAULT_FILE_ROWS, ChangefeedWriter, PublishedFile


def build(path: str, **options) -> ChangefeedWriter:
    """The changefeed writer of ``path`` (options: :class:`ChangefeedWriter`'s)."""
    return ChangefeedWriter(path, **options)


KIND = SinkKind("parquet", build, POSITION_KEY, status, status_line)

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
    "POSITION_KEY",
    "PublishedFile",
    "UnknownTableError",
    "parse_part_name",
    "part_name",
    "read_schema_document",
    "schema_document_path",
    "chain_names",
]
