"""Schema versions across kills: `olr-buffer replay` of redo files whose ddl records carry
columns, killed with SIGKILL at the changefeed's publication steps, then run again, gives
exactly the changefeed of an uninterrupted run: the same version on every row, the same
documents, none missing (docs/formats.md, "Schema documents")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.contract_model import check_changefeed_layout, load_changefeed

pytestmark = pytest.mark.slow

SHAPES = [
    [{"name": "ID", "type": "NUMBER(10)", "key": True}, {"name": "V", "type": "VARCHAR2(20)"}],
    [
        {"name": "ID", "type": "NUMBER(10)", "key": True},
        {"name": "V", "type": "VARCHAR2(20)"},
        {"name": "AMOUNT", "type": "NUMBER(12,2)"},
    ],
]


def write_input(root: Path) -> None:
    """Two redo threads: thread 1 alters T now and then (back to an earlier shape too),
    both threads write T."""
    root.mkdir()
    scn = {1: 100, 2: 100}
    lines: dict[int, list[dict]] = {1: [], 2: []}
    for k in range(240):
        thread = 1 + k % 2
        s = scn[thread] = max(scn.values()) + 10
        xid = f"x{k}"
        rows = []
        if thread == 1 and k % 40 == 20:
            rows.append(
                {
                    "op": "ddl",
                    "scn": s + 1,
                    "xid": xid,
                    "owner": "O",
                    "table": "T",
                    "sql": f"alter {k}",
                    "columns": SHAPES[(k // 40) % 2],
                }
            )
        rows += [
            {
                "op": "insert",
                "scn": s + 2 + i,
                "xid": xid,
                "owner": "O",
                "table": "T",
                "rid": f"R{k}.{i}",
                "after": {"ID": k, "V": "v", "AMOUNT": "1.50"},
            }
            for i in range(3)
        ]
        lines[thread] += [{"op": "begin", "scn": s, "xid": xid}, *rows, {"op": "commit", "scn": s + 8, "xid": xid}]
    for thread, records in lines.items():
        for seq in range(2):
            part = records[seq * len(records) // 2 : (seq + 1) * len(records) // 2]
            (root / f"redo_{thread}_{seq + 1}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))


def replay(root: Path, env=None) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "replay",
        str(root / "in"),
        "--queue",
        str(root / "q"),
        "--changefeed",
        str(root / "cf"),
        "--file-rows",
        "40",
        "--block-records",
        "50",
        "--checkpoint-interval",
        "0",
        "--no-progress",
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True)


def versions(cf: Path) -> list[tuple[int, int, str | None]]:
    return [(r["tx_seq"], r["op_seq"], r["schema_version"]) for r in load_changefeed(cf)]


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("clean")
    write_input(root / "in")
    assert replay(root).returncode == 0
    return root


@pytest.mark.parametrize("fault", ["after_row_group:9", "after_tmp_written:7", "after_rename:3", "after_rename:11"])
def test_killed_while_publishing_then_completed_names_the_same_versions(tmp_path, clean, fault):
    write_input(tmp_path / "in")
    crashed = replay(tmp_path, {**os.environ, "OLR_BUFFER_FAULT": fault})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    final = replay(tmp_path)
    assert final.returncode == 0, final.stderr
    check_changefeed_layout(tmp_path / "cf")
    want = versions(clean / "cf")
    assert versions(tmp_path / "cf") == want
    assert len({v for *_, v in want if v}) == 2 and want[0][2] is None  # rows before the first ddl: none

    def docs(root: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in (root / "cf" / "_olr_buffer" / "schemas").iterdir()}

    assert docs(tmp_path) == docs(clean)
    assert not list((tmp_path / "cf" / "_olr_buffer" / "tmp").iterdir())
