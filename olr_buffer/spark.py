"""PySpark helpers to read the changefeed. PySpark is imported only when these are used.

- :func:`read_changefeed`: the changefeed as a batch DataFrame.
- :func:`stream_changefeed`: the changefeed as a streaming DataFrame (Spark's file source).
- :func:`table_changes`: the rows of one table, ``before``/``after`` parsed into structs,
  between two ``tx_seq``; or Delta's change-data-feed view of them.
- :func:`snapshot`: the current state of one table, one row per key.
- :func:`infer_schema`: a table's columns, from its ``CREATE TABLE`` rows and a sample of
  its row images.

Every helper gives ``c_ts`` and ``ts`` (``c_tm``/``tm`` as Spark timestamps), deriving them
for files written before those columns existed.

``CHANGEFEED_SCHEMA`` (a module attribute, built on first use) and
:func:`changefeed_schema` give the contract's columns as a Spark ``StructType``.

The functions that take ``path`` also take a DataFrame with the changefeed's columns
instead (for example a micro-batch inside ``foreachBatch``); see docs/spark.md.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Sequence, Union

from .sinks.parquet import ChangefeedReadError, UnknownTableError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    Source = Union[str, DataFrame]

#: Only the changefeed's own files: Spark already skips names starting with ``_`` or ``.``;
#: this also keeps out anything else someone drops into the directory.
PART_GLOB = "part-*.parquet"


def changefeed_schema() -> "StructType":
    """The changefeed's columns (contract §2) as a Spark ``StructType``."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

    from .sinks.parquet import ARROW_SCHEMA, TIMESTAMP

    spark_type = {"int64": LongType(), "int32": IntegerType(), "string": StringType(), str(TIMESTAMP): TimestampType()}
    return StructType(
        [StructField(f.name, spark_type[str(f.type)], nullable=f.nullable) for f in ARROW_SCHEMA]
    )


def spark_path(path: str) -> str:
    """The changefeed's location as Spark's Hadoop filesystems name it: ``s3://`` (as
    olr-buffer and the AWS tools write it) becomes ``s3a://`` (hadoop-aws's S3A connector);
    anything else stays as it is."""
    return "s3a://" + path[len("s3://"):] if path.startswith("s3://") else path


def read_changefeed(spark: "SparkSession", path: str) -> "DataFrame":
    """The whole changefeed as a DataFrame (Spark skips ``_olr_buffer/`` and temporary files).

    The files listed when the query runs hold a gapless prefix of the changefeed, in whole
    transactions, so ``max(tx_seq)`` says how far the result goes. ``path`` may be
    ``s3://BUCKET/PREFIX`` (read as ``s3a://``, which needs hadoop-aws: docs/spark.md).

    A Delta changefeed (``--table-format delta``) is read as its plain files here; after a
    compaction, read it as a Delta table (``spark.read.format("delta")``): the files the
    compaction replaced stay beside it, and a plain read sees their rows twice.
    """
    df = spark.read.schema(changefeed_schema()).option("pathGlobFilter", PART_GLOB).parquet(spark_path(path))
    return _with_timestamps(df)


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
    return _with_timestamps(reader.load(spark_path(path)))


#: Delta's change types, by changefeed ``op`` (``ddl`` rows have none); a truncate's is
#: olr-buffer's own, given with ``truncates="include"``.
_CHANGE_TYPES = {"c": ["insert"], "r": ["insert"], "u": ["update_preimage", "update_postimage"], "d": ["delete"]}
TRUNCATE_CHANGE_TYPE = "truncate"
#: The columns the change-data-feed view adds to the table's: Delta's three, and ``_op_seq``.
CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp", "_op_seq")
#: What ``table_changes(change_data_feed=True)`` does with a truncate.
TRUNCATES = ("error", "include")


