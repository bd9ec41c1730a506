"""Plays a staged workload into a live directory, as a capture process would write it.

    python -m tests.live_writer STAGED_DIR LIVE_DIR [--rate RECORDS_PER_S] [--seed N]

Records of all threads are written in SCN order, each to its thread's current sequence
file; a new sequence file starts where the staged one did (log switch); some lines are
written in two parts with a pause between (a reader must not take half a line). At the
end every thread gets an ``lwn`` at the highest SCN, so the service can publish all.
With ``--tm-now``, every record's ``tm`` is replaced by the time it is written (latency
measurements). With ``--allow-file PATH``, the writer writes no more records than the
number in that file (read again whenever it gets there): a test sets how much input a
step of it may take, whatever the machine's load.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

_NAME = re.compile(r"^redo_([0-9]+)_([0-9]+)\.jsonl$")


def start_live_writer(
    staged: str | Path, live: str | Path, rate: float, seed: int | None = None, allow_file: str | Path | None = None
) -> subprocess.Popen:
    """This writer as a process (``python -m tests.live_writer``), from the repository's root."""
    seeded = [] if seed is None else ["--seed", str(seed)]
    gated = [] if allow_file is None else ["--allow-file", str(allow_file)]
    cmd = [sys.executable, "-m", "tests.live_writer", str(staged), str(live), "--rate", str(rate), *seeded, *gated]
    return subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[1])


def staged_streams(staged: str) -> dict[int, list[tuple[int, bytes]]]:
    """Per thread, ``(sequence, line)`` in order."""
    files: dict[int, list[int]] = {}
    for name in os.listdir(staged):
        m = _NAME.match(name)
        if m:
            files.setdefault(int(m.group(1)), []).append(int(m.group(2)))
    out = {}
    for t, seqs in files.items():
        lines = []
        for s in sorted(seqs):
            with open(os.path.join(staged, f"redo_{t}_{s}.jsonl"), "rb") as fh:
                lines.extend((s, line) for line in fh)
        out[t] = lines
    return out


def _allowed(path: str) -> int:
    try:
        with open(path) as fh:
            return int(fh.read().strip() or 0)
    except (FileNotFoundError, ValueError):  # (not written yet, or being written)
        return 0


def play(staged: str, live: str, rate: float, seed: int, tm_now: bool = False, allow_file: str | None = None) -> None:
    rng = random.Random(seed)
    os.makedirs(live, exist_ok=True)
    streams = staged_streams(staged)

    def keyed(t: int):
        for s, line in streams[t]:
            rec = json.loads(line)
            yield (rec["scn"], rec.get("sub", 0), t), s, rec, line

    handles: dict[int, tuple[int, object]] = {}
    max_scn = 0
    start = time.monotonic()
    allowed = -1 if allow_file is None else 0
    for n, ((scn, _sub, t), s, rec, line) in enumerate(heapq.merge(*(keyed(t) for t in streams))):
        while 0 <= allowed <= n:
            time.sleep(0.02)
            allowed = _allowed(allow_file)  # type: ignore[arg-type]
            start = time.monotonic() - n / rate  # (the rate counts from where it was let go)
        cur = handles.get(t)
        if cur is None or cur[0] != s:
            if cur is not None:
                cur[1].close()
            handles[t] = cur = (s, open(os.path.join(live, f"redo_{t}_{s}.jsonl"), "ab", buffering=0))
        if tm_now:
            rec["tm"] = time.time_ns()
            line = (json.dumps(rec, ensure_ascii=False) + "\n").encode()
        fh = cur[1]
        if rng.random() < 0.05 and len(line) > 4:
            cut = rng.randrange(1, len(line) - 1)
            fh.write(line[:cut])
            time.sleep(rng.uniform(0.001, 0.02))
            fh.write(line[cut:])
        else:
            fh.write(line)
        max_scn = max(max_scn, scn)
        ahead = (n + 1) / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
    for _, fh in handles.values():
        fh.write(json.dumps({"op": "lwn", "scn": max_scn}).encode() + b"\n")
        fh.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("staged")
    ap.add_argument("live")
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tm-now", action="store_true")
    ap.add_argument("--allow-file")
    a = ap.parse_args()
    play(a.staged, a.live, a.rate, a.seed, a.tm_now, a.allow_file)


if __name__ == "__main__":
    main()
