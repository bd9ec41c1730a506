"""Today's pipeline, stage by stage, in CPU time a line (issue 33's spike, before).

    PYTHONPATH=. python bench/columnar/stages_today.py INPUT_DIR [--work DIR] [--runs 3]
        [--stages reader,append,dispatch,sink,replay] [--json]

Each stage runs alone in this process (one thread busy, except the sink's Parquet
thread, whose CPU counts: ``time.process_time`` is the whole process's), on the same
input, and is timed in CPU (user+sys), not wall time: the machine is shared.

* ``reader``: every redo thread's ``ThreadReader.read_to_end`` in turn, into an appender
  that does what the reader process's pipe appender does (``BlockCodec.encode``: the
  block compressed and checksummed) and keeps the encoded blocks: parse, checks, block
  building, compression; the pipe itself is left out.
* ``pipe``: those blocks through a multiprocessing pipe (send and receive, both in this
  process), as a reader process sends them to the parent;
* ``append``: those blocks (threads interleaved) appended with ``append_encoded`` to a
  fresh, durable ``LmdbQueue``, as the parent's receiving threads do.
* ``dispatch``: a ``Dispatcher`` tailing that queue to its end (then every end acted on,
  as replay does) into a sink that only keeps what it is handed: summaries, grouping,
  commit order, read-back, ``decode_records``, compensation.
* ``sink``: a fresh durable ``ChangefeedWriter`` fed exactly those calls
  (``write_rows``/``write_transaction``); its ``_batch`` (Python rows to Arrow columns)
  and the Parquet encoding thread are also timed alone (``time.thread_time``).
* ``replay``: ``python -m olr_buffer.cli replay`` in a child, user+sys of it and its
  reaped descendants (the fork server and the reader processes: ``wait4``), interpreter
  start and imports included.

CPU µs a line = CPU seconds / the input's lines (``lwn`` included), as the issue counts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
import benchlib  # noqa: E402


class EncodeOnly:
    """The reader process's appender without the pipe: encode, keep."""

    def __init__(self, out: list) -> None:
        from olr_buffer.txbuffer import BlockCodec

        self.codec = BlockCodec()
        self.out = out

    def append(self, records, meta=None) -> int:
        self.out.append((self.codec.encode(records), len(records), dict(meta or {})))
        return 0


def readers(inp: str, appender_for):
    from olr_buffer.sources.redo.files import scan
    from olr_buffer.sources.redo.thread_reader import ThreadReader

    return [ThreadReader(appender_for(t), inp, t, files, None) for t, files in sorted(scan(inp).items())]


def stage_reader(inp: str) -> tuple[float, dict[int, list]]:
    blocks: dict[int, list] = {}
    rs = readers(inp, lambda t: EncodeOnly(blocks.setdefault(t, [])))
    c0 = time.process_time()
    for r in rs:
        r.read_to_end()
    return time.process_time() - c0, blocks


def interleave(blocks: dict[int, list]) -> list:
    out, its = [], [iter(v) for _, v in sorted(blocks.items())]
    while its:
        for it in list(its):
            x = next(it, None)
            if x is None:
                its.remove(it)
            else:
                out.append(x)
    return out


def stage_pipe(blocks: dict[int, list]) -> float:
    """The blocks through a multiprocessing pipe, as a reader process sends them and a
    receiving thread of the parent gets them (both sides in this process: their sum)."""
    import multiprocessing as mp
    import threading

    recv, send = mp.Pipe(duplex=False)
    got = []

    def receive() -> None:
        while True:
            msg = recv.recv()
            if msg is None:
                return
            got.append(len(msg[1]))

    th = threading.Thread(target=receive)
    c0 = time.process_time()
    th.start()
    for value, count, meta in interleave(blocks):
        send.send(("block", value, count, meta))
    send.send(None)
    th.join()
    return time.process_time() - c0


def stage_append(blocks: dict[int, list], queue_dir: str) -> float:
    from olr_buffer.txbuffer import LmdbQueue

    shutil.rmtree(queue_dir, ignore_errors=True)
    order = interleave(blocks)
    q = LmdbQueue(queue_dir)
    try:
        c0 = time.process_time()
        for value, count, meta in order:
            q.append_encoded(value, count, meta)
        return time.process_time() - c0
    finally:
        q.close()


