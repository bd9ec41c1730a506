"""Reference model of the changefeed, computed straight from the external contract.

This module is deliberately independent of ``olr_buffer``: it loads every record of every
input file into memory, groups by ``xid``, sorts, and applies the rules of
``contracts.md`` section 1 ("Meaning") to produce the rows of section 2 in the simplest
way possible.  Tests compare the real changefeed with it.

Interpretations where the contract is silent (the implementation follows them too):

* Row key ``(scn, sub, thread, sequence, line)``, lines numbered from 1 in each file;
  commit key ``(scn, thread, sequence, line)``.
* A transaction ends at its end record (``commit`` or ``rollback``) with the smallest
  commit key; later end records of the same ``xid`` are ignored.
* A committed transaction with commit SCN ``C`` is emitted when it has a ``begin`` with
  ``scn <= C`` and at least one row left after compensation.  Its rows and compensation
  records are its records with ``scn <= C``; later ones are ignored.
* Classification, in this order: no end record -> ``open``; ends with ``rollback`` ->
  ``rolled_back``; no ``begin`` -> ``no_begin``; nothing left -> ``empty``; else emitted.
  Unmatched compensations are counted only for transactions that get as far as the
  compensation walk (committed, with ``begin``).
* ``"rollback": true`` makes an ``insert``/``update``/``delete`` a compensation; a ``ddl``
  record is always a row and is never cancelled.
* Columns ``tm``, ``obj``, ``rid``, ``before``, ``after``, ``sql``, ``owner``, ``table``
  are the record's fields of those names (None when absent), whatever the ``op``;
  ``sub`` defaults to 0; ``thread`` comes from the file name; ``c_tm`` is the commit
  record's ``tm``.
* A last line without ``\\n`` is not yet written (contract, follow mode) and is ignored.
* ``lwn`` and ``close`` records belong to no transaction. For the complete input of a
  period they change nothing in the changefeed: they only tell a live reader when a commit
  is safe (``close``: the thread holds nothing back until its next record, whose SCN is
  above every SCN written before it, see :func:`check_close_rule`).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import zstandard

__all__ = [
    "CHANGEFEED_COLUMNS",
    "InputRecord",
    "ModelResult",
    "assert_changefeed_equal",
    "check_close_rule",
    "changefeed_files",
    "check_changefeed_layout",
    "expected_changefeed",
    "load_changefeed",
    "load_input",
]

CHANGEFEED_COLUMNS = (
    "tx_seq",
    "op_seq",
    "c_scn",
    "c_tm",
    "xid",
    "op",
    "scn",
    "sub",
    "tm",
    "thread",
    "owner",
    "table",
    "obj",
    "rid",
    "before",
    "after",
    "sql",
)

_NAME_RE = re.compile(r"^redo_([0-9]+)_([0-9]+)\.jsonl(\.zst)?$")
_END_OPS = ("commit", "rollback")
_THREAD_OPS = ("lwn", "close")  # records of a thread, not of a transaction
_DML_OPS = ("insert", "update", "delete")
_OP_CODES = {"insert": "c", "update": "u", "delete": "d", "ddl": "ddl"}


@dataclass(frozen=True)
class InputRecord:
    """One input record with its position."""

    thread: int
    sequence: int
    line: int
    data: dict[str, Any]

    @property
    def op(self) -> str:
        op: str = self.data["op"]
        return op

    @property
    def scn(self) -> int:
        scn: int = self.data["scn"]
        return scn

    @property
    def row_key(self) -> tuple[int, int, int, int, int]:
        return (self.scn, self.data.get("sub", 0), self.thread, self.sequence, self.line)

    @property
    def commit_key(self) -> tuple[int, int, int, int]:
        return (self.scn, self.thread, self.sequence, self.line)


@dataclass
class ModelResult:
    """The expected changefeed and what happened to the other transactions."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    committed: int = 0
    rolled_back: int = 0
    no_begin: int = 0
    empty: int = 0
    unmatched_compensations: int = 0
    open: int = 0

    @property
    def transactions(self) -> int:
        """Number of transactions (distinct xids) in the input."""
        return self.committed + self.rolled_back + self.no_begin + self.empty + self.open


# ---------------------------------------------------------------------------------------
# Input


def _read_lines(path: Path) -> list[bytes]:
    raw = path.read_bytes()
    if path.name.endswith(".zst"):
        with zstandard.ZstdDecompressor().stream_reader(raw) as reader:
            raw = reader.read()
    lines = raw.split(b"\n")
    # Offline, a file is complete: a last line without "\n" is still a record.
    return lines if lines[-1] else lines[:-1]


