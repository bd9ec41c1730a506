"""The messages a changefeed must give over OpenLogReplicator's protocol, computed from
its rows (read with pyarrow) and contracts section 6 alone, independently of olr-buffer's
builder: the reference the tests compare ``serve`` with."""

from __future__ import annotations

import json
from itertools import groupby
from typing import Any

OPS = {"c": "c", "u": "u", "d": "d", "ddl": "ddl", "r": "c", "t": "ddl"}


def expected_messages(rows: list[dict[str, Any]], database: str) -> list[dict]:
    """Every message of the stream, in order, as parsed JSON: ``rows`` are the
    changefeed's rows in ``(tx_seq, op_seq)`` order (``load_changefeed``'s)."""
    out: list[dict] = []
    c_scn_before, idx = None, 0
    for _tx_seq, tx_rows in groupby(rows, key=lambda r: r["tx_seq"]):
        tx_rows = list(tx_rows)
        first = tx_rows[0]
        c_scn, c_tm = first["c_scn"], first["c_tm"]
        if c_scn != c_scn_before:
            c_scn_before, idx = c_scn, 0

        def message(scn: int, tm: int | None, payload: dict) -> dict:
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
