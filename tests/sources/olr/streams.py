"""Recorded message streams for the OpenLogReplicator source's tests, in each JSON form
OpenLogReplicator's format options give (its BuilderJson; contracts section 7), and the
changefeed each must give (the model: contract section 7's column rules, written here
from the contract, not from the source's code).

A workload is a list of :class:`Tx` in commit order; :func:`messages` writes it in a
:class:`Form`; :func:`expected_rows` gives the changefeed's rows for that form.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

T0 = 1_700_000_000_000_000_000


@dataclass
class Row:
    op: str  # c u d ddl
    scn: int
    owner: str
    table: str
    obj: int
    rid: str | None
    before: dict | None
    after: dict | None
    sql: str | None = None


@dataclass
class Tx:
    xid: int  # the 64-bit XID: usn << 48 | slot << 32 | sqn
    c_scn: int
    c_tm: int
    rows: list[Row]
    thread: int = 1


@dataclass(frozen=True)
class Form:
    """OpenLogReplicator's format options that change what a receiver reads."""

    whole: bool = False  # message 1: one message per transaction
    scn_all: bool = False  # scn-type 1: scn in every message (default: the first only)
    tm_all: bool = False  # timestamp-all 1: tm in every message
    scn_hex: bool = False  # scn 1: "scns":"0x..."
    tms: str | None = None  # timestamp 4 ("ns": "tms" text) or 8 ("iso": ISO-8601 text)
    xid: str = "hex"  # xid 0 (hex text), 1 ("dec": decimal text), 2 ("num": "xidn")
    rth: bool = False  # the redo thread in every message
    checkpoints: bool = False  # chkpt messages between transactions
    columns: bool = False  # schema 1: a table's columns with its first row
    num: bool = False  # message 2: "num" in each row
    db: str | None = None  # db 1: "db" in each message


FORMS = {
    "per-row": Form(),
    "per-row-all": Form(scn_all=True, tm_all=True, xid="dec", checkpoints=True, columns=True, num=True, db="ORCL"),
    "per-transaction": Form(whole=True, checkpoints=True, columns=True),
    "hex-iso-xidn": Form(scn_hex=True, tms="iso", xid="num", rth=True, checkpoints=True),
    "rth-tms": Form(rth=True, tms="ns", scn_all=True, num=True, columns=True),
}


def xid_text(xid: int, form: Form) -> tuple[str, object]:
    usn, slt, sqn = xid >> 48, (xid >> 32) & 0xFFFF, xid & 0xFFFFFFFF
    if form.xid == "dec":
        return "xid", f"{usn}.{slt}.{sqn}"
    if form.xid == "num":
        return "xidn", xid
    return "xid", f"0x{usn:04x}.{slt:03x}.{sqn:08x}"


def xid_column(xid: int, form: Form) -> str:
    """What the changefeed's ``xid`` holds: the text as sent (a number as its decimal text)."""
    return str(xid_text(xid, form)[1])


COLUMNS = {
    ("HR", "EMP"): [
        {"name": "ID", "type": "number", "precision": 10, "scale": 0, "nullable": False},
        {"name": "NAME", "type": "varchar2", "length": 40, "nullable": True},
    ],
    ("HR", "DEPT"): [{"name": "ID", "type": "number", "precision": -1, "scale": 0, "nullable": False}],
    ("SALES", "ORDERS"): [{"name": "N", "type": "number", "precision": 38, "scale": 10, "nullable": True}],
}
OBJS = {("HR", "EMP"): 7001, ("HR", "DEPT"): 7002, ("SALES", "ORDERS"): 7003}