def table_changes(
    spark: "SparkSession",
    path: "Source",
    owner: str,
    table: str,
    schema: "StructType | str | None" = None,
    *,
    starting_tx_seq: int | None = None,
    ending_tx_seq: int | None = None,
    change_data_feed: bool = False,
    truncates: str = "error",
    json_options: dict[str, str] | None = None,
    missing_ok: bool = False,
) -> "DataFrame":
    """The rows of ``owner.table`` with ``before`` and ``after`` parsed by ``schema``.

    ``schema`` is a Spark ``StructType`` or a DDL string (``"ID BIGINT, NAME STRING"``)
    whose field names are the table's column names, as the capture writes them (Oracle:
    upper case); columns missing from an image are null, image columns missing from the
    schema are dropped. Without it, :func:`infer_schema` gives one (a Spark job). The
    other columns of the changefeed stay as they are, in the same order; ``ddl`` and
    truncate (``op = 't'``) rows are kept (their ``before``/``after`` are usually null).
    ``json_options`` go to ``from_json`` (for example ``{"timestampFormat": ...}``).

    ``starting_tx_seq``, ``ending_tx_seq``: only transactions in that range, both ends
    included (like Delta's ``startingVersion``/``endingVersion``).

    ``change_data_feed=True``: Delta's change-data-feed view instead: the table's columns,
    then ``_change_type`` (``insert``, ``update_preimage``, ``update_postimage``,
    ``delete``), ``_commit_version`` (``tx_seq``), ``_commit_timestamp`` (``c_ts``) and
    ``_op_seq`` (the change's order within its transaction). An update gives two rows
    (``before``, then ``after``); a row of an initial copy (``op = 'r'``) is an insert;
    ``ddl`` rows are not in this view.

    A truncate (``op = 't'``) ends every earlier row of the table, which no insert, update
    or delete says: a MERGE of them would keep the truncated rows. ``truncates="error"``
    (the default) refuses a range that holds one: :class:`ChangefeedReadError` naming
    it, at once for a batch source (a Spark job looks for one), and as the query's
    failure (``USER_RAISED_EXCEPTION``) for a streaming one. ``truncates="include"``
    gives each as one row, ``_change_type = 'truncate'``, the table's columns null: the
    target drops what it holds of the table from before it (docs/spark.md).

    ``path`` may also be a DataFrame with the changefeed's columns, batch or streaming.
    With a path, an ``owner.table`` that has no row in the changefeed raises
    :class:`UnknownTableError` naming the tables it holds (unless ``missing_ok``).
    """
    from pyspark.sql import functions as F

    if truncates not in TRUNCATES:
        raise ValueError(f"table_changes: truncates must be one of {TRUNCATES}, not {truncates!r}")
    df = _table_rows(spark, path, owner, table, missing_ok=missing_ok)
    if starting_tx_seq is not None:
        df = df.where(F.col("tx_seq") >= starting_tx_seq)
    if ending_tx_seq is not None:
        df = df.where(F.col("tx_seq") <= ending_tx_seq)
    if change_data_feed and truncates == "error":
        df = _refuse_truncates(df, path, owner, table)
    struct = infer_schema(spark, df, owner, table) if schema is None else _struct_type(spark, schema)
    opts = json_options or {}
    parsed = df.select(
        *[
            F.from_json(F.col(c), struct, opts).alias(c) if c in ("before", "after") else F.col(c)
            for c in df.columns
        ]
    )
    if not change_data_feed:
        return parsed
    image = {"insert": F.col("after"), "update_preimage": F.col("before"), "update_postimage": F.col("after"),
             "delete": F.col("before"), TRUNCATE_CHANGE_TYPE: F.lit(None).cast(struct)}
    change_types = {**_CHANGE_TYPES, "t": [TRUNCATE_CHANGE_TYPE]} if truncates == "include" else _CHANGE_TYPES
    changes = F.lit(None)
    for op, kinds in change_types.items():
        entries = F.array(*[F.struct(F.lit(k).alias("kind"), image[k].alias("image")) for k in kinds])
        changes = F.when(F.col("op") == op, entries).otherwise(changes)
    return parsed.select(
        F.explode(changes).alias("change"),
        F.col("tx_seq").alias("_commit_version"),
        F.col("c_ts").alias("_commit_timestamp"),
        F.col("op_seq").alias("_op_seq"),
    ).select("change.image.*", F.col("change.kind").alias("_change_type"), *CDF_COLUMNS[1:])


