"""One table of the changefeed in Spark. The functions that take ``path`` also take a
DataFrame with the changefeed's columns instead (for example a micro-batch inside
``foreachBatch``); see docs/spark.md.

- :func:`table_changes`: the rows of one table, ``before``/``after`` parsed into structs,
  between two ``tx_seq``; or Delta's change-data-feed view of them.
- :func:`snapshot`: the current state of one table, one row per key.
- :func:`typed`: the rows of one table, ``before``/``after`` as typed structs by the
  changefeed's schema documents (the types its source stated), every value checked.
- :func:`table_schema`: a table's schema document, and its columns as a ``StructType``.
- :func:`infer_schema`: a table's columns, from its ``CREATE TABLE`` rows and a sample of
  its row images (:func:`ddl_columns_of`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..sinks.parquet import ChangefeedReadError, UnknownTableError, read_schema_document
from ..value_forms import ARRAY as _ARRAY
from ..value_forms import BOOLEAN as _BOOLEAN
from ..value_forms import DATE as _DATE
from ..value_forms import FLOAT as _FLOAT
from ..value_forms import HEX as _HEX
from ..value_forms import INTEGER as _INTEGER
from ..value_forms import NANOS as _NANOS
from ..value_forms import TIMESTAMP as _TIMESTAMP
from ..value_forms import TIMESTAMP_NTZ as _TIMESTAMP_NTZ
from .reading import needs_pyspark, read_changefeed, with_timestamps

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    Source = str | DataFrame


#: Delta's change types, by changefeed ``op`` (``ddl`` rows have none); a truncate's is
#: olr-buffer's own, given with ``truncates="include"``.
_CHANGE_TYPES = {"c": ["insert"], "r": ["insert"], "u": ["update_preimage", "update_postimage"], "d": ["delete"]}
TRUNCATE_CHANGE_TYPE = "truncate"
#: The columns the change-data-feed view adds to the table's: Delta's three, and ``_op_seq``.
CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp", "_op_seq")
#: What ``table_changes(change_data_feed=True)`` does with a truncate.
TRUNCATES = ("error", "include")


@needs_pyspark
def table_changes(
    spark: SparkSession,
    path: Source,
    owner: str,
    table: str,
    schema: StructType | str | None = None,
    *,
    starting_tx_seq: int | None = None,
    ending_tx_seq: int | None = None,
    change_data_feed: bool = False,
    truncates: str = "error",
    json_options: dict[str, str] | None = None,
    missing_ok: bool = False,
) -> DataFrame:
    """The rows of ``owner.table`` with ``before`` and ``after`` parsed by ``schema``.

    ``schema`` is a Spark ``StructType`` or a DDL string (``"ID BIGINT, NAME STRING"``)
    whose field names are the table's column names, as the capture writes them (Oracle:
    upper case); columns missing from an image are null, image columns missing from the
    schema are dropped. Without it, the changefeed's schema document of the table gives
    the types, as :func:`typed` does (a changefeed path; Spark 4); without one either
    (rows that name no schema version), :func:`infer_schema` gives them (a Spark job). The
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
    ``ddl`` rows are not in this view. An update without a ``before`` image (PostgreSQL's
    default replica identity sends none) has the key columns of its ``rid`` (a JSON object)
    as its pre-image, the other columns null.

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
    df = _selected_rows(
        spark, path, owner, table, missing_ok, starting_tx_seq, ending_tx_seq, change_data_feed and truncates == "error"
    )
    if schema is None and isinstance(path, str):
        document = _table_document(spark, path, df, owner, table, None, required=False)
        if document is not None:
            _require_variant(spark, "reading a table by its schema document")
            fields = _document_fields(document, None)
            parsed = _typed_rows(df, fields, owner, table, key=change_data_feed)
            return _change_data_feed(parsed, _struct_of(fields), truncates) if change_data_feed else parsed
    struct = infer_schema(spark, df, owner, table) if schema is None else _struct_type(spark, schema)
    opts = json_options or {}
    parsed = df.select(
        *[F.from_json(F.col(c), struct, opts).alias(c) if c in ("before", "after") else F.col(c) for c in df.columns],
        *(
            [F.when(F.col("rid").startswith("{"), F.from_json("rid", struct, opts)).alias("_key")]
            if change_data_feed
            else []
        ),
    )
    if not change_data_feed:
        return parsed
    return _change_data_feed(parsed, struct, truncates)


