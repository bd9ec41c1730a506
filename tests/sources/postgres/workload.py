"""Concurrent clients against the test database, and the oracle: the database itself.

Each client records the ``txid_current()`` of every transaction it commits and of every
one it rolls back. At the end the state rebuilt from the changefeed (by ``rid``) must
equal every table's rows, every committed transaction must be published exactly once
and no rolled-back one at all.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psycopg2

from tests.contract_model import load_changefeed

SCHEMA = """
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, note text);
CREATE TABLE docs (id int PRIMARY KEY, title text, body text);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE full_rows (id int PRIMARY KEY, a int, b text);
ALTER TABLE full_rows REPLICA IDENTITY FULL;
CREATE TABLE events (id bigserial PRIMARY KEY, client int, n int, v numeric, j jsonb, ok boolean);
CREATE TABLE scratch (id int PRIMARY KEY, v int);
"""
TABLES = ("accounts", "docs", "full_rows", "events", "scratch")


def create_schema(db) -> None:
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute(SCHEMA)
        cur.execute("INSERT INTO accounts SELECT g, g * 10, 'seed' FROM generate_series(1, 200) g")
        cur.execute("INSERT INTO docs SELECT g, 'd' || g, repeat(md5(g::text), 200) FROM generate_series(1, 20) g")
        cur.execute("INSERT INTO full_rows SELECT g, g, 'f' || g FROM generate_series(1, 50) g")
    conn.close()


@dataclass
class Outcome:
    committed: set[int] = field(default_factory=set)
    rolled_back: set[int] = field(default_factory=set)
    errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, xid: int, ok: bool) -> None:
        with self.lock:
            (self.committed if ok else self.rolled_back).add(xid & 0xFFFFFFFF)


class Client(threading.Thread):
    """Runs ``n`` random transactions of every kind the issue lists."""

    def __init__(
        self, db, number: int, n: int, outcome: Outcome, large_rows: int = 0, seed: int = 0, pause: float = 0.0
    ) -> None:
        super().__init__(name=f"client-{number}", daemon=True)
        self.pause = pause
        self.db, self.number, self.n, self.outcome, self.large_rows = db, number, n, outcome, large_rows
        self.rng = random.Random(seed * 1000 + number)

    def run(self) -> None:
        try:
            conn = self.db.connect(autocommit=False)
            for i in range(self.n):
                self._one(conn, i)
                if i == self.n // 2 and self.large_rows:
                    self._large(conn)
                if self.pause:
                    time.sleep(self.pause)
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.outcome.errors.append(exc)

    def _txn(self, conn, body, commit: bool = True) -> None:
        for _ in range(20):
            with conn.cursor() as cur:
                try:
                    cur.execute("SELECT txid_current()")
                    (xid,) = cur.fetchone()
                    body(cur)
                except (
                    psycopg2.errors.DeadlockDetected,
                    psycopg2.errors.UniqueViolation,
                    psycopg2.errors.SerializationFailure,
                ):
                    conn.rollback()
                    self.outcome.add(xid, False)
                    continue
            if commit:
                conn.commit()
            else:
                conn.rollback()
            self.outcome.add(xid, commit)
            return

    def _one(self, conn, i: int) -> None:
        rng, c = self.rng, self.number
        kind = rng.choice(["small", "small", "savepoints", "rollback", "key", "toast", "full", "truncate"])
        base = 10_000 * (c + 1) + i * 10  # keys of this client: no conflicts between clients

        def ev(cur, n):
            cur.execute(
                "INSERT INTO events (client, n, v, j, ok) VALUES (%s, %s, %s, %s, %s)",
                (
                    c,
                    n,
                    rng.choice(["1.50", "-0.000123", "12345678901234567890.5", "NaN"]),
                    json.dumps({"c": c, "n": n, "s": 'é"x'}),
                    rng.random() < 0.5,
                ),
            )

        if kind == "small":

            def body(cur):
                ev(cur, i)
                cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (rng.randint(1, 200),))
                cur.execute("INSERT INTO accounts VALUES (%s, 0, 'new')", (base,))
                if rng.random() < 0.5:
                    cur.execute("DELETE FROM accounts WHERE id = %s", (base,))

            self._txn(conn, body)
        elif kind == "savepoints":

            def body(cur):
                ev(cur, i)
                cur.execute("SAVEPOINT a")
                ev(cur, -1)  # rolled back below
                cur.execute("SAVEPOINT b")
                ev(cur, -2)
                cur.execute("RELEASE SAVEPOINT b")
                cur.execute("ROLLBACK TO SAVEPOINT a")
                cur.execute("SAVEPOINT c")
                ev(cur, i)
                cur.execute("SAVEPOINT d")
                ev(cur, -3)
                cur.execute("ROLLBACK TO SAVEPOINT d")
                cur.execute("RELEASE SAVEPOINT c")
                ev(cur, i)

            self._txn(conn, body)
        elif kind == "rollback":
            self._txn(conn, lambda cur: (ev(cur, -4), ev(cur, -5)), commit=False)
        elif kind == "key":

            def body(cur):
                cur.execute("INSERT INTO accounts VALUES (%s, 1, 'k')", (base + 1,))
                cur.execute("UPDATE accounts SET id = %s, note = 'moved' WHERE id = %s", (base + 2, base + 1))

            self._txn(conn, body)
        elif kind == "toast":

            def body(cur):
                cur.execute("UPDATE docs SET title = %s WHERE id = %s", (f"t{c}-{i}", rng.randint(1, 20)))

            self._txn(conn, body)
        elif kind == "full":

            def body(cur):
                cur.execute("UPDATE full_rows SET a = a + 1, b = %s WHERE id = %s", (f"b{i}", rng.randint(1, 50)))
                cur.execute("DELETE FROM full_rows WHERE id = %s", (1000 + base,))
                cur.execute("INSERT INTO full_rows VALUES (%s, 0, 'x')", (1000 + base,))

            self._txn(conn, body)
        elif kind == "truncate":

            def body(cur):
                cur.execute("LOCK TABLE scratch")
                cur.execute("TRUNCATE scratch")
                cur.execute("INSERT INTO scratch SELECT g, %s FROM generate_series(1, 5) g", (c,))

            self._txn(conn, body)

    def _large(self, conn) -> None:
        """A transaction large enough to stream, with a subtransaction rolled back in the middle."""
        half = self.large_rows // 2

        def body(cur):
            cur.execute(
                "INSERT INTO events (client, n, v) SELECT %s, g, g FROM generate_series(1, %s) g", (self.number, half)
            )
            cur.execute("SAVEPOINT big")
            cur.execute(
                "INSERT INTO events (client, n, v) SELECT %s, -g, g FROM generate_series(1, %s) g", (self.number, half)
            )
            cur.execute("ROLLBACK TO SAVEPOINT big")
            # nested, the child writing before its parent (which gets its xid first), both
            # streamed, then rolled back together: the server aborts the child first
            cur.execute("SAVEPOINT outer_sp")
            cur.execute("SAVEPOINT inner_sp")
            cur.execute(
                "INSERT INTO events (client, n, v) SELECT %s, -g, g FROM generate_series(1, %s) g", (self.number, half)
            )
            cur.execute("RELEASE SAVEPOINT inner_sp")
            cur.execute(
                "INSERT INTO events (client, n, v) SELECT %s, -g, g FROM generate_series(1, %s) g", (self.number, half)
            )
            cur.execute("ROLLBACK TO SAVEPOINT outer_sp")
            cur.execute("RELEASE SAVEPOINT outer_sp")
            # a savepoint released, its rows kept
            cur.execute("SAVEPOINT kept")
            cur.execute(
                "INSERT INTO events (client, n, v) SELECT %s, g, g FROM generate_series(%s, %s) g",
                (self.number, half + 1, self.large_rows),
            )
            cur.execute("RELEASE SAVEPOINT kept")

        self._txn(conn, body)


def run_clients(
    db, clients: int, per_client: int, large_rows: int, seed: int = 0, pause: float = 0.0, number0: int = 0
) -> Outcome:
    """``clients`` clients, each ``per_client`` transactions (every ``pause`` seconds); the
    first two also run one large transaction of ``large_rows`` rows halfway."""
    outcome = Outcome()
    threads = [
        Client(db, number0 + c, per_client, outcome, large_rows if c < 2 else 0, seed, pause) for c in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not outcome.errors, outcome.errors
    return outcome


def _rid(row: dict) -> str:
    return json.dumps({"id": row["id"]}, separators=(",", ":"))


def database_state(db) -> dict[str, dict[str, dict]]:
    state = {}
    for table in TABLES:
        rows = db.execute(f"SELECT row_to_json(t)::text FROM {table} t")
        state[table] = {_rid(json.loads(r)): json.loads(r) for (r,) in rows}
    return state


def changefeed_state(rows: list[dict]) -> dict[str, dict[str, dict]]:
    state: dict[str, dict[str, dict]] = {t: {} for t in TABLES}
    for row in rows:
        table = state.setdefault(row["table"], {})
        op, rid = row["op"], row["rid"]
        if op in ("r", "c"):
            assert rid not in table, f"insert of an existing row {row}"
            table[rid] = row["after"]
        elif op == "u":
            assert rid in table, f"update of a missing row {row}"
            table[rid] = {**table[rid], **row["after"]}
        elif op == "d":
            assert rid in table, f"delete of a missing row {row}"
            del table[rid]
        elif op == "t":
            table.clear()
    return state


def check_against_database(db, cf: Path, outcome: Outcome) -> list[dict]:
    rows = load_changefeed(cf)
    got = changefeed_state(rows)
    want = database_state(db)
    for table in TABLES:
        g, w = got[table], want[table]
        missing = set(w) - set(g)
        extra = set(g) - set(w)
        assert not missing and not extra, f"{table}: missing {sorted(missing)[:5]} extra {sorted(extra)[:5]}"
        diff = [k for k in w if g[k] != w[k]]
        assert not diff, (
            f"{table}: {len(diff)} rows differ, e.g. {diff[0]}: changefeed {g[diff[0]]} database {w[diff[0]]}"
        )
    per_xid = Counter()
    seqs: dict[str, set] = {}
    for row in rows:
        seqs.setdefault(row["xid"], set()).add(row["tx_seq"])
    for xid, s in seqs.items():
        per_xid[xid] = len(s)
    published = {int(x) for x in seqs if not x.startswith("copy-")}
    twice = {x: n for x, n in per_xid.items() if n > 1}
    assert not twice, f"transactions published more than once: {twice}"
    assert outcome.committed <= published, f"committed, not published: {sorted(outcome.committed - published)[:10]}"
    assert not (outcome.rolled_back & published), f"rolled back, published: {sorted(outcome.rolled_back & published)}"
    return rows
