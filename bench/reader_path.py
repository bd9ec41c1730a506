"""The reader path alone, on one core: CPU per record of reading an input directory.

    PYTHONPATH=. python bench/reader_path.py INPUT [--line-by-line] [--profile] [--split]

Every ``ThreadReader.read_to_end`` in turn in this process, into a ``MemoryQueue``
(parse, check, block building, zstd; the MemoryQueue also decodes each block), as
``bench/profile_replay.py`` view 2 does, but timed by CPU time (``time.process_time``),
which a shared machine disturbs less than wall time. ``--line-by-line`` reads as the
reader did before it read in chunks (``ThreadReader.chunked = False``, the reference).
The chunked reader's lines go through the compiled loop where it is built
(``OLR_BUFFER_PURE_PYTHON=1``: the pure-Python one). ``--split`` divides the CPU into the
lines-to-records step (``ThreadReader._fast_lines`` less the block flushes inside it),
the blocks (``_flush``: building, zstd, the ``MemoryQueue``'s append) and the rest
(reading files, the line path), by ``time.thread_time`` around each call.
Compare two versions by running each in turn, several times (docs/performance.md).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import benchlib

from olr_buffer.sources.redo import READER_LOOP, ThreadReader
from olr_buffer.testing import MemoryQueue


def _timed(spent: dict, name: str, method):
    """``method`` with its thread CPU time added to ``spent[name]``; a flush inside the
    lines' call is taken out of theirs (``spent["flush_in_lines"]``)."""

    def wrapper(*args, **kw):
        t = time.thread_time()
        spent["depth"] += name == "lines"
        try:
            return method(*args, **kw)
        finally:
            dt = time.thread_time() - t
            spent["depth"] -= name == "lines"
            spent[name] += dt
            if name == "flush" and spent["depth"]:
                spent["flush_in_lines"] += dt

    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--line-by-line", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile, top 25 by own time")
    ap.add_argument("--split", action="store_true", help="CPU of lines-to-records, of blocks, of the rest")
    args = ap.parse_args()
    spent = {"lines": 0.0, "flush": 0.0, "flush_in_lines": 0.0, "depth": 0}
    if args.split:
        ThreadReader._fast_lines = _timed(spent, "lines", ThreadReader._fast_lines)  # type: ignore[method-assign]
        ThreadReader._flush = _timed(spent, "flush", ThreadReader._flush)  # type: ignore[method-assign]
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
        f" (reader loop: {READER_LOOP})"
    )
    if args.split:
        lines = spent["lines"] - spent["flush_in_lines"]
        rest = cpu - lines - spent["flush"]
        print(
            f"  us a record: lines to records {1e6 * lines / n:.2f}, blocks {1e6 * spent['flush'] / n:.2f}, "
            f"the rest {1e6 * rest / n:.2f}"
        )
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