def _change_data_feed(parsed: DataFrame, struct: StructType, truncates: str) -> DataFrame:
    """Delta's change-data-feed view of one table's parsed rows (with ``_key``: the
    ``rid``'s columns, the pre-image of an update that has no ``before``)."""
    from pyspark.sql import functions as F

    image = {
        "insert": F.col("after"),
        "update_preimage": F.coalesce(F.col("before"), F.col("_key")),
        "update_postimage": F.col("after"),
        "delete": F.col("before"),
        TRUNCATE_CHANGE_TYPE: F.lit(None).cast(struct),
    }
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


@needs_pyspark
def typed(
    spark: SparkSession,
    path: Source,
    owner: str,
    table: str,
    *,
    version: str | None = None,
    types: dict[str, Any] | None = None,
    changefeed: str | None = None,
    starting_tx_seq: int | None = None,
    ending_tx_seq: int | None = None,
    change_data_feed: bool = False,
    truncates: str = "error",
    missing_ok: bool = False,
) -> DataFrame:
    """The rows of ``owner.table`` with ``before`` and ``after`` as typed structs, by the
    table's schema document in the changefeed: the columns and types its source stated
    (docs/spark.md, "Types": ``numeric(12,2)`` is ``decimal(12,2)``, ``timestamptz`` a
    ``timestamp``, ``bytea`` ``binary`` ...). Needs Spark 4 (the images are read as
    ``VARIANT``, which keeps every digit of a number).

    Every value is checked: one that does not fit its type (a number with more digits
    than its decimal holds, a timestamp with nanoseconds, text that is not a date ...)
    fails the query that reads it, ``[USER_RAISED_EXCEPTION] owner.table: tx_seq N,
    op_seq M: after column "C" = '…' does not fit decimal(12,2)``, never a silent null.

    ``version``: the schema version to read by (a row's ``schema_version``); by default
    the version of the table's last row (in the range asked for): rows written under an
    earlier one are read by it too (columns it lacks are null, columns it dropped are not
    there). ``types``: column -> Spark type (a ``DataType`` or its SQL name, ``"string"``)
    to read a column otherwise than its document says. The other arguments are
    :func:`table_changes`'s, which this is with the document's types, and its result has
    the same columns (``change_data_feed=True``: Delta's change-data-feed view).
    ``path`` may be a DataFrame with the changefeed's columns (batch or streaming): then
    ``changefeed`` is the changefeed's directory, whose ``_olr_buffer/schemas/`` holds
    the documents (and whose rows give the version, unless ``version`` is given).
    """
    from pyspark.sql import functions as F

    if truncates not in TRUNCATES:
        raise ValueError(f"typed: truncates must be one of {TRUNCATES}, not {truncates!r}")
    _require_variant(spark, "typed")
    location = path if isinstance(path, str) else changefeed
    if location is None:
        raise ChangefeedReadError(
            "typed: given a DataFrame, it needs the changefeed's directory for the schema documents",
            hint="typed(spark, df, owner, table, changefeed=PATH)",
        )
    df = _selected_rows(
        spark, path, owner, table, missing_ok, starting_tx_seq, ending_tx_seq, change_data_feed and truncates == "error"
    )
    if version is None and not isinstance(path, str):
        rows = _table_rows(spark, location, owner, table)
        if starting_tx_seq is not None:
            rows = rows.where(F.col("tx_seq") >= starting_tx_seq)
        if ending_tx_seq is not None:
            rows = rows.where(F.col("tx_seq") <= ending_tx_seq)
        document = _table_document(spark, location, rows, owner, table, None, required=True)
    else:
        document = _table_document(spark, location, df, owner, table, version, required=True)
    assert document is not None  # required
    fields = _document_fields(document, types)
    parsed = _typed_rows(df, fields, owner, table, key=change_data_feed)
    return _change_data_feed(parsed, _struct_of(fields), truncates) if change_data_feed else parsed