def load_input(input_dir: str | Path) -> list[InputRecord]:
    """Every record of every log file in ``input_dir``, files in (thread, sequence) order.

    Raises ValueError on a missing sequence, a duplicated one (``.jsonl`` and
    ``.jsonl.zst``), or a line that is not a JSON object.
    """
    files: dict[tuple[int, int], Path] = {}
    for path in Path(input_dir).iterdir():
        match = _NAME_RE.match(path.name)
        if not match or not path.is_file():
            continue
        thread, sequence = int(match.group(1)), int(match.group(2))
        if thread < 1 or sequence < 1:
            continue
        if (thread, sequence) in files:
            raise ValueError(f"thread {thread} sequence {sequence} is present twice")
        files[(thread, sequence)] = path
    by_thread: dict[int, list[int]] = defaultdict(list)
    for thread, sequence in files:
        by_thread[thread].append(sequence)
    for thread, sequences in by_thread.items():
        sequences.sort()
        for expected, actual in zip(range(sequences[0], sequences[-1] + 1), sequences):
            if expected != actual:
                raise ValueError(f"thread {thread}: sequence {expected} is missing")
    records = []
    for (thread, sequence), path in sorted(files.items()):
        for number, line in enumerate(_read_lines(path), start=1):
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError(f"{path.name}:{number}: not a JSON object")
            records.append(InputRecord(thread, sequence, number, data))
    return records


# ---------------------------------------------------------------------------------------
# The model


def _compensate(dml: list[InputRecord]) -> tuple[list[InputRecord], int]:
    """Rows left after compensation (in the given order) and unmatched compensations."""
    cancelled: set[int] = set()
    stacks: dict[Any, list[int]] = defaultdict(list)
    unmatched = 0
    for index, rec in enumerate(dml):
        is_compensation = rec.op in _DML_OPS and rec.data.get("rollback", False) is True
        if not is_compensation:
            if rec.op in _DML_OPS:
                stacks[rec.data.get("rid")].append(index)
            continue
        cancelled.add(index)  # a compensation is never a row itself
        stack = stacks[rec.data.get("rid")]
        if stack:
            cancelled.add(stack.pop())
        else:
            unmatched += 1
    rows = [rec for index, rec in enumerate(dml) if index not in cancelled]
    return rows, unmatched


def _row(tx_seq: int, op_seq: int, commit: InputRecord, rec: InputRecord) -> dict[str, Any]:
    data = rec.data
    return {
        "tx_seq": tx_seq,
        "op_seq": op_seq,
        "c_scn": commit.scn,
        "c_tm": commit.data.get("tm"),
        "xid": data["xid"],
        "op": _OP_CODES[rec.op],
        "scn": rec.scn,
        "sub": data.get("sub", 0),
        "tm": data.get("tm"),
        "thread": rec.thread,
        "owner": data.get("owner"),
        "table": data.get("table"),
        "obj": data.get("obj"),
        "rid": data.get("rid"),
        "before": data.get("before"),
        "after": data.get("after"),
        "sql": data.get("sql"),
    }


def expected_changefeed(input_dir: str | Path) -> ModelResult:
    """The changefeed the contract prescribes for the complete input in ``input_dir``."""
    by_xid: dict[str, list[InputRecord]] = defaultdict(list)
    for rec in load_input(input_dir):
        if rec.op not in _THREAD_OPS:
            by_xid[rec.data["xid"]].append(rec)

    result = ModelResult()
    emitted: list[tuple[InputRecord, list[InputRecord]]] = []
    for records in by_xid.values():
        ends = [rec for rec in records if rec.op in _END_OPS]
        if not ends:
            result.open += 1
            continue
        end = min(ends, key=lambda rec: rec.commit_key)
        if end.op == "rollback":
            result.rolled_back += 1
            continue
        in_time = [rec for rec in records if rec.scn <= end.scn]
        if not any(rec.op == "begin" for rec in in_time):
            result.no_begin += 1
            continue
        dml = sorted((rec for rec in in_time if rec.op in _OP_CODES), key=lambda rec: rec.row_key)
        rows, unmatched = _compensate(dml)
        result.unmatched_compensations += unmatched
        if not rows:
            result.empty += 1
            continue
        emitted.append((end, rows))

    emitted.sort(key=lambda item: item[0].commit_key)
    for tx_seq, (commit, rows) in enumerate(emitted):
        result.rows.extend(_row(tx_seq, op_seq, commit, rec) for op_seq, rec in enumerate(rows))
    result.committed = len(emitted)
    return result


def check_close_rule(records_in_write_order: Iterable[InputRecord]) -> None:
    """The contract's promise about ``close``, on records in the order they were written:
    the record that opens a closed thread again has an SCN above every SCN written before
    it by any thread. Raises AssertionError naming the record."""
    closed: set[int] = set()
    top = -1
    for rec in records_in_write_order:
        if rec.thread in closed and rec.op != "close":
            assert rec.scn > top, f"thread {rec.thread} opens again at scn {rec.scn}, not above {top}"
            closed.discard(rec.thread)
        if rec.op == "close":
            closed.add(rec.thread)
        top = max(top, rec.scn)


