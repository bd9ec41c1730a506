"""How fast `olr-buffer serve` gives a receiver on the loopback the messages of a changefeed
of narrow rows, side by side with reading the same changefeed with pyarrow.

    python bench/serve_throughput.py [--lines 1000000] [--runs 5] [--work bench/out/serve]

The changefeed is made once (``bench/shapes.py --width narrow --tx tiny``, then
``olr-buffer replay``) and reused. Each run:

* **pyarrow**: a fresh process reads the columns the messages are made of from every
  file (``pyarrow.parquet.read_table``), and another also converts the values to Python
  objects (``to_pylist``: the least any Python consumer of the rows does); each timed
  from its first read to its last (start-up and imports aside);
* **serve**: a fresh ``olr-buffer serve`` (its own state directory, so nothing is
  confirmed), and a receiver in this process: INFO, START 0, then every message read
  (frames counted; the last one parsed and checked), a CONFIRM of the last message read
  every ``--confirm-every`` messages (serve reads and stores them while it streams).
  Wall time from START to the last message; CPU time of the serve process
  (``/proc/PID/stat``) and of the receiver over the same span.

Messages are begin + rows + commit of each transaction. The table gives the median of the
runs; the machine is shared, so CPU seconds are given beside wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from benchlib import machine_info, wait_quiet  # noqa: E402

sys.path.insert(0, str(BENCH.parent))
from olr_buffer.olr_protocol import COLUMNS  # noqa: E402

_U32 = struct.Struct("<I")


def prepare(work: Path, lines: int) -> dict:
    marker = work / "changefeed.json"
    params = {"lines": lines, "width": "narrow", "tx": "tiny", "threads": 2, "seed": 1}
    if marker.exists() and json.loads(marker.read_text()).get("params") == params:
        return json.loads(marker.read_text())
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(f"making a changefeed of {lines:,} narrow input lines ...", flush=True)
    subprocess.run(
        [
            sys.executable,
            str(BENCH / "shapes.py"),
            str(work / "in"),
            "--lines",
            str(lines),
            "--threads",
            "2",
            "--width",
            "narrow",
            "--tx",
            "tiny",
            "--open",
            "16",
            "--compensated",
            "0.0",
            "--seed",
            "1",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "replay",
            str(work / "in"),
            "--queue",
            str(work / "q"),
            "--changefeed",
            str(work / "cf"),
            "--no-sync",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=BENCH.parent,
    )
    shutil.rmtree(work / "in")
    shutil.rmtree(work / "q")
    import pyarrow.parquet as pq

    files = sorted(p for p in (work / "cf").iterdir() if p.name.startswith("part-"))
    rows = sum(pq.read_metadata(p).num_rows for p in files)
    transactions = int(files[-1].name.split("-")[2].split(".")[0]) + 1
    desc = {
        "params": params,
        "files": len(files),
        "rows": rows,
        "transactions": transactions,
        "messages": rows + 2 * transactions,
        "bytes": sum(p.stat().st_size for p in files),
    }
    marker.write_text(json.dumps(desc, indent=2))
    return desc


PYARROW = """
import json, sys, time, pyarrow.parquet as pq
from pathlib import Path
cols = sys.argv[2].split(",")
files = sorted(p for p in Path(sys.argv[1]).iterdir() if p.name.startswith("part-"))
t0, c0 = time.perf_counter(), time.process_time()
n = 0
for p in files:
    t = pq.read_table(p, columns=cols)
    if sys.argv[3] == "pylist":
        for c in t.columns:
            c.to_pylist()
    n += t.num_rows
