"""Helpers of the Spark and compaction tests.

The workload: a simulated RAC run plus one more log sequence written by hand with what the
simulator never does (a row id used again after a delete, an update that changes the
primary key) and more compensations, replayed into a changefeed of many small files. The
reference state of a table is computed in plain Python from the contract model's rows."""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from olr_buffer.changes import DDL, DELETE, INSERT, UPDATE, Commit, CommitKey
from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.sinks.parquet import ChangefeedWriter
from tests.contract_model import ModelResult, expected_changefeed

OWNER, TABLE = "SALES", "ORDERS"
ORDERS_DDL = (
    "ORDER_ID BIGINT, CUSTOMER STRING, CITY STRING, STATUS STRING, TOTAL DOUBLE, CREATED TIMESTAMP_NTZ, NOTE STRING"
)
ORDERS_JSON_OPTIONS = {"timestampNTZFormat": "yyyy-MM-dd HH:mm:ss"}
FILE_ROWS = 100


@dataclass
class Workload:
    root: Path
    input: Path
    queue: Path
    changefeed: Path
    expected: ModelResult

    def copy(self, dest: Path) -> Workload:
        """Input, queue and changefeed copied under ``dest`` (for tests that change them)."""
        shutil.copytree(self.queue, dest / "q")
        shutil.copytree(self.changefeed, dest / "cf")
        return Workload(dest, self.input, dest / "q", dest / "cf", self.expected)


# -- the hand-written sequence ------------------------------------------------------------


def _write_extra_sequence(input_dir: Path, last_scn: int) -> None:
    """Append ``redo_1_<next>.jsonl``: four transactions on SALES.ORDERS after the rest."""
    rows = expected_changefeed(input_dir).rows
    state = reference_snapshot(rows, OWNER, TABLE)
    deleted = sorted({r["rid"] for r in rows if r["table"] == TABLE and r["op"] == "d"})
    live = sorted(state)
    r1, r2, r3 = live[0], live[1], live[2]
    x = deleted[0]  # deleted earlier: its row id comes back
    r4 = "AAAR9/AAHAAAZZZAAA"  # a new row id
    seq = 1 + max(int(p.name.split("_")[2].split(".")[0]) for p in input_dir.glob("redo_1_*"))
    scn = last_scn + 10
    lines: list[dict[str, Any]] = []

    def rec(op: str, xid: str, **fields: Any) -> None:
        nonlocal scn
        scn += 1
        lines.append({"op": op, "scn": scn, "xid": xid, "tm": 1_800_000_000_000_000_000 + scn, **fields})

    def row(order_id: int, status: str) -> dict[str, Any]:
        return {
            "ORDER_ID": order_id,
            "CUSTOMER": "Zoë Ødegaard",
            "CITY": "Kraków",
            "STATUS": status,
            "TOTAL": 12.5,
            "CREATED": "2024-06-01 10:20:30",
            "NOTE": None,
        }

    def dml(op: str, xid: str, rid: str, before=None, after=None, rollback=False) -> None:
        fields: dict[str, Any] = {"owner": OWNER, "table": TABLE, "obj": 73215, "rid": rid}
        if before is not None:
            fields["before"] = before
        if after is not None:
            fields["after"] = after
        if rollback:
            fields["rollback"] = True
        rec(op, xid, **fields)

    # T1: delete r1, insert into the same row id in the same transaction, then update it
    t = "0x00ee.001.00000001"
    rec("begin", t)
    dml("delete", t, r1, before=state[r1])
    dml("insert", t, r1, after=row(900001, "NEW"))
    dml("update", t, r1, before=row(900001, "NEW"), after=row(900001, "PAID"))
    rec("commit", t)
    # T2: insert into a row id deleted long ago; move r2 to another ORDER_ID; two updates
    # of r3, the second one rolled back to a savepoint
    t = "0x00ee.002.00000001"
    rec("begin", t)
    dml("insert", t, x, after=row(900002, "NEW"))
    moved = dict(state[r2], ORDER_ID=900003)
    dml("update", t, r2, before=state[r2], after=moved)
    s1 = dict(state[r3], STATUS="SHIPPED")
    s2 = dict(state[r3], STATUS="CANCELLED")
    dml("update", t, r3, before=state[r3], after=s1)
    dml("update", t, r3, before=s1, after=s2)
    dml("update", t, r3, before=s2, after=s1, rollback=True)
    rec("commit", t)
    # T3: an insert undone by its compensation; delete the moved row
    t = "0x00ee.003.00000001"
    rec("begin", t)
    dml("insert", t, r4, after=row(900004, "NEW"))
    dml("delete", t, r4, before=row(900004, "NEW"), rollback=True)
    dml("delete", t, r2, before=moved)
    rec("commit", t)
    # T4: the reused row id once more: delete and insert again
    t = "0x00ee.004.00000001"
    rec("begin", t)
    dml("delete", t, x, before=row(900002, "NEW"))
    dml("insert", t, x, after=row(900005, "NEW"))
    rec("commit", t)
    scn += 1
    lines.append({"op": "lwn", "scn": scn})
    (input_dir / f"redo_1_{seq}.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))


# -- the reference --------------------------------------------------------------------------


def reference_snapshot(
    rows: Iterable[dict[str, Any]], owner: str, table: str, key: list[str] | None = None
) -> dict[Any, dict[str, Any]]:
    """Key -> the ``after`` image of the last change, deleted keys gone, ``ddl`` skipped.

    ``key=None``: by row id. Else by those columns: a delete's key from ``before``, an
    insert's or update's from ``after`` (a missing column from ``before``), and an update
    that changes the key removes the old one.
    """
    state: dict[Any, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["tx_seq"], r["op_seq"])):
        if r["owner"] != owner or r["table"] != table or r["op"] == "ddl":
            continue
        before, after = r["before"] or {}, r["after"] or {}
        if key is None:
            if r["op"] == "d":
                state.pop(r["rid"], None)
            else:
                state[r["rid"]] = after
            continue
        old = tuple(before.get(c) for c in key)
        if r["op"] == "d":
            state.pop(old, None)
            continue
        new = tuple(after.get(c) if after.get(c) is not None else before.get(c) for c in key)
        if None not in old and old != new:
            state.pop(old, None)
        state[new] = after
    return state


