"""What docs/postgresql.md's set-up tells an operator, against the real server: tables
without a replica identity (the query that finds them, REPLICA IDENTITY FULL), the
password from PGPASSWORD or ~/.pgpass instead of the URI, `olr-buffer drop-slot`; and
`status` and `run`'s log in the words of the source (LSNs as X/Y, no redo thread)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg2
import pytest

from olr_buffer.sources.postgres.state import lsn_text
from tests.contract_model import load_changefeed
from tests.sources.postgres.conftest import ROOT, start_service, wait_streaming

pytestmark = pytest.mark.e2e

DOC = ROOT / "docs" / "postgresql.md"
PASSWORD = "pw-0f-cdc"


def olr(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def wait_rows(cf: Path, n: int, proc: subprocess.Popen, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            rows = load_changefeed(cf)
        except FileNotFoundError:
            rows = []
        if len(rows) >= n:
            return rows
        assert proc.poll() is None, "the service stopped"
        assert time.monotonic() < deadline, f"{len(rows)} rows after {timeout}s, not {n}"
        time.sleep(0.1)


def slots(db) -> dict[str, int | None]:
    return dict(
        db.execute("SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = current_database()")
    )


def test_tables_without_a_replica_identity(pg_db, tmp_path):
    pg_db.execute(
        "CREATE TABLE keyed (id int PRIMARY KEY, v text); CREATE TABLE loose (a int, b text); "
        "CREATE TABLE nothing (a int PRIMARY KEY); ALTER TABLE nothing REPLICA IDENTITY NOTHING; "
        "CREATE TABLE indexed (a int NOT NULL, b text); CREATE UNIQUE INDEX indexed_a ON indexed (a); "
        "ALTER TABLE indexed REPLICA IDENTITY USING INDEX indexed_a; "
        "INSERT INTO keyed VALUES (1, 'x'); INSERT INTO loose VALUES (1, 'x')"
    )
    # what the docs warn about: under FOR ALL TABLES (the fixture's publication) the server refuses
    with pytest.raises(
        psycopg2.Error,
        match=r'cannot update table "loose" because it does not have a replica '
        r"identity and publishes updates",
    ):
        pg_db.execute("UPDATE loose SET b = 'y'")
    # the docs' query finds exactly the tables that need an identity
    (query,) = [block for block in re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S) if "relreplident" in block]
    assert [str(t) for (t,) in pg_db.execute(query)] == ["loose", "nothing"]
    # REPLICA IDENTITY FULL, as the docs say: updates go through, with the whole old row
    pg_db.execute("ALTER TABLE loose REPLICA IDENTITY FULL")
    assert [str(t) for (t,) in pg_db.execute(query)] == ["nothing"]
    svc = start_service(pg_db, tmp_path, "--no-initial-copy")
    try:
        wait_streaming(tmp_path, svc)
        pg_db.execute("UPDATE loose SET b = 'y'; DELETE FROM loose")
        rows = wait_rows(tmp_path / "cf", 2, svc)
    finally:
        stop(svc)
    assert [(r["op"], r["rid"], r["before"]) for r in rows] == [
        ("u", None, {"a": 1, "b": "x"}),
        ("d", None, {"a": 1, "b": "y"}),
    ]


@pytest.fixture
def password_role(pg_db):
    """A role that the server asks a password of (scram), whatever the cluster's trust rule,
    with the documented rights on table ``t``."""
    role = f"cdc_{pg_db.name}"
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    pg_db.execute(
        f"CREATE ROLE {role} LOGIN REPLICATION PASSWORD '{PASSWORD}'; "
        f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"
    )
    hba = pg_db.cluster.data / "pg_hba.conf"
    original = hba.read_text()
    hba.write_text(f"local all {role} scram-sha-256\n" + original)  # first match wins
    pg_db.execute("SELECT pg_reload_conf()")
    try:
        yield role
    finally:
        hba.write_text(original)
        pg_db.execute("SELECT pg_reload_conf()")


def test_the_password_from_pgpassword_or_pgpass(pg_db, password_role, tmp_path):
    uri = pg_db.cluster.dsn(pg_db.name, user=password_role)  # no password in it
    base = ["run", uri, "--flush-interval", "0.2", "--log-level", "info"]
    # none given: one line that says where to give it, exit 1
    r = olr(*base, "--queue", str(tmp_path / "q0"), "--changefeed", str(tmp_path / "cf0"))
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("olr-buffer: error:")]
    assert r.returncode == 1 and len(errors) == 1, r.stderr
    assert "the server asks for a password" in errors[0] and "PGPASSWORD" in errors[0] and ".pgpass" in errors[0]
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"*:*:*:{password_role}:{PASSWORD}\n")
    pgpass.chmod(0o600)
    for n, env in enumerate(({"PGPASSWORD": PASSWORD}, {"PGPASSFILE": str(pgpass)})):
        log = tmp_path / f"run{n}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "olr_buffer.cli",
                    *base,
                    "--slot",
                    f"s{n}",
                    "--queue",
                    str(tmp_path / f"q{n + 1}"),
                    "--changefeed",
                    str(tmp_path / f"cf{n + 1}"),
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, **env},
            )
        try:
            pg_db.execute(f"INSERT INTO t VALUES ({n})")
            rows = wait_rows(tmp_path / f"cf{n + 1}", 1, proc)
        finally:
            stop(proc)
        assert {r["after"]["id"] for r in rows} == set(range(n + 1))  # the copy, then the insert
        assert PASSWORD not in log.read_text()
    # drop-slot takes it from there too
    r = olr("drop-slot", uri, "--slot", "s0", env={"PGPASSWORD": PASSWORD})
    assert r.returncode == 0 and r.stdout.startswith("dropped replication slot 's0'"), r.stderr


def test_drop_slot(pg_db, tmp_path):
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    svc = start_service(pg_db, tmp_path)
    try:
        wait_streaming(tmp_path, svc)
        busy = olr("drop-slot", pg_db.uri, "--slot", "olr_buffer")
    finally:
        stop(svc)
    assert busy.returncode == 1 and busy.stdout == "", busy.stderr
    assert busy.stderr.startswith("olr-buffer: error: ") and len(busy.stderr.splitlines()) == 1
    assert "replication slot 'olr_buffer' is in use by server process " in busy.stderr
    assert "stop that run first" in busy.stderr
    assert "olr_buffer" in slots(pg_db)
    # another database's URI: refused, the slot stays
    other = olr("drop-slot", pg_db.cluster.dsn("postgres"), "--slot", "olr_buffer")
    assert other.returncode == 1 and f"belongs to database {pg_db.name}, not postgres" in other.stderr
    done = olr("drop-slot", pg_db.uri, "--slot", "olr_buffer")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        rf"dropped replication slot 'olr_buffer' of database {pg_db.name} \(confirmed "
        r"[0-9A-F]+/[0-9A-F]+, it held [0-9.,]+ MB of WAL\)\n",
        done.stdout,
    ), done.stdout
    assert "olr_buffer" not in slots(pg_db)
    again = olr("drop-slot", pg_db.uri, "--slot", "olr_buffer")
    assert (
        again.returncode == 1 and "no replication slot 'olr_buffer' (hint: this database has no slot)" in again.stderr
    )
    usage = olr("drop-slot", str(tmp_path), "--slot", "olr_buffer")
    assert usage.returncode == 2 and "drop-slot takes a PostgreSQL URI" in usage.stderr
    # what the docs say a run on the queue of a dropped slot does
    rerun = olr("run", pg_db.uri, "--queue", str(tmp_path / "q"), "--changefeed", str(tmp_path / "cf"))
    assert (
        rerun.returncode == 1
        and "replication slot 'olr_buffer' is gone, but this queue was filled from it" in rerun.stderr
    )


def test_status_and_logs_speak_lsn(pg_db, tmp_path):
    pg_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    svc = start_service(pg_db, tmp_path, "--log-summary-interval", "0.5")
    try:
        wait_streaming(tmp_path, svc)
        pg_db.execute("INSERT INTO t VALUES (1)")
        rows = wait_rows(tmp_path / "cf", 1, svc)
        deadline = time.monotonic() + 30
        while "last commit at LSN" not in (tmp_path / "service.log").read_text():
            assert time.monotonic() < deadline, (tmp_path / "service.log").read_text()
            time.sleep(0.1)
    finally:
        stop(svc)
    log = (tmp_path / "service.log").read_text()
    c_scn = rows[-1]["c_scn"]
    assert f"last commit at LSN {lsn_text(c_scn)}; " in log
    assert "threads in play" not in log and re.search(r"following postgresql://\S+: queue index \d+\n", log), log
    text = olr("status", "--queue", str(tmp_path / "q")).stdout
    doc = json.loads(olr("status", "--queue", str(tmp_path / "q"), "--json").stdout)
    assert f"watermark: LSN {lsn_text(doc['watermark'])}\n" in text, text
    assert "progress:" not in text and "thread" not in text
    assert f"last c_scn {c_scn} (LSN {lsn_text(c_scn)})" in text, text
    assert isinstance(doc["watermark"], int) and doc["changefeed"]["last_c_scn"] == c_scn  # --json keeps integers