@needs_pyspark
def table_schema(
    spark: SparkSession, path: str, owner: str, table: str, version: str | None = None
) -> tuple[dict, StructType]:
    """``(document, struct)``: the schema document of ``owner.table`` in the changefeed at
    ``path`` (``version``, or the version of the table's last row), and its columns as the
    Spark ``StructType`` that :func:`typed` gives ``before`` and ``after``."""
    rows = _table_rows(spark, path, owner, table, missing_ok=version is not None)
    document = _table_document(spark, path, rows, owner, table, version, required=True, renames=False)
    assert document is not None  # required
    return document, _struct_of(_document_fields(document, None))


@needs_pyspark
def infer_schema(
    spark: SparkSession,
    path: Source,
    owner: str,
    table: str,
    *,
    sample_rows: int = 1000,
    missing_ok: bool = False,
) -> StructType:
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
    ddl_columns = ddl_columns_of(
        [r.sql for r in rows.where(F.col("op") == "ddl").orderBy("tx_seq", "op_seq").select("sql").collect()]
    )
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


@needs_pyspark
def snapshot(
    spark: SparkSession,
    path: Source,
    owner: str,
    table: str,
    schema: StructType | str | None = None,
    key: str | Sequence[str] | None = None,
    *,
    json_options: dict[str, str] | None = None,
    missing_ok: bool = False,
) -> DataFrame:
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

    Without ``schema``: the table's columns typed by its schema document, as
    :func:`typed` reads them (a changefeed path whose rows name a schema version; Spark 4),
    or else columns ``rid`` and ``after`` (JSON text). With ``schema``: the schema's fields,
    typed. ``rid`` comes first when the key is the row id.

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
    if keys is not None and not keys:
        raise ValueError("snapshot: key is an empty list")
    all_rows = _table_rows(spark, path, owner, table, missing_ok=missing_ok)
    typed_fields = None
    if schema is None and isinstance(path, str):
        document = _table_document(spark, path, all_rows, owner, table, None, required=False)
        if document is not None:
            _require_variant(spark, "reading a table by its schema document")
            typed_fields = _document_fields(document, None)
    if keys is not None and schema is None and typed_fields is None:
        raise ValueError("snapshot: a key of table columns needs the table's schema")
    rows = _after_last_truncate(all_rows.where(F.col("op") != "ddl"))
    order = F.struct("tx_seq", "op_seq")
    is_delete = F.col("op") == "d"

    if schema is None and typed_fields is None:
        last = rows.groupBy("rid").agg(
            F.max_by(F.struct(is_delete.alias("deleted"), F.col("after")), order).alias("last")
        )
        return last.where(F.col("rid").isNotNull() & ~F.col("last.deleted")).select("rid", "last.after")

    if typed_fields is not None:
        struct = _struct_of(typed_fields)
        images = _typed_rows(rows, typed_fields, owner, table)
        b, a = F.col("before"), F.col("after")
    else:
        assert schema is not None  # without a schema nor typed fields, returned above
        struct = _struct_type(spark, schema)
        opts = json_options or {}
        images = rows
        b, a = F.from_json("before", struct, opts), F.from_json("after", struct, opts)
    fields = struct.fieldNames()
    parsed = images.select("tx_seq", "op_seq", "rid", is_delete.alias("deleted"), b.alias("b"), a.alias("a"))
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
    moved = parsed.where(~F.col("deleted") & _all_not_null(before_key) & ~_all_equal(before_key, upsert_key)).select(
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


# -- typed images ----------------------------------------------------------------------------
# A value of an image is read from the image parsed as VARIANT, which keeps a number's
# digits (a decimal of up to 38 digits; beyond that, or with an exponent, a double), as
# text: checked against its type (plain digits that fit the decimal, an ISO date or
# timestamp, hex ...), then cast. A value that does not pass is the row's error.

# (the forms, _INTEGER ... _ARRAY: olr_buffer.value_forms, shared with the mirror)


def _require_variant(spark: SparkSession, what: str) -> None:
    major = int(spark.version.split(".")[0])
    if major < 4:
        raise ChangefeedReadError(
            f"{what} needs Spark 4 or later (it reads the images as VARIANT, which keeps every digit); "
            f"this is Spark {spark.version}",
            hint="upgrade Spark, or give table_changes/snapshot a schema (a value that does not fit its type is "
            "then null)",
        )


def _table_document(
    spark: SparkSession,
    location: str,
    rows: DataFrame,
    owner: str,
    table: str,
    version: str | None,
    *,
    required: bool,
    renames: bool = True,
) -> dict | None:
    """The schema document ``version`` of the changefeed at ``location``, or the one the
    last of ``rows`` (one table's rows) names; None if they name none and not ``required``.
    Without ``version``, ``renames``: refused if the rows name a version that may have had
    a column renamed since (:func:`_refuse_renames`)."""
    from pyspark.sql import functions as F

    if version is None:
        versions = []
        if "schema_version" in rows.columns:
            versions = (
                rows.where(F.col("schema_version").isNotNull())
                .groupBy("schema_version")
                .agg(
                    F.max(F.struct("tx_seq", "op_seq")).alias("last"),
                    F.min("tx_seq").alias("first_tx_seq"),
                    F.max("tx_seq").alias("last_tx_seq"),
                )
                .collect()
            )
        if not versions:
            if not required:
                return None
            raise ChangefeedReadError(
                f"{location}: no row of {owner}.{table} names a schema version: its types are not in the changefeed",
                hint="the PostgreSQL source records them; for redo files, give the table's ddl records columns "
                "(docs/formats.md); or give table_changes a schema",
                path=location,
                owner=owner,
                table=table,
            )
        latest = max(versions, key=lambda v: (v.last.tx_seq, v.last.op_seq))
        document = _read_document(spark, location, latest.schema_version, owner, table)
        if renames:
            _refuse_renames(
                spark,
                location,
                owner,
                table,
                document,
                latest.schema_version,
                [v for v in versions if v.schema_version != latest.schema_version],
            )
        return document
    return _read_document(spark, location, version, owner, table)


def _read_document(spark: SparkSession, location: str, version: str, owner: str, table: str) -> dict:
    """The schema document ``version`` of ``owner.table`` in the changefeed at ``location``."""
    import json

    if re.fullmatch(r"[0-9a-f]{16}", version) is None:
        raise ValueError(f"not a schema version: {version!r} (16 hexadecimal digits)")
    if "://" in location and not location.startswith("file:"):
        row = spark.read.text(f"{location.rstrip('/')}/_olr_buffer/schemas/{version}.json", wholetext=True).first()
        assert row is not None  # wholetext: a row per file, even an empty one
        text = row[0]
    else:
        text = read_schema_document(location.removeprefix("file://"), version).decode()
    document = json.loads(text)
    if (document.get("owner"), document.get("table")) != (owner, table):
        raise ChangefeedReadError(
            f"{location}: schema version {version} is of {document.get('owner')}.{document.get('table')}, "
            f"not of {owner}.{table}",
            path=location,
            owner=owner,
            table=table,
        )
    return document


def _refuse_renames(
    spark: SparkSession, location: str, owner: str, table: str, latest: dict, version: str, others: list
) -> None:
    """Raise :class:`ChangefeedReadError` if an earlier version of the table's rows
    (``others``: rows of ``schema_version``, ``first_tx_seq``, ``last_tx_seq``) lacks a
    column of ``latest`` (version ``version``) and has one that ``latest`` lacks: a
    rename, or a drop and an add, which the documents cannot tell apart (they name
    columns; neither PostgreSQL's Relation message nor a redo or OpenLogReplicator schema
    gives a column a number that lasts), and read by ``latest`` its values would be null."""
    names = [c["name"] for c in latest["columns"]]
    for other in sorted(others, key=lambda v: v.first_tx_seq):
        theirs = [c["name"] for c in _read_document(spark, location, other.schema_version, owner, table)["columns"]]
        gone = [n for n in theirs if n not in names]
        new = [n for n in names if n not in theirs]
        if gone and new:
            a, b, last = other.schema_version, version, other.last_tx_seq
            raise ChangefeedReadError(
                f"{location}: {owner}.{table}: column {', '.join(gone)} of schema version {a} (rows of tx_seq "
                f"{other.first_tx_seq}..{last}) is not in version {b}, the table's last, which has "
                f"{', '.join(new)} instead: renamed, or dropped and added (the schema documents cannot tell); read "
                f"by {b}, those rows would have {', '.join(new)} null and {', '.join(gone)} gone",
                hint=f"read those rows by their own version (version='{a}', ending_tx_seq={last}) and the later "
                f"ones by {b} (version='{b}', starting_tx_seq={last + 1}); or give version='{b}' to read every row "
                'by it (docs/spark.md, "Renamed columns")',
                path=location,
                owner=owner,
                table=table,
                version=a,
                latest=b,
            )


def _document_fields(document: dict, types: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """``(name, DataType)`` of each column of a schema document; ``types`` overrides some."""
    from pyspark.sql.types import DataType

    overrides = dict(types or {})
    names = [c["name"] for c in document["columns"]]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ValueError(
            f"typed: types for column(s) {unknown} that {document['owner']}.{document['table']} "
            f"does not have (it has {names})"
        )
    fields = []
    for column in document["columns"]:
        given = overrides.get(column["name"], column["spark"])
        fields.append((column["name"], given if isinstance(given, DataType) else DataType.fromDDL(given)))
    return fields


def _struct_of(fields: list[tuple[str, Any]]) -> StructType:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(name, dtype) for name, dtype in fields])


