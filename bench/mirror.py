"""Benchmark of ``olr-buffer mirror`` (docs/mirror.md, "Performance").

A redo input of ``--changes`` changes over ``--tables`` tables (each with a key, eight
columns of the usual types: numbers, text, a timestamp; 60 % updates with partial images,
25 % inserts, 15 % deletes, ten changes a transaction), replayed into a changefeed (not
timed); then, timed:

* the backlog: ``mirror --until-caught-up`` of the whole changefeed into an empty target,
  in batches of ``--batch-rows``: changes applied per second, and the target's size
  against the changefeed's;
* the cost of one commit: a transaction of one change to one table, published and
  mirrored alone, ``--commits`` times: the median time of the mirror's batch (its MERGE
  and its progress note).

    python bench/mirror.py [--changes 1000000] [--tables 10] [--batch-rows 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402
from deltalake import DeltaTable  # noqa: E402

from olr_buffer.mirror import Mirror, MirrorOptions, mirror  # noqa: E402
from olr_buffer.runtime import PipelineOptions, replay  # noqa: E402

COLUMNS = [
    ("ID", "NUMBER(10)", True),
    ("AMOUNT", "NUMBER(12,2)", False),
    ("QTY", "NUMBER(9)", False),
    ("NAME", "VARCHAR2(40)", False),
    ("CITY", "VARCHAR2(40)", False),
    ("CREATED", "TIMESTAMP(6)", False),
    ("RATE", "BINARY_DOUBLE", False),
    ("NOTE", "VARCHAR2(200)", False),
]


def _row(r: random.Random, key: int) -> dict:
    return {
        "ID": key,
        "AMOUNT": f"{r.randrange(10**8) / 100:.2f}",
        "QTY": r.randrange(10**6),
        "NAME": f"name-{r.randrange(10**6)}",
        "CITY": r.choice(["Kraków", "Lyon", "Osaka", "Lima"]),
        "CREATED": (
            f"2024-0{r.randrange(1, 10)}-1{r.randrange(10)} 12:{r.randrange(10, 60)}:00.{r.randrange(10**6):06d}"
        ),
        "RATE": r.random(),
        "NOTE": None if r.random() < 0.5 else "note " * r.randrange(1, 8),
    }


def write_input(out: Path, changes: int, tables: int, seed: int = 1) -> None:
    r = random.Random(seed)
    out.mkdir(parents=True)
    keys: list[list[int]] = [[] for _ in range(tables)]
    next_key = [1] * tables
    scn, n, seq, done = 1000, 0, 1, 0
    fh = open(out / f"redo_1_{seq}.jsonl", "w")
    lines = 0

    def emit(rec: dict) -> None:
        nonlocal scn, lines
        scn += 1
        rec["scn"] = scn
        fh.write(json.dumps(rec) + "\n")
        lines += 1

    while done < changes:
        xid = f"x{n}"
        n += 1
        emit({"op": "begin", "xid": xid})
        if n == 1:
            for t in range(tables):
                emit(
                    {
                        "op": "ddl",
                        "xid": xid,
                        "owner": "B",
                        "table": f"T{t}",
                        "sql": "--",
                        "columns": [{"name": c, "type": ty, "key": k} for c, ty, k in COLUMNS],
                    }
                )
        for _ in range(10):
            t = r.randrange(tables)
            what = r.random()
            base = {"xid": xid, "owner": "B", "table": f"T{t}", "rid": "R"}
            if what < 0.25 or len(keys[t]) < 10:
                k = next_key[t]
                next_key[t] += 1
                keys[t].append(k)
                emit({**base, "op": "insert", "after": _row(r, k)})
            elif what < 0.85:
                k = r.choice(keys[t])
                full = _row(r, k)
                changed = r.sample(COLUMNS[1:], 2)
                emit({**base, "op": "update", "before": {"ID": k}, "after": {c: full[c] for c, _, _ in changed}})
            else:
                k = keys[t].pop(r.randrange(len(keys[t])))
                emit({**base, "op": "delete", "before": {"ID": k}})
            done += 1
        emit({"op": "commit", "xid": xid, "tm": scn * 1000})
        if lines > 500_000:
            fh.close()
            seq += 1
            fh = open(out / f"redo_1_{seq}.jsonl", "w")
            lines = 0
    fh.close()


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int, default=1_000_000)
    ap.add_argument("--tables", type=int, default=10)
    ap.add_argument("--batch-rows", type=int, default=200_000)
    ap.add_argument("--commits", type=int, default=20)
    ap.add_argument("--dir", default=None, help="Work directory (default: a temporary one).")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-mirror-"))
    t0 = time.monotonic()
    write_input(work / "in", args.changes, args.tables)
    replay(str(work / "in"), str(work / "q"), str(work / "cf"), PipelineOptions(durable=False))
    print(f"input and changefeed: {time.monotonic() - t0:.1f}s (not timed)", file=sys.stderr)
    cf_bytes = sum(p.stat().st_size for p in (work / "cf").glob("part-*.parquet"))

    t0 = time.monotonic()
    result = mirror(
        MirrorOptions(str(work / "cf"), str(work / "mirror"), until_caught_up=True, batch_rows=args.batch_rows)
    )
    backlog = time.monotonic() - t0
    target_bytes = size(work / "mirror")
    live_bytes = live_rows = 0
    for table in (work / "mirror" / "B").iterdir():  # the tables' current files (a VACUUM removes the others)
        adds = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pydict()
        live_bytes += sum(adds["size_bytes"])
        live_rows += sum(adds["num_records"])
    print(
        f"backlog: {result.changes} changes over {args.tables} tables in {backlog:.1f}s: "
        f"{result.changes / backlog:,.0f} changes/s ({result.commits} table commits, batches of "
        f"{args.batch_rows} rows); changefeed {cf_bytes / 2**20:.1f} MiB, mirror tables {live_bytes / 2**20:.1f} MiB "
        f"({live_rows} rows), {target_bytes / 2**20:.1f} MiB on disk before VACUUM"
    )

    times = []
    inp = work / "in"
    follower = Mirror(MirrorOptions(str(work / "cf"), str(work / "mirror")))
    follower.start()
    for i in range(args.commits):
        seq = len(list(inp.glob("redo_1_*.jsonl"))) + 1
        scn = 10**12 + i * 10
        recs = [
            {"op": "begin", "scn": scn, "xid": f"one{i}"},
            {
                "op": "update",
                "scn": scn + 1,
                "xid": f"one{i}",
                "owner": "B",
                "table": "T0",
                "rid": "R",
                "before": {"ID": 1 + i},
                "after": {"QTY": i},
            },
            {"op": "commit", "scn": scn + 2, "xid": f"one{i}"},
        ]
        (inp / f"redo_1_{seq}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
        replay(str(inp), str(work / "q"), str(work / "cf"), PipelineOptions(durable=False))
        follower.feed.refresh()
        t0 = time.monotonic()
        follower._batch(follower.feed.files_after(follower.scanned))  # what the service does per new file
        times.append(time.monotonic() - t0)
    print(
        f"one commit (a transaction of one change to one table, as the following service applies it: "
        f"read, MERGE, progress note): median {statistics.median(times) * 1000:.0f} ms, "
        f"min {min(times) * 1000:.0f} ms over {len(times)}"
    )
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