def infer_schema(
    spark: "SparkSession",
    path: "Source",
    owner: str,
    table: str,
    *,
    sample_rows: int = 1000,
    missing_ok: bool = False,
) -> "StructType":
    """The columns of ``owner.table``, for :func:`table_changes` and :func:`snapshot`.

    Types come from the table's last ``CREATE TABLE`` row and the ``ALTER TABLE … ADD``
    rows after it, where the changefeed has them (Oracle types mapped as docs/spark.md
    says), and otherwise from Spark's JSON inference over the ``before``/``after`` images
    of the table's last ``sample_rows`` changes (JSON integers are ``BIGINT``, other
    numbers ``DOUBLE``, strings, dates and timestamps ``STRING``). Columns come in the
    order the DDL and the images give them. A column no sampled image has and no DDL
    names is not in the result: give the schema by hand then.
    """
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    if not isinstance(path, str) and path.isStreaming:
        raise ChangefeedReadError(
            "infer_schema needs a batch source, not a streaming DataFrame",
            hint="give the schema, or infer it from the changefeed's path: infer_schema(spark, PATH, owner, table)",
        )
    rows = _table_rows(spark, path, owner, table, missing_ok=missing_ok)
    ddl_columns = ddl_columns_of([r.sql for r in rows.where(F.col("op") == "ddl").orderBy("tx_seq", "op_seq")
                               .select("sql").collect()])
    sample = (
        rows.where(F.col("op") != "ddl")
        .orderBy(F.desc("tx_seq"), F.desc("op_seq"))
        .limit(sample_rows)
        .select("before", "after")
        .collect()
    )
    images = [text for row in sample for text in (row.after, row.before) if text is not None]
    order: dict[str, None] = dict.fromkeys(ddl_columns)
    for text in images:
        order.update(dict.fromkeys(k for k in json.loads(text) if k not in order))
    inferred: dict[str, Any] = {}
    if images:
        json_df = spark.read.json(spark.sparkContext.parallelize(images, 1))
        inferred = {f.name: f.dataType for f in json_df.schema.fields if f.name != "_corrupt_record"}
    types = {**inferred, **{name: t for name, t in ddl_columns.items() if t is not None}}
    return StructType([StructField(name, types.get(name) or StringType()) for name in order])


def snapshot(
    spark: "SparkSession",
    path: "Source",
    owner: str,
    table: str,
    schema: "StructType | str | None" = None,
    key: str | Sequence[str] | None = None,
    *,
    json_options: dict[str, str] | None = None,
    missing_ok: bool = False,
) -> "DataFrame":
    """The current state of ``owner.table``: one row per key, from the last change.

    What the changefeed captured, not an initial load: a row that no captured change
    touched is not in it (unless the source copied it first, as the PostgreSQL source's
    initial copy does, ``op = 'r'``).

    Per key, the row with the largest ``(tx_seq, op_seq)`` wins; if it is a delete, the
    key is gone. A truncate (``op = 't'``) ends every row of the table before it: only
    changes after the last one count. ``ddl`` rows are skipped. The row is that change's ``after`` image, as
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
    ``foreachBatch``: the last state of each key the batch touched, which does not say what
    a truncate in it removed: apply such a batch through :func:`table_changes`'s
    ``change_data_feed=True, truncates="include"``); a streaming one raises
    :class:`ChangefeedReadError`. With a path, an unknown ``owner.table`` raises
    :class:`UnknownTableError` (unless ``missing_ok``).
    """
    from pyspark.sql import functions as F

    if not isinstance(path, str) and path.isStreaming:
        raise ChangefeedReadError(
            "snapshot needs a batch DataFrame, not a streaming one: a table's state is an aggregation "
            "over all its changes",
            hint="in a stream, call snapshot on each micro-batch (foreachBatch) or on the history a stream "
            "writes; see docs/spark.md",
        )
    keys = [key] if isinstance(key, str) else list(key) if key is not None else None
    if keys is not None and schema is None:
        raise ValueError("snapshot: a key of table columns needs the table's schema")
    if keys is not None and not keys:
        raise ValueError("snapshot: key is an empty list")
    rows = _table_rows(spark, path, owner, table, missing_ok=missing_ok).where(F.col("op") != "ddl")
    rows = _after_last_truncate(rows)
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


