"""CPU a published file of the changefeed writer, as `olr-buffer run` sets it up.

    python bench/publish_cost.py [--rows 220000] [--files 400,2] [--repeat 1]

A ``ChangefeedWriter`` with run's store settings (durable; its store's calls watched
with a timeout) publishes ``--rows`` rows of 11-row transactions as N files, for each N
of ``--files``; the rows are built before the clock starts. Prints the CPU time of the
process (all its threads) and per file: the difference between many small files and a
few large ones is what a publication costs beyond its rows (at ``run --flush-interval
0.02``, a file every 20-40 ms). Used in bench/log/2026-11-29-run-cpu.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from olr_buffer.changes import Commit, CommitKey
from olr_buffer.sinks.parquet.writer import ChangefeedWriter
from olr_buffer.store import OutageRetry

TX_ROWS = 11
NOTE = '{"ID":%d,"NAME":"name %d","SAL":1234.5,"DEPT":10,"NOTE":"some text here"}'


def _rows(scn: int) -> list[list]:
    tm = 1_700_000_000_000_000_000 + scn
    return [
        [2, scn, i, 1, tm, None, "SCOTT", "EMP", 12345, f"AAAB{scn:08d}{i:04d}", None, NOTE % (i, i), None]
        for i in range(TX_ROWS)
    ]


def publish(files: int, rows: int) -> float:
    """CPU seconds to publish ``rows`` rows as ``files`` files."""
    work = tempfile.mkdtemp(prefix="publish-cost-")
    try:
        writer = ChangefeedWriter(os.path.join(work, "cf"), retry=OutageRetry(timeout=30.0))
        per_file = max(1, rows // files // TX_ROWS)
        scn = 1
        batches = []
        for _ in range(files):
            items = []
            for _ in range(per_file):
                scn += 1
                items.append(
                    (Commit(f"x{scn}", CommitKey(scn, 1, 1, scn), 1_700_000_000_000_000_000 + scn), 1, _rows(scn))
                )
            batches.append(items)
        start = time.process_time()
        for items in batches:
            writer.write_transactions(items)
            writer.flush()
        cpu = time.process_time() - start
        writer.close()
        return cpu
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=220_000)
    ap.add_argument("--files", default="400,2", help="file counts, comma-separated")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    for _ in range(args.repeat):
        for files in (int(f) for f in args.files.split(",")):
            cpu = publish(files, args.rows)
            print(f"{files} files of {args.rows // files} rows: CPU {cpu:.3f} s, {cpu / files * 1e3:.2f} ms a file")


if __name__ == "__main__":
    main()
