"""Input of a chosen shape for the benchmark matrix (``bench/matrix.py``).

    python bench/shapes.py OUT_DIR --lines 1000000 --threads 3 --width narrow \\
        --tx tiny --open 16 --compensated 0.0 [--zst] [--seed 1]

``olr-buffer simulate`` writes a realistic mix (the correctness workload of the tests);
this writes one *shape* at a time, so that each cell of the matrix measures one thing:

* ``--width narrow``: row images of 3 to 6 scalar columns, about 160 bytes a line on
  average (begin and commit lines included); ``wide``: 22 to 30 columns, about 360 to
  560 bytes a line;
* ``--tx tiny``: transactions of 1 to 5 rows (2.7 on average); ``medium``: 500 to
  20,000 rows; ``large``: ten transactions, each a tenth of the input, interleaved;
* ``--open N``: how many transactions are open at once (their records interleave);
* ``--compensated F``: this share of rows is followed by a compensation record
  (``"rollback": true``, same ``rid``) that cancels it;
* ``--threads``: RAC threads;
* ``--distributed F``: this share of transactions (default 0.02) write rows on a second
  thread too (half of their rows, at random);
* ``--zst``: archived sequences (all but each thread's last) as ``.jsonl.zst``.

Every record but the ``lwn`` heartbeats has a ``tm`` in nanoseconds since 1970, as a
capture writes it (19 digits; 1 ms an SCN from 2026-11-18). Before 2026-11-29 the records had
no ``tm``, and the compiled reader loop's refusal of 19-digit integers went unseen (see
bench/log/2026-11-29-main-process.md); inputs made then are made again (``FORMAT``).

The input is valid: one global SCN clock, ``lwn`` heartbeats on every thread every
1,000 records, a log switch every ``--records-per-file`` lines of a thread, 3 % of
transactions rolled back, every transaction ended by the end of the input. The same
arguments give the same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

import orjson
import zstandard

MARKER = "_bench_input.json"  # the reader ignores it (see bench/benchlib.py)
FORMAT = 2  # 2: records have a tm (an input of another format is made again)
_TM0 = 1_795_000_000_000_000_000  # ns since 1970 at the first SCN: 2026-11-18
_TM_PER_SCN = 1_000_000
_WORDS = ("alpha", "Bravo", "charlie", "Δelta", "echo", "foxtrot", "golf", "hôtel", "india", "juliett")


class _Thread:
    __slots__ = ("thread", "sequence", "lines", "buf", "out", "zst")

    def __init__(self, out: Path, thread: int, zst: bool) -> None:
        self.out, self.thread, self.zst = out, thread, zst
        self.sequence, self.lines, self.buf = 1, 0, []

    def write(self, line: bytes, per_file: int) -> None:
        self.buf.append(line)
        self.lines += 1
        if self.lines >= per_file:
            self.flush(archived=True)
            self.sequence += 1
            self.lines = 0

    def flush(self, archived: bool) -> None:
        data = b"".join(self.buf)
        self.buf = []
        name = self.out / f"redo_{self.thread}_{self.sequence}.jsonl"
        if archived and self.zst:
            name = name.with_name(name.name + ".zst")
            data = zstandard.ZstdCompressor(level=3).compress(data)
        name.write_bytes(data)


class _Tx:
    __slots__ = ("xid", "thread", "rows_left", "table", "started", "end", "others")

    def __init__(self, xid: str, thread: int, rows: int, table: str, end: str, others: list[int]) -> None:
        self.xid, self.thread, self.rows_left, self.table, self.end = xid, thread, rows, table, end
        self.started = False
        self.others = others


def generate(
    out_dir: str,
    *,
    lines: int,
    threads: int,
    width: str,
    tx: str,
    open_txs: int,
    compensated: float,
    zst: bool,
    seed: int = 1,
    records_per_file: int = 20_000,
    distributed: float = 0.02,
) -> dict:
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rng = random.Random(seed)
    logs = {t: _Thread(out, t, zst) for t in range(1, threads + 1)}
    ncols = (3, 6) if width == "narrow" else (22, 30)
    dumps = orjson.dumps
    scn = 1_000_000
    written = 0
    n_tx = 0
    stats = {"transactions": 0, "rolled_back": 0, "row_records": 0, "compensations": 0}

    def new_tx() -> _Tx:
        nonlocal n_tx
        n_tx += 1
        home = rng.randrange(threads) + 1
        others = [home]
        if threads > 1 and rng.random() < distributed:
            others.append(rng.choice([t for t in range(1, threads + 1) if t != home]))
        if tx == "tiny":
            rows = rng.randint(1, 5) if rng.random() < 0.9 else rng.randint(1, 2)
        elif tx == "medium":
            rows = rng.randint(500, 20_000)
        else:
            rows = max(1, lines // 10)
        end = "rollback" if rng.random() < 0.03 else "commit"
        return _Tx(
            f"0x{n_tx >> 20:04x}.{(n_tx >> 12) & 0xFF:03x}.{n_tx & 0xFFF:08x}",
            home,
            rows,
            f"T{rng.randrange(8)}",
            end,
            others,
        )

    def image(key: int) -> bytes:
        k = rng.randint(*ncols)
        img = {"ID": key}
        for c in range(1, k):
            kind = c % 4
            if kind == 0:
                img[f"C{c}"] = rng.randrange(1_000_000)
            elif kind == 1:
                img[f"C{c}"] = rng.choice(_WORDS) + str(rng.randrange(1000))
            elif kind == 2:
                img[f"C{c}"] = round(rng.random() * 1000, 2)
            else:
                img[f"C{c}"] = None if rng.random() < 0.3 else "2026-11-23T10:00:00"
        return dumps(img)

    def tm(at: int) -> int:
        return _TM0 + (at - 1_000_000) * _TM_PER_SCN

    def emit(thread: int, rec: bytes) -> None:
        nonlocal written
        logs[thread].write(rec, records_per_file)
        written += 1
        if written % 1000 == 0:
            for lg in logs.values():
                lg.write(b'{"op":"lwn","scn":%d}\n' % scn, records_per_file)
                written += 1

    active = [new_tx() for _ in range(open_txs)]
    key = 0
    budget = lines
    while written < budget or active:
        i = rng.randrange(len(active))
        t = active[i]
        scn += 1
        if not t.started:
            t.started = True
            emit(t.thread, b'{"op":"begin","scn":%d,"xid":"%s","tm":%d}\n' % (scn, t.xid.encode(), tm(scn)))
            continue
        if t.rows_left > 0:
            t.rows_left -= 1
            key += 1
            thread = t.thread if len(t.others) == 1 or rng.random() < 0.5 else t.others[1]
            rid = f"AAAR{key:014d}".encode()
            head = b'{"op":"insert","scn":%d,"xid":"%s","tm":%d,"owner":"BENCH","table":"%s","rid":"%s","after":' % (
                scn,
                t.xid.encode(),
                tm(scn),
                t.table.encode(),
                rid,
            )
            img = image(key)
            emit(thread, head + img + b"}\n")
            stats["row_records"] += 1
            if compensated and rng.random() < compensated:
                scn += 1
                emit(
                    thread,
                    b'{"op":"delete","scn":%d,"xid":"%s","tm":%d,"owner":"BENCH","table":"%s","rid":"%s",'
                    b'"rollback":true,"before":%s}\n' % (scn, t.xid.encode(), tm(scn), t.table.encode(), rid, img),
                )
                stats["compensations"] += 1
            continue
        emit(t.thread, b'{"op":"%s","scn":%d,"xid":"%s","tm":%d}\n' % (t.end.encode(), scn, t.xid.encode(), tm(scn)))
        stats["transactions"] += 1
        stats["rolled_back"] += t.end == "rollback"
        if written < budget:
            active[i] = new_tx()
        else:
            active.pop(i)
    for lg in logs.values():
        if lg.buf or lg.lines == 0:
            lg.flush(archived=False)
    total = sum(p.stat().st_size for p in out.iterdir())
    desc = {
        "params": {
            "lines": lines,
            "threads": threads,
            "width": width,
            "tx": tx,
            "open": open_txs,
            "compensated": compensated,
            "zst": zst,
            "seed": seed,
            **({"distributed": distributed} if distributed != 0.02 else {}),
            "format": FORMAT,
        },
        "lines": written,
        "bytes": total,
        "stats": stats,
    }
    (out / MARKER).write_text(json.dumps(desc, indent=2))
    return desc


def prepare(out_dir: str, **params) -> dict:
    """Generate unless ``out_dir`` already holds exactly this shape."""
    marker = Path(out_dir) / MARKER
    if marker.exists():
        desc = json.loads(marker.read_text())
        want = {**params}
        want.setdefault("seed", 1)
        want["open"] = want.pop("open_txs")
        want["format"] = FORMAT
        if desc.get("params") == want:
            return desc
    return generate(out_dir, **params)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--width", choices=("narrow", "wide"), default="narrow")
    ap.add_argument("--tx", choices=("tiny", "medium", "large"), default="tiny")
    ap.add_argument("--open", type=int, default=16, dest="open_txs")
    ap.add_argument("--compensated", type=float, default=0.0)
    ap.add_argument("--zst", action="store_true")
    ap.add_argument(
        "--distributed", type=float, default=0.02, help="share of transactions that write rows on a second thread too"
    )
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    desc = generate(
        args.out_dir,
        lines=args.lines,
        threads=args.threads,
        width=args.width,
        tx=args.tx,
        open_txs=args.open_txs,
        compensated=args.compensated,
        zst=args.zst,
        seed=args.seed,
        distributed=args.distributed,
    )
    print(json.dumps({k: desc[k] for k in ("lines", "bytes", "stats")}), file=sys.stdout)


if __name__ == "__main__":
    main()