def _refuse_truncates(df: "DataFrame", path: "Source", owner: str, table: str) -> "DataFrame":
    """``df`` (one table's rows), refused if it holds a truncate: at once for a batch
    source, when the query reads it for a streaming one."""
    from pyspark.sql import functions as F

    what = f"{owner}.{table} was truncated"
    why = ("Delta's change data feed has no change type for a truncate, and a MERGE of the other changes "
           "would keep the rows it removed")
    hint = ("truncates='include' gives each truncate as a row with _change_type 'truncate' (drop what the "
            "target holds of the table from before it: docs/spark.md); snapshot() gives the table's state")
    is_truncate = F.col("op") == "t"
    if df.isStreaming:
        message = F.concat(F.lit(f"{what} at tx_seq "), F.col("tx_seq").cast("string"),
                           F.lit(f": {why} (hint: {hint})"))
        return df.where(F.when(is_truncate, F.raise_error(message)).otherwise(F.lit(True)))
    found = df.where(is_truncate).agg(
        F.count(F.lit(1)).alias("n"), F.min(F.struct("tx_seq", "op_seq")).alias("first")
    ).first()
    if found.n:
        where = f"{path}: " if isinstance(path, str) else ""
        times = f" {found.n} times, first" if found.n > 1 else ""
        raise ChangefeedReadError(
            f"{where}{what}{times} at tx_seq {found.first.tx_seq} (op_seq {found.first.op_seq}): {why}",
            hint=hint, path=path if isinstance(path, str) else None, owner=owner, table=table,
            tx_seq=found.first.tx_seq,
        )
    return df


def _after_last_truncate(rows: "DataFrame") -> "DataFrame":
    """One table's ``rows`` after its last truncate, which ends every row before it (and
    itself changes no row)."""
    from pyspark.sql import functions as F

    position = F.struct("tx_seq", "op_seq")
    last = rows.where(F.col("op") == "t").agg(F.max(position).alias("_truncated_at"))
    return (
        rows.crossJoin(last)
        .where((F.col("op") != "t") & (F.col("_truncated_at").isNull() | (position > F.col("_truncated_at"))))
        .drop("_truncated_at")
    )


def _source(spark: "SparkSession", path: "Source") -> "DataFrame":
    return read_changefeed(spark, path) if isinstance(path, str) else _with_timestamps(path)


def _with_timestamps(df: "DataFrame") -> "DataFrame":
    """``c_ts``/``ts`` from ``c_tm``/``tm`` where a file (written before they existed) lacks them."""
    from pyspark.sql import functions as F

    from .sinks.parquet import DERIVED_TIMESTAMPS

    derived = {}
    for ts, nanos in DERIVED_TIMESTAMPS.items():
        # floor(nanos / 1000) in integers (a double would lose the last digits)
        from_nanos = F.timestamp_micros(F.expr(f"({nanos} - pmod({nanos}, 1000)) div 1000"))
        derived[ts] = F.coalesce(F.col(ts), from_nanos) if ts in df.columns else from_nanos
    return df.withColumns(derived)


