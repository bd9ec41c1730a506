"""A capture process writing at a steady rate in batches of whole lines (bench/latency.py's writer).

    python bench/latency_writer.py STAGED_DIR LIVE_DIR --rate 100000 [--seconds 10] [--batch-ms 5] [--archive]

Plays the first ``rate * seconds`` records of a staged workload (``olr-buffer simulate``
output, plain ``.jsonl``) into LIVE_DIR in SCN order, as ``tests/live_writer.py`` does,
but without its torn lines and one write a line, which hold it near 2,000 records/s:
every ``--batch-ms`` it writes the records due by then, whole lines, one ``write`` per
thread's file, every record's ``tm`` stamped with the time of that write (so that a
latency measured from ``tm`` starts when the line can be read). A thread's next sequence
file is created when its first record is due (a log switch, the contract's rule); with
``--archive`` the sequence before is then replaced by its ``.jsonl.zst`` (written under a
temporary name, renamed, the ``.jsonl`` removed), as a capture archiving its logs does.
At the end every thread gets an ``lwn`` at the highest SCN written.

Prepares first (reads and renders the workload), prints ``ready`` and waits for a line on
stdin before it starts; at the end prints one JSON line: records written, seconds, the
rate achieved, how far behind its schedule it fell at worst, batches, and the time
(``time.time_ns()``) of its first and last write.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import msgspec
import numpy as np
import zstandard

_NAME = re.compile(rb"^redo_([0-9]+)_([0-9]+)\.jsonl$")
_TM = re.compile(rb'"tm":-?[0-9]+')
# 19 digits, as time.time_ns() has until 2286: the stamp replaces it in place
_SENTINEL = b'"tm":9999999999999999999'


class _Key(msgspec.Struct):
    scn: int
    sub: int = 0


class _Thread:
    """One redo thread's records: all its lines in one buffer (``tm`` made a placeholder),
    where each line ends, and where each sequence starts (in lines)."""

    def __init__(self, thread: int, seqs: list[tuple[int, bytes]]) -> None:
        self.thread = thread
        self.seqs = [s for s, _ in seqs]
        parts, firsts, n = [], [], 0
        for _, data in seqs:
            if data and not data.endswith(b"\n"):
                data += b"\n"
            firsts.append(n)
            n += data.count(b"\n")
            parts.append(data)
        self.buf = _TM.sub(_SENTINEL, b"".join(parts))
        self.ends = np.flatnonzero(np.frombuffer(self.buf, dtype=np.uint8) == 10) + 1
        self.seq_first = firsts + [n]  # the first line of each sequence, then the end
        self.lines = n

    def keys(self) -> tuple[np.ndarray, np.ndarray]:
        dec = msgspec.json.Decoder(_Key)
        scn = np.empty(self.lines, dtype=np.int64)
        sub = np.empty(self.lines, dtype=np.int64)
        start = 0
        for i, end in enumerate(self.ends.tolist()):
            k = dec.decode(self.buf[start:end])
            scn[i], sub[i] = k.scn, k.sub
            start = end
        return scn, sub

    def offset(self, line: int) -> int:
        """Where line ``line`` (0-based) starts in the buffer."""
        return int(self.ends[line - 1]) if line else 0


def load(staged: str) -> list[_Thread]:
    files: dict[int, list[int]] = {}
    for name in os.listdir(staged):
        m = _NAME.match(name.encode())
        if m:
            files.setdefault(int(m.group(1)), []).append(int(m.group(2)))
    out = []
    for t in sorted(files):
        seqs = []
        for s in sorted(files[t]):
            with open(os.path.join(staged, f"redo_{t}_{s}.jsonl"), "rb") as fh:
                seqs.append((s, fh.read()))
        out.append(_Thread(t, seqs))
    return out


def schedule(threads: list[_Thread], records: int) -> tuple[list[np.ndarray], int]:
    """For each thread, how many of its lines are among the first n records in SCN order
    (``(scn, sub, thread)``, as tests/live_writer.py merges them), n = 0..records; and the
    highest SCN among those records."""
    keys = [t.keys() for t in threads]
    scn = np.concatenate([k[0] for k in keys])
    sub = np.concatenate([k[1] for k in keys])
    thread = np.concatenate([np.full(t.lines, i, dtype=np.int64) for i, t in enumerate(threads)])
    order = np.lexsort((thread, sub, scn))[:records]
    which = thread[order]
    counts = [np.concatenate(([0], np.cumsum(which == i))) for i in range(len(threads))]
    return counts, int(scn[order].max()) if len(order) else 0


class _Files:
    """The open sequence file of each thread; a log switch when the next one is due."""

    def __init__(self, live: str, archive: bool) -> None:
        self.live = live
        self.archive = archive
        self.open: dict[int, tuple[int, int]] = {}  # thread -> (sequence, fd)
        self.switches = 0

    def fd(self, thread: int, seq: int) -> int:
        cur = self.open.get(thread)
        if cur is not None and cur[0] == seq:
            return cur[1]
        fd = os.open(self._path(thread, seq), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if cur is not None:  # the new file exists: the sequence before is complete
            os.close(cur[1])
            self.switches += 1
            if self.archive:
                self._archive(thread, cur[0])
        self.open[thread] = (seq, fd)
        return fd

    def _path(self, thread: int, seq: int) -> str:
        return os.path.join(self.live, f"redo_{thread}_{seq}.jsonl")

    def _archive(self, thread: int, seq: int) -> None:
        plain = self._path(thread, seq)
        with open(plain, "rb") as fh:
            data = zstandard.ZstdCompressor(level=1).compress(fh.read())
        tmp = os.path.join(self.live, f".redo_{thread}_{seq}.jsonl.zst.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.rename(tmp, plain + ".zst")
        os.unlink(plain)

    def close(self) -> None:
        for _, fd in self.open.values():
            os.close(fd)
        self.open.clear()


def write_range(threads: list[_Thread], files: _Files, i: int, a: int, b: int, stamp: bytes) -> None:
    """Lines ``a..b`` of thread ``threads[i]``, one write a sequence file, ``tm`` stamped."""
    t = threads[i]
    while a < b:
        k = int(np.searchsorted(t.seq_first, a, side="right")) - 1
        stop = min(b, t.seq_first[k + 1])
        data = t.buf[t.offset(a) : int(t.ends[stop - 1])].replace(_SENTINEL, stamp)
        fd = files.fd(t.thread, t.seqs[k])
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        a = stop


def play(threads: list[_Thread], live: str, rate: float, records: int, batch_s: float, archive: bool) -> dict:
    counts, max_scn = schedule(threads, records)
    records = len(counts[0]) - 1
    os.makedirs(live, exist_ok=True)
    files = _Files(live, archive)
    print("ready", flush=True)
    sys.stdin.readline()
    done = [0] * len(threads)
    written = batches = 0
    worst_behind = 0.0
    start = time.monotonic()
    first_ns = time.time_ns()
    while written < records:
        now = time.monotonic()
        due = min(records, int((now - start) * rate) + 1)
        if due > written:
            worst_behind = max(worst_behind, (now - start) - written / rate)
            stamp = b'"tm":%d' % time.time_ns()
            for i in range(len(threads)):
                b = int(counts[i][due])
                if b > done[i]:
                    write_range(threads, files, i, done[i], b, stamp)
                    done[i] = b
            written = due
            batches += 1
        pause = start + batches * batch_s - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    seconds = time.monotonic() - start
    last_ns = time.time_ns()
    for t in threads:
        fd = files.fd(t.thread, files.open[t.thread][0]) if t.thread in files.open else None
        if fd is not None:
            os.write(fd, json.dumps({"op": "lwn", "scn": max_scn, "tm": time.time_ns()}).encode() + b"\n")
    files.close()
    return {
        "records": written,
        "seconds": round(seconds, 3),
        "rate": round(written / seconds, 1) if seconds else 0.0,
        "worst_behind_s": round(worst_behind, 4),
        "batches": batches,
        "log_switches": files.switches,
        "first_write_ns": first_ns,
        "last_write_ns": last_ns,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("staged")
    ap.add_argument("live")
    ap.add_argument("--rate", type=float, required=True, help="records per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="write rate * seconds records (at most all)")
    ap.add_argument("--batch-ms", type=float, default=5.0, help="write the records due this often")
    ap.add_argument("--archive", action="store_true", help="replace a complete sequence by its .jsonl.zst")
    a = ap.parse_args()
    threads = load(a.staged)
    stats = play(threads, a.live, a.rate, int(a.rate * a.seconds), a.batch_ms / 1000, a.archive)
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()