def workload(
    rng: random.Random,
    n: int,
    *,
    rac: bool = False,
    max_rows: int = 6,
    c_scn: int = 5000,
    share: float = 0.25,
    large: int | None = None,
) -> list[Tx]:
    """``n`` transactions in commit order; about ``share`` of them commit at the SCN of the
    one before (RAC); ``large``: one transaction of that many rows in the middle."""
    txs = []
    for i in range(n):
        if i == 0 or rng.random() >= share:
            c_scn += rng.randint(1, 7)
        count = large if large is not None and i == n // 2 else rng.randint(1, max_rows)
        rows = []
        # a transaction's rows in redo order: SCNs that never go back (OpenLogReplicator
        # sends them so; the dispatcher orders the rows of a thread other than 1 by SCN)
        scns = sorted(c_scn - rng.randint(0, 20) for _ in range(count)) if count < 50 else [c_scn - 1] * count
        for j in range(count):
            owner, table = rng.choice(list(OBJS))
            op = "ddl" if count < 50 and rng.random() < 0.05 else rng.choice("cud")
            key = rng.randint(1, 10**6)
            big = rng.random() < 0.2
            value = float(BIG) if big else rng.randint(0, 999)
            image = {"ID": key, "NAME": rng.choice(["Ann", "Bo\u00e9", 'q"t', None]), "N": value}
            rows.append(
                Row(
                    op=op,
                    scn=scns[j],
                    owner=owner,
                    table=table,
                    obj=OBJS[(owner, table)],
                    rid=None if op == "ddl" else f"AAAR{i:05d}AAE{j:06d}"[:18],
                    before=None if op in ("c", "ddl") else {"ID": key, "NAME": "old"},
                    after=None if op in ("d", "ddl") else image,
                    sql=f'ALTER TABLE "{owner}"."{table}" ADD (C{i} NUMBER)' if op == "ddl" else None,
                )
            )
        txs.append(
            Tx(
                xid=(rng.randint(1, 40) << 48) | (rng.randint(0, 40) << 32) | (1000 + i),
                c_scn=c_scn,
                c_tm=T0 + c_scn * 1000,
                rows=rows,
                thread=rng.choice([1, 2]) if rac else 1,
            )
        )
    return txs


# -- messages ----------------------------------------------------------------------------

BIG = "123456789012345678901234567.0123456789"  # an Oracle NUMBER: more digits than a double keeps
_MARK = "\u0000big\u0000"


def _fix_numbers(image: dict | None) -> dict | None:
    if image is None:
        return None
    return {k: (_MARK if isinstance(v, float) else v) for k, v in image.items()}


def _encode(doc: dict) -> bytes:
    """JSON as OpenLogReplicator writes it: no spaces, UTF-8, numbers with their digits."""
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    return text.replace(json.dumps(_MARK), BIG).encode()


def _header(form: Form, tx: Tx, pos: tuple[int, int], first: bool, scn: int, tm: int) -> dict:
    doc: dict = {}
    if first or form.scn_all:
        if form.scn_hex:
            doc["scns"] = f"0x{scn:016x}"
        else:
            doc["scn"] = scn
    if first or form.tm_all:
        if form.tms == "ns":
            doc["tms"] = str(tm)
        elif form.tms == "iso":
            doc["tms"] = _iso(tm)
        else:
            doc["tm"] = tm
    doc["c_scn"], doc["c_idx"] = pos
    name, value = xid_text(tx.xid, form)
    doc[name] = value
    if form.db:
        doc["db"] = form.db
    if form.rth:
        doc["rth"] = tx.thread
    return doc


def _iso(tm: int) -> str:
    import datetime

    s, ns = divmod(tm, 1_000_000_000)
    return datetime.datetime.fromtimestamp(s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ns:09d}Z"


def _entry(form: Form, row: Row, num: int, seen: set) -> dict:
    schema: dict = {"owner": row.owner, "table": row.table, "obj": row.obj}
    if form.columns and (row.owner, row.table) not in seen:
        seen.add((row.owner, row.table))
        schema["columns"] = COLUMNS[(row.owner, row.table)]
    e: dict = {"op": row.op, "schema": schema}
    if form.num and row.op != "ddl":
        e["num"] = num
    if row.rid is not None:
        e["rid"] = row.rid
    if row.before is not None:
        e["before"] = _fix_numbers(row.before)
    if row.after is not None:
        e["after"] = _fix_numbers(row.after)
    if row.sql is not None:
        e["sql"] = row.sql
    return e


