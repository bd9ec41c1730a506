"""Mirror tables on a Spark cluster (docs/mirror.md, "On a Spark cluster"): the rules of
``olr-buffer mirror`` (:class:`olr_buffer.mirror.TableRules`, the same code) decide what a
micro-batch of whole transactions does to each table, and delta-spark's ``MERGE`` applies
it.

- :func:`mirror_batch_changes`: one table's final state per key after a batch: a row per
  key the batch touched, its column ``_change`` ``upsert`` (the row as it is now) or
  ``delete`` (the key is gone); when the table is written again whole (a truncate, a new
  table, a table without a key, a column whose type changed) a first row ``truncate``
  (every other column null: the rows the table held are gone) and then every row of the
  table as ``upsert``.
- :func:`mirror_foreach_batch`: the function for ``writeStream.foreachBatch``: per table of
  the micro-batch, :func:`mirror_batch_changes` over the table's current rows, then one
  Delta commit (``MERGE``, or an overwrite for a ``truncate``) that carries Delta's
  idempotent-write ``txnAppId``/``txnVersion``: the table's application id and the last
  ``tx_seq`` applied, as the service's commits carry them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..mirror import Change, TableRules, app_id, arrow_rows
from ..sinks.parquet import Location, read_manifest, read_schema_document
from .reading import needs_pyspark

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

#: The column of :func:`mirror_batch_changes` that says what a row does, and its values.
CHANGE = "_change"
UPSERT, DELETE, TRUNCATE = "upsert", "delete", "truncate"

_COLUMNS = ["tx_seq", "op_seq", "c_scn", "op", "before", "after", "schema_version"]
_EXTRA = [("tx_seq", pa.int64()), ("c_scn", pa.int64())]


class DeltaSparkMissingError(ModuleNotFoundError):
    """:func:`mirror_foreach_batch` was called without delta-spark (its Python package, or
    its jars in the session)."""


def _documents(changefeed: str) -> Callable[[str], dict]:
    import orjson

    location, kept = Location(changefeed), {}

    def document(version: str) -> dict:
        if version not in kept:
            kept[version] = orjson.loads(read_schema_document(location, version))
        return kept[version]

    return document


def _split(table: str) -> tuple[str, str]:
    owner, dot, name = table.partition(".")
    if not dot or not owner or not name:
        raise ValueError(f"table {table!r}: expected OWNER.TABLE")
    return owner, name


def _decide(
    df: DataFrame,
    owner: str,
    name: str,
    key: list[str] | None,
    current: DataFrame | None,
    document: Callable[[str], dict],
) -> tuple[DataFrame | None, int, list[str]]:
    """The rows of :func:`mirror_batch_changes`, the last ``tx_seq`` they apply and the
    table's key columns (None, -1, []: the batch has nothing for the table)."""
    from pyspark.sql import functions as F

    spark = df.sparkSession
    rows = (
        df.filter((F.col("owner") == owner) & (F.col("table") == name))
        .select(*_COLUMNS)
        .orderBy("tx_seq", "op_seq")
        .toArrow()
        .to_pylist()
    )
    changes = [
        Change(r["tx_seq"], r["op_seq"], r["c_scn"], r["op"], r["before"], r["after"], r["schema_version"])
        for r in rows
    ]
    if not any(c.op != "ddl" or c.version is not None for c in changes):
        return None, -1, []
    schema = None
    if current is not None:
        arrow = current.limit(0).toArrow().schema
        schema = [(f.name, f.type) for f in arrow if f.name not in ("tx_seq", "c_scn")]
    rules = TableRules(owner, name, schema, key, document)

    def fetch(key_columns: list[str], keys: set) -> dict:
        if current is None or not keys:
            return {}
        types = dict(schema or [])
        wanted = pa.Table.from_arrays(
            [pa.array([k[i] for k in keys], type=types[c]) for i, c in enumerate(key_columns)], names=key_columns
        )
        found = current.join(_frame(spark, wanted), key_columns, "left_semi").toArrow().to_pylist()
        return {tuple(r[c] for c in key_columns): (r, r.pop("tx_seq"), r.pop("c_scn")) for r in found}

    def load() -> list[tuple[dict, int, int]]:
        if current is None:
            return []
        return [(r, r.pop("tx_seq"), r.pop("c_scn")) for r in current.toArrow().to_pylist()]

    plan = rules.plan(changes, fetch, load)
    columns = plan.columns + _EXTRA + [(CHANGE, pa.string())]
    if isinstance(plan.rows, list):  # a rewrite
        out = [{CHANGE: TRUNCATE, "tx_seq": plan.last_tx_seq}]
        out += [{**r, "tx_seq": t, "c_scn": s, CHANGE: UPSERT} for r, t, s in plan.rows]
    else:
        out = [
            {
                **(r if r is not None else dict(zip(plan.key, k))),
                "tx_seq": t,
                "c_scn": s,
                CHANGE: UPSERT if r is not None else DELETE,
            }
            for k, (r, t, s) in plan.rows.items()
        ]
    return _frame(spark, arrow_rows(columns, out, f"{owner}.{name}")), plan.last_tx_seq, plan.key


