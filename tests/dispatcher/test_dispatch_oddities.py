"""Semantic oddities are counted, not fatal; which of a transaction's ends across threads
wins does not depend on the order the threads' blocks reach the queue.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from olr_buffer.sources.redo.files import scan
from olr_buffer.sources.redo.thread_reader import ThreadReader
from olr_buffer.txbuffer import LmdbQueue
from tests.cli.conftest import ok
from tests.contract_model import expected_changefeed
from tests.fault_helpers import dumps, exact, replay

# Semantic oddities: counted, not fatal


def _sem(op: str, scn: int, xid: str | None = None, **fields: Any) -> bytes:
    rec: dict[str, Any] = {"op": op, "scn": scn}
    if xid is not None:
        rec["xid"] = xid
    rec.update(fields)
    return dumps(rec)


def _row(op: str, scn: int, xid: str, rid: str, **fields: Any) -> bytes:
    images = {
        "insert": {"after": {"ID": rid}},
        "update": {"before": {"ID": rid}, "after": {"ID": rid}},
        "delete": {"before": {"ID": rid}},
    }[op]
    return _sem(op, scn, xid, owner="APP", table="T", rid=rid, **images, **fields)


ODDITIES = (
    _row("insert", 10, "A", "a1")
    + _sem("commit", 11, "A")  # no begin
    + _sem("begin", 12, "B")
    + _row("insert", 13, "B", "b1")
    + _sem("commit", 14, "B")
    + _row("insert", 15, "B", "b2")  # late record
    + _sem("begin", 20, "C")
    + _row("insert", 21, "C", "c1")
    + _row("delete", 22, "C", "zz", rollback=True)
    + _sem("commit", 23, "C")  # matches nothing
    + _sem("begin", 30, "D")
    + _row("insert", 31, "D", "d1")
    + _sem("commit", 32, "D")
    + _sem("rollback", 33, "D")  # commit wins
    + _sem("begin", 40, "E")
    + _row("insert", 41, "E", "e1")
    + _sem("rollback", 42, "E")
    + _sem("commit", 43, "E")  # rollback wins
    + _sem("begin", 50, "F")
    + _row("insert", 51, "F", "f1")
    + _row("update", 52, "F", "f1", rollback=True)
    + _sem("commit", 53, "F")  # empty
    + _sem("begin", 60, "G")
    + _row("insert", 61, "G", "g1")
    + _row("delete", 62, "G", "g1")
    + _row("delete", 63, "G", "g1", rollback=True)
    + _sem("commit", 64, "G")  # cancels the delete
    + _sem("lwn", 100)
)


@pytest.mark.parametrize("block_records", ["4096", "1", "3"])
def test_semantic_oddities_are_counted_not_fatal(tmp_path: Path, block_records: str) -> None:
    inp = tmp_path / "input"
    inp.mkdir()
    (inp / "redo_1_1.jsonl").write_bytes(ODDITIES)
    summary = ok(replay(inp, tmp_path / "q", tmp_path / "cf", "--json", "--block-records", block_records)).json()
    model = expected_changefeed(inp)
    exact(tmp_path / "cf", model)
    assert [(r["xid"], r["rid"], r["op"]) for r in model.rows] == [
        ("B", "b1", "c"),
        ("C", "c1", "c"),
        ("D", "d1", "c"),
        ("G", "g1", "c"),
    ]
    got = {
        k: summary[k]
        for k in (
            "transactions_published",
            "rows_published",
            "no_begin",
            "late_records",
            "unmatched_compensations",
            "extra_end_records",
            "rolled_back",
            "empty",
            "open_transactions",
        )
    }
    assert got == {
        "transactions_published": 4,
        "rows_published": 4,
        "no_begin": 1,
        "late_records": 1,
        "unmatched_compensations": 1,
        "extra_end_records": 2,
        "rolled_back": 1,
        "empty": 1,
        "open_transactions": 0,
    }


# Cross-thread ends: which end wins is decided by (scn, thread, sequence, line), whatever
# the order in which the threads' blocks reach the queue. The queue is filled by the
# readers one thread after the other (a legal interleaving), then `olr-buffer replay`
# dispatches it.
CROSS_T1 = (
    _sem("begin", 10, "X")
    + _row("insert", 11, "X", "x1")  # X commits in thread 2
    + _sem("begin", 20, "H")
    + _row("insert", 21, "H", "h1")
    + _sem("rollback", 25, "H")  # H: commit (23, t2) wins
    + _sem("begin", 30, "G")
    + _row("insert", 31, "G", "g1")
    + _sem("commit", 33, "G")  # G: rollback (34, t2) is extra
    + _sem("begin", 40, "E")
    + _row("insert", 41, "E", "e1")
    + _sem("rollback", 43, "E")  # same SCN: thread 1 wins
    + _sem("lwn", 50)
)
CROSS_T2 = (
    _sem("commit", 13, "X")
    + _sem("commit", 23, "H")
    + _sem("rollback", 34, "G")
    + _sem("commit", 43, "E")
    + _sem("lwn", 50)
)


@pytest.mark.parametrize(
    "order",
    [
        pytest.param((1, 2), id="thread-1-first"),
        pytest.param((2, 1), id="thread-2-first"),
    ],
)
def test_cross_thread_ends_do_not_depend_on_queue_order(tmp_path: Path, order: tuple[int, int]) -> None:
    inp, q, cf = tmp_path / "input", tmp_path / "q", tmp_path / "cf"
    inp.mkdir()
    (inp / "redo_1_1.jsonl").write_bytes(CROSS_T1)
    (inp / "redo_2_1.jsonl").write_bytes(CROSS_T2)
    model = expected_changefeed(inp)
    assert [r["xid"] for r in model.rows] == ["X", "H", "G"]
    with LmdbQueue(q) as queue:
        found = scan(str(inp))
        for t in order:
            ThreadReader(queue, str(inp), t, found[t], None).read_to_end()
    summary = ok(replay(inp, q, cf, "--json")).json()
    exact(cf, model)
    got = {
        k: summary[k]
        for k in ("transactions_published", "no_begin", "rolled_back", "extra_end_records", "open_transactions")
    }
    assert got == {
        "transactions_published": 3,
        "no_begin": 0,
        "rolled_back": 1,
        "extra_end_records": 3,
        "open_transactions": 0,
    }


# ---------------------------------------------------------------------------------------
# --dead-letter
