"""PySpark helpers to read the changefeed. PySpark is imported only when these are used.

- :func:`read_changefeed`: the changefeed as a batch DataFrame.
- :func:`stream_changefeed`: the changefeed as a streaming DataFrame (Spark's file source).
- :func:`table_changes`: the rows of one table, ``before``/``after`` parsed into structs.
- :func:`snapshot`: the current state of one table, one row per key.

``CHANGEFEED_SCHEMA`` (a module attribute, built on first use) and
:func:`changefeed_schema` give the contract's columns as a Spark ``StructType``.

The functions that take ``path`` also take a DataFrame with the changefeed's columns
instead (for example a micro-batch inside ``foreachBatch``); see docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, Union

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    Source = Union[str, DataFrame]

#: Only the changefeed's own files: Spark already skips names starting with ``_`` or ``.``;
#: this also keeps out anything else someone drops into the directory.
PART_GLOB = "part-*.parquet"


def changefeed_schema() -> "StructType":
    """The changefeed's columns (contract §2) as a Spark ``StructType``."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    from .schema import ARROW_SCHEMA

    spark_type = {"int64": LongType(), "int32": IntegerType(), "string": StringType()}
    return StructType(
        [StructField(f.name, spark_type[str(f.type)], nullable=f.nullable) for f in ARROW_SCHEMA]
    )


def read_changefeed(spark: "SparkSession", path: str) -> "DataFrame":
    """The whole changefeed as a DataFrame (Spark skips ``_olr_buffer/`` and temporary files).

    The files listed when the query runs hold a gapless prefix of the changefeed, in whole
    transactions, so ``max(tx_seq)`` says how far the result goes.
    """
    return spark.read.schema(changefeed_schema()).option("pathGlobFilter", PART_GLOB).parquet(path)


def stream_changefeed(spark: "SparkSession", path: str, **options: Any) -> "DataFrame":
    """The changefeed as a streaming DataFrame: Spark's file source, format parquet, with
    the changefeed's fixed schema.

    ``options`` go to the source as they are (``maxFilesPerTrigger=1``,
    ``maxBytesPerTrigger``, ...). The source remembers in its checkpoint the names of the
    files it has read, so every published file is read once; a file is never split, so a
    micro-batch holds whole transactions. Leave ``cleanSource`` unset: the changefeed's
    files are not the stream's to move or delete.
    """
    opts = {"pathGlobFilter": PART_GLOB, **options}
    reader = spark.readStream.schema(changefeed_schema()).format("parquet")
    for key, value in opts.items():
        reader = reader.option(key, value)
    return reader.load(path)


def table_changes(
    spark: "SparkSession",
    path: "Source",
    owner: str,
    table: str,
    schema: "StructType | str",
    *,
    json_options: dict[str, str] | None = None,
) -> "DataFrame":
    """The rows of ``owner.table`` with ``before`` and ``after`` parsed by ``schema``.

    ``schema`` is a Spark ``StructType`` or a DDL string (``"ID BIGINT, NAME STRING"``)
    whose field names are the table's column names, as the capture writes them (Oracle:
    upper case); columns missing from an image are null, image columns missing from the
    schema are dropped. The other columns of the changefeed stay as they are, in the same
    order; ``ddl`` rows are kept (their ``before``/``after`` are usually null).
    ``json_options`` go to ``from_json`` (for example ``{"timestampFormat": ...}``).

    ``path`` may also be a DataFrame with the changefeed's columns, batch or streaming.
    """
    from pyspark.sql import functions as F

    struct = _struct_type(spark, schema)
    df = _table_rows(spark, path, owner, table)
    opts = json_options or {}
    return df.select(
        *[
            F.from_json(F.col(c), struct, opts).alias(c) if c in ("before", "after") else F.col(c)
            for c in df.columns
        ]
    )