def _frame(spark: Any, table: pa.Table) -> DataFrame:
    """``table`` as a DataFrame of its types (an Arrow timestamp without a time zone is a
    ``timestamp_ntz``)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(table, schema=from_arrow_schema(table.schema, prefer_timestamp_ntz=True))


@needs_pyspark
def mirror_batch_changes(
    df: DataFrame,
    *,
    changefeed: str,
    table: str,
    key: Iterable[str] | None = None,
    current: DataFrame | None = None,
) -> DataFrame | None:
    """What the changefeed rows in ``df`` (a batch of whole transactions, as
    :func:`read_changefeed` or a micro-batch of :func:`stream_changefeed` gives them) do to
    the mirror table of ``table`` (``OWNER.TABLE``), by the rules of ``olr-buffer mirror``.

    ``current``: the table's rows before the batch (the source table's columns, ``tx_seq``,
    ``c_scn``), None for a table not made yet; the rows the batch's partial updates build
    on are looked up in it by key, and a rewrite (below) reads it whole. ``key``: the
    table's key columns when it has one already (default: the schema documents' key).
    ``changefeed``: where the schema documents the rows name are (the changefeed's path).

    Returns the table's columns (typed from the schema documents), ``tx_seq``, ``c_scn``
    and ``_change``: ``upsert`` (the key's row now) or ``delete`` (the key is gone); when
    the batch writes the table again whole (a truncate, a new table, a table without a
    key, a column whose type changed, a new key), a first row ``truncate`` (its
    ``tx_seq`` the batch's last; every other column null) says the table's rows are gone,
    and every row of the table follows as ``upsert``. None: the batch has no change to the
    table. A change the rules cannot apply raises :class:`olr_buffer.mirror.MirrorDataError`
    (one line, as the service says it).
    """
    owner, name = _split(table)
    out, _, _ = _decide(df, owner, name, list(key) if key is not None else None, current, _documents(changefeed))
    return out


def _delta_tables() -> Any:
    try:
        from delta.tables import DeltaTable
    except ImportError as exc:
        raise DeltaSparkMissingError(
            "olr_buffer.spark.mirror_foreach_batch needs delta-spark, which is not installed: pip install "
            "delta-spark (the version of your Spark: 3.x for Spark 3.5, 4.x for Spark 4), and its jars in the "
            "session (configure_spark_with_delta_pip, or --packages io.delta:delta-spark_2.13:VERSION)",
            name="delta",
        ) from exc
    return DeltaTable


@needs_pyspark
def mirror_foreach_batch(
    target: str, *, changefeed: str, tables: Iterable[str] | None = None, queue_id: str | None = None
) -> Callable[[DataFrame, int], None]:
    """The function to give ``writeStream.foreachBatch`` over
    ``stream_changefeed(spark, changefeed)``: each micro-batch's changes applied to the
    mirror tables under ``target`` (``TARGET/OWNER/TABLE``, Delta tables written with
    delta-spark), ``tables`` (``OWNER.TABLE``) only when given.

    Per table of the micro-batch: :func:`mirror_batch_changes` over the table's rows, then
    one Delta commit: a ``MERGE`` on the key (``delete`` rows delete, ``upsert`` rows update
    or insert; columns the batch adds added first with ``ALTER TABLE ... ADD COLUMNS``), or,
    after a ``truncate`` row, the table overwritten with the ``upsert`` rows. The commit
    carries Delta's idempotent-write ``txnAppId`` (the service's application id of the
    table: ``olr-buffer-mirror:QUEUE_ID:OWNER.TABLE``, ``queue_id`` read from the
    changefeed's manifest when not given) and ``txnVersion`` (the last ``tx_seq`` it
    applies): a micro-batch that Spark runs again after a failure is skipped by Delta.

    Needs delta-spark (its Python package and its jars in the session):
    :class:`DeltaSparkMissingError` says so in one line when they are missing.
    """
    _delta_tables()  # said at once, not at the first micro-batch
    wanted = None if tables is None else {_split(t) for t in tables}
    document = _documents(changefeed)
    base = target.rstrip("/")

    def apply(batch: DataFrame, batch_id: int) -> None:
        nonlocal queue_id
        DeltaTable = _delta_tables()
        spark = batch.sparkSession
        if queue_id is None:
            queue_id = (read_manifest(Location(changefeed)) or {}).get("queue_id") or "unknown"
        batch = batch.select("owner", "table", *_COLUMNS).persist()
        try:
            names = sorted((r["owner"], r["table"]) for r in batch.select("owner", "table").distinct().collect())
            for owner, name in names:
                if wanted is not None and (owner, name) not in wanted:
                    continue
                path = f"{base}/{owner}/{name}"
                try:
                    exists = DeltaTable.isDeltaTable(spark, path)
                except Exception as exc:  # the Python package without its jars: py4j finds no io.delta class
                    if not any(sign in str(exc) for sign in ("JavaPackage", "io.delta", "ClassNotFound")):
                        raise
                    raise DeltaSparkMissingError(
                        "olr_buffer.spark.mirror_foreach_batch needs delta-spark's jars in the Spark session: "
                        "configure_spark_with_delta_pip(builder), or --packages io.delta:delta-spark_2.13:VERSION, "
                        "with spark.sql.extensions io.delta.sql.DeltaSparkSessionExtension",
                        name="delta",
                    ) from None
                current = DeltaTable.forPath(spark, path).toDF() if exists else None
                out, last, key = _decide(batch, owner, name, None, current, document)
                if out is not None:
                    _commit(spark, DeltaTable, path, out, current, key, app_id(queue_id, owner, name), last)
        finally:
            batch.unpersist()

    return apply


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _commit(
    spark: Any,
    DeltaTable: Any,
    path: str,
    out: DataFrame,
    current: DataFrame | None,
    key: list[str],
    app: str,
    version: int,
) -> None:
    """``out`` applied to the Delta table at ``path`` in one commit with ``txn(app, version)``
    (delta-spark; not run by the tests, which have no Delta jars)."""
    from pyspark.sql import functions as F

    rows = out.filter(F.col(CHANGE) != TRUNCATE)
    if current is None or out.filter(F.col(CHANGE) == TRUNCATE).limit(1).count():
        (
            rows.drop(CHANGE)
            .write.format("delta")
            .mode("overwrite")
            .option("overwriteSchema", "true")
            .option("txnAppId", app)
            .option("txnVersion", str(version))
            .save(path)
        )
        return
    have = set(current.columns)
    added = [f for f in out.schema.fields if f.name != CHANGE and f.name not in have]
    if added:  # a column a new schema version adds (null in the rows no change wrote since)
        spark.sql(
            f"ALTER TABLE delta.{_quote(path)} ADD COLUMNS "
            f"({', '.join(f'{_quote(f.name)} {f.dataType.simpleString()}' for f in added)})"
        )
    setting = {_quote(c): f"s.{_quote(c)}" for c in out.columns if c != CHANGE}
    spark.conf.set("spark.databricks.delta.write.txnAppId", app)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
    try:
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(rows.alias("s"), " AND ".join(f"t.{_quote(k)} = s.{_quote(k)}" for k in key))
            .whenMatchedDelete(f"s.{CHANGE} = '{DELETE}'")
            .whenMatchedUpdate(f"s.{CHANGE} = '{UPSERT}'", setting)
            .whenNotMatchedInsert(f"s.{CHANGE} = '{UPSERT}'", setting)
            .execute()
        )
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
