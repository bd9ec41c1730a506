"""The Spark side of the mirror (docs/mirror.md, "On a Spark cluster"): what
``mirror_batch_changes`` decides, batch after batch on a local Spark, applied by a plain
applier of its ``upsert``/``delete``/``truncate`` rows (the stand-in for delta-spark's
``MERGE``, whose jars are not here), equals what ``olr-buffer mirror`` writes, however the
changefeed is cut into batches of whole transactions. The service's own tests are the
reference for the rules (tests/mirror)."""

from __future__ import annotations

import itertools
import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql.pandas.types import from_arrow_schema

from olr_buffer.mirror import MirrorOptions, mirror
from olr_buffer.spark import (
    DeltaSparkMissingError,
    mirror_batch_changes,
    mirror_foreach_batch,
    read_changefeed,
)

from ..mirror.test_mirror import TABLES, make_changefeed

pytestmark = pytest.mark.spark

KEYS = {"ORDERS": ["ORDER_ID"], "ITEMS": ["ORDER_ID", "LINE_NO"], "LOG": []}
TRANSACTIONS = 120  # ORDERS gains NOTE at tx 40, ITEMS loses SKU at tx 60


class Applier:
    """One table's rows, changed by ``mirror_batch_changes``'s rows as the MERGE would."""

    def __init__(self, key: list[str]) -> None:
        self.key = key
        self.schema: pa.Schema | None = None
        self.rows: list[dict] = []

    def current(self, spark):
        if self.schema is None:
            return None
        table = pa.Table.from_pylist(self.rows, schema=self.schema)
        return spark.createDataFrame(table, schema=from_arrow_schema(self.schema, prefer_timestamp_ntz=True))

    def apply(self, out: pa.Table) -> None:
        self.schema = pa.schema([f for f in out.schema if f.name != "_change"])
        rows = out.to_pylist()
        names = self.schema.names
        self.rows = [{n: r.get(n) for n in names} for r in self.rows]  # a column added: null
        for row in rows:
            change = row.pop("_change")
            if change == "truncate":
                self.rows = []
                continue
            k = tuple(row[c] for c in self.key)
            if self.key:
                self.rows = [r for r in self.rows if tuple(r[c] for c in self.key) != k]
            if change == "upsert":
                self.rows.append(row)
            else:
                assert change == "delete" and self.key, row


def _sorted(rows: list[dict]) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in rows)


@pytest.mark.parametrize("cuts", [[], [39, 40, 59, 89], [0, 7, 60, 61, 100]], ids=["one", "at-ddl", "others"])
def test_batches_decided_in_spark_end_as_the_service_mirror(spark, tmp_path, cuts):
    cf = make_changefeed(tmp_path, seed=11, transactions=TRANSACTIONS)
    target = tmp_path / "mirror"
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True))
    feed = read_changefeed(spark, str(cf)).cache()
    appliers = {t: Applier(KEYS[t]) for t in TABLES}
    bounds = [-1, *cuts, TRANSACTIONS - 1]
    for lo, hi in itertools.pairwise(bounds):
        batch = feed.filter((feed.tx_seq > lo) & (feed.tx_seq <= hi))
        for table, applier in appliers.items():
            out = mirror_batch_changes(batch, changefeed=str(cf), table=f"SHOP.{table}", current=applier.current(spark))
            if out is not None:
                applier.apply(out.toArrow())
    feed.unpersist()
    for table, applier in appliers.items():
        service = DeltaTable(str(target / "SHOP" / table))
        assert applier.schema.names == service.schema().to_arrow().names, table
        assert _sorted(applier.rows) == _sorted(service.to_pyarrow_table().to_pylist()), table
        assert applier.rows, table


