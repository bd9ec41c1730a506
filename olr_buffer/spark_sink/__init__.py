"""The Spark side of olr-buffer: the PySpark helpers that read the changefeed.

- :mod:`.reading`: the changefeed as a batch DataFrame (:func:`read_changefeed`), its
  schema, and what the helpers share;
- :mod:`.streaming`: the changefeed as a streaming DataFrame (:func:`stream_changefeed`);
- :mod:`.tables`: one table: its changes, snapshot, typed rows and schemas;
- :mod:`.mirror`: mirror tables with delta-spark (:func:`mirror_foreach_batch`), by the
  rules of ``olr-buffer mirror``;
- :mod:`.replay`: ``replay`` on Spark (:func:`replay_on_spark`): the changefeed assembled
  from archived redo log files as DataFrame work.

Users import these as :mod:`olr_buffer.spark` (docs/spark.md), which gives the same
objects; this package is where they live. PySpark is an extra, imported only when a
helper is called: without it, a helper raises :class:`PySparkMissingError`.
"""

from ..sinks.parquet import ChangefeedReadError, UnknownTableError, read_schema_document
from .mirror import DeltaSparkMissingError, mirror_batch_changes, mirror_foreach_batch
from .reading import (
    PART_GLOB,
    ChangefeedNotFoundError,
    PySparkMissingError,
    changefeed_schema,
    read_changefeed,
    spark_path,
)
from .replay import SparkReplayError, SparkReplaySummary, replay_on_spark
from .streaming import DELTA_STREAM_FORMAT, stream_changefeed
from .tables import (
    CDF_COLUMNS,
    TRUNCATE_CHANGE_TYPE,
    TRUNCATES,
    ddl_columns_of,
    infer_schema,
    snapshot,
    table_changes,
    table_schema,
    typed,
)

__all__ = [
    "SparkReplayError",
    "SparkReplaySummary",
    "replay_on_spark",
    "CDF_COLUMNS",
    "ChangefeedNotFoundError",
    "ChangefeedReadError",
    "DELTA_STREAM_FORMAT",
    "DeltaSparkMissingError",
    "PART_GLOB",
    "PySparkMissingError",
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
