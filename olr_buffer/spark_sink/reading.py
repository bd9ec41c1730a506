"""The changefeed read as a batch DataFrame, and what every Spark helper shares.

- :func:`read_changefeed`: the changefeed as a batch DataFrame. A Delta changefeed is read
  through its log (the files of its table's snapshot), never as the files of its
  directory, which keep those a compaction replaced.
- :func:`changefeed_schema` (and ``CHANGEFEED_SCHEMA``, built on first use): the
  contract's columns as a Spark ``StructType``; :func:`spark_path`: a path as Spark
  names it.

Shared with :mod:`.streaming` and :mod:`.tables`: :func:`needs_pyspark` (a helper called
where PySpark is not installed raises :class:`PySparkMissingError`, which says what to
install), :func:`load_waiting`, :func:`with_timestamps` (``c_ts`` and ``ts``, ``c_tm``/``tm``
as Spark timestamps, derived for files written before those columns existed),
:func:`delta_target` and :func:`delta_ranges` (a Delta changefeed's files).
"""

from __future__ import annotations

import functools
import re
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..sinks.parquet import ChangefeedReadError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


class PySparkMissingError(ModuleNotFoundError):
    """A Spark helper was called where PySpark is not installed (the service and its
    commands run without it)."""


def needs_pyspark(fn: Callable) -> Callable:
    """``fn``, which raises :class:`PySparkMissingError` (one line: what to install) when
    PySpark cannot be imported, instead of the error of its first import."""

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            import pyspark  # noqa: F401
        except ImportError as exc:
            raise PySparkMissingError(
                f"olr_buffer.spark.{fn.__name__} needs PySpark, which is not installed: "
                "pip install 'olr-buffer[spark]' (or pyspark>=3.5)",
                name="pyspark",
            ) from exc
        return fn(*args, **kwargs)

    return checked


class ChangefeedNotFoundError(ChangefeedReadError):
    """No changefeed at the path (yet): ``run`` or ``replay`` creates it when it starts."""


def _not_found(path: str, waited: float | None) -> ChangefeedNotFoundError:
    where = f"no changefeed appeared there within {waited:g}s" if waited else "no changefeed there (yet)"
    return ChangefeedNotFoundError(
        f"{path}: {where}",
        hint=f"start olr-buffer run (or replay) with --changefeed {path} first: it creates the directory"
        + ("; or give wait_seconds=N to wait for it" if waited == 0 else ""),
        path=path,
    )


def _path_not_found(exc: Exception) -> bool:
    """Whether Spark refused a read because its path does not exist."""
    with warnings.catch_warnings():  # getErrorClass: deprecated by PySpark 4, the only one in 3.5
        warnings.simplefilter("ignore", FutureWarning)
        get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
        try:
            condition = get() if get else None
        except Exception:  # noqa: BLE001 - an exception of another kind
            condition = None
    return condition == "PATH_NOT_FOUND" or "Path does not exist" in str(exc)


def load_waiting(load: Callable[[], DataFrame], path: str, wait_seconds: float | None) -> DataFrame:
    """``load()``, which Spark refuses while ``path`` does not exist: tried again every second
    for ``wait_seconds`` (None: a batch read, which does not wait), then
    :class:`ChangefeedNotFoundError`."""
    deadline = time.monotonic() + (wait_seconds or 0.0)
    while True:
        try:
            return load()
        except Exception as exc:
            if not _path_not_found(exc):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise _not_found(path, wait_seconds) from None
            time.sleep(min(1.0, left))


#: Only the changefeed's own files: Spark already skips names starting with ``_`` or ``.``;
#: this also keeps out anything else someone drops into the directory.
PART_GLOB = "part-*.parquet"


