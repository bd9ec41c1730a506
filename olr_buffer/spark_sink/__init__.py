"""The Spark side of olr-buffer: what reads the changefeed in Spark (:mod:`.dataframes`:
batch and streaming DataFrames, one table's changes, its snapshot, typed rows, schemas).

Users import these as :mod:`olr_buffer.spark` (docs/spark.md), which gives the same
objects; this package is where they live. PySpark is an extra, imported only when a
helper is called.
"""

from .dataframes import (
    CDF_COLUMNS,
    DELTA_STREAM_FORMAT,
    PART_GLOB,
    TRUNCATE_CHANGE_TYPE,
    TRUNCATES,
    ChangefeedNotFoundError,
    ChangefeedReadError,
    PySparkMissingError,
    UnknownTableError,
    changefeed_schema,
    ddl_columns_of,
    infer_schema,
    read_changefeed,
    read_schema_document,
    snapshot,
    spark_path,
    stream_changefeed,
    table_changes,
    table_schema,
    typed,
)

__all__ = [
    "CDF_COLUMNS", "ChangefeedNotFoundError", "ChangefeedReadError", "DELTA_STREAM_FORMAT", "PART_GLOB",
    "PySparkMissingError", "TRUNCATES", "TRUNCATE_CHANGE_TYPE", "UnknownTableError", "changefeed_schema",
    "ddl_columns_of", "infer_schema", "read_changefeed", "read_schema_document", "snapshot", "spark_path",
    "stream_changefeed", "table_changes", "table_schema", "typed",
]


def __getattr__(name: str):  # CHANGEFEED_SCHEMA, built on first use
    if name == "CHANGEFEED_SCHEMA":
        return changefeed_schema()
    raise AttributeError(name)
