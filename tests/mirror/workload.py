"""A redo workload for the mirror: tables whose ``ddl`` records carry ``columns`` (so the
changefeed has their schema documents), inserts, updates with partial images (only the
changed columns, as Oracle's redo carries them), updates that change the key, deletes,
an added and a dropped column, a table without a key (its changes carry whole rows);
and the model: each table's final rows computed from the changefeed's rows alone, by
rules written out plainly here (not the mirror's code)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from pathlib import Path

import pyarrow.parquet as pq

ORDERS = [
    {"name": "ORDER_ID", "type": "NUMBER(10)", "key": True},
    {"name": "TOTAL", "type": "NUMBER(12,2)"},
    {"name": "CITY", "type": "VARCHAR2(40)"},
    {"name": "CREATED", "type": "TIMESTAMP(6)"},
    {"name": "TAG", "type": "RAW(8)"},
]
ORDERS_ADDED = ORDERS + [{"name": "NOTE", "type": "VARCHAR2(100)"}]
ITEMS = [
    {"name": "ORDER_ID", "type": "NUMBER(10)", "key": True},
    {"name": "LINE_NO", "type": "NUMBER(3)", "key": True},
    {"name": "QTY", "type": "NUMBER(5)"},
    {"name": "PRICE", "type": "BINARY_DOUBLE"},
    {"name": "SKU", "type": "VARCHAR2(20)"},
]
ITEMS_DROPPED = [c for c in ITEMS if c["name"] != "SKU"]
LOG = [{"name": "MSG", "type": "VARCHAR2(100)"}, {"name": "LEVEL", "type": "NUMBER(2)"}]
CITIES = ["Kraków", "Berlin", "Lyon", "São Paulo", "Osaka", None]


def _value(r: random.Random, column: str, key: int = 0):
    if column == "TOTAL":
        return str(decimal.Decimal(r.randrange(0, 10**9)) / 100) if r.random() < 0.5 else r.randrange(0, 10**6)
    if column == "CITY":
        return r.choice(CITIES)
    if column == "CREATED":
        return (
            dt.datetime(2024, 1, 1) + dt.timedelta(seconds=r.randrange(10**8), microseconds=r.randrange(10**6))
        ).isoformat(sep=" ")
    if column == "TAG":
        return r.randbytes(r.randrange(0, 8)).hex() if r.random() < 0.9 else None
    if column == "NOTE":
        return r.choice(["fragile ☂", "call first", None])
    if column == "QTY":
        return r.randrange(1, 99999)
    if column == "PRICE":
        return r.choice([1.5, 0.1, 1e10, r.random() * 100])
    if column == "SKU":
        return f"SKU-{r.randrange(10**5):05d}"
    if column == "MSG":
        return r.choice(["started", "stopped", "warn: disk", "ok"])
    if column == "LEVEL":
        return r.randrange(0, 5)
    raise KeyError(column)


def write_workload(out: Path, seed: int, transactions: int = 300) -> None:
    """One redo thread's log files under ``out`` (several sequences)."""
    r = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    lines: list[dict] = []
    scn = [1000]

    def nxt() -> int:
        scn[0] += r.randrange(1, 3)
        return scn[0]

    def ddl(xid: str, table: str, columns: list[dict]) -> dict:
        return {
            "op": "ddl",
            "scn": nxt(),
            "xid": xid,
            "owner": "SHOP",
            "table": table,
            "sql": f"-- {table}",
            "columns": columns,
        }

    orders: dict[int, dict] = {}
    items: dict[tuple, dict] = {}
    log: list[dict] = []
    orders_columns, items_columns = ORDERS, ITEMS
    next_order = 1
    xid_n = 0
    rid_n = 0
    for t in range(transactions):
        xid_n += 1
        xid = f"0x0001.000.{xid_n:08x}"
        tx = [{"op": "begin", "scn": nxt(), "xid": xid}]
        if t == 0:
            tx += [ddl(xid, "ORDERS", ORDERS), ddl(xid, "ITEMS", ITEMS), ddl(xid, "LOG", LOG)]
        if t == transactions // 3:
            orders_columns = ORDERS_ADDED
            tx.append(ddl(xid, "ORDERS", ORDERS_ADDED))
        if t == transactions // 2:
            items_columns = ITEMS_DROPPED
            tx.append(ddl(xid, "ITEMS", ITEMS_DROPPED))
            for row in items.values():
                row.pop("SKU", None)
        for _ in range(r.randrange(1, 6)):
            rid_n += 1
            rid = f"AAAR{rid_n:014d}"
            what = r.random()
            if what < 0.3 or not orders:
                key = next_order
                next_order += 1
                row = {c["name"]: _value(r, c["name"]) for c in orders_columns if c["name"] != "ORDER_ID"}
                row["ORDER_ID"] = key
                orders[key] = row
                tx.append(
                    {
                        "op": "insert",
                        "scn": nxt(),
                        "xid": xid,
                        "owner": "SHOP",
                        "table": "ORDERS",
                        "rid": rid,
                        "after": dict(row),
                    }
                )
            elif what < 0.5:
                key = r.choice(list(orders))
                row = orders[key]
                changed = r.sample([c["name"] for c in orders_columns if c["name"] != "ORDER_ID"], r.randrange(1, 3))
                before = {"ORDER_ID": key, **{c: row.get(c) for c in changed}}
                after = {c: _value(r, c) for c in changed}
                if r.random() < 0.2:  # the key changes
                    new = next_order
                    next_order += 1
                    after["ORDER_ID"] = new
                    del orders[key]
                    orders[new] = {**row, **after}
                else:
                    row.update(after)
                tx.append(
                    {
                        "op": "update",
                        "scn": nxt(),
                        "xid": xid,
                        "owner": "SHOP",
                        "table": "ORDERS",
                        "rid": rid,
                        "before": before,
                        "after": after,
                    }
                )
            elif what < 0.58:
                key = r.choice(list(orders))
                row = orders.pop(key)
                tx.append(
                    {
                        "op": "delete",
                        "scn": nxt(),
                        "xid": xid,
                        "owner": "SHOP",
                        "table": "ORDERS",
                        "rid": rid,
                        "before": {"ORDER_ID": key, "TOTAL": row.get("TOTAL")},
                    }
                )
            elif what < 0.75 or not items:
                key = (r.choice(list(orders) or [0]), r.randrange(1, 5))
                row = {
                    c["name"]: _value(r, c["name"]) for c in items_columns if c["name"] not in ("ORDER_ID", "LINE_NO")
                }
                row.update({"ORDER_ID": key[0], "LINE_NO": key[1]})
                op = "update" if key in items else "insert"
                rec = {
                    "op": op,
                    "scn": nxt(),
                    "xid": xid,
                    "owner": "SHOP",
                    "table": "ITEMS",
                    "rid": rid,
                    "after": dict(row),
                }
                if op == "update":
                    rec["before"] = {"ORDER_ID": key[0], "LINE_NO": key[1]}
                items[key] = row
                tx.append(rec)
            elif what < 0.85:
                key = r.choice(list(items))
                items.pop(key)
                tx.append(
                    {
                        "op": "delete",
                        "scn": nxt(),
                        "xid": xid,
                        "owner": "SHOP",
                        "table": "ITEMS",
                        "rid": rid,
                        "before": {"ORDER_ID": key[0], "LINE_NO": key[1]},
                    }
                )
            elif what < 0.95 or not log:
                row = {"MSG": _value(r, "MSG"), "LEVEL": _value(r, "LEVEL")}
                log.append(row)
                tx.append(
                    {
                        "op": "insert",
                        "scn": nxt(),
                        "xid": xid,
                        "owner": "SHOP",
                        "table": "LOG",
                        "rid": rid,
                        "after": row,
                    }
                )
            else:
                row = log.pop(r.randrange(len(log)))
                if r.random() < 0.5:
                    tx.append(
                        {
                            "op": "delete",
                            "scn": nxt(),
                            "xid": xid,
                            "owner": "SHOP",
                            "table": "LOG",
                            "rid": rid,
                            "before": dict(row),
                        }
                    )
                else:
                    new = {**row, "LEVEL": _value(r, "LEVEL")}
                    log.append(new)
                    tx.append(
                        {
                            "op": "update",
                            "scn": nxt(),
                            "xid": xid,
                            "owner": "SHOP",
                            "table": "LOG",
                            "rid": rid,
                            "before": dict(row),
                            "after": {"LEVEL": new["LEVEL"]},
                        }
                    )
        tx.append({"op": "commit", "scn": nxt(), "xid": xid, "tm": 1717200000000000000 + scn[0] * 1000})
        lines += tx
    per_file = max(1, len(lines) // 4)
    for seq, start in enumerate(range(0, len(lines), per_file), start=1):
        chunk = lines[start : start + per_file]
        (out / f"redo_1_{seq}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in chunk))


# -- the model -----------------------------------------------------------------------------

TYPES = {"NUMBER": "decimal", "BINARY_DOUBLE": "double", "VARCHAR2": "text", "TIMESTAMP": "timestamp", "RAW": "raw"}


def _expected(value, oracle: str):
    if value is None:
        return None
    kind = TYPES[oracle.split("(")[0]]
    if kind == "decimal":
        return decimal.Decimal(str(value))
    if kind == "double":
        return float(value)
    if kind == "timestamp":
        return dt.datetime.fromisoformat(value)
    if kind == "raw":
        return bytes.fromhex(value)
    return value


def model(changefeed: Path, puts: dict | None = None) -> dict[str, list[dict]]:
    """Each table's rows after the changefeed's last transaction (the columns the mirror
    table has, dropped ones null where a later change wrote the row; with tx_seq)."""
    columns = ["tx_seq", "op_seq", "op", "table", "before", "after", "schema_version"]
    if (changefeed / "_delta_log").is_dir():  # a Delta changefeed: the files of its table (compaction leaves others)
        from deltalake import DeltaTable

        table = DeltaTable(str(changefeed)).to_pyarrow_table(columns=columns)
    else:
        table = pq.read_table(changefeed, columns=columns)
    rows = table.sort_by([("tx_seq", "ascending"), ("op_seq", "ascending")]).to_pylist()
    schemas = {}
    for path in (changefeed / "_olr_buffer" / "schemas").glob("*.json"):
        schemas[path.stem] = json.loads(path.read_text())
    keys = {"ORDERS": ["ORDER_ID"], "ITEMS": ["ORDER_ID", "LINE_NO"], "LOG": []}
    types = {c["name"]: c["type"] for c in ORDERS_ADDED + ITEMS + LOG}
    state: dict[str, dict] = {t: {} for t in keys}
    current: dict[str, list[str]] = {}
    for row in rows:
        table = row["table"]
        if row["schema_version"]:
            current[table] = [c["name"] for c in schemas[row["schema_version"]]["columns"]]
        if row["op"] == "ddl":
            continue
        before = json.loads(row["before"]) if row["before"] else None
        after = json.loads(row["after"]) if row["after"] else None
        rows_of = state[table]
        names = current[table]
        if not keys[table]:  # a list of rows, matched by their whole value
            bag = rows_of.setdefault("bag", [])
            if row["op"] in ("u", "d"):
                old = {n: before.get(n) for n in names}
                for i, (have, _) in enumerate(bag):
                    if {n: have.get(n) for n in names} == old:
                        del bag[i]
                        break
            if row["op"] == "c":
                bag.append(({n: after.get(n) for n in names}, row["tx_seq"]))
            if row["op"] == "u":
                bag.append(({**{n: before.get(n) for n in names}, **after}, row["tx_seq"]))
            continue
        key_names = keys[table]
        if row["op"] == "c":
            rows_of[tuple(after[k] for k in key_names)] = ({n: after.get(n) for n in names}, row["tx_seq"])
            key = tuple(after[k] for k in key_names)
        elif row["op"] == "d":
            key = tuple(before[k] for k in key_names)
            rows_of.pop(key)
            _unseen(puts, table, key, key_names, types, row["tx_seq"])
        else:
            old = tuple(before[k] for k in key_names)
            was = rows_of.pop(old)[0]
            new_row = {n: was.get(n) for n in names}
            new_row.update(before)
            new_row.update(after)
            key = tuple(new_row[k] for k in key_names)
            rows_of[key] = (new_row, row["tx_seq"])
            if key != old:
                _unseen(puts, table, old, key_names, types, row["tx_seq"])
        if puts is not None and row["op"] in ("c", "u"):  # the transactions that left a version of the key
            puts.setdefault(table, {}).setdefault(
                tuple(_expected(v, types[n]) for v, n in zip(key, key_names)), set()
            ).add(row["tx_seq"])
    out = {}
    for table, rows_of in state.items():
        entries = rows_of.get("bag", []) if not keys[table] else list(rows_of.values())
        out[table] = sorted(
            ({**{n: _expected(v, types[n]) for n, v in r.items() if n in types}, "tx_seq": tx} for r, tx in entries),
            key=repr,
        )
    return out


def _unseen(puts: dict | None, table: str, key: tuple, key_names: list, types: dict, tx_seq: int) -> None:
    """A key removed by the transaction that wrote it: that version was never seen."""
    if puts is not None:
        txs = puts.get(table, {}).get(tuple(_expected(v, types[n]) for v, n in zip(key, key_names)), set())
        txs.discard(tx_seq)
