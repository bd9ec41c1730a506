"""The PostgreSQL source's CPU a row, stage by stage, without a server: the pgoutput stream
of one streamed transaction of ``--rows`` inserts into the benchmarks' table (``id bigint``
key, ``v int``, ``s text``) is made in memory, then each stage runs on the output of the
one before, alone, timed by ``time.process_time`` (best of ``--repeat``):

0. ``receive``: socket reads and message splitting (``SocketStream.read_batch``) of that
   stream as the server sends it, written by a thread into a socket pair (the reading
   thread's CPU, ``time.thread_time``);
1. ``decode``: the reader's stream loop (pgoutput frames to encoded records in blocks),
   blocks thrown away: message decode and row-to-record conversion;
2. ``blocks``: building those blocks (``BlockBuilder.build``) and encoding them (zstd);
3. ``append``: appending the encoded blocks to an LmdbQueue (durable, as the service);
4. ``read``: reading the committed transaction back (the dispatcher: blocks decoded,
   records decoded), rows thrown away;
5. ``sink``: the changefeed writer given those rows (Arrow batches, Parquet, fsync).

    python bench/postgres_split.py [--rows 200000] [--repeat 3] [--tables 1] [--json]

``--tables N`` spreads the inserts over N tables of that shape, in turn (row i into table
i mod N): with more than one, no two inserts in a row go to the same table, so each is a
run of one (``BlockBuilder.add_encoded_row`` once a row, the reader's worst case).

``OLR_BUFFER_PURE_PYTHON=1`` runs the pure-Python insert step instead of the compiled one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from olr_buffer.changes import INFINITE_SCN, Commit  # noqa: E402
from olr_buffer.dispatcher import Dispatcher  # noqa: E402
from olr_buffer.runtime import quiet_gc  # noqa: E402
from olr_buffer.sinks.parquet import ChangefeedWriter  # noqa: E402
from olr_buffer.sources.postgres import protocol as p  # noqa: E402
from olr_buffer.sources.postgres.connection import Server, SocketStream  # noqa: E402
from olr_buffer.testing import MemoryQueue  # noqa: E402
from olr_buffer.txbuffer import LmdbQueue  # noqa: E402
from olr_buffer.txbuffer.block import BlockCodec  # noqa: E402
from tests.sources.postgres.test_reader_fast_path import FakeStream, encode  # noqa: E402
from tests.sources.postgres.test_reader_stream import OID, reader  # noqa: E402

try:
    from olr_buffer.sources.postgres.compiled import INSERT_STEP
except ImportError:  # a tree before the compiled step (to compare with)
    INSERT_STEP = "pure Python (no compiled step in this tree)"

XID = 700


def frames(rows: int, tables: int = 1) -> list[bytes]:
    cols = (p.Column("id", 20, True), p.Column("v", 23, False), p.Column("s", 25, False))
    out = []
    lsn = 1 << 32

    def add(msg, in_stream: bool) -> None:
        nonlocal lsn
        lsn += 40
        out.append(b"w" + struct.pack("!QQq", lsn, lsn + 40, 0) + encode(msg, in_stream))

    add(p.StreamStart(XID, True), False)
    for t in range(tables):
        add(p.Relation(XID, OID + t, "public", "big" if t == 0 else f"big{t}", "d", cols), True)
    for i in range(rows):
        add(p.Insert(XID, OID + i % tables, (str(i).encode(), str(i % 1000).encode(), b"row %d" % i)), True)
    add(p.StreamStop(), True)
    add(p.StreamCommit(XID, lsn + 40, lsn + 80, 0), False)
    return out


class _Blocks(MemoryQueue):
    """Keeps the blocks' records as the reader hands them over (with the state)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[tuple[list[bytes], dict]] = []

    def append(self, records, meta=None) -> int:
        self.blocks.append((list(records), dict(meta or {})))
        return 0


def best(fn, repeat: int, clock=time.process_time) -> float:
    times = []
    for _ in range(repeat):
        with quiet_gc():
            t = clock()
            fn()
            times.append(clock() - t)
    return min(times)


