"""Commit-to-visible latency of `olr-buffer run` at a steady load.

    python bench/latency.py [--rate 2000] [--transactions 4000] [--flush-interval 1.0] [--poll-interval 0.1]

A writer process plays a simulated 3-thread workload into a live directory at a steady
rate, stamping every record's `tm` with the time it is written; the service follows it;
this program watches the changefeed directory and, for every transaction, takes the time
its file became visible minus its commit's `tm`. Prints p50/p90/p99/max under steady
load: the writer starts once the service has opened its changefeed, and transactions
committed in the first --warmup seconds of writing are left out (their count and max are
printed apart). Run by hand.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=float, default=2000.0, help="records per second written")
    ap.add_argument("--transactions", type=int, default=4000)
    ap.add_argument("--flush-interval", type=float, default=1.0)
    ap.add_argument("--poll-interval", type=float, default=None, help="the service's --poll-interval (its default)")
    ap.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        help="leave out transactions committed in the first seconds of writing (reader processes start)",
    )
    ap.add_argument("--dump", help="write 'visible_s latency_s' per transaction to this file (to look at the tail)")
    ap.add_argument("service_args", nargs="*", help="more options for `olr-buffer run`, after --")
    args = ap.parse_args()

    from olr_buffer.simulate import simulate

    work = tempfile.mkdtemp(prefix="olr-latency-")
    try:
        stage, live, cf = (os.path.join(work, d) for d in ("stage", "live", "cf"))
        stats = simulate(
            stage, threads=3, transactions=args.transactions, seed=9, compress_archived=False, lwn_every=8.0
        )
        os.makedirs(live)
        service = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "olr_buffer.cli",
                "run",
                live,
                "--queue",
                os.path.join(work, "q"),
                "--changefeed",
                cf,
                "--threads",
                "1,2,3",
                "--flush-interval",
                str(args.flush_interval),
                *(("--poll-interval", str(args.poll_interval)) if args.poll_interval is not None else ()),
                "--log-level",
                "warning",
                *args.service_args,
            ],
            cwd=ROOT,
        )
        # steady load: the writer starts once the service has opened its changefeed, and
        # the first --warmup seconds of writing (reader processes starting) are left out
        t0 = time.monotonic()
        while not os.path.isdir(os.path.join(cf, "_olr_buffer")):
            if service.poll() is not None or time.monotonic() - t0 > 60:
                raise SystemExit("the service did not start")
            time.sleep(0.01)
        writer_start = time.time_ns()
        writer = subprocess.Popen(
            [sys.executable, "-m", "tests.live_writer", stage, live, "--rate", str(args.rate), "--tm-now"], cwd=ROOT
        )
        seen: set[str] = set()
        latencies: list[float] = []
        seen_at: list[float] = []
        commit_tms: list[int] = []
        t_end = None
        while True:
            now_ns = time.time_ns()
            for name in sorted(os.listdir(cf)) if os.path.isdir(cf) else []:
                if name.startswith("part-") and name not in seen:
                    seen.add(name)
                    table = pq.read_table(os.path.join(cf, name), columns=["tx_seq", "c_tm"])
                    firsts = {}
                    for tx, tm in zip(table.column("tx_seq").to_pylist(), table.column("c_tm").to_pylist()):
                        firsts.setdefault(tx, tm)
                    latencies.extend((now_ns - tm) / 1e9 for tm in firsts.values() if tm)
                    seen_at.extend(now_ns / 1e9 for tm in firsts.values() if tm)
                    commit_tms.extend(tm for tm in firsts.values() if tm)
            if writer.poll() is not None:
                t_end = t_end or time.monotonic()
                if time.monotonic() - t_end > 3 * args.flush_interval + 2:
                    break
            time.sleep(0.01)
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=60)
        if args.dump:
            with open(args.dump, "w") as fh:
                fh.writelines(f"{t - seen_at[0]:.3f} {x:.4f}\n" for t, x in zip(seen_at, latencies))
        steady_from = writer_start + int(args.warmup * 1e9)
        lat = sorted(x for x, tm in zip(latencies, commit_tms) if tm >= steady_from)
        warm = [x for x, tm in zip(latencies, commit_tms) if tm < steady_from]

        def q(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))]

        print(
            f"workload: {stats.records:,} records written at {args.rate:,.0f} records/s by 3 threads; "
            f"flush interval {args.flush_interval}s, poll interval "
            f"{'default' if args.poll_interval is None else f'{args.poll_interval}s'}"
            + (f"; service options {' '.join(args.service_args)}" if args.service_args else "")
        )
        print(
            f"commit-to-visible latency over {len(lat):,} transactions: p50 {q(0.5):.3f}s  p90 {q(0.9):.3f}s  "
            f"p99 {q(0.99):.3f}s  max {lat[-1]:.3f}s"
        )
        print(
            f"left out: {len(warm):,} transactions committed in the first {args.warmup:g}s of writing (warm-up), "
            f"max {max(warm, default=0.0):.3f}s"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
