"""Tests of the reference model `contract_model` on small hand-written inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from tests import contract_model as cm


def write_log(
    directory: Path,
    thread: int,
    sequence: int,
    records: list[dict[str, Any]],
    *,
    compress: bool = False,
    tail: bytes = b"",
) -> Path:
    """Write one redo log file; ``tail`` is appended raw (e.g. a line without newline)."""
    data = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records) + tail
    name = f"redo_{thread}_{sequence}.jsonl"
    if compress:
        data, name = zstandard.ZstdCompressor().compress(data), name + ".zst"
    path = directory / name
    path.write_bytes(data)
    return path


def rec(op: str, scn: int, xid: str | None = None, **fields: Any) -> dict[str, Any]:
    """A record; DML gets owner/table defaults."""
    record: dict[str, Any] = {"op": op, "scn": scn}
    if xid is not None:
        record["xid"] = xid
    if op in ("insert", "update", "delete", "ddl"):
        record.setdefault("owner", "APP")
        record.setdefault("table", "T")
    record.update(fields)
    return record


def comp(op: str, scn: int, xid: str, rid: str, **fields: Any) -> dict[str, Any]:
    """A compensation record (``"rollback": true``)."""
    return rec(op, scn, xid, rid=rid, rollback=True, **fields)


def summary(result: cm.ModelResult) -> list[tuple[int, int, str, str, str | None]]:
    """(tx_seq, op_seq, xid, op, rid) of every row."""
    return [(r["tx_seq"], r["op_seq"], r["xid"], r["op"], r["rid"]) for r in result.rows]


def counts(result: cm.ModelResult) -> dict[str, int]:
    return {
        "committed": result.committed,
        "rolled_back": result.rolled_back,
        "no_begin": result.no_begin,
        "empty": result.empty,
        "unmatched": result.unmatched_compensations,
        "open": result.open,
    }


ZERO = dict(committed=0, rolled_back=0, no_begin=0, empty=0, unmatched=0, open=0)


# ---------------------------------------------------------------------------------------


def test_interleaving_across_two_threads(tmp_path: Path) -> None:
    a1 = {"ID": 1, "NAME": "Zoë", "PRICE": 1.5, "NOTE": None}
    a2 = {"ID": 1, "NAME": "Zoë", "PRICE": 2.25, "NOTE": "Überarbeitet"}
    b9 = {"ID": 9, "NAME": "x", "PRICE": 0.0, "NOTE": None}
    write_log(
        tmp_path,
        1,
        1,
        [
            rec("begin", 10, "A", tm=100),
            rec("insert", 11, "A", tm=110, obj=501, rid="R1", after=a1),
            rec("lwn", 12),
            rec("update", 14, "A", tm=140, obj=501, rid="R1", before=a1, after=a2),
            rec("commit", 16, "A", tm=160),
        ],
    )
    write_log(
        tmp_path,
        2,
        1,
        [
            rec("begin", 10, "B"),
            rec("insert", 11, "B", tm=111, obj=502, rid="R2", after={"ID": 2}, table="U"),
            rec("insert", 12, "A", sub=0, tm=120, obj=501, rid="R3", after={"ID": 3}),
            rec("insert", 12, "C", sub=1, rid="R4", after={"ID": 4}),
            rec("delete", 13, "B", tm=130, rid="R9", before=b9),
            rec("commit", 15, "B", tm=150),
        ],
    )
    result = cm.expected_changefeed(tmp_path)
    common_b = {"c_scn": 15, "c_tm": 150, "xid": "B", "thread": 2, "owner": "APP", "sql": None}
    common_a = {"c_scn": 16, "c_tm": 160, "xid": "A", "owner": "APP", "table": "T", "sql": None}
    assert result.rows == [
        {
            "tx_seq": 0,
            "op_seq": 0,
            **common_b,
            "op": "c",
            "scn": 11,
            "sub": 0,
            "tm": 111,
            "table": "U",
            "obj": 502,
            "rid": "R2",
            "before": None,
            "after": {"ID": 2},
        },
        {
            "tx_seq": 0,
            "op_seq": 1,
            **common_b,
            "op": "d",
            "scn": 13,
            "sub": 0,
            "tm": 130,
            "table": "T",
            "obj": None,
            "rid": "R9",
            "before": b9,
            "after": None,
        },
        {
            "tx_seq": 1,
            "op_seq": 0,
            **common_a,
            "op": "c",
            "scn": 11,
            "sub": 0,
            "tm": 110,
            "thread": 1,
            "obj": 501,
            "rid": "R1",
            "before": None,
            "after": a1,
        },
        {
            "tx_seq": 1,
            "op_seq": 1,
            **common_a,
            "op": "c",
            "scn": 12,
            "sub": 0,
            "tm": 120,
            "thread": 2,
            "obj": 501,
            "rid": "R3",
            "before": None,
            "after": {"ID": 3},
        },
        {
            "tx_seq": 1,
            "op_seq": 2,
            **common_a,
            "op": "u",
            "scn": 14,
            "sub": 0,
            "tm": 140,
            "thread": 1,
            "obj": 501,
            "rid": "R1",
            "before": a1,
            "after": a2,
        },
    ]
    assert [list(row) for row in result.rows] == [list(cm.CHANGEFEED_COLUMNS)] * 5
    assert counts(result) == {**ZERO, "committed": 2, "open": 1}


def test_rows_ordered_by_scn_sub_thread(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        1,
        1,
        [
            rec("begin", 1, "A"),
            rec("insert", 5, "A", sub=2, rid="t1-5-2"),
            rec("insert", 6, "A", rid="t1-6"),
        ],
    )
    write_log(tmp_path, 1, 2, [rec("insert", 6, "A", sub=1, rid="t1-6-1-seq2")])
    write_log(
        tmp_path,
        2,
        1,
        [
            rec("insert", 5, "A", rid="t2-5-0"),
            rec("insert", 5, "A", sub=2, rid="t2-5-2"),
            rec("commit", 9, "A"),
        ],
    )
    result = cm.expected_changefeed(tmp_path)
    assert [row["rid"] for row in result.rows] == ["t2-5-0", "t1-5-2", "t2-5-2", "t1-6", "t1-6-1-seq2"]
    assert [row["op_seq"] for row in result.rows] == [0, 1, 2, 3, 4]


def test_commit_order_by_key_with_equal_scns(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        1,
        1,
        [
            rec("begin", 1, "X"),
            rec("begin", 1, "Y"),
            rec("insert", 2, "X", rid="x"),
            rec("insert", 3, "Y", rid="y"),
            rec("commit", 20, "X"),
        ],
    )
    write_log(tmp_path, 1, 2, [rec("commit", 20, "Y", sub=1)])
    write_log(
        tmp_path,
        2,
        1,
        [
            rec("begin", 1, "Z"),
            rec("begin", 1, "W"),
            rec("insert", 3, "Z", rid="z"),
            rec("insert", 4, "W", rid="w"),
            rec("commit", 19, "W"),
            rec("commit", 20, "Z"),
        ],
    )
    result = cm.expected_changefeed(tmp_path)
    assert summary(result) == [
        (0, 0, "W", "c", "w"),
        (1, 0, "X", "c", "x"),
        (2, 0, "Y", "c", "y"),
        (3, 0, "Z", "c", "z"),
    ]
    assert [row["c_scn"] for row in result.rows] == [19, 20, 20, 20]


def test_rollback_discards_and_first_end_wins(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        1,
        1,
        [
            rec("begin", 1, "R"),
            rec("insert", 2, "R", rid="r"),
            rec("rollback", 5, "R"),
            rec("commit", 6, "R"),  # after the rollback: ignored
            rec("begin", 7, "K"),
            rec("insert", 8, "K", rid="k"),
            rec("commit", 9, "K"),
            rec("rollback", 10, "K"),  # after the commit: ignored
        ],
    )
    write_log(
        tmp_path,
        2,
        1,
        [
            rec("begin", 1, "S"),
            rec("insert", 2, "S", rid="s"),
            rec("commit", 11, "S"),
            rec("rollback", 11, "S", sub=1),  # same SCN, later line: ignored
        ],
    )
    result = cm.expected_changefeed(tmp_path)
    assert summary(result) == [(0, 0, "K", "c", "k"), (1, 0, "S", "c", "s")]
    assert counts(result) == {**ZERO, "committed": 2, "rolled_back": 1}


def test_rollback_on_another_thread_at_a_lower_key_wins(tmp_path: Path) -> None:
    write_log(tmp_path, 1, 1, [rec("begin", 1, "D"), rec("insert", 2, "D", rid="d"), rec("commit", 8, "D")])
    write_log(tmp_path, 2, 1, [rec("rollback", 8, "D")])
    write_log(tmp_path, 3, 1, [rec("rollback", 7, "E"), rec("begin", 8, "E"), rec("insert", 9, "E", rid="e")])
    write_log(tmp_path, 4, 1, [rec("commit", 6, "E")])
    result = cm.expected_changefeed(tmp_path)
    # D: commit (8, thread 1) precedes rollback (8, thread 2); E: commit at 6 has no begin.
    assert summary(result) == [(0, 0, "D", "c", "d")]
    assert counts(result) == {**ZERO, "committed": 1, "no_begin": 1}


def test_transaction_without_begin_is_not_emitted(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        1,
        1,
        [
            rec("insert", 1, "N", rid="n1"),
            rec("begin", 2, "A"),
            rec("insert", 3, "A", rid="a"),
            rec("commit", 4, "N"),
            rec("commit", 5, "A"),
            rec("insert", 6, "L", rid="l"),
            rec("commit", 7, "L"),
            rec("begin", 8, "L"),  # after its commit: does not count
        ],
    )
    result = cm.expected_changefeed(tmp_path)
    assert summary(result) == [(0, 0, "A", "c", "a")]
    assert counts(result) == {**ZERO, "committed": 1, "no_begin": 2}


def test_compensation_cancels_latest_uncancelled_row_of_same_rid(tmp_path: Path) -> None:
    a, b, c = {"V": "a"}, {"V": "b"}, {"V": "c"}
    write_log(
        tmp_path,
        1,
        1,
        [
            rec("begin", 1, "P"),
            rec("insert", 2, "P", rid="R", after=a),
            comp("delete", 2, "P", "T", sub=1, before={"V": "t"}),  # before T's insert: unmatched
            rec("update", 4, "P", rid="R", before=a, after=b),
            comp("update", 5, "P", "R", before=b, after=a),  # cancels the update, not the insert
            rec("insert", 6, "P", rid="S", after={"V": "s"}),
            comp("delete", 7, "P", "Q", before={"V": "q"}),  # no row Q: unmatched
            rec("ddl", 8, "P", sql="ALTER TABLE APP.T ADD (W NUMBER)"),
            rec("update", 9, "P", rid="R", before=a, after=c),
            rec("insert", 10, "P", rid="U", after={"V": "u1"}),
            rec("update", 11, "P", rid="U", before={"V": "u1"}, after={"V": "u2"}),
            comp("update", 12, "P", "U", before={"V": "u2"}, after={"V": "u1"}),
            comp("delete", 13, "P", "U", before={"V": "u1"}),  # both rows of U cancelled
            rec("commit", 20, "P"),
        ],
    )
    write_log(tmp_path, 2, 1, [rec("insert", 3, "P", rid="T", after={"V": "t"})])
    result = cm.expected_changefeed(tmp_path)
    assert summary(result) == [
        (0, 0, "P", "c", "R"),
        (0, 1, "P", "c", "T"),
        (0, 2, "P", "c", "S"),
        (0, 3, "P", "ddl", None),
        (0, 4, "P", "u", "R"),
    ]
    assert result.rows[0]["after"] == a and result.rows[4]["after"] == c
    assert result.rows[3]["sql"] == "ALTER TABLE APP.T ADD (W NUMBER)"
    assert counts(result) == {**ZERO, "committed": 1, "unmatched": 2}


def test_fully_compensated_transaction_takes_no_tx_seq(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        1,
        1,
        [
            rec("begin", 1, "A"),
            rec("insert", 2, "A", rid="a"),
            rec("commit", 3, "A"),
            rec("begin", 4, "F"),
            rec("insert", 5, "F", rid="f"),
            comp("delete", 6, "F", "f"),
            rec("commit", 7, "F"),
            rec("begin", 8, "B"),
            rec("insert", 9, "B", rid="b"),
            rec("commit", 10, "B"),
            rec("begin", 11, "G"),
            rec("commit", 12, "G"),  # nothing at all
        ],
    )
    result = cm.expected_changefeed(tmp_path)
    assert summary(result) == [(0, 0, "A", "c", "a"), (1, 0, "B", "c", "b")]
    assert counts(result) == {**ZERO, "committed": 2, "empty": 2}


def test_records_after_the_commit_scn_are_ignored(tmp_path: Path) -> None:
    write_log(
        tmp_path,
        1,
        1,
        [
            rec("begin", 1, "A"),
            rec("insert", 2, "A", rid="a1"),
            rec("commit", 10, "A"),
        ],
    )
    write_log(
        tmp_path,
        2,
        1,
        [
            rec("insert", 10, "A", rid="a2"),  # at the commit SCN: a row
            rec("insert", 11, "A", rid="late"),  # after it: ignored
            comp("delete", 12, "A", "a1"),  # ignored too: cancels nothing
        ],
    )
    result = cm.expected_changefeed(tmp_path)
    assert summary(result) == [(0, 0, "A", "c", "a1"), (0, 1, "A", "c", "a2")]
    assert counts(result) == {**ZERO, "committed": 1}


def test_input_files_names_compression_and_defaults(tmp_path: Path) -> None:
    write_log(tmp_path, 1, 1, [rec("begin", 1, "A"), rec("insert", 2, "A", rid="a1")], compress=True)
    write_log(
        tmp_path,
        1,
        2,
        [
            rec("insert", 3, "A", rid="a2", extra="dropped", after={"K": "ü"}),
            rec("commit", 4, "A", tm=44),
        ],
        tail=b'{"op":"begin","scn":5,"xid":"H"}',
    )  # offline, a last line without newline is read
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "redo_1_3.json").write_text("{]")
    (tmp_path / "redo_x_3.jsonl").write_text("{]")
    (tmp_path / "redo_0_1.jsonl").write_text("{]")
    (tmp_path / ".redo_1_3.jsonl.tmp").write_text("{]")
    result = cm.expected_changefeed(tmp_path)
    assert summary(result) == [(0, 0, "A", "c", "a1"), (0, 1, "A", "c", "a2")]
    row = result.rows[1]
    assert (row["sub"], row["tm"], row["obj"], row["c_tm"], row["before"]) == (0, None, None, 44, None)
    assert row["after"] == {"K": "ü"} and "extra" not in row
    assert len(cm.load_input(tmp_path)) == 5


def test_missing_sequence_is_an_error(tmp_path: Path) -> None:
    write_log(tmp_path, 2, 4, [rec("lwn", 1)])
    write_log(tmp_path, 2, 6, [rec("lwn", 2)])
    with pytest.raises(ValueError, match="thread 2: sequence 5 is missing"):
        cm.expected_changefeed(tmp_path)


# ---------------------------------------------------------------------------------------
# Reading and comparing a real changefeed


SCHEMA = pa.schema(
    [
        ("tx_seq", pa.int64()),
        ("op_seq", pa.int64()),
        ("c_scn", pa.int64()),
        ("c_tm", pa.int64()),
        ("xid", pa.string()),
        ("op", pa.string()),
        ("scn", pa.int64()),
        ("sub", pa.int64()),
        ("tm", pa.int64()),
        ("thread", pa.int32()),
        ("owner", pa.string()),
        ("table", pa.string()),
        ("obj", pa.int64()),
        ("rid", pa.string()),
        ("before", pa.string()),
        ("after", pa.string()),
        ("sql", pa.string()),
    ]
)


def write_part(directory: Path, rows: list[dict[str, Any]], name: str | None = None) -> None:
    """Write ``rows`` as a changefeed file (before/after as JSON text)."""
    encoded = [
        {**row, **{c: None if row[c] is None else json.dumps(row[c], ensure_ascii=False) for c in ("before", "after")}}
        for row in rows
    ]
    first, last = rows[0]["tx_seq"], rows[-1]["tx_seq"]
    name = name or f"part-{first:020d}-{last:020d}.parquet"
    pq.write_table(pa.Table.from_pylist(encoded, schema=SCHEMA), directory / name)


@pytest.fixture
def model_rows(tmp_path: Path) -> list[dict[str, Any]]:
    source = tmp_path / "in"
    source.mkdir()
    write_log(
        source,
        1,
        1,
        [
            rec("begin", 1, "A"),
            rec("insert", 2, "A", rid="a1", after={"N": 1.5, "S": "ß"}),
            rec("update", 3, "A", rid="a1", before={"N": 1.5, "S": "ß"}, after={"N": 2, "S": None}),
            rec("commit", 4, "A", tm=4000),
            rec("begin", 5, "B"),
            rec("ddl", 6, "B", sql="DROP TABLE APP.T"),
            rec("commit", 7, "B"),
            rec("begin", 8, "C"),
            rec("delete", 9, "C", rid="c", before={"N": 3}),
            rec("commit", 10, "C"),
            rec("begin", 11, "D"),
            rec("insert", 12, "D", rid="d", after={}),
            rec("commit", 13, "D"),
        ],
    )
    return cm.expected_changefeed(source).rows


def test_load_changefeed_round_trip(tmp_path: Path, model_rows: list[dict[str, Any]]) -> None:
    feed = tmp_path / "feed"
    feed.mkdir()
    write_part(feed, model_rows[3:])  # tx 2-3
    write_part(feed, model_rows[:3])  # tx 0-1
    write_part(feed, model_rows[:1], name="_tmp-part-x.parquet")
    write_part(feed, model_rows[:1], name=".part-hidden.parquet")
    loaded = cm.load_changefeed(feed)
    cm.assert_changefeed_equal(loaded, model_rows)
    cm.check_changefeed_layout(feed)
    assert loaded[0]["after"] == {"N": 1.5, "S": "ß"}


def test_assert_changefeed_equal_names_the_first_difference(model_rows: list[dict[str, Any]]) -> None:
    changed = [dict(row) for row in model_rows]
    changed[2]["rid"] = "other"
    changed[3]["after"] = {"x": 1}
    with pytest.raises(AssertionError, match=r"tx_seq=1 op_seq=0 .*'rid'") as info:
        cm.assert_changefeed_equal(changed, model_rows)
    assert len(str(info.value)) < 400
    with pytest.raises(AssertionError, match=r"has 3 rows, expected 5; first missing: tx_seq=2"):
        cm.assert_changefeed_equal(model_rows[:3], model_rows)
    extra = [*model_rows, {**model_rows[-1], "op_seq": 1}]
    with pytest.raises(AssertionError, match=r"first extra: tx_seq=3 op_seq=1"):
        cm.assert_changefeed_equal(extra, model_rows)
    wrong_type = [{**row, "thread": str(row["thread"])} for row in model_rows]
    with pytest.raises(AssertionError, match="'thread'"):
        cm.assert_changefeed_equal(wrong_type, model_rows)


def test_check_changefeed_layout_finds_gaps_and_split_transactions(
    tmp_path: Path, model_rows: list[dict[str, Any]]
) -> None:
    gap = tmp_path / "gap"
    gap.mkdir()
    write_part(gap, model_rows[:3])
    write_part(gap, model_rows[4:])  # tx_seq 3 without tx 2
    with pytest.raises(AssertionError, match="starts at tx_seq 3, expected 2"):
        cm.check_changefeed_layout(gap)
    split = tmp_path / "split"
    split.mkdir()
    write_part(split, model_rows[:1], name=f"part-{0:020d}-{0:020d}.parquet")
    write_part(split, model_rows[1:], name=f"part-{1:020d}-{3:020d}.parquet")
    with pytest.raises(AssertionError, match=r"first row is \(tx_seq=0, op_seq=1\)"):
        cm.check_changefeed_layout(split)
