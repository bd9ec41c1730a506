"""Replay throughput and peak memory: `python bench/replay_throughput.py [--transactions N]`.

Simulates a workload (unless --input is given), runs `olr-buffer replay` in a child
process, prints records/s, rows/s and the child's peak RSS. Run by hand; the figures go
in docs/performance.md, never into tests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--transactions", type=int, default=50_000)
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--large-tx-rows", type=int, default=0)
    ap.add_argument("--input", help="an existing input directory instead of a simulated one")
    ap.add_argument("--no-sync", action="store_true", help="replay with --no-sync (durability off)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="olr-bench-")
    try:
        inp = args.input or os.path.join(work, "in")
        if not args.input:
            from olr_buffer.simulate import simulate

            t = time.monotonic()
            stats = simulate(inp, threads=args.threads, transactions=args.transactions, seed=1, large_tx_rows=args.large_tx_rows)
            print(f"simulated {stats.records:,} records in {time.monotonic() - t:.1f}s")
        cmd = [sys.executable, "-m", "olr_buffer.cli", "replay", inp, "--queue", os.path.join(work, "q"),
               "--changefeed", os.path.join(work, "cf"), "--json", "--no-progress"]
        if args.no_sync:
            cmd.append("--no-sync")
        t = time.monotonic()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        wall = time.monotonic() - t
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        s = json.loads(out)
        print(
            f"replay: {s['records_read']:,} records, {s['rows_published']:,} rows, "
            f"{s['transactions_published']:,} transactions in {wall:.2f}s wall "
            f"({s['records_read'] / wall:,.0f} records/s, {s['rows_published'] / wall:,.0f} rows/s); "
            f"peak RSS {peak_kib / 1024:,.0f} MiB; durable={not args.no_sync}"
        )
    finally:
        if args.keep:
            print("work directory:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
