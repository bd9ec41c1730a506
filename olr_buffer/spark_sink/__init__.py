"""The former home of the Spark helpers and the changefeed writer, kept so that code
written against it still runs: the Spark helpers are :mod:`olr_buffer.spark`, the
changefeed writer and compaction :mod:`olr_buffer.sinks.parquet`."""

import warnings

from ..spark import changefeed_schema, infer_schema, read_changefeed, snapshot, stream_changefeed, table_changes

warnings.warn("olr_buffer.spark_sink is now olr_buffer.spark (Spark helpers) and olr_buffer.sinks.parquet "
              "(the changefeed writer, compaction)", DeprecationWarning, stacklevel=2)

__all__ = ["changefeed_schema", "infer_schema", "read_changefeed", "snapshot", "stream_changefeed", "table_changes"]
