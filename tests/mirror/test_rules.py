"""The mirror's rules on small hand-made redo inputs: a column whose type changes, values
that do not fit their type, a table without a key whose changes lack the whole row, a
delete without its key: each refused in one line naming the table and what to do."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from olr_buffer.mirror import MirrorDataError, MirrorOptions, mirror
from olr_buffer.runtime import replay


def _redo(tmp: Path, transactions: list[list[dict]]) -> Path:
    lines, scn = [], 100
    for n, tx in enumerate(transactions):
        xid = f"x{n}"
        scn += 1
        lines.append({"op": "begin", "scn": scn, "xid": xid})
        for rec in tx:
            scn += 1
            lines.append({"scn": scn, "xid": xid, "owner": "O", "rid": f"R{scn}", **rec})
        scn += 1
        lines.append({"op": "commit", "scn": scn, "xid": xid, "tm": scn * 10**9})
    inp = tmp / "in"
    inp.mkdir()
    (inp / "redo_1_1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    replay(str(inp), str(tmp / "q"), str(tmp / "cf"))
    return tmp / "cf"


def _ddl(table: str, columns: list[tuple[str, str, bool]]) -> dict:
    return {
        "op": "ddl",
        "table": table,
        "sql": "--",
        "columns": [{"name": n, "type": t, "key": k} for n, t, k in columns],
    }


def _rows(target: Path, table: str) -> list[dict]:
    return sorted(DeltaTable(str(target / "O" / table)).to_pyarrow_table().to_pylist(), key=lambda r: str(r["ID"]))


@pytest.mark.parametrize("batch_rows", [1, 1000])
def test_a_column_whose_type_changes_takes_the_new_type(tmp_path, batch_rows):
    cf = _redo(
        tmp_path,
        [
            [
                _ddl("T", [("ID", "NUMBER(5)", True), ("A", "NUMBER(5)", False), ("B", "DATE", False)]),
                {"op": "insert", "table": "T", "after": {"ID": 1, "A": 5, "B": "2024-01-02 03:04:05"}},
                {"op": "insert", "table": "T", "after": {"ID": 2, "A": 6, "B": None}},
            ],
            [
                _ddl("T", [("ID", "NUMBER(5)", True), ("A", "NUMBER(12,2)", False), ("B", "VARCHAR2(30)", False)]),
                {"op": "update", "table": "T", "before": {"ID": 2}, "after": {"A": "6.25"}},
            ],
        ],
    )
    target = tmp_path / "m"
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, batch_rows=batch_rows))
    schema = pa.schema(DeltaTable(str(target / "O" / "T")).schema().to_arrow())
    assert schema.field("A").type == pa.decimal128(12, 2) and schema.field("B").type == pa.string()
    rows = _rows(target, "T")
    assert [(r["ID"], r["A"], r["B"], r["tx_seq"]) for r in rows] == [
        (decimal.Decimal(1), decimal.Decimal("5.00"), "2024-01-02 03:04:05.000000", 0),  # cast to the new type
        (decimal.Decimal(2), decimal.Decimal("6.25"), None, 1),
    ]


def test_a_value_that_does_not_fit_stops_the_mirror_in_one_line(tmp_path):
    cf = _redo(
        tmp_path,
        [
            [
                _ddl("T", [("ID", "NUMBER(5)", True), ("A", "NUMBER(5,2)", False)]),
                {"op": "insert", "table": "T", "after": {"ID": 1, "A": "1.234"}},
            ],
        ],
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "mirror",
            str(cf),
            "--target",
            str(tmp_path / "m"),
            "--until-caught-up",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "olr-buffer: error: O.T: tx_seq 0, op_seq 1: after column \"A\" = '1.234' does not fit "
        "decimal128(5, 2) (more digits after the point than the scale) (hint: the schema document "
        "states the column's type: the source sent a value of another)"
    ], done.stderr


def test_a_table_without_a_key_needs_whole_rows(tmp_path):
    cf = _redo(
        tmp_path,
        [
            [
                _ddl("K", [("A", "NUMBER(5)", False), ("B", "VARCHAR2(5)", False)]),
                {"op": "insert", "table": "K", "after": {"A": 1, "B": "x"}},
            ],
            [{"op": "update", "table": "K", "before": {"A": 1}, "after": {"A": 2}}],
        ],
    )
    with pytest.raises(
        MirrorDataError,
        match=r"O\.K: has no key, and its 'u' change at tx_seq 1, op_seq 0 does not "
        r"carry the whole row in before",
    ) as err:
        mirror(MirrorOptions(str(cf), str(tmp_path / "m"), until_caught_up=True))
    assert "REPLICA IDENTITY FULL" in err.value.hint


def test_a_delete_without_its_key_is_named(tmp_path):
    cf = _redo(
        tmp_path,
        [
            [
                _ddl("T", [("ID", "NUMBER(5)", True), ("A", "NUMBER(5)", False)]),
                {"op": "insert", "table": "T", "after": {"ID": 1, "A": 1}},
            ],
            [{"op": "delete", "table": "T", "before": {"A": 1}}],
        ],
    )
    with pytest.raises(
        MirrorDataError,
        match=r"O\.T: tx_seq 1, op_seq 0: a 'd' change without its key column\(s\) "
        r"ID in before",
    ):
        mirror(MirrorOptions(str(cf), str(tmp_path / "m"), until_caught_up=True))


def test_types_of_the_redo_columns(tmp_path):
    cf = _redo(
        tmp_path,
        [
            [
                _ddl(
                    "T",
                    [
                        ("ID", "NUMBER(5)", True),
                        ("TS", "TIMESTAMP WITH TIME ZONE", False),
                        ("R", "RAW(4)", False),
                        ("F", "BINARY_FLOAT", False),
                        ("N", "NUMBER", False),
                        ("D", "DATE", False),
                    ],
                ),
                {
                    "op": "insert",
                    "table": "T",
                    "after": {
                        "ID": 1,
                        "TS": "2024-06-01 10:00:00.5+02:00",
                        "R": "00ff",
                        "F": 1.5,
                        "N": "12345678901234567890.0123456789",
                        "D": 1717236000000000000,
                    },
                },
            ],
        ],
    )
    target = tmp_path / "m"
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True))
    (row,) = _rows(target, "T")
    assert row["TS"] == dt.datetime(2024, 6, 1, 8, 0, 0, 500000, tzinfo=dt.UTC)
    assert row["R"] == b"\x00\xff" and row["F"] == 1.5
    assert row["N"] == decimal.Decimal("12345678901234567890.0123456789")
    assert row["D"] == dt.datetime(2024, 6, 1, 10, 0)


def test_a_truncate_ends_every_row_and_every_open_version(tmp_path):
    """Batch by batch through the rules and the tables themselves (PostgreSQL's truncate is
    not in the redo input): the truncate rewrites the mirror table, and closes the history's
    open versions in its MERGE."""
    from olr_buffer.mirror import Change, TableRules
    from olr_buffer.mirror.history import HistoryTable
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
    t = MirrorTable(str(tmp_path), "p", "t", "app")
    h = HistoryTable(str(tmp_path), "p", "t", "app")
    t.open(), h.open()
    rules = TableRules("p", "t", None, None, lambda version: doc)

    def apply(changes):
        plan = rules.plan(changes, t.fetch, t.load)
        h.commit_history(plan, t)
        t.commit(plan)

    def change(tx, op, before=None, after=None):
        return Change(
            tx,
            0,
            100 + tx,
            op,
            before and json.dumps(before),
            after and json.dumps(after),
            "v1",
            (1_700_000_000 + tx) * 10**9,
        )

    apply([change(0, "c", after={"id": 1, "v": "a"}), change(1, "c", after={"id": 2, "v": "b"})])
    apply(
        [
            change(2, "u", before={"id": 1}, after={"id": 1, "v": "A"}),
            change(3, "t"),
            change(4, "c", after={"id": 3, "v": "c"}),
        ]
    )
    assert [(r["id"], r["v"], r["tx_seq"]) for r in t.load() for r in [r[0] | {"tx_seq": r[1]}]] == [(3, "c", 4)]
    history = sorted((v["id"], v["v"], v["valid_from_tx_seq"], v["valid_to_tx_seq"]) for v in h.load_all())
    assert history == [(1, "A", 2, 3), (1, "a", 0, 2), (2, "b", 1, 3), (3, "c", 4, None)]
    assert "MERGE" in [c["operation"] for c in h.dt.history()]
    to = {v["id"]: v["valid_to"] for v in h.load_all()}
    assert to[2] == dt.datetime.fromtimestamp(1_700_000_003, dt.UTC)
    assert t.version == h.version == 4


@pytest.mark.parametrize(
    "text, zoned, expected",
    [
        ("2024-06-01 10:00:00+02", True, dt.datetime(2024, 6, 1, 8, tzinfo=dt.UTC)),
        ("2024-06-01T10:00:00.123456789000Z"[:-4] + "Z", True, None),  # nanoseconds that are not zeros: no
        ("2024-06-01 10:00:00.123456000Z", True, dt.datetime(2024, 6, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)),
        ("2024-06-01 10:00:00 Europe/Warsaw", True, dt.datetime(2024, 6, 1, 8, tzinfo=dt.UTC)),
        ("2024-06-01 10:00:00", True, None),  # no zone
        ("2024-06-01 10:00:00+02", False, None),  # a zone where none belongs
        ("2024-06-01", False, dt.datetime(2024, 6, 1)),
        ("1717236000000000000", False, dt.datetime(2024, 6, 1, 10)),
        ("1717236000000000001", False, None),
    ],
)
def test_timestamp_forms_are_typed_s(text, zoned, expected):
    """The forms of olr_buffer.value_forms, which spark.typed checks too."""
    from olr_buffer.mirror.types import Misfit, value

    t = pa.timestamp("us", tz="UTC") if zoned else pa.timestamp("us")
    if expected is None:
        with pytest.raises(Misfit):
            value(text, t)
    else:
        assert value(text, t) == expected


@pytest.mark.parametrize(
    "v, t, expected",
    [
        ("{1,NULL,3}", pa.list_(pa.int32()), [1, None, 3]),
        ("{}", pa.list_(pa.int32()), []),
        ('{"a b",c}', pa.list_(pa.int32()), None),
        ("\\x00ff", pa.binary(), b"\x00\xff"),
        ("0f0", pa.binary(), None),
        ("t", pa.bool_(), True),
        ("NaN", pa.float64(), "nan"),
        ("1e3", pa.float32(), 1000.0),
        ("12a", pa.int64(), None),
        (2**63, pa.int64(), None),
        ({"b": [1, decimal.Decimal("2.50")], "a": None}, pa.string(), '{"a":null,"b":[1,2.50]}'),
    ],
)
def test_value_forms(v, t, expected):
    from olr_buffer.mirror.types import Misfit, value

    if expected is None:
        with pytest.raises(Misfit):
            value(v, t)
    elif expected == "nan":
        assert value(v, t) != value(v, t)
    else:
        assert value(v, t) == expected
