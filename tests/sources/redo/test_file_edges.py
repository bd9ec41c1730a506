"""Edges of a log file seen by real `replay` runs: a byte order mark, a file rewritten
before the point a run stopped at."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import olr_buffer


def _line(rec: dict) -> bytes:
    return json.dumps(rec, separators=(",", ":")).encode() + b"\n"


def _tx(xid: str, scn: int, rid: str, note: str = "") -> list[bytes]:
    return [
        _line({"op": "begin", "scn": scn, "xid": xid}),
        _line(
            {
                "op": "insert",
                "scn": scn + 1,
                "xid": xid,
                "owner": "A",
                "table": "T",
                "rid": rid,
                "after": {"ID": rid, "NOTE": note},
            }
        ),
        _line({"op": "commit", "scn": scn + 2, "xid": xid}),
    ]


def _replay(tmp: Path):
    return olr_buffer("replay", tmp / "in", "--queue", tmp / "q", "--changefeed", tmp / "cf")


def test_a_byte_order_mark_at_the_start_of_a_file_is_accepted(tmp_path: Path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "redo_1_1.jsonl").write_bytes(b"\xef\xbb\xbf" + b"".join(_tx("A", 100, "r1")))
    r = _replay(tmp_path)
    assert r.returncode == 0, r.describe()
    assert r.published() == (1, 1)


def test_a_file_rewritten_before_the_resume_point_is_named(tmp_path: Path):
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "redo_1_1.jsonl"
    lines = _tx("A", 100, "r1", note="short") + _tx("B", 200, "r2", note="a longer note") + [b"not json\n"]
    path.write_bytes(b"".join(lines))
    r = _replay(tmp_path)
    assert r.returncode == 3 and f"{path}:7: " in r.stderr, r.describe()
    # the "fix" also rewrites line 2 (longer): byte offsets after it moved
    lines[1] = _tx("A", 100, "r1", note="shortened? no, longer")[1]
    lines[6] = _line({"op": "lwn", "scn": 300})
    path.write_bytes(b"".join(lines))
    r = _replay(tmp_path)
    assert r.returncode == 3, r.describe()
    assert len(r.stderr_lines) == 1 and f"{path}:7: the file changed before the resume point" in r.stderr, r.describe()
