"""What page checksums cost: writing a changefeed file with them, and verifying the newest
file when the writer opens.

    python bench/page_checksums.py [--rows N] [--image-bytes B] [--repeat R]

Writes one file of ``--rows`` rows (default 1,000,000: ``--file-rows``' default, the
largest file the writer publishes but for one bigger transaction) through the real
``ChangefeedWriter`` (no fsync), with and without ``write_page_checksum``, and times:
the write; opening a writer on it with the footer only (``list_files``) and with the
newest file's pages verified (``verify_pages``, what ``ChangefeedWriter`` does on
open). Best of ``--repeat`` runs. Run by hand; figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rows_and_txs(n: int, image_bytes: int, seed: int = 1) -> tuple[list[list], list[tuple]]:
    from olr_buffer.changes import INSERT, UPDATE, CommitKey

    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "Müller", "São Paulo", "請求書", "1234.56", "NEW", "SHIPPED"]
    rows, txs = [], []
    scn = 5_000_000_000
    i = 0
    while i < n:
        size = min(rng.randint(1, 8), n - i)
        for k in range(size):
            note = " ".join(rng.choice(words) for _ in range(image_bytes // 8))[:image_bytes]
            after = f'{{"ID":{i + k},"STATUS":"{rng.choice(words)}","TOTAL":{rng.random() * 1e4:.2f},"NOTE":"{note}"}}'
            code = INSERT if k % 3 else UPDATE
            before = f'{{"ID":{i + k},"STATUS":"NEW"}}' if code == UPDATE else None
            rows.append(
                [
                    code,
                    scn + k,
                    0,
                    1,
                    i + k,
                    scn * 1000,
                    "SALES",
                    "ORDERS",
                    73812,
                    f"AAAR3/AAHAAAACD{i + k:08d}",
                    before,
                    after,
                    None,
                ]
            )
        scn += size + 1
        txs.append((f"0x{i:04x}.001.00000001", CommitKey(scn, 1, 1, i + size), scn * 1000, 1, size))
        i += size
    return rows, txs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--image-bytes", type=int, default=120, help="length of each after image's NOTE text")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import pyarrow.parquet as pq

    from olr_buffer.sinks.parquet import schema
    from olr_buffer.sinks.parquet import writer as writer_mod
    from olr_buffer.sinks.parquet.layout import list_files, verify_pages

    rows, txs = rows_and_txs(args.rows, args.image_bytes)
    real = schema.parquet_writer
    work = tempfile.mkdtemp(prefix="olr-checksums-")
    try:
        for checksums in (False, True):

            def make(path, compression, _checksums=checksums):
                if _checksums:
                    return real(path, compression)
                return pq.ParquetWriter(
                    path, schema.ARROW_SCHEMA, compression=compression, use_dictionary=schema.DICTIONARY_COLUMNS
                )

            writer_mod.parquet_writer = make
            best_write = best_footer = best_verify = float("inf")
            for r in range(args.repeat):
                cf = os.path.join(work, f"cf-{checksums}-{r}")
                w = writer_mod.ChangefeedWriter(cf, durable=False, file_rows=args.rows)
                t = time.perf_counter()
                w.write_rows(rows, txs)
                w.close()
                best_write = min(best_write, time.perf_counter() - t)
                t = time.perf_counter()
                files = list_files(cf)
                best_footer = min(best_footer, time.perf_counter() - t)
                t = time.perf_counter()
                verify_pages(cf, files[-1].name)
                best_verify = min(best_verify, time.perf_counter() - t)
                size = os.path.getsize(os.path.join(cf, files[-1].name))
                if r < args.repeat - 1:
                    shutil.rmtree(cf)
            print(
                f"checksums {'on ' if checksums else 'off'}: write {best_write:.2f} s, file {size / 2**20:.1f} MiB, "
                f"open: footers {best_footer * 1000:.1f} ms, newest file's pages {best_verify:.2f} s"
            )
        writer_mod.parquet_writer = real
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
