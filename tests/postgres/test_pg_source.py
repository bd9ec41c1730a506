"""``olr-buffer run postgresql://...`` against a real server: the database is the oracle."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.contract_model import check_changefeed_layout, load_changefeed
from tests.postgres.conftest import start_service, wait_streaming
from tests.postgres.workload import check_against_database, create_schema, run_clients

SERVICE_TIMEOUT = 30


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    proc.send_signal(sig)
    return proc.wait(SERVICE_TIMEOUT)


def published_xids(cf: Path) -> set[int]:
    try:
        return {int(r["xid"]) for r in load_changefeed(cf) if not r["xid"].startswith("copy-")}
    except FileNotFoundError:
        return set()


def wait_published(cf: Path, xids: set[int], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if xids <= published_xids(cf):
            return
        time.sleep(0.3)
    missing = xids - published_xids(cf)
    raise AssertionError(f"{len(missing)} committed transaction(s) not published after {timeout}s: {sorted(missing)[:10]}")


def service_log(tmp: Path) -> str:
    return (tmp / "service.log").read_text(errors="replace")


def stream_txns(db) -> int:
    return db.execute("SELECT coalesce(sum(stream_txns), 0) FROM pg_stat_replication_slots")[0][0]


def test_concurrent_clients_exactly_once(pg_db, tmp_path):
    create_schema(pg_db)
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc)
        outcome = run_clients(pg_db, clients=3, per_client=40, large_rows=3000, seed=1)
        wait_published(tmp_path / "cf", outcome.committed)
    finally:
        assert stop(svc) == 0, service_log(tmp_path)
    assert stream_txns(pg_db) > 0, "no transaction was streamed"
    rows = check_against_database(pg_db, tmp_path / "cf", outcome)
    check_changefeed_layout(tmp_path / "cf")
    ops = {r["op"] for r in rows}
    assert {"r", "c", "u", "d", "t"} <= ops
    # the slot is confirmed up to published commits: nothing published is held
    (confirmed,) = pg_db.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots")[0]
    assert confirmed >= max(r["c_scn"] for r in rows)