@needs_pyspark
def changefeed_schema() -> StructType:
    """The changefeed's columns (contract §2) as a Spark ``StructType``."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

    from ..sinks.parquet import ARROW_SCHEMA, TIMESTAMP

    spark_type = {"int64": LongType(), "int32": IntegerType(), "string": StringType(), str(TIMESTAMP): TimestampType()}
    return StructType([StructField(f.name, spark_type[str(f.type)], nullable=f.nullable) for f in ARROW_SCHEMA])


@needs_pyspark
def spark_path(path: str) -> str:
    """The changefeed's location as Spark's Hadoop filesystems name it: ``s3://`` (as
    olr-buffer and the AWS tools write it) becomes ``s3a://`` (hadoop-aws's S3A connector);
    anything else stays as it is."""
    return "s3a://" + path[len("s3://") :] if path.startswith("s3://") else path


@needs_pyspark
def read_changefeed(spark: SparkSession, path: str) -> DataFrame:
    """The whole changefeed as a DataFrame (Spark skips ``_olr_buffer/`` and temporary files).

    The files listed when the query runs hold a gapless prefix of the changefeed, in whole
    transactions, so ``max(tx_seq)`` says how far the result goes. No changefeed at
    ``path``: :class:`ChangefeedNotFoundError`. ``path`` may be ``s3://BUCKET/PREFIX``
    (read as ``s3a://``, which needs hadoop-aws: docs/spark.md).

    A Delta changefeed (``--table-format delta``) is read through its log, an Iceberg
    changefeed (``--table-format iceberg``) through its table's current snapshot (with
    pyiceberg): the files of the table (and a file published but not yet committed after
    them), listed when this is called; the files a compaction replaced, which stay beside
    the table, are not read. No Delta or Iceberg jar is needed.
    """
    schema = changefeed_schema()
    files = _delta_files(spark, path)
    if files is None:
        reader = spark.read.schema(schema).option("pathGlobFilter", PART_GLOB)
        return with_timestamps(load_waiting(lambda: reader.parquet(spark_path(path)), path, None))
    if not files:
        return with_timestamps(spark.createDataFrame([], schema))
    return with_timestamps(spark.read.schema(schema).parquet(*files))


def _delta_files(spark: SparkSession, path: str) -> list[str] | None:
    """The files of the Delta changefeed at ``path``, in ``tx_seq`` order, as Spark names
    them: its table's (the snapshot's active files, read from the Delta log) and those
    published after them, not yet committed; None if ``path`` holds no Delta changefeed."""
    from ..sinks.parquet import Location

    target = delta_target(spark, path)
    if target is None:
        return None
    loc = Location(target)
    ranges = delta_ranges(target)
    return None if ranges is None else [spark_path(loc.where(name)) for _, _, name in ranges]


def delta_target(spark: SparkSession, path: str) -> str | None:
    """``path`` as olr-buffer's stores name it (:func:`_store_target`), if it may hold a
    Delta (or Iceberg) changefeed. On S3, Spark's own filesystem (S3A, with its settings)
    says first whether there is a ``_delta_log/`` (an ``_iceberg/``), so that a plain
    changefeed is read as before with Spark's credentials alone; olr-buffer's store (the
    AWS variables) reads the log (the table)."""
    target = _store_target(path)
    if target is None or not target.startswith("s3://"):
        return target
    try:
        jvm = spark._jvm
        if jvm is None:  # Spark Connect: olr-buffer's store looks
            return target
        found = False
        for folder in ("_delta_log", "_iceberg"):
            log_dir = jvm.org.apache.hadoop.fs.Path(spark_path(path).rstrip("/") + "/" + folder)
            found = found or log_dir.getFileSystem(spark._jsc.hadoopConfiguration()).exists(log_dir)
    except Exception:  # noqa: BLE001 - no S3A here, or Spark Connect: olr-buffer's store looks
        return target
    return target if found else None


def _store_target(path: str) -> str | None:
    """``path`` as olr-buffer's stores name it (``s3a://`` is ``s3://``, ``file://`` a
    path); None for a scheme they do not have (the changefeed cannot be there)."""
    target = path.removeprefix("file://")
    if target.startswith("s3a://"):
        target = "s3://" + target[len("s3a://") :]
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", target) and not target.startswith("s3://"):
        return None
    return target


def delta_ranges(path: str) -> list[tuple[int, int, str]] | None:
    """``(first, last, name)`` of the files of the Delta changefeed at ``path`` (olr-buffer's
    name of it: :func:`_store_target`), in ``tx_seq`` order: its table's, then those
    published after them; None if ``path`` holds no Delta changefeed."""
    from ..sinks.parquet import Location, chain_names, parse_part_name

    names = chain_names(Location(path))
    if names is None:
        return None
    return sorted((*(parse_part_name(n) or (-1, -1)), n) for n in names)


def with_timestamps(df: DataFrame) -> DataFrame:
    """``c_ts``/``ts`` from ``c_tm``/``tm`` where a file (written before they existed) lacks them."""
    from pyspark.sql import functions as F

    from ..sinks.parquet import DERIVED_TIMESTAMPS

    derived = {}
    for ts, nanos in DERIVED_TIMESTAMPS.items():
        # floor(nanos / 1000) in integers (a double would lose the last digits)
        from_nanos = F.timestamp_micros(F.expr(f"({nanos} - pmod({nanos}, 1000)) div 1000"))
        derived[ts] = F.coalesce(F.col(ts), from_nanos) if ts in df.columns else from_nanos
    return df.withColumns(derived)


def __getattr__(name: str):  # CHANGEFEED_SCHEMA, built on first use
    if name == "CHANGEFEED_SCHEMA":
        return changefeed_schema()
    raise AttributeError(name)
