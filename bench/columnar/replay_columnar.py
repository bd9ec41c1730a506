"""The columnar prototype as a replay: reader processes, the queue, the dispatcher and the
sink, wired as ``olr-buffer replay`` wires today's (a prototype: no checkpoints, no
restart, no errors beyond refusing; see bench/log/2026-11-26-columnar-spike.md).

    PYTHONPATH=. python bench/columnar/replay_columnar.py INPUT_DIR --queue DIR --changefeed DIR [--no-sync]

One child process per redo thread (forked before the queue is opened, niceness 10 as
today's) reads its files with ``ColumnarReader`` and sends each block, compressed, with
its position through a pipe; a thread of the parent per child appends it to the
``LmdbQueue`` (``append_encoded``, durable); the main thread runs
``ColumnarDispatcher`` and ``ColumnarSink``. Once every reader is done and the queue is
read to its end, every remaining end is acted on (the input is complete), as replay
does. Prints one JSON line: lines, rows, transactions, wall seconds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import proto  # noqa: E402

READER_NICENESS = 10


def _child(conn, input_dir: str, thread: int) -> None:
    os.nice(READER_NICENESS)
    try:
        r = proto.ColumnarReader(input_dir, thread, lambda v, c, n, meta: conn.send(("block", v, c, n, meta)))
        r.read_to_end()
        conn.send(("done", r.lines))
    except BaseException as exc:  # noqa: BLE001 - the parent stops the run
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def replay(input_dir: str, queue_dir: str, changefeed: str, durable: bool = True) -> dict:
    from olr_buffer.changes import INFINITE_SCN
    from olr_buffer.sources.redo.files import scan

    threads = sorted(scan(input_dir))
    ctx = mp.get_context("fork")  # before the queue is opened: no LMDB environment crosses it
    children = []
    for t in threads:
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(send, input_dir, t), daemon=True)
        p.start()
        send.close()
        children.append((t, p, recv))

    from olr_buffer.runtime import quiet_gc
    from olr_buffer.txbuffer import LmdbQueue

    queue = LmdbQueue(queue_dir, durable=durable)
    wake = threading.Event()
    done: dict[int, int] = {}
    errors: list[str] = []

    def receive(t: int, conn) -> None:
        try:
            while True:
                msg = conn.recv()
                if msg[0] == "block":
                    _, value, count, _n, meta = msg
                    queue.append_encoded(value, count, meta)
                elif msg[0] == "done":
                    done[t] = msg[1]
                    return
                else:
                    errors.append(msg[1])
                    return
        except EOFError:
            errors.append(f"reader of thread {t} died")
        finally:
            wake.set()

    receivers = [threading.Thread(target=receive, args=(t, c), daemon=True) for t, _, c in children]
    for r in receivers:
        r.start()
    sink = proto.ColumnarSink(changefeed, durable=durable)
    d = proto.ColumnarDispatcher(queue, sink, threads)
    t0 = time.perf_counter()
    with quiet_gc():
        while True:
            finished = len(done) == len(threads) or errors
            if not d.poll():
                if finished and d.tailer.index >= queue.next_index:
                    break
                wake.wait(0.05)
                wake.clear()
        if errors:
            raise SystemExit(f"replay_columnar: {errors[0]}")
        d.publish_ready(INFINITE_SCN)
        sink.flush()
    for _, p, _ in children:
        p.join()
    queue.close()
    return {
        "lines": sum(done.values()),
        "rows": sink.rows,
        "transactions": sink.next_tx_seq,
        "files": sink.files,
        "blocks": d.stats.blocks,
        "block_reads": d.stats.block_reads,
        "wall_after_start": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--queue", required=True)
    ap.add_argument("--changefeed", required=True)
    ap.add_argument("--no-sync", action="store_true")
    args = ap.parse_args()
    print(json.dumps(replay(args.input, args.queue, args.changefeed, durable=not args.no_sync)))


if __name__ == "__main__":
    main()
