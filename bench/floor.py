"""The floor: the input converted straight to Parquet with pyarrow, nothing else.

    python bench/floor.py INPUT_DIR [--out DIR] [--json]

Each log file is read by ``pyarrow.json.read_json`` (multi-threaded C++, schema inferred,
``before``/``after`` as nested structs) and written by ``pyarrow.parquet.write_table``
(zstd, like the changefeed) to one Parquet file per log file, then fsync'ed (``--no-sync``
skips that). No buffering, no transactions, no ordering, no validation: the fastest that
this machine turns these bytes into Parquet with the libraries olr-buffer uses. olr-buffer
``replay`` must reach at least 0.5x (aim 0.8x) of its records/s.

``.jsonl.zst`` files are read through a zstd stream; for the side-by-side figures give it
plain ``.jsonl`` input (``bench/run_all.py`` does), so that no one times decompression.
One file per log file because the inferred schemas differ between files (a column that
is null throughout one file has no type there).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def convert(input_dir: str, out_dir: str, *, durable: bool = True) -> dict:
    import pyarrow as pa
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    parse = pajson.ParseOptions(unexpected_field_behavior="infer")
    os.makedirs(out_dir, exist_ok=True)
    t = time.perf_counter()
    records = files = out_bytes = 0
    for thread_files in benchlib.log_files(input_dir).values():
        for p in thread_files:
            src = pa.input_stream(str(p), compression="zstd" if p.suffix == ".zst" else None)
            table = pajson.read_json(src, parse_options=parse)
            dst = os.path.join(out_dir, p.name.split(".")[0] + ".parquet")
            pq.write_table(table, dst, compression="zstd")
            if durable:
                benchlib.fsync_path(dst)
            records += table.num_rows
            out_bytes += os.path.getsize(dst)
            files += 1
    if durable:
        benchlib.fsync_path(out_dir)
    seconds = time.perf_counter() - t
    return {
        "name": "floor",
        "records": records,
        "files": files,
        "out_bytes": out_bytes,
        "seconds": seconds,
        "records_per_s": benchlib.rate(records, seconds),
        "durable": durable,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input_dir")
    ap.add_argument("--out", help="output directory (default: a temporary one, removed)")
    ap.add_argument("--no-sync", action="store_true", help="do not fsync the Parquet files")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = ap.parse_args()
    import shutil
    import tempfile

    out = args.out or tempfile.mkdtemp(prefix="olr-floor-")
    try:
        if args.out:
            benchlib.fresh_dir(out)
        r = convert(args.input_dir, out, durable=not args.no_sync)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    if args.json:
        benchlib.print_json(r)
    else:
        print(
            f"floor (pyarrow json -> parquet): {r['records']:,} records from {r['files']} files "
            f"in {r['seconds']:.2f}s = {r['records_per_s']:,.0f} records/s; "
            f"{r['out_bytes'] / 1e6:,.1f} MB of Parquet; durable={r['durable']}"
        )


if __name__ == "__main__":
    main()