def _typed_rows(df: DataFrame, fields: list[tuple[str, Any]], owner: str, table: str, key: bool = False) -> DataFrame:
    """``df`` (one table's rows) with ``before``/``after`` as structs of ``fields``, every
    value checked: a row with one that does not fit fails the query; ``key``: also
    ``_key``, the ``rid``'s columns when it is a JSON object (PostgreSQL)."""
    from pyspark.sql import functions as F

    # rand(): a projection Spark does not push the filter below, by inlining every step of
    # _misfit into its condition (code beyond the JVM's 64 KB a method, and each step again)
    checked = _checked_images(df, fields, key).withColumn("_misfit", F.when(F.rand(0) < 2, F.col("_misfit")))
    message = F.concat(
        F.lit(f"{owner}.{table}: tx_seq "),
        F.col("tx_seq").cast("string"),
        F.lit(", op_seq "),
        F.col("op_seq").cast("string"),
        F.lit(": "),
        F.col("_misfit"),
        F.lit(" (hint: typed(..., types={column: type}) reads a column as another type, 'string' as its text)"),
    )
    checked = checked.where(F.when(F.col("_misfit").isNotNull(), F.raise_error(message)).otherwise(F.lit(True)))
    images = {"before": "_v0", "after": "_v1", "_key": "_v2"}
    return checked.select(
        *[F.col(images[c]).alias(c) if c in images else F.col(c) for c in df.columns],
        *([F.col("_v2").alias("_key")] if key else []),
    )