# -- publishing rows with the real writer ---------------------------------------------------

_CODES = {"c": INSERT, "u": UPDATE, "d": DELETE, "ddl": DDL}


def transactions(rows: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The model's rows grouped by tx_seq, in order."""
    by_tx: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_tx[r["tx_seq"]].append(r)
    return [sorted(by_tx[t], key=lambda r: r["op_seq"]) for t in sorted(by_tx)]


def publish(writer: ChangefeedWriter, tx: list[dict[str, Any]]) -> None:
    """Give one transaction of model rows to a ChangefeedWriter, as the dispatcher would."""
    first = tx[0]
    assert writer.next_tx_seq == first["tx_seq"]

    def text(v):
        return None if v is None else orjson.dumps(v).decode()

    commit = Commit(first["xid"], CommitKey(first["c_scn"], 0, 0, first["tx_seq"]), first["c_tm"])
    writer.write_transaction(
        commit,
        (  # a chunk a row: the rows of a transaction may change thread at any row
            (
                r["thread"],
                [
                    [
                        _CODES[r["op"]],
                        r["scn"],
                        r["sub"],
                        0,
                        r["op_seq"],
                        r["tm"],
                        r["owner"],
                        r["table"],
                        r["obj"],
                        r["rid"],
                        text(r["before"]),
                        text(r["after"]),
                        r["sql"],
                    ]
                ],
            )
            for r in tx
        ),
    )


def spark_rows(df) -> list[dict[str, Any]]:
    """A changefeed DataFrame's rows by (tx_seq, op_seq), before/after parsed."""
    rows = [r.asDict() for r in df.orderBy("tx_seq", "op_seq").collect()]
    for r in rows:
        for col in ("before", "after"):
            r[col] = json.loads(r[col]) if r[col] is not None else None
    return rows


def part_files(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith("part-"))


def build_workload(root: Path) -> Workload:
    stats = simulate(root / "in", threads=3, transactions=500, seed=11, records_per_file=300)
    _write_extra_sequence(root / "in", stats.last_scn)
    replay(str(root / "in"), str(root / "q"), str(root / "cf"), PipelineOptions(file_rows=FILE_ROWS, durable=False))
    return Workload(root, root / "in", root / "q", root / "cf", expected_changefeed(root / "in"))