def messages(txs: list[Tx], form: Form) -> list[bytes]:
    """The stream of ``txs`` in ``form``: (c_scn, c_idx) as OpenLogReplicator numbers them
    (c_idx counts the messages that share a c_scn), a checkpoint message after every
    third transaction when the form has them."""
    out: list[bytes] = []
    seen: set = set()
    c_scn, idx = 0, 0

    def pos(scn: int) -> tuple[int, int]:
        nonlocal c_scn, idx
        if scn != c_scn:
            c_scn, idx = scn, 0
        p = (c_scn, idx)
        idx += 1
        return p

    for n, tx in enumerate(txs):
        first_scn = tx.rows[0].scn
        if form.whole:
            doc = _header(form, tx, pos(tx.c_scn), True, first_scn, tx.c_tm)
            doc["payload"] = [_entry(form, r, i, seen) for i, r in enumerate(tx.rows)]
            out.append(_encode(doc))
        else:
            doc = _header(form, tx, pos(tx.c_scn), True, first_scn, tx.c_tm)
            doc["payload"] = [{"op": "begin"}]
            out.append(_encode(doc))
            for i, r in enumerate(tx.rows):
                doc = _header(form, tx, pos(tx.c_scn), False, r.scn, tx.c_tm)
                doc["payload"] = [_entry(form, r, i, seen)]
                out.append(_encode(doc))
            doc = _header(form, tx, pos(tx.c_scn), False, tx.c_scn, tx.c_tm)
            doc["payload"] = [{"op": "commit"}]
            out.append(_encode(doc))
        if form.checkpoints and n % 3 == 2:
            p = pos(tx.c_scn)
            out.append(
                _encode(
                    {
                        "scn": tx.c_scn,
                        "tm": tx.c_tm,
                        "c_scn": p[0],
                        "c_idx": p[1],
                        "payload": [{"op": "chkpt", "seq": 1763, "offset": 15872 + n}],
                    }
                )
            )
    return out


def expected_rows(txs: list[Tx], form: Form) -> list[dict]:
    """The changefeed ``txs`` in ``form`` must give (contract section 7): ``c_scn`` the
    message's c_scn (here the commit SCN), ``c_tm`` the commit message's tm (else the
    transaction's first message's), ``scn`` the last one sent, ``tm`` the row message's
    own, ``thread`` the message's rth or 1, ``before``/``after`` as sent."""
    rows = []
    for tx_seq, tx in enumerate(txs):
        first_scn = tx.rows[0].scn
        for op_seq, r in enumerate(tx.rows):
            if form.whole:
                scn, tm = first_scn, tx.c_tm
            else:
                scn = r.scn if form.scn_all else first_scn
                tm = tx.c_tm if form.tm_all else None
            rows.append(
                {
                    "tx_seq": tx_seq,
                    "op_seq": op_seq,
                    "c_scn": tx.c_scn,
                    "c_tm": tx.c_tm,
                    "xid": xid_column(tx.xid, form),
                    "op": r.op,
                    "scn": scn,
                    "sub": 0,
                    "tm": tm,
                    "thread": tx.thread if form.rth else 1,
                    "owner": r.owner,
                    "table": r.table,
                    "obj": r.obj,
                    "rid": r.rid,
                    "before": r.before,
                    "after": r.after,
                    "sql": r.sql,
                }
            )
    return rows


def columns_sent(txs: list[Tx], form: Form) -> dict[tuple[str, str], list]:
    """The tables whose columns the stream gives."""
    if not form.columns:
        return {}
    return {(r.owner, r.table): COLUMNS[(r.owner, r.table)] for tx in txs for r in tx.rows}


def write_stream(path, msgs: list[bytes]) -> None:
    """A stream file for ``python -m tests.sources.olr.standin`` (one message a line)."""
    with open(path, "wb") as f:
        for m in msgs:
            assert b"\n" not in m
            f.write(m + b"\n")
