"""The naive in-memory buffer a Python programmer would write first.

    python bench/naive_buffer.py INPUT_DIR [--out DIR] [--json] [--quiet-gc]

What it does, in plain Python:

* reads each thread's log files in sequence order, one line at a time, and parses every
  line with the standard ``json`` module (``.jsonl.zst`` through a zstd stream);
* merges the threads with ``heapq.merge`` on ``(scn, sub)`` (ties: thread order);
* keeps a dict of open transactions, ``xid -> list of row dicts``, in memory;
* on ``commit`` of a transaction that had a ``begin`` and has rows, appends its rows to
  column lists; every 65,536 rows they become a ``pyarrow`` table written as a row group
  of the open Parquet file (zstd); a file is closed (fsync'ed unless ``--no-sync``) and
  renamed once it holds 1,000,000 rows, at a transaction boundary;
* on ``rollback`` drops the transaction.

The output has the changefeed's columns (``before``/``after`` as JSON text).

It is correct for the common case, which is all the simulated workload needs, and it is
not olr-buffer: it holds every open transaction's rows in memory (a 1.5-million-row
transaction costs gigabytes), it remembers nothing across a restart (a crash means
re-reading all the input), and it skips the subtleties of the contract:

* compensation is the simple form: a ``"rollback": true`` record removes the latest
  remaining row of the same transaction with the same ``rid`` (a linear scan back);
* no watermark: it reads every file to the end (offline), so the global ``(scn, sub)``
  merge order stands in for it; it would be wrong for logs that are still growing;
* no validation of the input, no check of SCN order, no exactly-once publication, no
  manifest; rows are in merge order, not ``(scn, sub, thread, sequence, line)``;
* transactions are emitted in the merge order of their commits (``(scn, sub, thread)``).

The garbage collector is left as Python sets it, as a first program would; ``--quiet-gc``
freezes it and raises its threshold the way ``olr-buffer`` does (an informational row of
``bench/run_all.py``).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import os
import sys
import time
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

ROW_OPS = {"insert": "c", "update": "u", "delete": "d", "ddl": "ddl"}
BATCH_ROWS = 65_536
FILE_ROWS = 1_000_000


def thread_records(thread: int, paths: list) -> Iterator[tuple]:
    """``(scn, sub, thread, n, record)`` for every line of one thread, in file order."""
    n = 0
    for p in paths:
        if p.suffix == ".zst":
            import io

            import zstandard

            fh = io.BufferedReader(zstandard.open(p, "rb"), 1 << 20)
        else:
            fh = open(p, "rb")
        with fh:
            for line in fh:
                rec = json.loads(line)
                n += 1
                yield rec["scn"], rec.get("sub", 0), thread, n, rec


class ParquetOut:
    """Column lists -> row groups -> files of about FILE_ROWS rows."""

    def __init__(self, out_dir: str, durable: bool) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from olr_buffer.sinks.parquet.schema import ARROW_SCHEMA

        self.pa, self.pq, self.schema = pa, pq, ARROW_SCHEMA
        self.out_dir = out_dir
        self.durable = durable
        self.cols: dict[str, list] = {name: [] for name in ARROW_SCHEMA.names}
        self.batch = 0
        self.writer = None
        self.tmp = ""
        self.file_first = 0
        self.file_rows = 0
        self.files = 0

    def add_transaction(self, tx_seq: int, commit: dict, rows: list[tuple[int, dict]]) -> None:
        c = self.cols
        c_scn, c_tm, xid = commit["scn"], commit.get("tm"), commit["xid"]
        for op_seq, (thread, r) in enumerate(rows):
            c["tx_seq"].append(tx_seq)
            c["op_seq"].append(op_seq)
            c["c_scn"].append(c_scn)
            c["c_tm"].append(c_tm)
            c["xid"].append(xid)
            c["op"].append(ROW_OPS[r["op"]])
            c["scn"].append(r["scn"])
            c["sub"].append(r.get("sub", 0))
            c["tm"].append(r.get("tm"))
            c["thread"].append(thread)
            c["owner"].append(r["owner"])
            c["table"].append(r["table"])
            c["obj"].append(r.get("obj"))
            c["rid"].append(r.get("rid"))
            b, a = r.get("before"), r.get("after")
            c["before"].append(None if b is None else json.dumps(b, ensure_ascii=False, separators=(",", ":")))
            c["after"].append(None if a is None else json.dumps(a, ensure_ascii=False, separators=(",", ":")))
            c["sql"].append(r.get("sql"))
            c["c_ts"].append(None if c_tm is None else c_tm // 1000)  # timestamp columns: microseconds
            tm = r.get("tm")
            c["ts"].append(None if tm is None else tm // 1000)
            c["schema_version"].append(None)  # the naive buffer keeps no schema documents
        self.batch += len(rows)
        self.file_rows += len(rows)
        if self.batch >= BATCH_ROWS:
            self.write_batch(tx_seq)
        if self.file_rows >= FILE_ROWS:
            self.close_file(tx_seq)

    def write_batch(self, tx_seq: int) -> None:
        if not self.batch:
            return
        if self.writer is None:
            self.file_first = tx_seq if self.file_rows == self.batch else self.file_first
            self.tmp = os.path.join(self.out_dir, f".tmp-{self.files}.parquet")
            self.writer = self.pq.ParquetWriter(self.tmp, self.schema, compression="zstd")
        table = self.pa.Table.from_pydict(self.cols, schema=self.schema)
        self.writer.write_table(table)
        for v in self.cols.values():
            v.clear()
        self.batch = 0

    def close_file(self, last_tx_seq: int) -> None:
        self.write_batch(last_tx_seq)
        if self.writer is None:
            return
        self.writer.close()
        if self.durable:
            benchlib.fsync_path(self.tmp)
        name = f"part-{self.files:05d}-{last_tx_seq:020d}.parquet"
        os.replace(self.tmp, os.path.join(self.out_dir, name))
        if self.durable:
            benchlib.fsync_path(self.out_dir)
        self.writer = None
        self.file_rows = 0
        self.files += 1


def run(input_dir: str, out_dir: str, *, durable: bool = True) -> dict:
    t = time.perf_counter()
    streams = [thread_records(th, paths) for th, paths in benchlib.log_files(input_dir).items()]
    out = ParquetOut(out_dir, durable)
    open_tx: dict[str, list[tuple[int, dict]]] = {}
    began: set[str] = set()
    records = tx_seq = rows_out = rolled_back = no_begin = empty = comps = 0
    for _scn, _sub, thread, _n, rec in heapq.merge(*streams):
        records += 1
        op = rec["op"]
        if op == "lwn":
            continue
        xid = rec["xid"]
        if op == "begin":
            began.add(xid)
            open_tx.setdefault(xid, [])
        elif op == "commit":
            rows = open_tx.pop(xid, [])
            if xid not in began:
                no_begin += 1
            elif rows:
                out.add_transaction(tx_seq, rec, rows)
                tx_seq += 1
                rows_out += len(rows)
            else:
                empty += 1
            began.discard(xid)
        elif op == "rollback":
            open_tx.pop(xid, None)
            began.discard(xid)
            rolled_back += 1
        elif rec.get("rollback"):
            comps += 1
            rows = open_tx.get(xid, [])
            rid = rec.get("rid")
            for i in range(len(rows) - 1, -1, -1):
                if rows[i][1].get("rid") == rid:
                    del rows[i]
                    break
        else:
            open_tx.setdefault(xid, []).append((thread, rec))
    out.close_file(tx_seq - 1)
    seconds = time.perf_counter() - t
    return {
        "name": "naive",
        "records": records,
        "transactions_published": tx_seq,
        "rows_published": rows_out,
        "rolled_back": rolled_back,
        "no_begin": no_begin,
        "empty": empty,
        "compensations": comps,
        "still_open": len(open_tx),
        "files": out.files,
        "seconds": seconds,
        "records_per_s": benchlib.rate(records, seconds),
        "durable": durable,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input_dir")
    ap.add_argument("--out", help="output directory (default: a temporary one, removed)")
    ap.add_argument("--no-sync", action="store_true", help="do not fsync the Parquet files")
    ap.add_argument("--quiet-gc", action="store_true", help="freeze the GC and raise its threshold, as olr-buffer does")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = ap.parse_args()
    import shutil
    import tempfile

    if args.quiet_gc:
        gc.freeze()
        gc.set_threshold(200_000, 50, 100)
    out = args.out or tempfile.mkdtemp(prefix="olr-naive-")
    try:
        if args.out:
            benchlib.fresh_dir(out)
        r = run(args.input_dir, out, durable=not args.no_sync)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    r["quiet_gc"] = args.quiet_gc
    if args.json:
        benchlib.print_json(r)
    else:
        print(
            f"naive buffer: {r['records']:,} records, {r['transactions_published']:,} transactions, "
            f"{r['rows_published']:,} rows in {r['seconds']:.2f}s = {r['records_per_s']:,.0f} records/s; "
            f"durable={r['durable']} quiet_gc={r['quiet_gc']}"
        )


if __name__ == "__main__":
    main()