def _checked_images(df: DataFrame, fields: list[tuple[str, Any]], key: bool = False) -> DataFrame:
    """``df`` with, per image j (0 ``before``, 1 ``after``, and with ``key`` 2 the ``rid``'s
    JSON), ``_v<j>``: the struct of its values by ``fields`` (null without the image); and
    ``_misfit``: what the first value that does not fit is (null if none).

    In steps that Spark keeps apart (so that the code it generates stays small), each
    holding a column or two per image: the image as a VARIANT map (``_m<j>``); the text of
    each value (``_t<j>``: a number's exact digits, an object's JSON) and whether a number
    kept its digits (``_x<j>``: not a double); the values; the first that does not fit."""
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.types import ByteType, DecimalType, IntegerType, LongType, ShortType, StringType

    texts = [F.col("before"), F.col("after")] + ([F.when(F.col("rid").startswith("{"), F.col("rid"))] if key else [])
    labels = ["before", "after", "rid"][: len(texts)]
    numbers = (DecimalType, ByteType, ShortType, IntegerType, LongType)
    images = range(len(texts))
    out = df.withColumns({f"_m{j}": F.parse_json(text).cast("map<string,variant>") for j, text in enumerate(texts)})
    steps: dict[str, Column] = {}
    for j in images:
        items = [F.col(f"_m{j}").getItem(name) for name, _ in fields]
        steps[f"_t{j}"] = F.array(*[F.try_variant_get(v, "$", "string") for v in items])
        steps[f"_x{j}"] = F.array(
            *[
                F.schema_of_variant(v) != "DOUBLE" if isinstance(dtype, numbers) else F.lit(True)
                for v, (_, dtype) in zip(items, fields)
            ]
        )
    out = out.withColumns(steps)
    # The values and their checks, in a higher-order function: Spark interprets its body
    # rather than generate code for it, which for a table of many columns would pass the
    # JVM's 64 KB a method (Spark then says so in an error and runs the query uncompiled)
    names = F.array(*[F.lit(json.dumps(name, ensure_ascii=False)) for name, _ in fields])
    types = F.array(*[F.lit(dtype.simpleString()) for _, dtype in fields])

    def typed_image(r: Column) -> Column:
        t, x = r.getField("t"), r.getField("x")
        values = F.struct(*[_typed_value(t[i], dtype)[0].alias(name) for i, (name, dtype) in enumerate(fields)])
        fits = [
            F.lit(True) if isinstance(dtype, StringType) else t[i].isNull() | _typed_value(t[i], dtype, x[i])[1]
            for i, (_, dtype) in enumerate(fields)
        ]
        return F.struct(values.alias("v"), F.array_position(F.array(*fits), False).cast("int").alias("f"))

    out = out.withColumns(
        {
            f"_r{j}": F.transform(
                F.array(F.struct(F.col(f"_t{j}").alias("t"), F.col(f"_x{j}").alias("x"))), typed_image
            )[0]
            for j in images
        }
    )
    out = out.withColumns({f"_v{j}": F.when(F.col(f"_m{j}").isNotNull(), F.col(f"_r{j}.v")) for j in images})
    misfits = []
    for j in images:
        first, t = F.col(f"_r{j}.f"), F.col(f"_t{j}")
        misfits.append(
            F.when(
                first > 0,
                F.concat(
                    F.lit(f"{labels[j]} column "),
                    F.element_at(names, first),
                    F.lit(" = '"),
                    F.substring(F.element_at(t, first), 1, 100),
                    F.lit("' does not fit "),
                    F.element_at(types, first),
                ),
            )
        )
    return out.withColumn("_misfit", F.coalesce(*misfits) if fields else F.lit(None).cast("string"))