def test_a_batch_names_upserts_deletes_and_the_rewrite_of_a_table_without_a_key(spark, tmp_path):
    cf = make_changefeed(tmp_path, seed=12, transactions=30)
    feed = read_changefeed(spark, str(cf))
    first = feed.filter(feed.tx_seq <= 10)  # ORDERS gains NOTE at tx 10
    log = mirror_batch_changes(first, changefeed=str(cf), table="SHOP.LOG").toArrow().to_pylist()
    assert log[0]["_change"] == "truncate" and {r["_change"] for r in log[1:]} <= {"upsert"}
    orders = Applier(KEYS["ORDERS"])
    orders.apply(mirror_batch_changes(first, changefeed=str(cf), table="SHOP.ORDERS").toArrow())
    later = (
        mirror_batch_changes(
            feed.filter(feed.tx_seq > 10), changefeed=str(cf), table="SHOP.ORDERS", current=orders.current(spark)
        )
        .toArrow()
        .to_pylist()
    )
    assert {r["_change"] for r in later} == {"upsert", "delete"}  # merged by key, no rewrite
    assert mirror_batch_changes(feed.filter(feed.tx_seq > 100), changefeed=str(cf), table="SHOP.ORDERS") is None


def test_the_foreach_batch_function_names_delta_spark_when_it_is_missing(spark, tmp_path):
    # delta-spark is not installed here: the one line a user gets
    with pytest.raises(DeltaSparkMissingError) as exc:
        mirror_foreach_batch(str(tmp_path / "mirror"), changefeed=str(tmp_path / "cf"))
    message = str(exc.value)
    assert "\n" not in message and "delta-spark" in message and "pip install delta-spark" in message


def test_a_truncate_in_a_batch_writes_the_table_again_as_the_service_does(spark, tmp_path):
    """PostgreSQL's truncate (not in the redo input): rows and changes made by hand, the
    service's rules and table (``deltalake``) beside the Spark decision, batch by batch."""
    from olr_buffer.mirror import Change, TableRules
    from olr_buffer.mirror.table import MirrorTable

    doc = {
        "format": 1,
        "source": "postgresql",
        "owner": "p",
        "table": "t",
        "key": ["id"],
        "columns": [
            {"name": "id", "type": "integer", "nullable": False, "spark": "int"},
            {"name": "v", "type": "text", "nullable": True, "spark": "string"},
        ],
    }
    cf = tmp_path / "cf"
    (cf / "_olr_buffer" / "schemas").mkdir(parents=True)
    (cf / "_olr_buffer" / "schemas" / "v1.json").write_text(json.dumps(doc))
    service = MirrorTable(str(tmp_path / "svc"), "p", "t", "app")
    service.open()
    rules = TableRules("p", "t", None, None, lambda version: doc)
    applier = Applier(["id"])

    def change(tx, op, before=None, after=None):
        return Change(tx, 0, 100 + tx, op, before and json.dumps(before), after and json.dumps(after), "v1")

    batches = [
        [change(0, "c", after={"id": 1, "v": "a"}), change(1, "c", after={"id": 2, "v": "b"})],
        [
            change(2, "u", before={"id": 1}, after={"v": "A"}),
            change(3, "t"),
            change(4, "c", after={"id": 3, "v": "c"}),
            change(5, "u", before={"id": 3}, after={"v": "C"}),
        ],
        [change(6, "u", before={"id": 3}, after={"v": "D"}), change(7, "c", after={"id": 4, "v": "d"})],
    ]
    changes = []
    for batch in batches:
        service.commit(rules.plan(batch, service.fetch, service.load))
        df = spark.createDataFrame(
            [("p", "t", c.tx_seq, c.op_seq, c.c_scn, c.op, c.before, c.after, c.version) for c in batch],
            "owner string, table string, tx_seq long, op_seq long, c_scn long, op string, before string, "
            "after string, schema_version string",
        )
        out = mirror_batch_changes(df, changefeed=str(cf), table="p.t", current=applier.current(spark)).toArrow()
        changes.append(out.column("_change").to_pylist())
        applier.apply(out)
        assert _sorted(applier.rows) == _sorted(DeltaTable(service.uri).to_pyarrow_table().to_pylist())
    assert changes == [["truncate", "upsert", "upsert"], ["truncate", "upsert"], ["upsert", "upsert"]]
    assert applier.rows == [
        {"id": 3, "v": "D", "tx_seq": 6, "c_scn": 106},
        {"id": 4, "v": "d", "tx_seq": 7, "c_scn": 107},
    ]