def snapshot(
    spark: "SparkSession",
    path: "Source",
    owner: str,
    table: str,
    schema: "StructType | str | None" = None,
    key: str | Sequence[str] | None = None,
    *,
    json_options: dict[str, str] | None = None,
) -> "DataFrame":
    """The current state of ``owner.table``: one row per key, from the last change.

    Per key, the row with the largest ``(tx_seq, op_seq)`` wins; if it is a delete, the
    key is gone. ``ddl`` rows are skipped. The row is that change's ``after`` image, as
    it is: if the capture logs only the changed columns of an update, the other columns
    are null. Supplemental logging of all columns (``ALTER TABLE ... ADD SUPPLEMENTAL LOG
    DATA (ALL) COLUMNS``) is what makes every ``after`` image a complete row.

    ``key``: by default the row id (``rid``). Or column names of the table (needs
    ``schema``): a delete's key comes from ``before``; an insert's or update's from
    ``after``, a key column that ``after`` lacks from ``before``. An update that changes
    the key (``before``'s differs from ``after``'s) also removes the old key. Rows whose
    key is null are left out.

    Without ``schema``: columns ``rid`` and ``after`` (JSON text). With ``schema``: the
    schema's fields, typed (``rid`` first when the key is the row id).

    ``path`` may also be a batch DataFrame with the changefeed's columns (a micro-batch in
    ``foreachBatch``: the last state of each key the batch touched).
    """
    from pyspark.sql import functions as F

    keys = [key] if isinstance(key, str) else list(key) if key is not None else None
    if keys is not None and schema is None:
        raise ValueError("snapshot: a key of table columns needs the table's schema")
    if keys is not None and not keys:
        raise ValueError("snapshot: key is an empty list")
    rows = _table_rows(spark, path, owner, table).where(F.col("op") != "ddl")
    order = F.struct("tx_seq", "op_seq")
    is_delete = F.col("op") == "d"

    if schema is None:
        last = rows.groupBy("rid").agg(
            F.max_by(F.struct(is_delete.alias("deleted"), F.col("after")), order).alias("last")
        )
        return last.where(F.col("rid").isNotNull() & ~F.col("last.deleted")).select("rid", "last.after")

    struct = _struct_type(spark, schema)
    fields = struct.fieldNames()
    opts = json_options or {}
    parsed = rows.select(
        "tx_seq",
        "op_seq",
        "rid",
        is_delete.alias("deleted"),
        F.from_json("before", struct, opts).alias("b"),
        F.from_json("after", struct, opts).alias("a"),
    )
    if keys is None:
        last = parsed.groupBy("rid").agg(F.max_by(F.struct("deleted", "a"), order).alias("last"))
        return last.where(F.col("rid").isNotNull() & ~F.col("last.deleted")).select("rid", "last.a.*")

    missing = [k for k in keys if k not in fields]
    if missing:
        raise ValueError(f"snapshot: key column(s) {missing} are not in the schema {fields}")
    # One event per (key, change): deletes by before's key, upserts by after's key (a
    # column after lacks comes from before), and a delete of before's key when an update
    # moves the row to another key.
    upsert_key = [F.coalesce(F.col(f"a.{k}"), F.col(f"b.{k}")) for k in keys]
    before_key = [F.col(f"b.{k}") for k in keys]
    events = parsed.select(
        "tx_seq",
        "op_seq",
        "deleted",
        F.when(F.col("deleted"), F.struct(*[c.alias(k) for c, k in zip(before_key, keys)]))
        .otherwise(F.struct(*[c.alias(k) for c, k in zip(upsert_key, keys)]))
        .alias("k"),
        "a",
    )
    moved = parsed.where(
        ~F.col("deleted")
        & _all_not_null(before_key)
        & ~_all_equal(before_key, upsert_key)
    ).select(
        "tx_seq",
        "op_seq",
        F.lit(True).alias("deleted"),
        F.struct(*[c.alias(k) for c, k in zip(before_key, keys)]).alias("k"),
        F.lit(None).cast(struct).alias("a"),
    )
    last = (
        events.unionByName(moved)
        .where(_all_not_null([F.col(f"k.{k}") for k in keys]))
        .groupBy("k")
        .agg(F.max_by(F.struct("deleted", "a"), order).alias("last"))
    )
    return last.where(~F.col("last.deleted")).select("last.a.*")


# -- helpers -------------------------------------------------------------------------------


def _source(spark: "SparkSession", path: "Source") -> "DataFrame":
    return read_changefeed(spark, path) if isinstance(path, str) else path


def _table_rows(spark: "SparkSession", path: "Source", owner: str, table: str) -> "DataFrame":
    from pyspark.sql import functions as F

    return _source(spark, path).where((F.col("owner") == owner) & (F.col("table") == table))


def _struct_type(spark: "SparkSession", schema: "StructType | str") -> "StructType":
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        parsed = StructType.fromDDL(schema) if hasattr(StructType, "fromDDL") else None
        if parsed is None:  # pragma: no cover - PySpark < 4
            parsed = spark.createDataFrame([], schema).schema
        return parsed
    raise TypeError(f"schema must be a StructType or a DDL string, not {type(schema).__name__}")


def _all_not_null(cols: list["Column"]) -> "Column":
    from functools import reduce

    return reduce(lambda x, y: x & y, [c.isNotNull() for c in cols])


def _all_equal(left: list["Column"], right: list["Column"]) -> "Column":
    from functools import reduce

    return reduce(lambda x, y: x & y, [a.eqNullSafe(b) for a, b in zip(left, right)])


def __getattr__(name: str):  # CHANGEFEED_SCHEMA, built on first use
    if name == "CHANGEFEED_SCHEMA":
        return changefeed_schema()
    raise AttributeError(name)
