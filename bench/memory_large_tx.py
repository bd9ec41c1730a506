"""Memory with a large transaction: peak RSS of `olr-buffer replay` on a workload with one
1.5-million-row transaction, against the same workload without it.

    python bench/memory_large_tx.py [--transactions 86000] [--large-rows 1500000]
                                    [--work DIR] [--naive] [--json]

Both inputs are simulated with the same arguments (three threads, seed 1, plain .jsonl),
the second with ``large_tx_rows``: one more transaction of exactly that many rows, open
while the rest of the workload goes on. Each replay runs in a child process, durable,
from an empty queue and changefeed; its peak RSS is the child's own ``ru_maxrss``.

Target: peak RSS with the large transaction <= 1.5x the peak RSS without it (olr-buffer
keeps where a transaction's records are, not the records, and streams a commit through
the changefeed writer). ``--naive`` also runs ``bench/naive_buffer.py`` on both inputs,
for contrast: it holds every open transaction's rows in memory.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
import replay_throughput  # noqa: E402


def run(args) -> dict:
    work = args.work
    base_in = args.base_input or os.path.join(work, "input")
    large_in = args.large_input or os.path.join(work, "input-large")
    common = dict(transactions=args.transactions, threads=args.threads, seed=args.seed, quiet=args.json)
    if not args.base_input:
        benchlib.prepare_input(base_in, **common)
    if not args.large_input:
        benchlib.prepare_input(large_in, large_tx_rows=args.large_rows, **common)
    out: dict = {"name": "memory", "large_rows": args.large_rows}
    for label, inp in (("base", base_in), ("large", large_in)):
        if label == "base" and args.base_result:
            import json

            out[label] = json.loads(args.base_result)
        else:
            out[label] = replay_throughput.measure(inp, os.path.join(work, f"replay-{label}"))
        if not args.json:
            r = out[label]
            print(
                f"replay {label}: {r['records']:,} records, {r['rows_published']:,} rows in {r['wall']:.1f}s, "
                f"peak RSS {benchlib.mib(r['peak_rss'])}",
                flush=True,
            )
    out["ratio"] = out["large"]["peak_rss"] / out["base"]["peak_rss"]
    if args.naive:
        for label, inp in (("base", base_in), ("large", large_in)):
            benchlib.warm_cache(inp)
            benchlib.wait_quiet()
            m = benchlib.run_measured(benchlib.python_cmd("naive_buffer.py", inp, "--json")).check()
            r = m.last_json()
            out[f"naive_{label}"] = {"wall": m.wall, "peak_rss": m.peak_rss, "rows_published": r["rows_published"]}
            if not args.json:
                print(f"naive {label}: {m.wall:.1f}s, peak RSS {benchlib.mib(m.peak_rss)}", flush=True)
        out["naive_ratio"] = out["naive_large"]["peak_rss"] / out["naive_base"]["peak_rss"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=benchlib.DEFAULT_TRANSACTIONS)
    ap.add_argument("--threads", type=int, default=benchlib.DEFAULT_THREADS)
    ap.add_argument("--seed", type=int, default=benchlib.DEFAULT_SEED)
    ap.add_argument("--large-rows", type=int, default=benchlib.LARGE_TX_ROWS)
    ap.add_argument("--work", default=os.path.join("/tmp", "olr-bench"), help="work directory (inputs are reused)")
    ap.add_argument("--base-input", help="an existing input for the workload without the large transaction")
    ap.add_argument("--large-input", help="an existing input with it")
    ap.add_argument("--base-result", help=argparse.SUPPRESS)  # run_all passes the base replay it measured
    ap.add_argument("--naive", action="store_true", help="also run the naive buffer on both inputs")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    r = run(args)
    if args.json:
        benchlib.print_json(r)
        return
    print(
        f"peak RSS with a {args.large_rows:,}-row transaction: {benchlib.mib(r['large']['peak_rss'])}, "
        f"without: {benchlib.mib(r['base']['peak_rss'])} = {r['ratio']:.2f}x "
        f"(target <= 1.5x) {'MET' if r['ratio'] <= 1.5 else 'NOT MET'}"
    )
    if args.naive:
        print(f"naive buffer: {r['naive_ratio']:.2f}x")


if __name__ == "__main__":
    main()