def _table_rows(
    spark: "SparkSession", path: "Source", owner: str, table: str, *, missing_ok: bool = True
) -> "DataFrame":
    from pyspark.sql import functions as F

    rows = _source(spark, path).where((F.col("owner") == owner) & (F.col("table") == table))
    if isinstance(path, str) and not missing_ok and not rows.limit(1).count():
        _unknown_table(_source(spark, path), path, owner, table)
    return rows


def _unknown_table(df: "DataFrame", path: str, owner: str, table: str) -> None:
    names = sorted(f"{r.owner}.{r.table}" for r in df.select("owner", "table").distinct().collect())
    wanted = f"{owner}.{table}"
    alike = [n for n in names if n.casefold() == wanted.casefold()]
    if alike:
        hint = f"names are case-sensitive: did you mean {' or '.join(alike)}?"
    elif names:
        shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
        hint = f"the changefeed holds {shown}"
    else:
        hint = "the changefeed holds no rows yet"
    raise UnknownTableError(
        f"{path}: no row of {wanted} in the changefeed", hint=hint + "; missing_ok=True returns no rows instead",
        path=path, owner=owner, table=table,
    )


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


_CREATE_TABLE = re.compile(r"^\s*CREATE\s+(?:GLOBAL\s+TEMPORARY\s+)?TABLE\s+[^(]+\((.*)\)", re.I | re.S)
_ALTER_ADD = re.compile(r"^\s*ALTER\s+TABLE\s+\S+\s+ADD\s*\((.*)\)", re.I | re.S)
_NOT_A_COLUMN = {"CONSTRAINT", "PRIMARY", "UNIQUE", "FOREIGN", "CHECK", "SUPPLEMENTAL", "PERIOD"}
_NUMBER = re.compile(r"^NUMBER\s*(?:\(\s*(\d+|\*)\s*(?:,\s*(-?\d+)\s*)?\))?", re.I)


def ddl_columns_of(statements: Sequence[str | None]) -> dict[str, Any]:
    """Column name -> Spark type (or None: let the images decide), from the last ``CREATE
    TABLE`` of ``statements`` and the ``ALTER TABLE … ADD (…)`` after it."""
    columns: dict[str, Any] = {}
    for sql in statements:
        if not sql:
            continue
        create = _CREATE_TABLE.match(sql)
        if create:
            columns = {}
        body = create or _ALTER_ADD.match(sql)
        if body:
            for definition in _top_level_split(body.group(1)):
                words = definition.split(None, 1)
                if len(words) == 2 and words[0].upper() not in _NOT_A_COLUMN:
                    columns[words[0].strip('"')] = _oracle_type(words[1])
    return columns


def _top_level_split(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _oracle_type(text: str) -> Any:
    """An Oracle column type -> the Spark type its JSON values read as; None if unsure."""
    from pyspark.sql.types import DecimalType, DoubleType, LongType, StringType

    name = text.strip().upper()
    number = _NUMBER.match(name)
    if number:
        precision, scale = number.group(1), int(number.group(2) or 0)
        if precision in (None, "*") or scale < 0:
            return None  # NUMBER without precision: any number
        p = int(precision)
        if scale == 0:
            return LongType() if p <= 18 else DecimalType(min(p, 38), 0)
        return DecimalType(min(p, 38), min(scale, p, 38))
    if name.startswith(("INTEGER", "INT ", "SMALLINT")) or name == "INT":
        return DecimalType(38, 0)
    if name.startswith(("FLOAT", "BINARY_FLOAT", "BINARY_DOUBLE", "REAL", "DOUBLE PRECISION")):
        return DoubleType()
    if name.startswith(("VARCHAR", "NVARCHAR", "CHAR", "NCHAR", "CLOB", "NCLOB", "LONG", "ROWID", "UROWID",
                        "RAW", "DATE", "TIMESTAMP", "INTERVAL")):
        return StringType()  # dates and times: their text form, whose format the capture chooses
    return None


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