# ---------------------------------------------------------------------------------------
# The real changefeed


def changefeed_files(changefeed_dir: str | Path) -> list[Path]:
    """The Parquet files that are part of the changefeed, by name."""
    return sorted(
        path
        for path in Path(changefeed_dir).iterdir()
        if path.is_file() and path.name.startswith("part-") and path.name.endswith(".parquet")
    )


def load_changefeed(changefeed_dir: str | Path) -> list[dict[str, Any]]:
    """Every row of the changefeed, ordered by (tx_seq, op_seq), before/after parsed."""
    rows: list[dict[str, Any]] = []
    for path in changefeed_files(changefeed_dir):
        rows.extend(pq.read_table(path).to_pylist())
    for row in rows:
        for column in ("before", "after"):
            if row.get(column) is not None:
                row[column] = json.loads(row[column])
    rows.sort(key=lambda row: (row["tx_seq"], row["op_seq"]))
    return rows


_PART_RE = re.compile(r"^part-([0-9]{20})-([0-9]{20})\.parquet$")


def check_changefeed_layout(changefeed_dir: str | Path) -> None:
    """Check the file rules of contract section 2 on a changefeed directory.

    Every ``part-*`` name has two 20-digit numbers, the files cover tx_seq 0..N without
    gap or overlap, each file holds exactly its range ordered by (tx_seq, op_seq) with
    op_seq 0, 1, 2, ... per transaction (so no transaction is split across files).
    Raises AssertionError naming the file.
    """
    next_tx = 0
    for path in changefeed_files(changefeed_dir):
        match = _PART_RE.match(path.name)
        assert match, f"{path.name}: not named part-<20 digits>-<20 digits>.parquet"
        first, last = int(match.group(1)), int(match.group(2))
        assert first == next_tx, f"{path.name}: starts at tx_seq {first}, expected {next_tx}"
        table = pq.read_table(path, columns=["tx_seq", "op_seq"])
        keys = list(zip(table.column("tx_seq").to_pylist(), table.column("op_seq").to_pylist()))
        assert keys, f"{path.name}: no rows"
        assert keys[0] == (first, 0), (
            f"{path.name}: first row is (tx_seq={keys[0][0]}, op_seq={keys[0][1]}), "
            f"expected ({first}, 0): a transaction split across files?"
        )
        expected_tx, expected_op = first, 0
        for tx_seq, op_seq in keys:
            if tx_seq != expected_tx:
                assert tx_seq == expected_tx + 1 and op_seq == 0, (
                    f"{path.name}: row (tx_seq={tx_seq}, op_seq={op_seq}) out of order"
                )
                expected_tx, expected_op = tx_seq, 0
            assert op_seq == expected_op, f"{path.name}: tx_seq={tx_seq} has op_seq {op_seq}, expected {expected_op}"
            expected_op += 1
        assert expected_tx == last, f"{path.name}: last tx_seq {expected_tx}, name says {last}"
        next_tx = last + 1


def _position(row: dict[str, Any] | None) -> str:
    if row is None:
        return "<none>"
    return f"tx_seq={row.get('tx_seq')} op_seq={row.get('op_seq')} xid={row.get('xid')}"


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def assert_changefeed_equal(
    actual_rows: Iterable[dict[str, Any]],
    expected_rows: Iterable[dict[str, Any]],
    columns: Iterable[str] = CHANGEFEED_COLUMNS,
) -> None:
    """Compare two changefeeds row by row on ``columns`` (extra columns are ignored).

    Raises AssertionError naming the first differing row and column.
    """
    actual, expected = list(actual_rows), list(expected_rows)
    columns = tuple(columns)
    for index, (got, want) in enumerate(zip(actual, expected)):
        for column in columns:
            if column not in got:
                raise AssertionError(f"row #{index} ({_position(got)}): column {column!r} missing")
            if got[column] != want.get(column) or type(got[column]) is not type(want.get(column)):
                raise AssertionError(
                    f"row #{index} ({_position(want)}): column {column!r} is "
                    f"{_short(got[column])}, expected {_short(want.get(column))}"
                )
    if len(actual) != len(expected):
        first_extra = actual[len(expected)] if len(actual) > len(expected) else None
        first_missing = expected[len(actual)] if len(expected) > len(actual) else None
        raise AssertionError(
            f"changefeed has {len(actual)} rows, expected {len(expected)}; "
            f"first missing: {_position(first_missing)}; first extra: {_position(first_extra)}"
        )
