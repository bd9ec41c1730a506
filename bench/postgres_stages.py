"""Where the PostgreSQL source's time goes: its two halves timed apart, in one process,
against a throwaway cluster (``tests/sources/postgres/cluster.py``).

    python bench/postgres_stages.py [--rows 300000] [--tx-rows 100] [--large] [--profile FILE]

Each stage reports its wall time and the process's CPU time (``time.process_time``):
on a shared machine the CPU time is the steadier figure.

1. ``read``: a backlog of ``--rows`` inserted rows (in ``--tx-rows`` transactions, or one
   transaction with ``--large``) read from a slot by :class:`PostgresReader` alone into an
   LmdbQueue (durable, as the service): rows/s of the reader with the process to itself.
2. ``publish``: the same queue read back by the dispatcher into a changefeed
   (:class:`Dispatcher` + :class:`ChangefeedWriter`, durable): rows/s of the read-back.

``--profile FILE`` writes cProfile's top functions of each stage to FILE.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.postgres_source import insert_in_transactions, new_db, sql  # noqa: E402
from olr_buffer.changes import INFINITE_SCN  # noqa: E402
from olr_buffer.dispatcher import Dispatcher  # noqa: E402
from olr_buffer.runtime import quiet_gc  # noqa: E402
from olr_buffer.sinks.parquet import ChangefeedWriter  # noqa: E402
from olr_buffer.sources.postgres import PostgresReader  # noqa: E402
from olr_buffer.txbuffer import LmdbQueue  # noqa: E402
from tests.sources.postgres.cluster import create_cluster  # noqa: E402


def _profiled(fn, prof: cProfile.Profile | None):
    if prof is None:
        return fn()
    prof.enable()
    try:
        return fn()
    finally:
        prof.disable()


def _report(prof: cProfile.Profile, title: str) -> str:
    out = io.StringIO()
    out.write(f"== {title}\n")
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
    return out.getvalue()


def read_stage(uri: str, qdir: Path, rows: int, prof) -> tuple[float, int]:
    queue = LmdbQueue(str(qdir))
    stop = threading.Event()
    reader = PostgresReader(queue, uri, initial_copy=False, stop=stop)
    reader.prepare()
    expected = rows

    def watch():
        while reader.records < expected and not stop.is_set():
            time.sleep(0.01)
        stop.set()

    t0, c0 = time.monotonic(), time.process_time()
    w = threading.Thread(target=watch, daemon=True)
    w.start()
    with quiet_gc():
        _profiled(reader.run, prof)
    seconds, cpu = time.monotonic() - t0, time.process_time() - c0
    queue.close()
    return seconds, cpu, reader.records


def publish_stage(qdir: Path, cfdir: Path, prof) -> tuple[float, int]:
    queue = LmdbQueue(str(qdir))
    sink = ChangefeedWriter(str(cfdir))
    d = Dispatcher(queue, sink, [1])

    def go():
        while d.poll():
            pass
        d.publish_ready(INFINITE_SCN)
        sink.flush()

    t0, c0 = time.monotonic(), time.process_time()
    with quiet_gc():
        _profiled(go, prof)
    seconds, cpu = time.monotonic() - t0, time.process_time() - c0
    n = d.stats.rows
    sink.release()
    queue.close()
    return seconds, cpu, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--tx-rows", type=int, default=100)
    ap.add_argument("--large", action="store_true", help="one transaction of --rows rows")
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    cluster = create_cluster()
    work = Path(tempfile.mkdtemp(prefix="olr-pg-stages-"))
    try:
        new_db(cluster, "stages")
        sql(cluster, "stages", "SELECT pg_create_logical_replication_slot('olr_buffer', 'pgoutput')")
        if args.large:
            sql(
                cluster,
                "stages",
                "INSERT INTO big SELECT g, g %% 1000, 'row ' || g FROM generate_series(1, %s) g",
                (args.rows,),
            )
            txns = 1
        else:
            insert_in_transactions(cluster, "stages", 1, args.rows, args.tx_rows)
            txns = args.rows // args.tx_rows
        records = args.rows + 2 * txns
        profs = [cProfile.Profile(), cProfile.Profile()] if args.profile else [None, None]
        read_s, read_cpu, n_read = read_stage(cluster.dsn("stages"), work / "q", records, profs[0])
        pub_s, pub_cpu, n_pub = publish_stage(work / "q", work / "cf", profs[1])
        print(
            json.dumps(
                {
                    "rows": args.rows,
                    "transactions": txns,
                    "records_read": n_read,
                    "read_s": round(read_s, 2),
                    "read_rows_per_s": round(args.rows / read_s),
                    "read_cpu_s": round(read_cpu, 2),
                    "read_rows_per_cpu_s": round(args.rows / read_cpu),
                    "publish_s": round(pub_s, 2),
                    "rows_published": n_pub,
                    "publish_rows_per_s": round(n_pub / pub_s),
                    "publish_cpu_s": round(pub_cpu, 2),
                }
            )
        )
        if args.profile:
            Path(args.profile).write_text(_report(profs[0], "read") + _report(profs[1], "publish"))
    finally:
        cluster.remove()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
