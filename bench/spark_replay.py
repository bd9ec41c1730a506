"""Replay on Spark against the one-process replay, on the same simulated input.

    python bench/spark_replay.py [--transactions 86000] [--masters local[2],local[1]]
                                 [--large-tx-rows 0] [--work /tmp/bench-spark-replay]
                                 [--no-replay]

For each contender, from an empty queue and changefeed: wall time, lines/s, and for
Spark, from its REST API (the UI of the child's session): the bytes each stage shuffled
(written), the stages that took longest, the executor's peak JVM heap (in local mode
the executor is the driver's JVM) and the peak RSS of its Python workers (Spark's
process-tree metrics, polled every 200 ms). The changefeeds are checked equal (rows and
tx_seq). The load average (1 min) is sampled every 5 s during each contender: its mean
and maximum say how busy the shared machine was. ``--no-replay``: Spark only.
One JSON document on stdout; the figures go to docs/performance.md and bench/log/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
import benchlib  # noqa: E402


def child(input_dir: str, work: str, master: str) -> None:
    """Run in a child process: one Spark replay, then the figures of its Spark UI."""
    from pyspark.sql import SparkSession

    from olr_buffer.spark import replay_on_spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("bench-spark-replay")
        .config("spark.ui.enabled", "true")
        .config("spark.ui.port", "4077")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.executor.processTreeMetrics.enabled", "true")
        .config("spark.executor.metrics.pollingInterval", "200ms")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    marks: list[tuple[str, float]] = []  # each step's name and start (the driver's clock)
    t0 = time.monotonic()
    s = replay_on_spark(
        spark,
        input_dir,
        os.path.join(work, "queue"),
        os.path.join(work, "changefeed"),
        durable=True,
        on_stage=lambda name: marks.append((name.split(" (")[0][:60], time.monotonic())),
    )
    wall = time.monotonic() - t0
    ends = [t for _, t in marks[1:]] + [t0 + wall]
    # per step, its wall time from its start to the next one's (the driver's work in it too)
    steps = {name: round(end - start, 1) for (name, start), end in zip(marks, ends)}
    ui = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    stages = json.load(urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/stages"))
    executors = json.load(urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/allexecutors"))
    jobs = json.load(urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/jobs"))
    spark.stop()
    per_stage = [
        {
            "stage": st["stageId"],
            "name": st["name"][:80],
            "description": (st.get("description") or "")[:80],
            "seconds": _stage_seconds(st),
            "shuffle_write_bytes": st.get("shuffleWriteBytes", 0),
            "shuffle_read_bytes": st.get("shuffleReadBytes", 0),
            "input_records": st.get("inputRecords", 0),
        }
        for st in stages
        if st.get("status") == "COMPLETE"
    ]

    def peak(metric: str) -> int:
        return max((e.get("peakMemoryMetrics") or {}).get(metric, 0) for e in executors)

    print(
        json.dumps(
            {
                "wall": wall,
                "summary": s.as_dict(),
                "shuffle_write_bytes": sum(x["shuffle_write_bytes"] for x in per_stage),
                "stages": sorted(per_stage, key=lambda x: -x["seconds"])[:6],
                "jobs": len(jobs),
                "steps": steps,
                "peak_jvm_heap": peak("JVMHeapMemory"),
                "peak_python_workers_rss": peak("ProcessTreePythonRSSMemory"),
                "peak_jvm_rss": peak("ProcessTreeJVMRSSMemory"),
            }
        )
    )


def _ts(v: str) -> float:
    from datetime import datetime

    return datetime.strptime(v.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def _stage_seconds(st: dict) -> float:
    try:
        return _ts(st["completionTime"]) - _ts(st["firstTaskLaunchedTime"])
    except (KeyError, ValueError):
        return 0.0


class LoadSampler:
    """The 1-minute load average every 5 s while a contender runs: mean and maximum."""

    def __init__(self) -> None:
        self.samples = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(5.0):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])
        return {"mean": round(sum(self.samples) / len(self.samples), 2), "max": round(max(self.samples), 2)}


def same_changefeed(a: Path, b: Path) -> int:
    """Assert that two changefeeds hold the same rows (every column, in ``(tx_seq, op_seq)``
    order; files may be cut differently), a file at a time against a stream of the other
    (memory: a few files, whatever the size); the rows compared."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.contract_model import changefeed_files

    def batches(cf: Path):
        for path in changefeed_files(cf):
            yield from pq.ParquetFile(path).iter_batches(batch_size=65_536)

    other = batches(b)
    held: pa.Table | None = None
    n = 0
    for batch in batches(a):
        while held is None or held.num_rows < batch.num_rows:
            more = next(other, None)
            assert more is not None, f"{b} has fewer rows than {a} ({n} compared)"
            more_t = pa.Table.from_batches([more])
            held = more_t if held is None else pa.concat_tables([held, more_t])
        mine = pa.Table.from_batches([batch])
        theirs = held.slice(0, batch.num_rows).select(mine.column_names)
        assert mine.equals(theirs.cast(mine.schema)), f"rows {n}..{n + batch.num_rows - 1} differ"
        held = held.slice(batch.num_rows)
        n += batch.num_rows
    assert (held is None or held.num_rows == 0) and next(other, None) is None, f"{b} has more rows than {a}"
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transactions", type=int, default=benchlib.DEFAULT_TRANSACTIONS)
    ap.add_argument("--large-tx-rows", type=int, default=0)
    ap.add_argument("--masters", default="local[2],local[1]")
    ap.add_argument("--work", default="/tmp/bench-spark-replay")
    ap.add_argument("--child", nargs=3, metavar=("INPUT", "WORK", "MASTER"))
    ap.add_argument("--no-replay", action="store_true", help="Spark only (no one-process replay)")
    ap.add_argument(
        "--no-wait", action="store_true", help="do not wait for a quiet machine (other_cpu says how busy it was)"
    )
    args = ap.parse_args()
    if args.no_wait:
        benchlib.wait_quiet = lambda *a, **k: 0.0
    if args.child:
        child(*args.child)
        return
    work = Path(args.work)
    input_dir = str(work / f"input-{args.transactions}-{args.large_tx_rows}")
    desc = benchlib.prepare_input(input_dir, transactions=args.transactions, large_tx_rows=args.large_tx_rows)
    lines = desc["lines"]
    out: dict = {"input": desc, "machine": benchlib.machine_info(str(work)), "contenders": {}}
    if not args.no_replay:
        load = LoadSampler()
        m, summary = benchlib.measure_replay(input_dir, str(work / "replay"))
        out["contenders"]["replay"] = {
            "wall": m.wall,
            "lines_per_s": benchlib.rate(lines, m.wall),
            "peak_rss": m.peak_rss,
            "other_cpu": m.other_cpu,
            "cpu_seconds": m.user + m.sys,
            "rows": summary["rows_published"],
            "load_average": load.stop(),
        }
        print(json.dumps({"replay": out["contenders"]["replay"]}), file=sys.stderr, flush=True)
    for master in args.masters.split(","):
        where = work / f"spark-{master.replace('[', '').replace(']', '')}"
        benchlib.fresh_dir(where)
        benchlib.warm_cache(input_dir)
        benchlib.wait_quiet()
        env = {**os.environ, "PYTHONPATH": str(benchlib.REPO_DIR), "PYSPARK_PYTHON": sys.executable}
        load = LoadSampler()
        r = benchlib.run_measured([sys.executable, __file__, "--child", input_dir, str(where), master], env=env)
        r.check()
        doc = r.last_json()
        doc["load_average"] = load.stop()
        doc["lines_per_s"] = benchlib.rate(lines, r.wall)
        doc["wall_process"] = r.wall
        doc["shuffle_bytes_per_line"] = doc["shuffle_write_bytes"] / lines
        doc["other_cpu"] = r.other_cpu
        doc["cpu_seconds"] = r.user + r.sys  # the Python driver only (its JVM is not waited for, so not counted)
        out["contenders"][f"spark {master}"] = doc
        print(json.dumps({f"spark {master}": doc}), file=sys.stderr, flush=True)
        if not args.no_replay:
            doc["rows_compared"] = same_changefeed(where / "changefeed", work / "replay" / "changefeed")
    benchlib.print_json(out)


if __name__ == "__main__":
    main()
