"""The dispatcher and the changefeed writer alone (view 3 of profile_replay.py), timed
in CPU as well as wall, on a queue filled once.

    python bench/dispatch_stage.py INPUT_DIR QUEUE_DIR [--runs 3] [--profile] [--top 30]

If ``QUEUE_DIR`` does not exist, the input is read into a durable ``LmdbQueue`` there
first (reader threads, as ``profile_replay.py`` does), and kept for later runs: the
same queue can then be read by another checkout's code, e.g. to compare branches
(``PYTHONPATH=/other/checkout python bench/dispatch_stage.py ...``; the queue's format
must be the same). Each run is the dispatcher tailing the whole queue from its first
block into a fresh changefeed (durable) until nothing is left, then a flush; it prints
the records read, wall seconds, CPU seconds (user+sys of this process, its only busy
thread) and CPU microseconds per record, one JSON line per run.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import shutil
import sys
import tempfile
import time


def fill(inp: str, queue_dir: str) -> None:
    import benchlib

    from olr_buffer.txbuffer import LmdbQueue

    q = LmdbQueue(queue_dir)
    try:
        g = benchlib.redo_source(q, inp)
        benchlib.read_source(g)
    finally:
        q.close()


def run_once(queue_dir: str, profile: bool) -> tuple[dict, cProfile.Profile | None]:
    from olr_buffer.dispatcher import Dispatcher
    from olr_buffer.runtime import quiet_gc
    from olr_buffer.sinks.parquet import ChangefeedWriter
    from olr_buffer.sources.redo.position import POSITION_PREFIX, load_positions
    from olr_buffer.txbuffer import LmdbQueue

    cf = tempfile.mkdtemp(prefix="dispatch-stage-", dir=os.path.dirname(os.path.abspath(queue_dir)))
    q = LmdbQueue(queue_dir)
    prof = cProfile.Profile() if profile else None
    try:
        threads = sorted(load_positions(q.meta_items(POSITION_PREFIX)))
        sink = ChangefeedWriter(os.path.join(cf, "changefeed"))
        d = Dispatcher(q, sink, threads, start_index=q.first_index, published_through=sink.last_commit)
        with quiet_gc():  # as the pipeline runs them
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            t = time.perf_counter()
            if prof:
                prof.enable()
            while d.poll():
                pass
            d.publish_ready()
            sink.flush()
            if prof:
                prof.disable()
            wall = time.perf_counter() - t
            r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        sink.close()
        recs = d.stats.records
        out = {
            "records": recs,
            "published": d.stats.published,
            "rows": d.stats.rows,
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "records_per_s": round(recs / wall),
            "records_per_cpu_s": round(recs / cpu),
            "cpu_us_per_record": round(cpu / recs * 1e6, 3),
        }
    finally:
        q.close()
        shutil.rmtree(cf, ignore_errors=True)
    return out, prof


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("queue")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="cProfile the runs; print the top functions")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    if not os.path.exists(args.queue):
        print(f"filling {args.queue} from {args.input} ...", file=sys.stderr, flush=True)
        fill(args.input, args.queue)
    import olr_buffer

    for _ in range(args.runs):
        out, prof = run_once(args.queue, args.profile)
        out["label"] = args.label
        out["code"] = os.path.dirname(os.path.dirname(olr_buffer.__file__))
        print(json.dumps(out), flush=True)
        if prof:
            pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