print(json.dumps({"rows": n, "wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}))
"""


def measure_pyarrow(cf: Path, mode: str) -> dict:
    """Timed inside a fresh process, from the first read to the last (no start-up, no import)."""
    out = subprocess.run(
        [sys.executable, "-c", PYARROW, str(cf), ",".join(COLUMNS), mode], capture_output=True, text=True, check=True
    ).stdout
    doc = json.loads(out)
    return {"wall": doc["wall"], "cpu": doc["cpu"]}


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _request(code: int, database: str = "BENCH", **fields: int) -> bytes:
    def varint(v: int) -> bytes:
        out = bytearray()
        while v >= 0x80:
            out.append(v & 0x7F | 0x80)
            v >>= 7
        out.append(v)
        return bytes(out)

    body = (b"\x08" + varint(code) if code else b"") + b"\x12" + varint(len(database)) + database.encode()
    for number, name in ((3, "scn"), (8, "c_scn"), (9, "c_idx")):
        if name in fields:
            body += varint(number << 3) + varint(fields[name])
    return _U32.pack(len(body)) + body


def measure_serve(cf: Path, state: Path, messages: int, confirm_every: int) -> dict:
    import shutil

    shutil.rmtree(state, ignore_errors=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "serve",
            str(cf),
            "--listen",
            "127.0.0.1:0",
            "--database",
            "BENCH",
            "--state",
            str(state),
            "--log-format",
            "json",
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=BENCH.parent,
    )
    port = None
    for line in proc.stderr:
        doc = json.loads(line)
        if "listen" in doc:
            port = int(doc["listen"].rpartition(":")[2])
            break
    assert port, "serve did not start"
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    try:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(_request(0))
        assert sock.recv(64) == b"\x00\x00\x00\x00"  # READY (code 0: an empty message)
        serve0, me0 = _proc_cpu(proc.pid), resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        sock.sendall(_request(1, scn=0))
        buf = bytearray()
        count = -1  # the REPLICATE reply comes first
        next_confirm = confirm_every
        last = b""
        while count < messages:
            data = sock.recv(4 << 20)
            assert data, f"closed after {count:,} messages"
            buf += data
            pos, end = 0, len(buf)
            while end - pos >= 4:
                (n,) = _U32.unpack_from(buf, pos)
                if end - pos - 4 < n:
                    break
                count += 1
                last_at = pos
                pos += 4 + n
            if pos:
                last = bytes(buf[last_at + 4 : pos])
                del buf[:pos]
            if confirm_every and count >= next_confirm:
                next_confirm += confirm_every
                doc = json.loads(last)  # the last message read: a position that moves, stored each time
                sock.sendall(_request(3, c_scn=doc["c_scn"], c_idx=doc["c_idx"]))
        wall = time.perf_counter() - t0
        serve_cpu = _proc_cpu(proc.pid) - serve0
        me1 = resource.getrusage(resource.RUSAGE_SELF)
        doc = json.loads(last)
        assert doc["payload"] == [{"op": "commit"}], doc
        sock.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    return {
        "wall": wall,
        "cpu": serve_cpu,
        "receiver_cpu": (me1.ru_utime - me0.ru_utime) + (me1.ru_stime - me0.ru_stime),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000, help="input lines of the changefeed (made once)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", default=str(BENCH / "out" / "serve"))
    ap.add_argument("--confirm-every", type=int, default=100_000, help="messages between two CONFIRMs (0: none)")
    ap.add_argument("--json", help="also write the results to this file")
    a = ap.parse_args()
    work = Path(a.work)
    desc = prepare(work, a.lines)
    n = desc["messages"]
    print(
        f"changefeed: {desc['files']} file(s), {desc['rows']:,} rows, {desc['transactions']:,} transactions, "
        f"{n:,} messages, {desc['bytes'] / 1e6:,.1f} MB of Parquet",
        flush=True,
    )
    runs: dict[str, list[dict]] = {"pyarrow read": [], "pyarrow read + to_pylist": [], "serve to a receiver": []}
    for i in range(a.runs):
        wait_quiet(threshold=0.5, max_wait=30, quiet=True)
        runs["pyarrow read"].append(measure_pyarrow(work / "cf", "table"))
        runs["pyarrow read + to_pylist"].append(measure_pyarrow(work / "cf", "pylist"))
        runs["serve to a receiver"].append(measure_serve(work / "cf", work / "state", n, a.confirm_every))
        s = runs["serve to a receiver"][-1]
        print(
            f"run {i + 1}: serve {s['wall']:.2f}s wall, {s['cpu']:.2f}s CPU ({n / s['wall']:,.0f} messages/s); "
            f"receiver {s['receiver_cpu']:.2f}s CPU",
            flush=True,
        )
    print(f"\nmedian of {a.runs} runs ({desc['rows']:,} rows = {n:,} messages):")
    print(f"{'':28} {'wall s':>8} {'CPU s':>8} {'per wall s':>14} {'per CPU s':>14}")
    result = {"changefeed": desc, "runs": runs, "machine": machine_info(str(work)), "median": {}}
    for name, rs in runs.items():
        wall = statistics.median(r["wall"] for r in rs)
        cpu = statistics.median(r["cpu"] for r in rs)
        unit = "rows" if name.startswith("pyarrow") else "messages"
        count = desc["rows"] if unit == "rows" else n
        result["median"][name] = {
            "wall": wall,
            "cpu": cpu,
            f"{unit}_per_s": count / wall,
            f"{unit}_per_cpu_s": count / cpu,
        }
        print(f"{name:28} {wall:8.2f} {cpu:8.2f} {count / wall:>10,.0f} {unit[:4]} {count / cpu:>10,.0f} {unit[:4]}")
    recv = statistics.median(r["receiver_cpu"] for r in runs["serve to a receiver"])
    print(f"(the receiver: {recv:.2f}s CPU to read the frames)")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
