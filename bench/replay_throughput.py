"""Replay throughput and peak memory: `python bench/replay_throughput.py [--transactions N]`.

Simulates a workload (unless --input is given), runs `olr-buffer replay` in a child
process (`python -m olr_buffer.cli replay ... --json --no-progress`, from an empty queue
and changefeed, input in the page cache), prints records/s, rows/s and the child's peak
RSS. Durable by default (`--no-sync` to measure without fsync). Run by hand; the figures
go in docs/performance.md, never into tests.

Wall time is the child's, fork to exit (interpreter start and imports included); peak
RSS is the child's own `ru_maxrss` (from `os.wait4`). "records" are the input's lines,
`lwn` included (the replay summary's `records_read` leaves `lwn` out).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def measure(input_dir: str, work: str, *, durable: bool = True, lines: int | None = None) -> dict:
    lines = lines if lines is not None else benchlib.describe_input(input_dir)["lines"]
    m, s = benchlib.measure_replay(input_dir, work, durable=durable)
    return {
        "name": "replay",
        "records": lines,
        "records_read": s["records_read"],
        "transactions_published": s["transactions_published"],
        "rows_published": s["rows_published"],
        "wall": m.wall,
        "seconds_in_process": s["seconds"],
        "records_per_s": benchlib.rate(lines, m.wall),
        "rows_per_s": benchlib.rate(s["rows_published"], m.wall),
        "peak_rss": m.peak_rss,
        "cpu_user": m.user,
        "cpu_sys": m.sys,
        "other_cpu": m.other_cpu,
        "steal": m.steal,
        "queue_bytes": s["queue_bytes"],
        "durable": durable,
        "summary": s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=50_000)
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--large-tx-rows", type=int, default=0)
    ap.add_argument("--plain", action="store_true", help="simulate without compressing archived logs")
    ap.add_argument("--input", help="an existing input directory instead of a simulated one")
    ap.add_argument("--no-sync", action="store_true", help="replay with --no-sync (durability off)")
    ap.add_argument("--work", help="work directory (queue, changefeed; simulated input unless --input)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = ap.parse_args()

    work = args.work or tempfile.mkdtemp(prefix="olr-bench-")
    keep = args.keep or bool(args.work)
    try:
        inp = args.input or os.path.join(work, "in")
        if not args.input:
            benchlib.prepare_input(
                inp,
                transactions=args.transactions,
                threads=args.threads,
                seed=args.seed,
                large_tx_rows=args.large_tx_rows,
                compress=not args.plain,
                quiet=args.json,
            )
        r = measure(inp, os.path.join(work, "replay"), durable=not args.no_sync)
        if args.json:
            benchlib.print_json(r)
        else:
            print(
                f"replay: {r['records']:,} records ({r['records_read']:,} without lwn), {r['rows_published']:,} rows, "
                f"{r['transactions_published']:,} transactions in {r['wall']:.2f}s wall "
                f"({r['records_per_s']:,.0f} records/s, {r['rows_per_s']:,.0f} rows/s); "
                f"peak RSS {benchlib.mib(r['peak_rss'])}; durable={r['durable']}"
            )
    finally:
        if keep:
            print("work directory:", work, file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
