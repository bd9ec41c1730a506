"""Does the prototype's vectorized check find the first bad line where today's reader does?

    PYTHONPATH=. python bench/columnar/check_bad_lines.py INPUT_DIR [--lines 400]

Takes the first ``--lines`` lines of thread 1 of a valid input, puts one bad line (of
each kind below) into them at a few places, and reads the result twice: today's
``ThreadReader`` (the line number of its ``InputError``) and the prototype's
``chunk_records`` on the whole file as one chunk (the line of its ``BadChunk``). Prints
one row per case; exits 1 if any case differs. A DDL line is no error: today's reader
takes it; the prototype leaves a chunk that holds one to the line path (its ``BadChunk``
is a routing decision there).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import proto  # noqa: E402

# (name, bad line made from the valid line it replaces and the line before it)
CASES = [
    ("malformed JSON", lambda cur, prev: cur[:-5]),
    ("unknown op", lambda cur, prev: b'{"op":"merge","scn":%d,"xid":"0x1"}' % prev["scn"]),
    ("scn goes back", lambda cur, prev: b'{"op":"begin","scn":%d,"xid":"0x1"}' % (prev["scn"] - 1)),
    ("sub goes back", None),  # two lines: see below
    ("scn as a string", lambda cur, prev: b'{"op":"begin","scn":"%d","xid":"0x1"}' % (prev["scn"] + 1)),
    ("scn negative", lambda cur, prev: b'{"op":"begin","scn":-5,"xid":"0x1"}'),
    ("missing xid", lambda cur, prev: b'{"op":"begin","scn":%d}' % (prev["scn"] + 1)),
    ("empty xid", lambda cur, prev: b'{"op":"commit","scn":%d,"xid":""}' % (prev["scn"] + 1)),
    (
        "insert without rid",
        lambda cur, prev: (
            b'{"op":"insert","scn":%d,"xid":"0x1","owner":"A","table":"T","after":{"a":1}}' % (prev["scn"] + 1)
        ),
    ),
    (
        "update without before",
        lambda cur, prev: (
            b'{"op":"update","scn":%d,"xid":"0x1","owner":"A","table":"T",'
            b'"rid":"R","after":{"a":1}}' % (prev["scn"] + 1)
        ),
    ),
    (
        "after is an array",
        lambda cur, prev: (
            b'{"op":"insert","scn":%d,"xid":"0x1","owner":"A","table":"T","rid":"R","after":[1]}' % (prev["scn"] + 1)
        ),
    ),
    (
        "tm beyond int64",
        lambda cur, prev: b'{"op":"begin","scn":%d,"xid":"0x1","tm":9223372036854775808}' % (prev["scn"] + 1),
    ),
    (
        "invalid UTF-8 in an unknown field",
        lambda cur, prev: b'{"op":"begin","scn":%d,"xid":"0x1","x":"\xff"}' % (prev["scn"] + 1),
    ),
    ("record at an lwn's scn", None),  # two lines: see below
    (
        "ddl (not an error)",
        lambda cur, prev: (
            b'{"op":"ddl","scn":%d,"xid":"0x1","owner":"A","table":"T",'
            b'"sql":"create table t (a int)"}' % (prev["scn"] + 1)
        ),
    ),
]


def today_line(lines: list[bytes], tmp: str) -> int | None:
    from olr_buffer.sources.redo.errors import InputError
    from olr_buffer.sources.redo.files import scan
    from olr_buffer.sources.redo.thread_reader import ThreadReader
    from olr_buffer.testing import MemoryQueue

    with open(os.path.join(tmp, "redo_1_1.jsonl"), "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")
    r = ThreadReader(MemoryQueue(), tmp, 1, scan(tmp)[1], None)
    try:
        r.read_to_end()
    except InputError as exc:
        return exc.line
    return None


def proto_line(lines: list[bytes]) -> tuple[int | None, str]:
    try:
        proto.chunk_records(b"\n".join(lines), 1, 0, proto.ChunkState())
    except proto.BadChunk as exc:
        return exc.index + 1, exc.reason
    return None, ""


def main() -> None:
    import orjson

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--lines", type=int, default=400)
    args = ap.parse_args()
    with open(os.path.join(args.input, "redo_1_1.jsonl"), "rb") as fh:
        base = [fh.readline().rstrip(b"\n") for _ in range(args.lines)]
    failures = 0
    print(f"{'case':36s} {'at':>5s} {'today':>6s} {'proto':>6s}")
    for name, make in CASES:
        for at in (1, args.lines // 2, args.lines - 1):
            lines = list(base)
            prev = orjson.loads(lines[at - 1])
            if name == "record at an lwn's scn":
                scn = max(orjson.loads(x)["scn"] for x in lines[:at])
                lines[at] = b'{"op":"lwn","scn":%d}' % scn
                lines[at + 1 : at + 1] = [b'{"op":"begin","scn":%d,"xid":"0x1"}' % scn]
            elif name == "sub goes back":
                lines[at] = b'{"op":"begin","scn":%d,"sub":5,"xid":"0x1"}' % prev["scn"]
                lines[at + 1 : at + 1] = [b'{"op":"begin","scn":%d,"sub":1,"xid":"0x2"}' % prev["scn"]]
            else:
                lines[at] = make(lines[at], prev)
            with tempfile.TemporaryDirectory() as tmp:
                t = today_line(lines, tmp)
            p, why = proto_line(lines)
            ok = t == p or (name.startswith("ddl") and t is None and p is not None)
            failures += not ok
            print(f"{name:36s} {at + 1:5d} {str(t):>6s} {str(p):>6s} {'ok' if ok else 'DIFFERENT'}  {why[:60]}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
