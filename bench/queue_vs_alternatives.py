"""The queue alone: append then tail ~200-byte records, durable, against the disk-backed
queues a Python user would pick.

    python bench/queue_vs_alternatives.py [--records 1000000] [--alt-records 100000]
                                          [--budget 60] [--block 4096] [--json]

Contenders (each in a fresh directory under --work; records are the same ~200-byte
byte strings, shaped like olr-buffer's queue records, seeded):

* ``LmdbQueue``, how olr-buffer uses it: ``append`` of blocks of ``--block`` records
  (4,096, the reader's default), each with a small metadata value (a reader position)
  in the same write; durable (LMDB sync + metasync: each append is on disk when it
  returns). Tail: ``queue.tailer()``, every record read back in order. ``--records``.
* ``diskcache.Deque`` over ``Cache(sqlite_synchronous=2)``: one ``append`` per record,
  each its own SQLite transaction, FULL synchronous so that each is on disk when it
  returns (diskcache's default, NORMAL in WAL mode, does not fsync a commit). Tail:
  iteration (reads without removing, like a tailer).
* ``persistqueue.SQLiteQueue(auto_commit=True)``: one ``put`` per record, committed
  (and, with SQLite's default FULL synchronous, fsync'ed) each; tail: one ``get`` per
  record, which also commits (it deletes the record): that is its only read API.

Informational rows, not targets: ``LmdbQueue`` with one record per append (durable:
the same fsync per record as the others, which shows where the gap comes from),
``diskcache.Deque`` with its default settings (no fsync per commit), and
``persistqueue.Queue`` (files: flush per put, fsync only every 100-record chunk).

A durable commit costs an fsync (see ``fsync_ms`` in the output), so one-record-per-
commit queues run at a few hundred to a few thousand records/s. They get ``--alt-records``
records (100,000) or ``--budget`` seconds per phase, whichever comes first; the output
says how many were measured. The figure is records/s of append, of tail, and of the two
together (records / (append seconds + tail seconds); if a tail phase hit the budget first,
its time is extrapolated to all the appended records at its measured rate).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

_WORDS = (
    "Kraków",
    "München",
    "São Paulo",
    "Zürich",
    "NEW",
    "PAID",
    "SHIPPED",
    "Müller",
    "García",
    "Nowak",
    "O'Brien",
    "Smith",
    "Dubois",
    "Rossi",
    "Silva",
    "fragile",
    "gift wrap",
)


def make_records(n: int, size: int = 200, seed: int = 7, pool: int = 65_536) -> list[bytes]:
    """``n`` records of about ``size`` bytes, shaped like the queue's record encoding.

    A pool of ``pool`` distinct records is cycled (a block of 4,096 never repeats one,
    so zstd sees realistic data, not copies)."""
    import orjson

    rng = random.Random(seed)
    recs = []
    for i in range(min(n, pool)):
        after = {
            "ORDER_ID": rng.randrange(10**6),
            "CUSTOMER": f"{rng.choice(_WORDS)} {rng.choice(_WORDS)}",
            "STATUS": rng.choice(_WORDS),
            "TOTAL": round(rng.uniform(5, 5000), 2),
            "NOTE": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(rng.randrange(1, 12))),
        }
        rec = orjson.dumps(
            [
                2,
                5_000_000_000 + i,
                0,
                1 + i // 5000,
                1 + i % 5000,
                1_717_200_000_000_000_000 + i * 1_000_000,
                "SALES",
                "ORDERS",
                73215,
                f"AAAR3/AAHAAA{rng.randrange(64**6):08x}",
                None,
                orjson.dumps(after).decode(),
            ]
        )
        if len(rec) < size:
            rec = rec[:-1] + b',"' + b"x" * max(0, size - len(rec) - 3) + b'"]'
        recs.append(rec)
    return [recs[i % len(recs)] for i in range(n)]


# ---------------------------------------------------------------------------------------
# Contenders: each returns (appended, append_seconds, tailed, tail_seconds, note)


def bench_lmdb(path: str, records: list[bytes], block: int, budget: float | None = None):
    from olr_buffer.txbuffer import LmdbQueue

    q = LmdbQueue(path, durable=True)
    try:
        n = 0
        t = time.perf_counter()
        deadline = t + budget if budget else float("inf")
        while n < len(records) and time.perf_counter() < deadline:
            chunk = records[n : n + block]
            q.append(chunk, {b"pos/bench": str(n + len(chunk)).encode()})
            n += len(chunk)
        t_append = time.perf_counter() - t
        t = time.perf_counter()
        tailed = nbytes = 0
        for _index, rec in q.tailer():
            tailed += 1
            nbytes += len(rec)
        t_tail = time.perf_counter() - t
        disk = sum(s.bytes for s in q.segments())
    finally:
        q.close()
    return n, t_append, tailed, t_tail, f"{disk / 1e6:.0f} MB on disk"


def bench_diskcache(path: str, records: list[bytes], budget: float, durable: bool = True):
    from diskcache import Cache, Deque

    settings = {"eviction_policy": "none"}
    if durable:
        settings["sqlite_synchronous"] = 2  # FULL: fsync every commit
    cache = Cache(path, **settings)
    try:
        dq = Deque.fromcache(cache)
        n = 0
        t = time.perf_counter()
        deadline = t + budget
        append = dq.append
        for rec in records:
            append(rec)
            n += 1
            if not n & 63 and time.perf_counter() > deadline:
                break
        t_append = time.perf_counter() - t
        t = time.perf_counter()
        tailed = 0
        for _rec in dq:
            tailed += 1
        t_tail = time.perf_counter() - t
    finally:
        cache.close()
    return n, t_append, tailed, t_tail, "synchronous=FULL" if durable else "defaults (WAL, synchronous=NORMAL)"


def bench_persist_sqlite(path: str, records: list[bytes], budget: float):
    import persistqueue

    q = persistqueue.SQLiteQueue(path, auto_commit=True)
    try:
        sync = q._conn.execute("PRAGMA synchronous").fetchone()[0]
        n = 0
        t = time.perf_counter()
        deadline = t + budget
        for rec in records:
            q.put(rec)
            n += 1
            if not n & 63 and time.perf_counter() > deadline:
                break
        t_append = time.perf_counter() - t
        t = time.perf_counter()
        tailed = 0
        deadline = t + budget
        while tailed < n:
            q.get(block=False)
            tailed += 1
            if not tailed & 63 and time.perf_counter() > deadline:
                break
        t_tail = time.perf_counter() - t
    finally:
        q.close()
    return n, t_append, tailed, t_tail, f"auto_commit=True, synchronous={sync}, get() deletes"


def bench_persist_file(path: str, records: list[bytes], budget: float):
    import persistqueue

    q = persistqueue.Queue(path, autosave=True)
    n = 0
    t = time.perf_counter()
    deadline = t + budget
    for rec in records:
        q.put(rec)
        n += 1
        if not n & 63 and time.perf_counter() > deadline:
            break
    t_append = time.perf_counter() - t
    t = time.perf_counter()
    tailed = 0
    deadline = t + budget
    while tailed < n:
        q.get(block=False)
        tailed += 1
        if not tailed & 63 and time.perf_counter() > deadline:
            break
    t_tail = time.perf_counter() - t
    return n, t_append, tailed, t_tail, "fsync per 100-record chunk only, autosave=True"


def _row(name: str, target: bool, res, unit_note: str = "") -> dict:
    n, ta, tailed, tt, note = res
    return {
        "name": name,
        "target": target,
        "appended": n,
        "append_s": ta,
        "append_per_s": benchlib.rate(n, ta),
        "tailed": tailed,
        "tail_s": tt,
        "tail_per_s": benchlib.rate(tailed, tt),
        # records / (append seconds + tail seconds); when the tail phase hit the budget
        # before reading all n records, its time is extrapolated to n at its own rate
        "combined_per_s": benchlib.rate(n, ta + (tt * n / tailed if tailed else float("inf"))),
        "note": note + unit_note,
    }


def run(args) -> dict:
    work = args.work or tempfile.mkdtemp(prefix="olr-queue-bench-")
    os.makedirs(work, exist_ok=True)
    records = make_records(args.records, args.size)
    alt = records[: args.alt_records]
    mean = sum(len(r) for r in records[:65_536]) / min(len(records), 65_536)
    rows = []

    def step(name, target, fn, *a, **kw):
        d = os.path.join(work, name.split()[0].replace(".", "_"))
        shutil.rmtree(d, ignore_errors=True)
        benchlib.wait_quiet()
        print(f"  {name} ...", file=sys.stderr, flush=True)
        row = _row(name, target, fn(d, *a, **kw))
        rows.append(row)
        shutil.rmtree(d, ignore_errors=True)
        print(
            f"  {name}: {row['appended']:,} appended at {row['append_per_s']:,.0f}/s, "
            f"{row['tailed']:,} tailed at {row['tail_per_s']:,.0f}/s, "
            f"append+tail {row['combined_per_s']:,.0f}/s ({row['note']})",
            file=sys.stderr,
            flush=True,
        )

    try:
        only = set(args.only.split(",")) if args.only else None
        if not only or "lmdb" in only:
            step(f"LmdbQueue blocks of {args.block}", True, bench_lmdb, records, args.block)
        if not only or "diskcache" in only:
            step("diskcache.Deque durable", True, bench_diskcache, alt, args.budget, True)
        if not only or "persistqueue" in only:
            step("persistqueue.SQLiteQueue", True, bench_persist_sqlite, alt, args.budget)
        if not args.no_extra and (not only or "extra" in only):
            step("LmdbQueue one record per append", False, bench_lmdb, alt, 1, args.budget)
            step("diskcache.Deque defaults", False, bench_diskcache, alt, args.budget, False)
            step("persistqueue.Queue (files)", False, bench_persist_file, alt, args.budget)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    lmdb = next((r for r in rows if r["name"].startswith("LmdbQueue blocks")), None)
    ratios = {}
    if lmdb:
        for r in rows:
            if r["target"] and r is not lmdb:
                ratios[r["name"]] = lmdb["combined_per_s"] / r["combined_per_s"]
    return {
        "name": "queue",
        "record_bytes_mean": mean,
        "fsync_ms": benchlib.fsync_latency(work if args.work else tempfile.gettempdir()) * 1e3,
        "rows": rows,
        "ratios": ratios,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="records for LmdbQueue (blocks)")
    ap.add_argument("--alt-records", type=int, default=100_000, help="at most this many records for the others")
    ap.add_argument("--budget", type=float, default=60.0, help="at most this many seconds per phase for the others")
    ap.add_argument("--block", type=int, default=4096, help="records per LmdbQueue append")
    ap.add_argument("--size", type=int, default=200, help="approximate record size in bytes")
    ap.add_argument("--work", help="work directory (default: a temporary one, removed)")
    ap.add_argument("--only", help="comma list of lmdb,diskcache,persistqueue,extra")
    ap.add_argument("--no-extra", action="store_true", help="skip the informational rows")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = ap.parse_args()
    r = run(args)
    if args.json:
        benchlib.print_json(r)
        return
    print(f"records of {r['record_bytes_mean']:.0f} bytes on average; one fsync costs {r['fsync_ms']:.2f} ms here")
    print(f"{'queue':40} {'records':>10} {'append/s':>12} {'tail/s':>12} {'append+tail/s':>14}  note")
    for row in r["rows"]:
        print(
            f"{row['name'] + ('' if row['target'] else ' (info)'):40} {row['appended']:>10,} "
            f"{row['append_per_s']:>12,.0f} {row['tail_per_s']:>12,.0f} {row['combined_per_s']:>14,.0f}  {row['note']}"
        )
    for name, ratio in r["ratios"].items():
        print(f"LmdbQueue / {name}: {ratio:,.0f}x (target >= 30x) {'MET' if ratio >= 30 else 'NOT MET'}")


if __name__ == "__main__":
    main()
