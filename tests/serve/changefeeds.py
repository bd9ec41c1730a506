"""Changefeeds for the tests of ``serve``, written by olr-buffer's own changefeed writer
file by file, so that a test chooses where files end, which transactions share a commit
SCN, and which ops (PostgreSQL's ``r`` and ``t`` too) they hold."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from olr_buffer.changes import COPY_ROW, DDL, DELETE, INSERT, TRUNCATE, UPDATE, Commit, CommitKey, schema_fields
from olr_buffer.sinks.parquet import ChangefeedWriter
from tests.contract_model import load_changefeed

CODES = {"c": INSERT, "u": UPDATE, "d": DELETE, "ddl": DDL, "t": TRUNCATE, "r": COPY_ROW}


@dataclass
class Row:
    op: str = "c"
    scn: int = 0
    tm: int | None = None
    owner: str = "HR"
    table: str = "EMP"
    obj: int | None = 7001
    rid: str | None = "AAAR1"
    before: dict | None = None
    after: dict | None = field(default_factory=lambda: {"ID": 1})
    sql: str | None = None
    schema: tuple[str, str | None] | None = None  # (schema version, its document on a row that introduces it)


@dataclass
class Tx:
    xid: str
    c_scn: int
    rows: list[Row]
    c_tm: int | None = None


class Feed:
    """A changefeed being written: ``publish(txs)`` adds one file of those transactions."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.writer = ChangefeedWriter(path, file_rows=1 << 40, durable=False)
        self._line = 0

    def publish(self, txs: list[Tx]) -> None:
        for tx in txs:
            self._line += 1
            rows = [
                [
                    CODES[r.op],
                    r.scn,
                    0,
                    1,
                    self._line,
                    r.tm,
                    r.owner,
                    r.table,
                    r.obj,
                    r.rid,
                    None if r.before is None else json.dumps(r.before),
                    None if r.after is None else json.dumps(r.after),
                    r.sql,
                    *(schema_fields(*r.schema) if r.schema else ()),
                ]
                for r in tx.rows
            ]
            assert self.writer.write_transaction(
                Commit(tx.xid, CommitKey(tx.c_scn, 1, 1, self._line), tx.c_tm), [(1, rows)]
            ) == len(rows)
        assert self.writer.flush() is not None

    def close(self) -> None:
        self.writer.close()

    def rows(self) -> list[dict]:
        return load_changefeed(self.path)

    def documents(self) -> dict[str, dict]:
        """The changefeed's schema documents by version, as the files in its metadata hold them."""
        return {p.stem: json.loads(p.read_text()) for p in (self.path / "_olr_buffer" / "schemas").glob("*.json")}


def random_transactions(
    rng: random.Random, n: int, *, c_scn: int = 1000, share: float = 0.3, max_rows: int = 4
) -> list[Tx]:
    """``n`` transactions in commit order; about ``share`` of them share the commit SCN of
    the one before (RAC commits, PostgreSQL's initial copy), with every op."""
    txs = []
    for i in range(n):
        if i == 0 or rng.random() >= share:
            c_scn += rng.randint(1, 5)
        rows = []
        for j in range(rng.randint(1, max_rows)):
            op = rng.choice(["c", "c", "u", "d", "ddl", "r", "t"])
            rows.append(
                Row(
                    op=op,
                    scn=c_scn - rng.randint(0, 3),
                    tm=rng.choice([None, 1_700_000_000_000_000_000 + i * 1000 + j]),
                    owner=rng.choice(["HR", "SALES", 'we"ird']),
                    table=rng.choice(["EMP", "DEPT", "t\u00e9"]),
                    obj=rng.choice([None, 7001, 7002]),
                    rid=None if op in ("ddl", "t") else f"AAAR{i}.{j}",
                    before={"ID": i, "N": "old"} if op in ("u", "d") else None,
                    after={"ID": i, "N": rng.choice(["x", 'q"uote', "new\nline", "\u00e9t\u00e9"]), "F": 1.5}
                    if op in ("c", "u", "r")
                    else None,
                    sql="ALTER TABLE HR.EMP ADD (X NUMBER)" if op == "ddl" else None,
                )
            )
        txs.append(Tx(f"0x{i:04x}.001.{i:08x}", c_scn, rows, rng.choice([None, 1_700_000_000_000_000_000 + i * 1000])))
    return txs
