"""The columnar prototype (``proto.py``), stage by stage, in CPU time a line: the same
stages and the same way as ``stages_today.py`` measures today's pipeline.

    PYTHONPATH=. python bench/columnar/stages_columnar.py INPUT_DIR [--work DIR] [--runs 3]
        [--compare CHANGEFEED_DIR] [--json]

* ``reader``: every redo thread's ``ColumnarReader`` in turn (decode, column building,
  vectorized checks, blocks as Arrow IPC, ``BlockCodec.encode``), blocks kept;
* ``pipe``: those blocks through a multiprocessing pipe (as ``stages_today.py``);
* ``append``: those blocks appended to a fresh durable ``LmdbQueue`` (``append_encoded``);
* ``dispatch``: ``ColumnarDispatcher`` tailing that queue into a sink that keeps what it
  gets (per-block summaries, commit order, the rows taken from the blocks' batches,
  compensation);
* ``sink``: ``ColumnarSink`` fed those runs (changefeed columns, Parquet, fsync, rename);
  its Parquet writer's own CPU is also given.

``--compare DIR``: the prototype's changefeed is checked against a changefeed written by
today's code from the same input (``Table.equals`` after sorting both by tx_seq, op_seq).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
import proto  # noqa: E402
from stages_today import stage_append, stage_pipe  # noqa: E402


def stage_reader(inp: str) -> tuple[float, dict[int, list]]:
    from olr_buffer.sources.redo.files import scan

    blocks: dict[int, list] = {}
    rs = []
    for t in sorted(scan(inp)):
        out = blocks.setdefault(t, [])
        rs.append(proto.ColumnarReader(inp, t, lambda v, c, n, meta, out=out: out.append((v, c, meta))))
    c0 = time.process_time()
    for r in rs:
        r.read_to_end()
    return time.process_time() - c0, blocks


class KeepSink:
    def __init__(self) -> None:
        self.runs: list = []

    def write(self, p) -> None:
        self.runs.append(p)


def stage_dispatch(queue_dir: str, threads: list[int]) -> tuple[float, KeepSink, dict]:
    from olr_buffer.changes import INFINITE_SCN
    from olr_buffer.runtime import quiet_gc
    from olr_buffer.txbuffer import LmdbQueue

    q = LmdbQueue(queue_dir)
    try:
        sink = KeepSink()
        d = proto.ColumnarDispatcher(q, sink, threads)
        with quiet_gc():
            c0 = time.process_time()
            while d.poll():
                pass
            d.publish_ready(INFINITE_SCN)
            cpu = time.process_time() - c0
        return cpu, sink, {f: getattr(d.stats, f) for f in d.stats.__struct_fields__}
    finally:
        q.close()


def stage_sink(runs: list, out: str) -> tuple[float, float, dict]:
    from olr_buffer.runtime import quiet_gc

    shutil.rmtree(out, ignore_errors=True)
    s = proto.ColumnarSink(out)
    with quiet_gc():
        c0 = time.process_time()
        for p in runs:
            s.write(p)
        s.flush()
        cpu = time.process_time() - c0
    return cpu, s.parquet_cpu, {"rows": s.rows, "transactions": s.next_tx_seq, "files": s.files}


def read_changefeed(path: str):
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from olr_buffer.sinks.parquet.schema import ARROW_SCHEMA

    files = sorted(f for f in os.listdir(path) if f.startswith("part-") and f.endswith(".parquet"))
    import pyarrow as pa

    t = pa.concat_tables([pq.read_table(os.path.join(path, f), schema=ARROW_SCHEMA) for f in files])
    return t.take(pc.sort_indices(t, [("tx_seq", "ascending"), ("op_seq", "ascending")]))


def compare(ours: str, theirs: str) -> dict:
    a, b = read_changefeed(ours), read_changefeed(theirs)
    same = a.equals(b)
    out = {"rows": [len(a), len(b)], "equal": same}
    if not same:
        for name in a.column_names:
            if not a.column(name).equals(b.column(name)):
                out.setdefault("columns_differ", []).append(name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--work", default="/tmp/olr-columnar")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--compare", help="a changefeed of today's code from the same input")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    lines = benchlib.describe_input(args.input)["lines"]
    os.makedirs(args.work, exist_ok=True)
    benchlib.warm_cache(args.input)
    res: dict[str, list] = {}
    extra: dict = {}

    def add(name: str, cpu: float) -> None:
        res.setdefault(name, []).append(cpu / lines * 1e6)
        print(
            f"[{time.strftime('%H:%M:%S')}] {name}: {cpu:.2f} s CPU, {cpu / lines * 1e6:.3f} us a line",
            file=sys.stderr,
            flush=True,
        )

    queue_dir = os.path.join(args.work, "columnar-queue")
    out = os.path.join(args.work, "columnar-changefeed")
    for _ in range(args.runs):
        cpu, blocks = stage_reader(args.input)
        add("reader", cpu)
        extra["queue_blocks"] = sum(len(v) for v in blocks.values())
        extra["queue_bytes"] = sum(len(b[0]) for v in blocks.values() for b in v)
        add("pipe", stage_pipe(blocks))
        add("append", stage_append(blocks, queue_dir))
        threads = sorted(blocks)
        del blocks
        cpu, sink, extra["dispatch"] = stage_dispatch(queue_dir, threads)
        add("dispatch", cpu)
        cpu, parquet, extra["sink"] = stage_sink(sink.runs, out)
        add("sink", cpu)
        add("sink: Parquet encoding", parquet)
        del sink
    if args.compare:
        extra["compare"] = compare(out, args.compare)
        print(f"compare with {args.compare}: {extra['compare']}", file=sys.stderr, flush=True)
    summary = {k: {"median": statistics.median(v), "runs": [round(x, 3) for x in v]} for k, v in res.items()}
    result = {"input": args.input, "lines": lines, "load": os.getloadavg(), "stages": summary, **extra}
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in summary.items():
            print(f"{k:40s} {v['median']:7.3f} us/line  (runs: {', '.join(f'{x:.3f}' for x in v['runs'])})")
        print(json.dumps(extra))


if __name__ == "__main__":
    main()
