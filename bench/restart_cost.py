"""Restart cost: kill `olr-buffer replay` with many open transactions and a large queue,
restart it, and measure the time from the restart to the first new publication.

    python bench/restart_cost.py [--transactions N] [--concurrency C] [--large-tx-rows R]

A memory-buffering capture process must re-read its redo from the start of the oldest
open transaction after a restart; olr-buffer restores its dispatcher checkpoint and
re-reads only the queue after the checkpoint's position. Run by hand; figures go to
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "olr_buffer.cli", *args]


def part_files(cf: str) -> set[str]:
    try:
        return {n for n in os.listdir(cf) if n.startswith("part-")}
    except FileNotFoundError:
        return set()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--transactions", type=int, default=60_000)
    ap.add_argument("--concurrency", type=int, default=3_000, help="transactions open at once in the workload")
    ap.add_argument("--large-tx-rows", type=int, default=300_000)
    ap.add_argument("--kill-at", type=float, default=0.6, help="fraction of a full run's time at which to kill")
    ap.add_argument("--checkpoint-interval", default="2", help="the replays' --checkpoint-interval (seconds)")
    args = ap.parse_args()

    from olr_buffer.simulate import simulate

    work = tempfile.mkdtemp(prefix="olr-restart-")
    try:
        inp = os.path.join(work, "in")
        stats = simulate(
            inp,
            threads=3,
            transactions=args.transactions,
            seed=3,
            concurrency=args.concurrency,
            large_tx_rows=args.large_tx_rows,
            compress_archived=False,
        )
        print(
            f"workload: {stats.records:,} records, {args.concurrency:,} transactions open at once, "
            f"one of {args.large_tx_rows:,} rows"
        )

        def replay_args(tag: str) -> list[str]:
            return cli(
                "replay",
                inp,
                "--queue",
                os.path.join(work, tag, "q"),
                "--changefeed",
                os.path.join(work, tag, "cf"),
                "--file-rows",
                "2000",
                "--checkpoint-interval",
                args.checkpoint_interval,
                "--no-progress",
                "--json",
            )

        t = time.monotonic()
        subprocess.run(replay_args("full"), check=True, capture_output=True)
        full = time.monotonic() - t
        print(f"uninterrupted replay: {full:.1f}s")

        cf = os.path.join(work, "run", "cf")
        proc = subprocess.Popen(replay_args("run"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(full * args.kill_at)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        queue = os.path.join(work, "run", "q")
        if not os.path.isdir(queue):  # (a small workload: the kill came while the replay started)
            print(f"killed at {full * args.kill_at:.1f}s: before the replay made its queue")
        else:
            status = json.loads(
                subprocess.run(
                    cli("status", "--queue", queue, "--json"), check=True, capture_output=True, text=True
                ).stdout
            )
            ot = status.get("open_transactions") or {}
            checkpoint = status.get("checkpoint")  # (None: the kill came before the first one)
            print(
                f"killed at {full * args.kill_at:.1f}s: queue {status['segments']['bytes'] / 1e6:,.1f} MB "
                f"in {status['segments']['count']} segment(s), "
                + (f"checkpoint {checkpoint['behind_records']:,} records behind, " if checkpoint else "no checkpoint, ")
                + f"{ot.get('count', 0):,} open transactions "
                f"(largest {((ot.get('largest') or {}).get('rows') or 0):,} rows)"
            )

        t = time.monotonic()
        subprocess.run(cli("--help"), check=True, capture_output=True)
        startup = time.monotonic() - t

        before = part_files(cf)
        t = time.monotonic()
        proc = subprocess.Popen(replay_args("run"), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        first = None
        while proc.poll() is None:
            if part_files(cf) - before:
                first = time.monotonic() - t
                break
            time.sleep(0.005)
        out, _ = proc.communicate()
        total = time.monotonic() - t
        if first is None and part_files(cf) - before:
            first = total
        if proc.returncode != 0:
            raise SystemExit(f"the restarted replay failed (exit {proc.returncode})")
        print(
            "restart: "
            + (f"first new publication after {first:.2f}s" if first is not None else "nothing left to publish")
            + f" (interpreter start-up and imports: {startup:.2f}s); the restarted run finished in {total:.1f}s"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