def _typed_value(
    t: Column, dtype: Any, exact: Column | None = None, value: Column | None = None
) -> tuple[Column, Column]:
    """``(value, fits)`` of the text ``t`` read as ``dtype`` (see "typed images" above);
    ``exact``: whether a number kept its digits; ``value``: the value computed already."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        BooleanType,
        ByteType,
        DateType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        ShortType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    exact = F.lit(True) if exact is None else exact
    if isinstance(dtype, StringType):
        return t, F.lit(True)
    if isinstance(dtype, BooleanType):
        return t.try_cast(dtype), t.rlike(_BOOLEAN)
    if isinstance(dtype, (ByteType, ShortType, IntegerType, LongType)):
        computed = t.try_cast(dtype)
        return computed, t.rlike(_INTEGER) & (computed if value is None else value).isNotNull() & exact
    if isinstance(dtype, DecimalType):
        computed = t.try_cast(dtype)
        # plain digits: at most precision - scale before the point (leading zeros aside), at
        # most scale after it (trailing zeros aside)
        digits = (
            rf"^(?=[^.]*[0-9])[+-]?0*[0-9]{{0,{dtype.precision - dtype.scale}}}"
            rf"(\.[0-9]{{0,{dtype.scale}}}0*)?$"
        )
        return computed, t.rlike(digits) & (computed if value is None else value).isNotNull() & exact
    if isinstance(dtype, (FloatType, DoubleType)):
        double = t.try_cast("double")
        ok = t.rlike(_FLOAT) & double.isNotNull()
        if isinstance(dtype, DoubleType):
            return double, ok
        single = double.cast("float")
        infinite = float("inf")
        return single, ok & ((F.abs(single) == infinite) == (F.abs(double) == infinite))  # no overflow
    if isinstance(dtype, (DateType, TimestampType, TimestampNTZType)):
        pattern = (
            _DATE if isinstance(dtype, DateType) else _TIMESTAMP if isinstance(dtype, TimestampType) else _TIMESTAMP_NTZ
        )
        computed = t.try_cast(dtype)
        if isinstance(dtype, DateType):
            return computed, t.rlike(pattern) & (computed if value is None else value).isNotNull()
        # or an integer of nanoseconds since the epoch (OpenLogReplicator's default form), in
        # whole microseconds; a timestamp_ntz is the time of day it gives in UTC
        nanos = F.when(t.rlike(_NANOS), t.try_cast("long"))
        micros = F.when(nanos % 1000 == 0, (nanos.cast("decimal(20,0)") / 1000).cast("long"))
        epoch = (
            F.timestamp_micros(micros)
            if isinstance(dtype, TimestampType)
            else F.timestamp_add("MICROSECOND", micros, F.lit("1970-01-01 00:00:00").cast("timestamp_ntz"))
        )
        computed = F.when(t.rlike(_NANOS), epoch).otherwise(computed)
        return computed, (t.rlike(pattern) | t.rlike(_NANOS)) & (computed if value is None else value).isNotNull()
    if isinstance(dtype, BinaryType):
        return F.unhex(F.regexp_replace(t, r"^\\x", "")), t.rlike(_HEX)
    if isinstance(dtype, ArrayType):  # PostgreSQL's text form: {1,2,NULL}
        element = dtype.elementType
        parts = F.when(t == "{}", F.array().cast("array<string>")).otherwise(
            F.split(F.regexp_replace(t, r"^\{|\}$", ""), ",")
        )
        computed = F.transform(parts, lambda x: F.when(x != "NULL", _typed_value(x, element)[0]))
        ok = t.rlike(_ARRAY) & F.forall(parts, lambda x: (x == "NULL") | _typed_value(x, element)[1])
        return computed, ok
    raise ValueError(f"typed: cannot read a value as {dtype.simpleString()}")


# -- helpers -------------------------------------------------------------------------------


def _selected_rows(
    spark: SparkSession,
    path,
    owner: str,
    table: str,
    missing_ok: bool,
    starting_tx_seq: int | None,
    ending_tx_seq: int | None,
    refuse_truncates: bool,
) -> DataFrame:
    """The table's rows, within the ``tx_seq`` range asked for; a truncate among them fails
    the query when ``refuse_truncates``."""
    from pyspark.sql import functions as F

    df = _table_rows(spark, path, owner, table, missing_ok=missing_ok)
    if starting_tx_seq is not None:
        df = df.where(F.col("tx_seq") >= starting_tx_seq)
    if ending_tx_seq is not None:
        df = df.where(F.col("tx_seq") <= ending_tx_seq)
    if refuse_truncates:
        df = _refuse_truncates(df, path, owner, table)
    return df


def _refuse_truncates(df: DataFrame, path: Source, owner: str, table: str) -> DataFrame:
    """``df`` (one table's rows), refused if it holds a truncate: at once for a batch
    source, when the query reads it for a streaming one."""
    from pyspark.sql import functions as F

    what = f"{owner}.{table} was truncated"
    why = (
        "Delta's change data feed has no change type for a truncate, and a MERGE of the other changes "
        "would keep the rows it removed"
    )
    hint = (
        "truncates='include' gives each truncate as a row with _change_type 'truncate' (drop what the "
        "target holds of the table from before it: docs/spark.md); snapshot() gives the table's state"
    )
    is_truncate = F.col("op") == "t"
    if df.isStreaming:
        message = F.concat(
            F.lit(f"{what} at tx_seq "), F.col("tx_seq").cast("string"), F.lit(f": {why} (hint: {hint})")
        )
        return df.where(F.when(is_truncate, F.raise_error(message)).otherwise(F.lit(True)))
    found = (
        df.where(is_truncate)
        .agg(F.count(F.lit(1)).alias("n"), F.min(F.struct("tx_seq", "op_seq")).alias("first"))
        .first()
    )
    assert found is not None  # an aggregate without groups has one row
    if found.n:
        where = f"{path}: " if isinstance(path, str) else ""
        times = f" {found.n} times, first" if found.n > 1 else ""
        raise ChangefeedReadError(
            f"{where}{what}{times} at tx_seq {found.first.tx_seq} (op_seq {found.first.op_seq}): {why}",
            hint=hint,
            path=path if isinstance(path, str) else None,
            owner=owner,
            table=table,
            tx_seq=found.first.tx_seq,
        )
    return df


def _after_last_truncate(rows: DataFrame) -> DataFrame:
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


def _source(spark: SparkSession, path: Source) -> DataFrame:
    return read_changefeed(spark, path) if isinstance(path, str) else with_timestamps(path)


def _table_rows(spark: SparkSession, path: Source, owner: str, table: str, *, missing_ok: bool = True) -> DataFrame:
    from pyspark.sql import functions as F

    rows = _source(spark, path).where((F.col("owner") == owner) & (F.col("table") == table))
    if isinstance(path, str) and not missing_ok and not rows.limit(1).count():
        _unknown_table(_source(spark, path), path, owner, table)
    return rows


def _unknown_table(df: DataFrame, path: str, owner: str, table: str) -> None:
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
        f"{path}: no row of {wanted} in the changefeed",
        hint=hint + "; missing_ok=True returns no rows instead",
        path=path,
        owner=owner,
        table=table,
    )


def _struct_type(spark: SparkSession, schema: StructType | str) -> StructType:
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        parsed = StructType.fromDDL(schema) if hasattr(StructType, "fromDDL") else None
        if parsed is None:  # pragma: no cover - PySpark < 4
            parsed = spark.createDataFrame([], schema).schema
        if not isinstance(parsed, StructType):
            raise TypeError(f"schema must be a DDL string of columns, not {schema!r}")
        return parsed
    raise TypeError(f"schema must be a StructType or a DDL string, not {type(schema).__name__}")


_CREATE_TABLE = re.compile(r"^\s*CREATE\s+(?:GLOBAL\s+TEMPORARY\s+)?TABLE\s+[^(]+\((.*)\)", re.I | re.S)
_ALTER_ADD = re.compile(r"^\s*ALTER\s+TABLE\s+\S+\s+ADD\s*\((.*)\)", re.I | re.S)
_NOT_A_COLUMN = {"CONSTRAINT", "PRIMARY", "UNIQUE", "FOREIGN", "CHECK", "SUPPLEMENTAL", "PERIOD"}
_NUMBER = re.compile(r"^NUMBER\s*(?:\(\s*(\d+|\*)\s*(?:,\s*(-?\d+)\s*)?\))?", re.I)


@needs_pyspark
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
    parts: list[str] = []
    current: list[str] = []
    depth = 0
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
    if name.startswith(
        (
            "VARCHAR",
            "NVARCHAR",
            "CHAR",
            "NCHAR",
            "CLOB",
            "NCLOB",
            "LONG",
            "ROWID",
            "UROWID",
            "RAW",
            "DATE",
            "TIMESTAMP",
            "INTERVAL",
        )
    ):
        return StringType()  # dates and times: their text form, whose format the capture chooses
    return None


def _all_not_null(cols: list[Column]) -> Column:
    from functools import reduce

    return reduce(lambda x, y: x & y, [c.isNotNull() for c in cols])


def _all_equal(left: list[Column], right: list[Column]) -> Column:
    from functools import reduce

    return reduce(lambda x, y: x & y, [a.eqNullSafe(b) for a, b in zip(left, right)])
