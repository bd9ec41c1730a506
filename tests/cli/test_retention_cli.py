"""--transaction-retention and --transaction-retention-scn on the command line, in the
environment and in --config; replay abandons too, and its summary keeps bad records and
abandoned transactions apart in the dead-letter file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import ok, olr_buffer
from tests.fault_helpers import dumps

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

T0 = 1_717_200_000_000_000_000


def _input(root: Path) -> Path:
    """STUCK begins first and never ends; 40 small transactions follow, a minute apart,
    and one bad line."""
    inp = root / "in"
    inp.mkdir()
    recs = [
        {"op": "begin", "scn": 10, "xid": "STUCK", "tm": T0},
        {"op": "insert", "scn": 11, "xid": "STUCK", "owner": "A", "table": "T", "rid": "s", "after": {"X": 1}},
    ]
    for i in range(40):
        scn, tm = 100 + 10 * i, T0 + i * 60 * 10**9
        xid = f"T{i}"
        recs += [
            {"op": "begin", "scn": scn, "xid": xid, "tm": tm},
            {"op": "insert", "scn": scn + 1, "xid": xid, "owner": "A", "table": "T", "rid": xid, "after": {"X": i}},
            {"op": "commit", "scn": scn + 2, "xid": xid, "tm": tm},
        ]
    data = b"".join(dumps(r) for r in recs)
    (inp / "redo_1_1.jsonl").write_bytes(data + b'{"op":"insert","scn":"bad"}\n' + dumps({"op": "lwn", "scn": 1000}))
    return inp


def test_replay_abandons_by_scn_and_keeps_bad_records_apart(tmp_path: Path):
    inp = _input(tmp_path)
    dead = tmp_path / "dead.jsonl"
    r = ok(
        olr_buffer(
            "replay",
            inp,
            "--queue",
            tmp_path / "q",
            "--changefeed",
            tmp_path / "cf",
            "--dead-letter",
            dead,
            "--transaction-retention-scn",
            "300",
            "--json",
        )
    )
    doc = r.json()
    assert (doc["abandoned_transactions"], doc["abandoned_rows"], doc["transactions_published"]) == (1, 1, 40)
    assert [b["reason"] for b in doc["quarantined_lines"]] and all(b["file"] for b in doc["quarantined_lines"])
    lines = [json.loads(x) for x in dead.read_text().splitlines()]
    kinds = sorted(d.get("kind", "bad record") for d in lines)
    assert kinds == ["abandoned_transaction", "bad record"]
    (gone,) = [d for d in lines if d.get("kind")]
    assert gone["xid"] == "STUCK" and "limit 300" in gone["reason"]
    text = ok(
        olr_buffer(
            "replay",
            inp,
            "--queue",
            tmp_path / "q2",
            "--changefeed",
            tmp_path / "cf2",
            "--dead-letter",
            tmp_path / "dead2.jsonl",
            "--transaction-retention-scn",
            "300",
        )
    ).stdout
    assert "abandoned by the retention limit 1 (1 rows not published); their later records 0" in text


def test_the_time_limit_from_the_environment_and_from_config(tmp_path: Path):
    inp = _input(tmp_path)
    env = {**os.environ, "OLR_BUFFER_REPLAY_TRANSACTION_RETENTION": "600"}
    env.pop("PYTHONWARNINGS", None)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "replay",
            str(inp),
            "--queue",
            str(tmp_path / "q"),
            "--changefeed",
            str(tmp_path / "cf"),
            "--dead-letter",
            str(tmp_path / "d.jsonl"),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["abandoned_transactions"] == 1
    cfg = tmp_path / "olr.toml"
    cfg.write_text("transaction_retention = 3000.0\ntransaction_retention_scn = 100000\n")
    doc = ok(
        olr_buffer(
            "replay",
            "--config",
            cfg,
            inp,
            "--queue",
            tmp_path / "q2",
            "--changefeed",
            tmp_path / "cf2",
            "--dead-letter",
            tmp_path / "d2.jsonl",
            "--json",
        )
    ).json()
    assert doc["abandoned_transactions"] == 0 and doc["open_transactions"] == 1  # 39 minutes < 50
    bad = olr_buffer(
        "replay", inp, "--queue", tmp_path / "q3", "--changefeed", tmp_path / "cf3", "--transaction-retention", "0"
    )
    assert bad.returncode == 2 and "--transaction-retention" in bad.stderr
