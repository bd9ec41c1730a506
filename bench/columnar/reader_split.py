"""Where the prototype's reader spends its CPU: one redo thread's files read by
``ColumnarReader`` with the parts of the work timed (``time.process_time`` around each
call; one run, one thread).

    PYTHONPATH=. python bench/columnar/reader_split.py INPUT_DIR [--thread 1] [--chunk 524288]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import proto  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--thread", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=proto.CHUNK)
    args = ap.parse_args()
    proto.CHUNK = args.chunk
    acc: dict[str, float] = {}

    def wrap(owner, name: str, label: str) -> None:
        f = getattr(owner, name)

        def timed(*a, **k):
            c0 = time.process_time()
            try:
                return f(*a, **k)
            finally:
                acc[label] = acc.get(label, 0.0) + time.process_time() - c0

        setattr(owner, name, timed)

    wrap(proto, "_decode_lines", "chunk: decode (msgspec, one call a chunk)")
    wrap(proto, "chunk_columns", "chunk: columns (a list a field, pa.array)")
    wrap(proto, "check_chunk", "chunk: checks (vectorized)")
    wrap(proto, "chunk_records", "chunk: total")
    wrap(proto, "encode_block", "block: zstd + CRC (encode_block)")
    wrap(proto, "build_block", "block: total (sort, summary, IPC, zstd)")
    r = proto.ColumnarReader(args.input, args.thread, lambda *a: None)
    c0 = time.process_time()
    r.read_to_end()
    total = time.process_time() - c0
    print(f"{r.lines:,} lines, {r.blocks} blocks; CPU {total / r.lines * 1e6:.3f} us a line, of which:")
    for k, v in acc.items():
        print(f"  {k:45s} {v / r.lines * 1e6:.3f}")


if __name__ == "__main__":
    main()