class KeepSink:
    """A TransactionSink that keeps what it is handed (for the sink stage)."""

    def __init__(self) -> None:
        self.calls: list = []

    def write_rows(self, rows, txs) -> None:
        self.calls.append(("rows", rows, txs))

    def write_transaction(self, commit, chunks) -> int:
        chunks = [(t, rows) for t, rows in chunks]
        n = sum(len(r) for _, r in chunks)
        if n:
            self.calls.append(("tx", commit, chunks))
        return n


def stage_dispatch(queue_dir: str) -> tuple[float, KeepSink, dict]:
    from olr_buffer.changes import INFINITE_SCN
    from olr_buffer.dispatcher import Dispatcher
    from olr_buffer.runtime import quiet_gc
    from olr_buffer.sources.redo.position import POSITION_PREFIX, load_positions
    from olr_buffer.txbuffer import LmdbQueue

    q = LmdbQueue(queue_dir)
    try:
        threads = sorted(load_positions(q.meta_items(POSITION_PREFIX)))
        sink = KeepSink()
        d = Dispatcher(q, sink, threads, start_index=q.first_index)
        with quiet_gc():
            c0 = time.process_time()
            while d.poll():
                pass
            d.publish_ready(INFINITE_SCN)
            cpu = time.process_time() - c0
        return cpu, sink, {"published": d.stats.published, "rows": d.stats.rows, "records": d.stats.records}
    finally:
        q.close()


def stage_sink(sink_calls: list, out: str) -> tuple[float, dict]:
    from olr_buffer.runtime import quiet_gc
    from olr_buffer.sinks.parquet import ChangefeedWriter
    from olr_buffer.sinks.parquet import writer as writer_mod

    shutil.rmtree(out, ignore_errors=True)
    spent = {"batch": 0.0, "parquet": 0.0}
    batch0, run0 = writer_mod.ChangefeedWriter._batch, writer_mod._BackgroundWrite._run

    def batch(self):
        t = time.thread_time()
        try:
            return batch0(self)
        finally:
            spent["batch"] += time.thread_time() - t

    def run(self, w, b):
        t = time.thread_time()
        try:
            return run0(self, w, b)
        finally:
            spent["parquet"] += time.thread_time() - t

    writer_mod.ChangefeedWriter._batch, writer_mod._BackgroundWrite._run = batch, run
    try:
        w = ChangefeedWriter(out)
        with quiet_gc():
            c0 = time.process_time()
            for kind, a, b in sink_calls:
                if kind == "rows":
                    w.write_rows(a, b)
                else:
                    w.write_transaction(a, iter(b))
            w.flush()
            cpu = time.process_time() - c0
        w.close()
    finally:
        writer_mod.ChangefeedWriter._batch, writer_mod._BackgroundWrite._run = batch0, run0
    return cpu, spent


def stage_replay(inp: str, work: str) -> tuple[float, float, dict]:
    benchlib.fresh_dir(work)
    m = benchlib.run_measured(benchlib.replay_cmd(inp, work)).check()
    return m.user + m.sys, m.wall, m.last_json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--work", default="/tmp/olr-columnar")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--stages", default="reader,append,dispatch,sink,replay")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    stages = args.stages.split(",")
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

    queue_dir = os.path.join(args.work, "today-queue")
    for _ in range(args.runs):
        if {"reader", "append", "dispatch", "sink"} & set(stages):
            cpu, blocks = stage_reader(args.input)
            add("reader", cpu)
            add("pipe", stage_pipe(blocks))
            add("append", stage_append(blocks, queue_dir))
            del blocks
            if {"dispatch", "sink"} & set(stages):
                cpu, sink, extra["dispatch"] = stage_dispatch(queue_dir)
                add("dispatch", cpu)
                if "sink" in stages:
                    cpu, spent = stage_sink(sink.calls, os.path.join(args.work, "today-changefeed"))
                    add("sink", cpu)
                    add("sink: _batch (columns)", spent["batch"])
                    add("sink: Parquet encoding", spent["parquet"])
                del sink
        if "replay" in stages:
            cpu, wall, out = stage_replay(args.input, os.path.join(args.work, "today-replay"))
            add("replay total (processes included)", cpu)
            extra["replay_wall"] = extra.get("replay_wall", []) + [wall]
    summary = {k: {"median": statistics.median(v), "runs": [round(x, 3) for x in v]} for k, v in res.items()}
    out = {"input": args.input, "lines": lines, "load": os.getloadavg(), "stages": summary, **extra}
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in summary.items():
            print(f"{k:40s} {v['median']:7.3f} us/line  (runs: {', '.join(f'{x:.3f}' for x in v['runs'])})")
        print(json.dumps(extra))


if __name__ == "__main__":
    main()
