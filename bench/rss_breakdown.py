"""What replay's resident memory is: anonymous memory against mapped file pages.

    python bench/rss_breakdown.py INPUT [--interval 0.05] [--json]

Runs `olr-buffer replay INPUT` (durable, from an empty queue and changefeed, in a
temporary directory) in a child process and samples its `/proc/PID/status` every
``--interval`` seconds: the peaks of `VmRSS` (what `ru_maxrss` reports), `RssAnon`
(the heap: Python objects, Arrow buffers) and `RssFile` (file pages mapped into the
process: mostly the queue's LMDB segments, which the kernel can drop). The reader
processes are not included: each is a separate process with its own, smaller, RSS.
Run by hand; the figures go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

FIELDS = ("VmRSS", "RssAnon", "RssFile")


def sample(pid: int) -> dict[str, int]:
    """The fields above from /proc/PID/status, in bytes ({} once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            lines = fh.read().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return {}
    out = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name in FIELDS:
            out[name] = int(value.split()[0]) * 1024
    return out


def measure(input_dir: str, interval: float) -> dict:
    work = tempfile.mkdtemp(prefix="olr-rss-")
    try:
        cmd = [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "replay",
            input_dir,
            "--queue",
            os.path.join(work, "q"),
            "--changefeed",
            os.path.join(work, "cf"),
            "--json",
            "--no-progress",
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        peaks = dict.fromkeys(FIELDS, 0)
        samples = 0
        while proc.poll() is None:
            for name, value in sample(proc.pid).items():
                peaks[name] = max(peaks[name], value)
            samples += 1
            time.sleep(interval)
        if proc.returncode:
            raise SystemExit(f"replay failed with exit code {proc.returncode}")
        return {"input": input_dir, "samples": samples, **{f"peak_{k}": v for k, v in peaks.items()}}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = measure(args.input, args.interval)
    if args.json:
        print(json.dumps(r))
        return
    mib = lambda b: f"{b / 2**20:,.0f} MiB"  # noqa: E731
    print(
        f"replay of {args.input}: peak VmRSS {mib(r['peak_VmRSS'])}, of which at most "
        f"{mib(r['peak_RssAnon'])} anonymous and {mib(r['peak_RssFile'])} mapped files ({r['samples']} samples)"
    )


if __name__ == "__main__":
    main()