def receive(data: bytes, count: int) -> int:
    """The ``count`` messages of ``data`` (CopyData messages) received by a
    :class:`SocketStream` from a socket pair, sent by a thread after CopyBoth; their count."""
    ours, server = socket.socketpair()
    ours.setblocking(False)  # as libpq leaves it
    conn = _Conn(ours)
    s = SocketStream(Server("postgresql://u@h/db"), conn)
    server.sendall(b"W" + struct.pack("!i", 7) + b"\0\0\0")
    s.start("START_REPLICATION SLOT s LOGICAL 0/0")
    writer = threading.Thread(target=lambda: (server.sendall(data), server.shutdown(socket.SHUT_WR)))
    writer.start()
    got = 0
    try:
        while got < count:
            got += len(s.read_batch(5.0))
    finally:
        writer.join()
        s.close()
        server.close()
    return got


class _Conn:
    """What SocketStream uses of a psycopg2 connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tables", type=int, default=1, help="inserts spread over this many tables, in turn")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    stream = frames(args.rows, args.tables)
    batches = [stream[i : i + 3000] for i in range(0, len(stream), 3000)]
    out: dict = {"rows": args.rows, "insert_step": INSERT_STEP}
    kept: list = []

    def decode() -> None:
        q = _Blocks()
        r = reader(q, block_records=4096)
        r.flush_seconds = 1e9
        r._stream_loop(FakeStream(list(batches), r.stop))
        r._append()
        kept[:] = [q.blocks]

    copydata = b"".join(b"d" + struct.pack("!i", len(m) + 4) + m for m in stream)
    out["receive"] = best(lambda: receive(copydata, len(stream)), args.repeat, time.thread_time)
    # the stage's blocks built by the builder but not kept: decode's time less the build's
    out["decode"] = best(decode, args.repeat)
    blocks = kept[0]
    codec = BlockCodec()
    out["blocks"] = best(lambda: [codec.encode(recs) for recs, _ in blocks if recs], args.repeat)
    encoded = [(codec.encode(recs) if recs else None, len(recs), meta) for recs, meta in blocks]
    work = Path(tempfile.mkdtemp(prefix="olr-pg-split-"))
    try:
        appends = []

        def append() -> None:
            qdir = work / f"q{len(appends)}"
            q = LmdbQueue(str(qdir))
            for value, count, meta in encoded:
                q.append_encoded(value, count, meta)
            q.close()
            appends.append(qdir)

        out["append"] = best(append, args.repeat)
        qdir = appends[-1]
        rows: list = []

        def read() -> None:
            q = LmdbQueue(str(qdir))
            sink = _Rows()
            d = Dispatcher(q, sink, [1])
            while d.poll():
                pass
            d.publish_ready(INFINITE_SCN)
            rows[:] = [sink.chunks, sink.commit, sink.flat]
            q.close()

        out["read"] = best(read, args.repeat)
        chunks, commit, flat = rows

        def sink() -> None:
            cf = work / f"cf{time.monotonic_ns()}"
            w = ChangefeedWriter(str(cf))
            if flat is not None:
                w.write_rows(*flat)
            else:
                w.write_transaction(commit, iter(chunks))
            w.flush()
            w.release()

        out["sink"] = best(sink, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    us = {k: round(v / args.rows * 1e6, 3) for k, v in out.items() if isinstance(v, float)}
    result = {
        "rows": args.rows,
        "tables": args.tables,
        "insert_step": INSERT_STEP,
        "cpu_us_per_row": us,
        "total": round(sum(us.values()), 3),
    }
    print(json.dumps(result, indent=None if args.json else 2))


class _Rows:
    """A sink that keeps the chunks of the one transaction (the read-back's output)."""

    def __init__(self) -> None:
        self.chunks: list = []
        self.commit: Commit | None = None
        self.flat: tuple | None = None  # (rows, txs) where the dispatcher hands it over flat
        self.next_tx_seq = 0

    def open(self, *args, **kwargs):
        return None

    def write_transaction(self, commit, chunks) -> int:
        self.commit = commit
        self.chunks = list(chunks)
        return sum(len(r) for _, r in self.chunks)

    def write_rows(self, rows, txs) -> None:
        self.flat = (rows, txs)


if __name__ == "__main__":
    main()
