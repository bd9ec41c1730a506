"""``olr-buffer run postgresql://...`` against a real server: the database is the oracle."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.contract_model import check_changefeed_layout, load_changefeed
from tests.processes import reader_processes
from tests.sources.postgres.conftest import ROOT, start_service, wait_streaming
from tests.sources.postgres.workload import check_against_database, create_schema, run_clients

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

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
    raise AssertionError(
        f"{len(missing)} committed transaction(s) not published after {timeout}s: {sorted(missing)[:10]}"
    )


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
        # idle: the slot is confirmed up to the server's position, so that it holds no WAL
        (end,) = pg_db.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")[0]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            (confirmed,) = pg_db.execute("SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots")[0]
            if confirmed >= end:
                break
            time.sleep(0.2)
        assert confirmed >= end, f"idle, the slot is still confirmed at {confirmed} < {end}"
    finally:
        assert stop(svc) == 0, service_log(tmp_path)
    assert stream_txns(pg_db) > 0, "no transaction was streamed"
    rows = check_against_database(pg_db, tmp_path / "cf", outcome)
    check_changefeed_layout(tmp_path / "cf")
    ops = {r["op"] for r in rows}
    assert {"r", "c", "u", "d", "t"} <= ops
    status = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "status", "--queue", str(tmp_path / "q"), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    pg = json.loads(status.stdout)["postgresql"]
    assert pg["slot"] == "olr_buffer" and pg["initial_copy"] == "done" and pg["streaming_transactions"] == 0
    assert pg["subtransaction_cuts"] > 0, "no streamed subtransaction abort dropped appended rows"
    assert int(pg["confirmed_lsn"].split("/")[0], 16) << 32 | int(pg["confirmed_lsn"].split("/")[1], 16) > 0


@pytest.mark.slow
def test_sigkill_and_server_restart_under_load_exactly_once(pg_db, pg_cluster, tmp_path):
    import threading

    create_schema(pg_db)
    svc = start_service(pg_db, tmp_path)
    starts = 0
    try:
        wait_streaming(tmp_path, svc)
        box = {}
        load = threading.Thread(
            target=lambda: box.setdefault(
                "outcome", run_clients(pg_db, clients=3, per_client=80, large_rows=4000, seed=2, pause=0.05)
            ),
            daemon=True,
        )
        load.start()
        for _ in range(3):
            time.sleep(1.2)
            svc.kill()  # SIGKILL, mid-load
            svc.wait(SERVICE_TIMEOUT)
            svc = start_service(pg_db, tmp_path)
            starts += 1
            wait_streaming(tmp_path, svc, after=starts)
        load.join(300)
        first = box["outcome"]
        # the server restarted under the running service (clients idle): it reconnects
        pg_cluster.restart()
        second = run_clients(pg_db, clients=2, per_client=20, large_rows=3000, seed=4, number0=5)
        svc.kill()  # and once more, then the server restarted while olr-buffer is down
        svc.wait(SERVICE_TIMEOUT)
        pg_cluster.restart()
        third = run_clients(pg_db, clients=2, per_client=10, large_rows=0, seed=5, number0=7)
        svc = start_service(pg_db, tmp_path)
        committed = first.committed | second.committed | third.committed
        wait_published(tmp_path / "cf", committed, timeout=90)
    finally:
        assert stop(svc) == 0, service_log(tmp_path)
    assert "reconnecting" in service_log(tmp_path)
    for part in (second, third):
        first.committed |= part.committed
        first.rolled_back |= part.rolled_back
    check_against_database(pg_db, tmp_path / "cf", first)
    check_changefeed_layout(tmp_path / "cf")


@pytest.mark.slow
def test_kill_during_initial_copy_copies_again_whole(pg_db, tmp_path):
    create_schema(pg_db)
    pg_db.execute("INSERT INTO events (client, n, v) SELECT 9, g, g FROM generate_series(1, 150000) g")
    svc = start_service(pg_db, tmp_path)
    deadline = time.monotonic() + 60
    while "initial copy of" not in service_log(tmp_path) and time.monotonic() < deadline:
        assert svc.poll() is None, service_log(tmp_path)
        time.sleep(0.01)
    svc.kill()
    svc.wait(SERVICE_TIMEOUT)
    assert "streaming slot" not in service_log(tmp_path), "the copy ended before the kill: make the table larger"
    assert not published_xids(tmp_path / "cf") and not load_changefeed_safe(tmp_path / "cf")
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc)
        outcome = run_clients(pg_db, clients=2, per_client=10, large_rows=0, seed=3)
        wait_published(tmp_path / "cf", outcome.committed)
    finally:
        assert stop(svc) == 0, service_log(tmp_path)
    assert "dropping slot" in service_log(tmp_path)
    rows = check_against_database(pg_db, tmp_path / "cf", outcome)
    copied = [r for r in rows if r["op"] == "r"]
    assert len({(r["table"], r["rid"]) for r in copied}) == len(copied)
    assert len(pg_db.execute("SELECT slot_name FROM pg_replication_slots")) == 1


def load_changefeed_safe(cf: Path) -> list:
    try:
        return load_changefeed(cf)
    except FileNotFoundError:
        return []


def test_no_streaming_protocol_1(pg_db, tmp_path):
    create_schema(pg_db)
    svc = start_service(pg_db, tmp_path, "--no-streaming", "--no-initial-copy")
    try:
        wait_streaming(tmp_path, svc)
        outcome = run_clients(pg_db, clients=2, per_client=15, large_rows=3000, seed=6)
        wait_published(tmp_path / "cf", outcome.committed)
    finally:
        assert stop(svc) == 0, service_log(tmp_path)
    assert "protocol 1" in service_log(tmp_path)
    (streamed, spilled) = pg_db.execute("SELECT stream_txns, spill_txns FROM pg_stat_replication_slots")[0]
    assert streamed == 0 and spilled > 0
    rows = load_changefeed(tmp_path / "cf")
    assert rows and not [r for r in rows if r["op"] == "r"]  # no initial copy
    published = {int(r["xid"]) for r in rows}
    assert outcome.committed <= published and not (outcome.rolled_back & published)


def test_metrics_and_json_logs_of_the_postgresql_source(pg_db, tmp_path):
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    create_schema(pg_db)
    svc = start_service(pg_db, tmp_path, "--metrics-port", "0", "--log-format", "json")
    try:
        wait_streaming(tmp_path, svc)
        outcome = run_clients(pg_db, clients=1, per_client=5, large_rows=0, seed=2)
        wait_published(tmp_path / "cf", outcome.committed)
        docs = [json.loads(ln) for ln in service_log(tmp_path).splitlines() if ln.startswith("{")]
        port = next(d["metrics_port"] for d in docs if "metrics_port" in d)
        time.sleep(1.2)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        assert stop(svc) == 0, service_log(tmp_path)
    names = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert {
        "olr_buffer_postgres_confirmed_lsn",
        "olr_buffer_postgres_lag_bytes",
        "olr_buffer_postgres_reconnects_total",
        "olr_buffer_seconds_behind_source",
        "olr_buffer_transactions_published_total",
    } <= names
    assert all(d["ts"].endswith("Z") for d in docs)


def test_a_killed_reader_process_stops_the_service_with_an_error(pg_db, tmp_path):
    """The reader runs in a child process: killed, the service exits non-zero with one
    error line (it does not hang); run again, it goes on exactly once."""
    create_schema(pg_db)
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc)
        first = run_clients(pg_db, clients=2, per_client=10, large_rows=2000, seed=4)
        wait_published(tmp_path / "cf", first.committed)
        (child,) = reader_processes(svc.pid)
        os.kill(child, signal.SIGKILL)
        code = svc.wait(SERVICE_TIMEOUT)
    finally:
        if svc.poll() is None:
            svc.kill()
            svc.wait(SERVICE_TIMEOUT)
    errors = [ln for ln in service_log(tmp_path).splitlines() if ln.startswith("olr-buffer: error:")]
    assert code != 0 and len(errors) == 1, service_log(tmp_path)
    assert "the PostgreSQL reader process died (exit code -9)" in errors[0]
    assert "Traceback" not in service_log(tmp_path)
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc, after=1)
        second = run_clients(pg_db, clients=2, per_client=10, large_rows=2000, seed=5, number0=3)
        wait_published(tmp_path / "cf", second.committed)
    finally:
        assert stop(svc) == 0, service_log(tmp_path)
    first.committed |= second.committed
    first.rolled_back |= second.rolled_back
    check_against_database(pg_db, tmp_path / "cf", first)


def test_the_reader_process_dies_with_the_service(pg_db, tmp_path):
    """SIGKILL of the service kills its reader process too (PR_SET_PDEATHSIG): nothing
    keeps the slot busy for the next run."""
    create_schema(pg_db)
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc)
        (child,) = reader_processes(svc.pid)
    finally:
        svc.kill()
        svc.wait(SERVICE_TIMEOUT)
    deadline = time.monotonic() + SERVICE_TIMEOUT
    while Path(f"/proc/{child}").exists() and Path(f"/proc/{child}/status").read_text().find("State:\tZ") < 0:
        assert time.monotonic() < deadline, "the reader process outlived the service"
        time.sleep(0.05)


def test_reader_as_a_thread_of_the_service(pg_db, tmp_path):
    """``PipelineOptions(reader_processes=False)``: the same source, the reader a thread."""
    import threading

    from olr_buffer.runtime import PipelineOptions, run_service

    create_schema(pg_db)
    stop_event = threading.Event()
    box: dict = {}
    opts = PipelineOptions(reader_processes=False, flush_seconds=0.2, checkpoint_seconds=0.5)

    def serve():
        try:
            box["summary"] = run_service(pg_db.uri, str(tmp_path / "q"), str(tmp_path / "cf"), opts, stop_event)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            box["error"] = exc

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "cf").glob("*.parquet")) and "error" not in box:
            assert time.monotonic() < deadline, "the initial copy was not published"
            time.sleep(0.1)
        outcome = run_clients(pg_db, clients=2, per_client=10, large_rows=2000, seed=8)
        wait_published(tmp_path / "cf", outcome.committed)
    finally:
        stop_event.set()
        t.join(SERVICE_TIMEOUT)
    assert "error" not in box, box.get("error")
    check_against_database(pg_db, tmp_path / "cf", outcome)
