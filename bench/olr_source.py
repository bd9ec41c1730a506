"""Memory of the OpenLogReplicator source with a large transaction: the peak RSS of
``olr-buffer run olr://...`` (``VmHWM`` of the service process plus its receiver process)
while a sender streams one transaction of N rows (OpenLogReplicator's default form: a
``begin`` message, one message per row, a ``commit`` message) after a base load of small
transactions, for several N side by side.

    python bench/olr_source.py [--rows 1000,100000,1000000] [--base-transactions 2000] [--json]

The sender is a generator in this process (messages made as they are sent: its own
memory is not the service's). The service appends each block of the transaction as its
messages arrive and publishes the transaction whole at its commit (reading it back from
the queue), so its peak RSS should not grow with N. Target: the 1,000,000-row
transaction at most 1.5x the peak of the smallest. Also shown: seconds from the first
message to the last row in the changefeed, and rows a second.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from tests.contract_model import changefeed_files  # noqa: E402
from tests.processes import reader_processes  # noqa: E402
from tests.sources.olr.standin import (  # noqa: E402
    INFO,
    READY,
    REPLICATE,
    START,
    decode_request,
    encode_response,
    framed,
)

ROW = (
    '{"c_scn":%d,"c_idx":%d,"xid":"%s","payload":[{"op":"c","schema":{"owner":"BENCH","table":"BIG","obj":9001},'
    '"rid":"AAAR%014d","after":{"ID":%d,"V":%d,"S":"row %d of a transaction, some text to make it wider"}}]}'
)
BEGIN = '{"scn":%d,"tm":%d,"c_scn":%d,"c_idx":%d,"xid":"%s","payload":[{"op":"begin"}]}'
COMMIT = '{"c_scn":%d,"c_idx":%d,"xid":"%s","payload":[{"op":"commit"}]}'


def stream(base: int, large: int):
    """Frames: ``base`` transactions of 10 rows, then one of ``large`` rows."""
    scn = 1_000_000
    n = 0
    sizes = [10] * base + [large]
    for t, rows in enumerate(sizes):
        scn += 5
        xid = f"0x{t % 60000:04x}.{t % 4096:03x}.{t:08x}"
        idx = 0
        yield framed((BEGIN % (scn - 1, 1_700_000_000_000_000_000 + scn, scn, idx, xid)).encode())
        batch = []
        for _ in range(rows):
            idx += 1
            n += 1
            batch.append(framed((ROW % (scn, idx, xid, n, n, n % 1000, n)).encode()))
            if len(batch) == 1000:
                yield b"".join(batch)
                batch = []
        if batch:
            yield b"".join(batch)
        idx += 1
        yield framed((COMMIT % (scn, idx, xid)).encode())


class Sender:
    """One receiver: INFO -> READY, START -> REPLICATE, then the stream."""

    def __init__(self, base: int, large: int) -> None:
        self.base, self.large = base, large
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.started = None
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        buf = b""
        while True:
            buf += conn.recv(4096)
            while len(buf) >= 4:
                n = int.from_bytes(buf[:4], "little")
                if len(buf) < 4 + n:
                    break
                req, buf = decode_request(buf[4 : 4 + n]), buf[4 + n :]
                if req["code"] == INFO:
                    conn.sendall(framed(encode_response(READY)))
                elif req["code"] == START:
                    conn.sendall(framed(encode_response(REPLICATE, 0)))
                    self.started = time.monotonic()
                    for chunk in stream(self.base, self.large):
                        conn.sendall(chunk)
                    self.done.set()
                    conn.settimeout(None)
                    while conn.recv(4096):  # confirms, until the service goes
                        pass
                    return


def rows_published(cf: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in changefeed_files(cf)) if cf.is_dir() else 0


def peak_rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def measure(work: Path, base: int, large: int) -> dict:
    work.mkdir(parents=True)
    sender = Sender(base, large)
    cmd = [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "run",
        f"olr://127.0.0.1:{sender.port}/BENCH",
        "--queue",
        str(work / "q"),
        "--changefeed",
        str(work / "cf"),
        "--flush-interval",
        "0.5",
        "--log-level",
        "info",
    ]
    with open(work / "service.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    total = base * 10 + large
    try:
        while rows_published(work / "cf") < total:
            if proc.poll() is not None:
                raise RuntimeError((work / "service.log").read_text()[-3000:])
            time.sleep(0.5)
        seconds = time.monotonic() - sender.started
        service = peak_rss_kib(proc.pid)
        receiver = sum(peak_rss_kib(c) for c in reader_processes(proc.pid))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return {
        "large_rows": large,
        "rows": total,
        "seconds": round(seconds, 1),
        "rows_per_s": round(total / seconds),
        "service_peak_rss_mib": round(service / 1024, 1),
        "receiver_peak_rss_mib": round(receiver / 1024, 1),
        "peak_rss_mib": round((service + receiver) / 1024, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1000,100000,1000000", help="rows of the large transaction, one run each")
    ap.add_argument("--base-transactions", type=int, default=2000, help="10-row transactions before it")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="olr-source-bench-"))
    results = []
    try:
        for n in (int(x) for x in args.rows.split(",")):
            r = measure(work / str(n), args.base_transactions, n)
            results.append(r)
            if not args.json:
                print(
                    f"transaction of {n:>9,} rows: peak RSS {r['peak_rss_mib']:6.1f} MiB (service "
                    f"{r['service_peak_rss_mib']:.1f}, receiver {r['receiver_peak_rss_mib']:.1f}); "
                    f"{r['rows']:,} rows in {r['seconds']}s, {r['rows_per_s']:,} rows/s",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = round(results[-1]["peak_rss_mib"] / results[0]["peak_rss_mib"], 3)
    out = {"name": "olr_source_memory", "runs": results, "ratio": ratio, "target": 1.5}
    print(json.dumps(out) if args.json else f"largest / smallest: {ratio}x (target <= 1.5x)")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
