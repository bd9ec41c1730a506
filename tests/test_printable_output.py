"""Data shown to a person is escaped: an XID can neither forge a line nor drive a terminal."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import olr_buffer

FORGED = "0x1\nqueue /forged  (owner pid 1, running)\x1b[2J\u202e"


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_status_escapes_an_xid_with_control_characters(tmp_path: Path):
    (tmp_path / "in").mkdir()
    _write(
        tmp_path / "in" / "redo_1_1.jsonl",
        [
            {"op": "begin", "scn": 100, "xid": FORGED},
            {"op": "insert", "scn": 101, "xid": FORGED, "owner": "S", "table": "T", "rid": "r1", "after": {"ID": 1}},
            {"op": "lwn", "scn": 200},
        ],
    )
    r = olr_buffer("replay", tmp_path / "in", "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf")
    assert r.returncode == 0, r.describe()
    st = olr_buffer("status", "--queue", tmp_path / "q")
    assert st.returncode == 0, st.describe()
    assert "\x1b" not in st.stdout and "\u202e" not in st.stdout, st.describe()
    assert not any(line.startswith("queue /forged") for line in st.stdout.splitlines()), st.describe()
    assert "0x1\\nqueue /forged" in st.stdout and "\\x1b[2J\\u202e" in st.stdout, st.describe()
    # the JSON output keeps the XID exact
    assert (
        olr_buffer("status", "--queue", tmp_path / "q", "--json").json()["open_transactions"]["oldest"]["xid"] == FORGED
    )


def test_an_error_line_escapes_control_characters(tmp_path: Path):
    (tmp_path / "in\x1b[31m").mkdir()
    (tmp_path / "in\x1b[31m" / "redo_1_2.jsonl").write_text('{"op":"lwn","scn":1}\n')
    (tmp_path / "in\x1b[31m" / "redo_1_4.jsonl").write_text('{"op":"lwn","scn":2}\n')
    r = olr_buffer("replay", tmp_path / "in\x1b[31m", "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf")
    assert r.returncode == 3, r.describe()
    assert len(r.stderr_lines) == 1 and "\x1b" not in r.stderr and "in\\x1b[31m" in r.stderr, r.describe()


def test_a_text_log_line_escapes_an_xid(tmp_path: Path):
    from tests.test_cleanup_and_status import run_until_logged, write_long_and_short

    write_long_and_short(tmp_path / "in", long_open=True)
    path = tmp_path / "in" / "redo_1_1.jsonl"
    path.write_text(path.read_text().replace('"xid": "L"', '"xid": ' + json.dumps(FORGED)))
    log = run_until_logged(tmp_path / "in", tmp_path / "q", tmp_path / "cf", "has not ended")
    assert "\x1b" not in log and not any(ln.startswith("queue /forged") for ln in log.splitlines()), log
    assert "transaction 0x1\\nqueue /forged" in log, log
