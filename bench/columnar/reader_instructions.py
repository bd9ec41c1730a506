"""The reader stage alone, for instruction counts (callgrind): today's ``ThreadReader``
or the prototype's ``ColumnarReader`` over every thread of INPUT, blocks encoded and
dropped; ``--imports-only`` stops after the imports and set-up, to subtract.

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python bench/columnar/reader_instructions.py today|columnar INPUT [--imports-only]

(``Collected`` in valgrind's last lines is the count; run each twice, with and without
``--imports-only``, and take the difference.)
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def main() -> None:
    which, inp = sys.argv[1], sys.argv[2]
    only_imports = "--imports-only" in sys.argv
    from olr_buffer.sources.redo.files import scan

    if which == "today":
        from stages_today import EncodeOnly, readers

        rs = readers(inp, lambda t: EncodeOnly([]))
        if not only_imports:
            for r in rs:
                r.read_to_end()
    else:
        import proto

        rs = [proto.ColumnarReader(inp, t, lambda *a: None) for t in sorted(scan(inp))]
        if only_imports:
            # the first Arrow calls load kernels: make them here too, on one tiny chunk
            proto.chunk_records(b'{"op":"begin","scn":1,"xid":"x"}', 1, 0, proto.ChunkState())
        else:
            for r in rs:
                r.read_to_end()


if __name__ == "__main__":
    main()
