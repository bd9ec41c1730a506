"""The reader path alone, on one core: CPU per record of reading an input directory.

    PYTHONPATH=. python bench/reader_path.py INPUT [--line-by-line] [--profile]

Every ``ThreadReader.read_to_end`` in turn in this process, into a ``MemoryQueue``
(parse, check, block building, zstd; the MemoryQueue also decodes each block), as
``bench/profile_replay.py`` view 2 does, but timed by CPU time (``time.process_time``),
which a shared machine disturbs less than wall time. ``--line-by-line`` reads as the
reader did before it read in chunks (``ThreadReader.chunked = False``, the reference).
Compare two versions by running each in turn, several times (docs/performance.md).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import benchlib

from olr_buffer.testing import MemoryQueue


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--line-by-line", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile, top 25 by own time")
    args = ap.parse_args()
    g = benchlib.redo_source(MemoryQueue(), args.input)
    prof = cProfile.Profile() if args.profile else None
    c0, w0 = time.process_time(), time.perf_counter()
    if prof:
        prof.enable()
    for r in g.thread_readers.values():
        if args.line_by_line:
            r.chunked = False
        r.read_to_end()
    if prof:
        prof.disable()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    n = g.figures().records_read
    print(
        f"{n} records: CPU {cpu:.2f} s ({1e6 * cpu / n:.2f} us a record, {n / cpu:,.0f} records/s), wall {wall:.2f} s"
    )
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
