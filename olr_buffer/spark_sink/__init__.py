"""spark_sink: the Parquet changefeed (schema, atomic publication, recovery) and Spark helpers."""

from .errors import (
    ChangefeedCorruptError,
    ChangefeedError,
    ChangefeedLockedError,
    ChangefeedOwnerError,
    ChangefeedReadError,
    UnknownTableError,
)
from .layout import ChangefeedOwner
from .schema import ARROW_SCHEMA, COLUMNS, parse_part_name, part_name
from .spark import changefeed_schema, infer_schema, read_changefeed, snapshot, stream_changefeed, table_changes
from .writer import ChangefeedWriter, PublishedFile

__all__ = [
    "ARROW_SCHEMA",
    "COLUMNS",
    "ChangefeedCorruptError",
    "ChangefeedError",
    "ChangefeedLockedError",
    "ChangefeedOwner",
    "ChangefeedOwnerError",
    "ChangefeedReadError",
    "ChangefeedWriter",
    "PublishedFile",
    "UnknownTableError",
    "changefeed_schema",
    "infer_schema",
    "parse_part_name",
    "part_name",
    "read_changefeed",
    "snapshot",
    "stream_changefeed",
    "table_changes",
]
