"""Two Iceberg writers committing to one table at once (real processes, one SQLite
catalog): the catalog's compare-and-swap and the committer's check that a snapshot
continues the table mean no range is ever committed twice, nor by both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from olr_buffer.sinks.parquet.iceberg import IcebergChangefeed, IcebergSettings
from olr_buffer.sinks.parquet.schema import ARROW_SCHEMA
from olr_buffer.store import open_store
from tests.sinks.parquet.delta.parts import ROWS_PER_TX

ROOT = Path(__file__).resolve().parents[4]
LAST = 30

pytestmark = pytest.mark.slow


def test_two_writers_at_once_never_both_commit_a_range(tmp_path):
    cf = tmp_path / "cf"
    cf.mkdir()
    IcebergChangefeed(open_store(str(cf)), ARROW_SCHEMA, IcebergSettings(), app_id="setup", local_root=str(cf))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.sinks.parquet.iceberg.commit_loop", str(cf), app, str(LAST)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for app in ("queue-a", "queue-b")
    ]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err[-2000:]
    committed = sorted(tuple(map(int, line.split()[1:])) for out, _ in results for line in out.splitlines())
    assert [t for first, last in committed for t in range(first, last + 1)] == list(range(LAST + 1))
    table = IcebergChangefeed(
        open_store(str(cf)), ARROW_SCHEMA, IcebergSettings(), app_id="check", create=False, local_root=str(cf)
    )
    assert table.last_committed() == LAST
    from pyiceberg.catalog.sql import SqlCatalog

    scan = SqlCatalog("olr_buffer", uri=f"sqlite:///{cf}/_iceberg/catalog.db").load_table("olr_buffer.changefeed")
    got = sorted(scan.scan(selected_fields=("tx_seq",)).to_arrow().column("tx_seq").to_pylist())
    assert got == [t for t in range(LAST + 1) for _ in range(ROWS_PER_TX)]
