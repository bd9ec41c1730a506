"""The messages a changefeed must give over OpenLogReplicator's protocol, computed from
its rows (read with pyarrow) and contracts section 6 alone, independently of olr-buffer's
builder: the reference the tests compare ``serve`` with."""

from __future__ import annotations

import json
from itertools import groupby
from typing import Any

OPS = {"c": "c", "u": "u", "d": "d", "ddl": "ddl", "r": "c", "t": "ddl"}


# OpenLogReplicator's column (its JSON writer's ``schema.columns`` item, name and nullable
# aside) of each source type the tests' schema documents use: Oracle's types by the
# figures of SYS.COL$ (-1: none), PostgreSQL's under their own names
OLR_COLUMNS: dict[tuple[str, str], dict[str, Any]] = {
    ("redo", "NUMBER"): {"type": "number", "precision": -1, "scale": -1},
    ("redo", "NUMBER(10)"): {"type": "number", "precision": 10, "scale": 0},
    ("redo", "NUMBER(12, 2)"): {"type": "number", "precision": 12, "scale": 2},
    ("redo", "NUMBER(*,0)"): {"type": "number", "precision": -1, "scale": 0},
    ("redo", "INTEGER"): {"type": "number", "precision": -1, "scale": 0},
    ("redo", "FLOAT"): {"type": "number", "precision": 126, "scale": -1},
    ("redo", "BINARY_DOUBLE"): {"type": "binary_double"},
    ("redo", "VARCHAR2(30 CHAR)"): {"type": "varchar2", "length": 30},
    ("redo", "NVARCHAR2(10)"): {"type": "varchar2", "length": 10},
    ("redo", "CHAR(3)"): {"type": "char", "length": 3},
    ("redo", "DATE"): {"type": "date"},
    ("redo", "TIMESTAMP(6)"): {"type": "timestamp", "length": 11},
    ("redo", "TIMESTAMP(3) WITH TIME ZONE"): {"type": "timestamp with time zone", "length": 13},
    ("redo", "TIMESTAMP WITH LOCAL TIME ZONE"): {"type": "timestamp with local time zone", "length": 11},
    ("redo", "INTERVAL DAY(2) TO SECOND(6)"): {"type": "interval day to second", "length": 11},
    ("redo", "RAW(16)"): {"type": "raw", "length": 16},
    ("redo", "CLOB"): {"type": "clob"},
    ("redo", "BLOB"): {"type": "blob"},
    ("redo", "XMLTYPE"): {"type": "unknown"},
    ("postgresql", "bigint"): {"type": "bigint"},
    ("postgresql", "numeric(12,2)"): {"type": "numeric(12,2)", "precision": 12, "scale": 2},
    ("postgresql", "numeric"): {"type": "numeric", "precision": -1, "scale": -1},
    ("postgresql", "character varying(40)"): {"type": "character varying(40)", "length": 40},
    ("postgresql", "timestamp with time zone"): {"type": "timestamp with time zone"},
    ("postgresql", "date"): {"type": "date"},
    ("postgresql", "jsonb"): {"type": "jsonb"},
}


def expected_columns(document: dict) -> list[dict]:
    """``schema.columns`` of a schema document: OpenLogReplicator's columns, in order."""
    return [
        {"name": c["name"], **OLR_COLUMNS[(document["source"], c["type"])], "nullable": c["nullable"] is not False}
        for c in document["columns"]
    ]


def expected_messages(
    rows: list[dict[str, Any]], database: str, documents: dict[str, dict] | None = None
) -> list[dict]:
    """Every message of the stream, in order, as parsed JSON: ``rows`` are the
    changefeed's rows in ``(tx_seq, op_seq)`` order (``load_changefeed``'s);
    ``documents``: the changefeed's schema documents by version (a row that names one
    carries its columns)."""
    out: list[dict] = []
    c_scn_before, idx = None, 0
    for _tx_seq, tx_rows in groupby(rows, key=lambda r: r["tx_seq"]):
        tx_rows = list(tx_rows)
        first = tx_rows[0]
        c_scn, c_tm = first["c_scn"], first["c_tm"]
        if c_scn != c_scn_before:
            c_scn_before, idx = c_scn, 0

        def message(scn: int, tm: int | None, payload: dict, *, c_scn: int = c_scn, first: dict = first) -> dict:
            nonlocal idx
            m = {"scn": scn}
            if tm is not None:
                m["tm"] = tm
            m.update({"c_scn": c_scn, "c_idx": idx, "xid": first["xid"], "db": database, "payload": [payload]})
            idx += 1
            return m

        out.append(message(first["scn"], c_tm, {"op": "begin"}))
        for r in tx_rows:
            payload: dict[str, Any] = {"op": OPS[r["op"]], "schema": {"owner": r["owner"], "table": r["table"]}}
            if r["obj"] is not None:
                payload["schema"]["obj"] = r["obj"]
            if r.get("schema_version") is not None:
                payload["schema"]["columns"] = expected_columns((documents or {})[r["schema_version"]])
            if r["rid"] is not None:
                payload["rid"] = r["rid"]
            for key in ("before", "after"):  # JSON text in the file (load_changefeed parses it)
                if r[key] is not None:
                    payload[key] = json.loads(r[key]) if isinstance(r[key], str) else r[key]
            if r["op"] == "t":
                owner, table = (r["owner"].replace('"', '""'), r["table"].replace('"', '""'))
                payload["sql"] = f'TRUNCATE TABLE "{owner}"."{table}"'
            elif r["sql"] is not None:
                payload["sql"] = r["sql"]
            out.append(message(r["scn"], r["tm"] if r["tm"] is not None else c_tm, payload))
        out.append(message(c_scn, c_tm, {"op": "commit"}))
    return out


def position(m: dict) -> tuple[int, int]:
    return m["c_scn"], m["c_idx"]


def after(messages: list[dict], pos: tuple[int, int] | None) -> list[dict]:
    """The messages after ``pos`` (all of them for None)."""
    return messages if pos is None else [m for m in messages if position(m) > pos]


def transactions(messages: list[dict]) -> list[tuple[str, int, int]]:
    """``(xid, c_scn, rows)`` of each whole transaction (begin to commit) in ``messages``."""
    out, rows, xid = [], None, None
    for m in messages:
        op = m["payload"][0]["op"]
        if op == "begin":
            rows, xid = 0, m["xid"]
        elif op == "commit":
            assert rows is not None and m["xid"] == xid, "a commit without its begin"
            out.append((xid, m["c_scn"], rows))
            rows = None
        elif rows is not None:
            rows += 1
    return out
