"""The PySpark helpers that read the changefeed, and replay on Spark (docs/spark.md): the import users write,
``from olr_buffer.spark import read_changefeed``. They live in :mod:`olr_buffer.spark_sink`;
this module gives the same objects under this name.

PySpark is an extra (``pip install 'olr-buffer[spark]'``): without it, a helper raises
:class:`PySparkMissingError`, which says what to install. ``CHANGEFEED_SCHEMA`` (built on
first use) is :func:`changefeed_schema`'s ``StructType``.
"""

from .spark_sink import (
    CDF_COLUMNS,
    DELTA_STREAM_FORMAT,
    PART_GLOB,
    TRUNCATE_CHANGE_TYPE,
    TRUNCATES,
    ChangefeedNotFoundError,
    ChangefeedReadError,
    DeltaSparkMissingError,
    PySparkMissingError,
    SparkReplayError,
    SparkReplaySummary,
    UnknownTableError,
    changefeed_schema,
    ddl_columns_of,
    infer_schema,
    mirror_batch_changes,
    mirror_foreach_batch,
    read_changefeed,
    read_schema_document,
    replay_on_spark,
    snapshot,
    spark_path,
    stream_changefeed,
    table_changes,
    table_schema,
    typed,
)

__all__ = [
    "CDF_COLUMNS",
    "ChangefeedNotFoundError",
    "ChangefeedReadError",
    "DELTA_STREAM_FORMAT",
    "DeltaSparkMissingError",
    "PART_GLOB",
    "PySparkMissingError",
    "SparkReplayError",
    "SparkReplaySummary",
    "TRUNCATES",
    "TRUNCATE_CHANGE_TYPE",
    "UnknownTableError",
    "changefeed_schema",
    "ddl_columns_of",
    "infer_schema",
    "mirror_batch_changes",
    "mirror_foreach_batch",
    "read_changefeed",
    "read_schema_document",
    "replay_on_spark",
    "snapshot",
    "spark_path",
    "stream_changefeed",
    "table_changes",
    "table_schema",
    "typed",
]


def __getattr__(name: str):  # CHANGEFEED_SCHEMA, built on first use
    if name == "CHANGEFEED_SCHEMA":
        return changefeed_schema()
    raise AttributeError(name)
