"""The changefeed as a streaming DataFrame (:func:`stream_changefeed`): Spark's file
source, or, for a Delta changefeed, a Python data source that reads through the table's
log (Spark's workers import this module by its path to run it).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..sinks.parquet import ChangefeedReadError
from .reading import (
    PART_GLOB,
    changefeed_schema,
    delta_ranges,
    delta_target,
    load_waiting,
    needs_pyspark,
    spark_path,
    with_timestamps,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession


@needs_pyspark
def stream_changefeed(spark: SparkSession, path: str, *, wait_seconds: float = 0.0, **options: Any) -> DataFrame:
    """The changefeed as a streaming DataFrame: Spark's file source, format parquet, with
    the changefeed's fixed schema.

    ``options`` go to the source as they are (``maxFilesPerTrigger=1``,
    ``maxBytesPerTrigger``, ...). The source remembers in its checkpoint the names of the
    files it has read, so every published file is read once; a file is never split, so a
    micro-batch holds whole transactions. Leave ``cleanSource`` unset: the changefeed's
    files are not the stream's to move or delete.

    Spark's file source needs the directory, which ``run`` creates when it starts: with no
    changefeed at ``path`` this raises :class:`ChangefeedNotFoundError` (one line: start
    ``run`` first), after waiting up to ``wait_seconds`` for it to appear (0: no wait).

    A Delta changefeed (one with a Delta log when this is called) is streamed through its
    log instead (Spark 4: a Python data source, no Delta jar): the stream's offset is the
    next ``tx_seq``, each micro-batch reads the rows of the transactions after it from the
    table's files as they are then, so a compaction (its merged file holds transactions
    read already, ``dataChange = false``) adds nothing and nothing is read twice. Its one
    option is ``maxFilesPerTrigger`` (Spark 4.2 or later).
    """
    target = delta_target(spark, path)
    if target is not None and delta_ranges(target) is not None:
        return _stream_delta(spark, target, options)
    opts = {"pathGlobFilter": PART_GLOB, **options}
    reader = spark.readStream.schema(changefeed_schema()).format("parquet")
    for key, value in opts.items():
        reader = reader.option(key, value)
    return with_timestamps(load_waiting(lambda: reader.load(spark_path(path)), path, wait_seconds))


#: The name of the Python data source that streams a Delta changefeed.
DELTA_STREAM_FORMAT = "olr_buffer_delta_changefeed"
_DELTA_STREAM_OPTIONS = ("maxFilesPerTrigger",)


def _stream_delta(spark: SparkSession, path: str, options: dict[str, Any]) -> DataFrame:
    """The Delta changefeed at ``path`` as a streaming DataFrame (see :func:`stream_changefeed`)."""
    unknown = sorted(set(options) - set(_DELTA_STREAM_OPTIONS))
    if unknown:
        raise ChangefeedReadError(
            f"{path}: a Delta changefeed is streamed through its log, which takes no option {', '.join(unknown)}",
            hint=f"its options: {', '.join(_DELTA_STREAM_OPTIONS)}",
            path=path,
        )
    if int(spark.version.split(".")[0]) < 4:
        raise ChangefeedReadError(
            f"{path}: streaming a Delta changefeed needs Spark 4 or later (a Python data source); this is Spark "
            f"{spark.version}",
            hint='or read it with Delta\'s own source: spark.readStream.format("delta") (docs/spark.md)',
            path=path,
        )
    spark.dataSource.register(_delta_stream_source())
    reader = spark.readStream.format(DELTA_STREAM_FORMAT).schema(changefeed_schema()).option("path", path)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return with_timestamps(reader.load())


@functools.cache
def _delta_stream_source() -> type:
    """The Python data source that streams a Delta changefeed (its classes need PySpark 4,
    so they are made on first use). Offsets are ``{"tx_seq": next}``; a partition is one
    file of the table and the range of transactions to take from it."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class FileRange(InputPartition):
        def __init__(self, name: str, start: int, end: int) -> None:
            self.name, self.start, self.end = name, start, end

    class Reader(DataSourceStreamReader):
        def __init__(self, path: str, max_files: int | None) -> None:
            self.path, self.max_files = path, max_files

        def initialOffset(self) -> dict:
            return {"tx_seq": 0}

        def getDefaultReadLimit(self):  # Spark 4.2+
            from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

            return ReadMaxFiles(self.max_files) if self.max_files else ReadAllAvailable()

        def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
            ranges = delta_ranges(self.path) or []
            at = start["tx_seq"] if start else 0
            later = [r for r in ranges if r[1] >= at]
            most = getattr(limit, "max_files", None)
            if most:
                later = later[:most]
            return {"tx_seq": later[-1][1] + 1 if later else at}

        def partitions(self, start: dict, end: dict) -> list:
            lo, hi = start["tx_seq"], end["tx_seq"]
            return [
                FileRange(name, max(first, lo), min(last + 1, hi))
                for first, last, name in delta_ranges(self.path) or []
                if last >= lo and first < hi
            ]

        def read(self, partition):
            yield from _delta_batches(self.path, partition.name, partition.start, partition.end)

    class DeltaChangefeedSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return DELTA_STREAM_FORMAT

        def schema(self):
            return changefeed_schema()

        def streamReader(self, schema):
            max_files = self.options.get("maxFilesPerTrigger") or self.options.get("maxfilespertrigger")
            return Reader(self.options["path"], int(max_files) if max_files else None)

    return DeltaChangefeedSource


def _delta_batches(path: str, name: str, start: int, end: int):
    """The rows of the file ``name`` of the changefeed at ``path`` whose ``tx_seq`` is in
    ``[start, end)``, as Arrow batches of the changefeed's columns (a column an older file
    lacks: nulls)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ..sinks.parquet import ARROW_SCHEMA, Location

    schema = ARROW_SCHEMA
    with Location(path).open_input(name) as fh:
        pf = pq.ParquetFile(fh)
        present = [f.name for f in schema if f.name in pf.schema_arrow.names]
        for batch in pf.iter_batches(columns=present):
            tx = batch.column("tx_seq")
            batch = batch.filter(pc.and_(pc.greater_equal(tx, start), pc.less(tx, end)))
            if batch.num_rows:
                columns = [
                    batch.column(f.name).cast(f.type) if f.name in present else pa.nulls(batch.num_rows, f.type)
                    for f in schema
                ]
                yield pa.RecordBatch.from_arrays(columns, schema=schema)
