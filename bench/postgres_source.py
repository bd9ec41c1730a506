"""Benchmarks of the PostgreSQL source, each against its own throwaway cluster
(``tests/sources/postgres/cluster.py``: PostgreSQL 15+ server binaries needed).

    python bench/postgres_source.py throughput [--rows 1000000] [--tx-rows 100]
    python bench/postgres_source.py latency    [--rows 1000000]
    python bench/postgres_source.py memory     [--rows 2000000] [--base-rows 400000]
    python bench/postgres_source.py all        [--json]

* throughput: a backlog of ``--rows`` inserted rows in transactions of ``--tx-rows``,
  decoded from two slots created before the load: ``pg_recvlogical`` writing the slot's
  pgoutput stream to /dev/null (the server's decode rate, the limit), and ``olr-buffer
  run`` until every row is in the changefeed. Target: olr-buffer >= 0.5x the server.
  Also the CPU time a row of each process (from ``/proc``): both walsenders, the service
  and its reader process; on a shared machine the steadier figure.
* latency: one transaction of ``--rows`` rows while the service runs, streaming and with
  ``--no-streaming``: seconds from COMMIT returning to its rows visible in the changefeed,
  and the server's spill bytes for the slot (``pg_stat_replication_slots``). Targets: with
  streaming visible within 2 s, and no spill. Split by the service's log: COMMIT to the
  reader's append of the commit (the reader still catching up), then to the file with the
  last row published (the dispatcher's and changefeed writer's read-back, with its rows/s).
  The same transaction followed by ``pg_recvlogical`` (streaming) instead gives the
  server's own part: COMMIT to the walsender having sent WAL up to the commit.
* memory: the service's peak RSS (``VmHWM``, the service process plus its reader
  process) with one ``--rows`` transaction on top of a load of ``--base-rows`` rows in
  200-row transactions, against the load alone. Target: at most 1.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from tests.contract_model import changefeed_files  # noqa: E402
from tests.sources.postgres.cluster import create_cluster  # noqa: E402


def rows_published(cf: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in changefeed_files(cf)) if cf.is_dir() else 0


def sql(cluster, db: str, statement: str, params=None):
    conn = cluster.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def new_db(cluster, name: str) -> None:
    sql(cluster, "postgres", f"CREATE DATABASE {name}")
    sql(cluster, name, "CREATE TABLE big (id bigint PRIMARY KEY, v int, s text)")
    sql(cluster, name, "CREATE PUBLICATION olr_buffer FOR ALL TABLES")


def insert_in_transactions(cluster, db: str, first: int, rows: int, tx_rows: int) -> None:
    sql(
        cluster,
        db,
        f"DO $$ BEGIN FOR i IN 0..{rows // tx_rows - 1} LOOP "
        f"INSERT INTO big SELECT g, g % 1000, 'row ' || g FROM generate_series({first} + i * {tx_rows}, "
        f"{first} + (i + 1) * {tx_rows} - 1) g; COMMIT; END LOOP; END $$",
    )


def start_service(cluster, db: str, work: Path, *extra: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "run",
        cluster.dsn(db),
        "--queue",
        str(work / "q"),
        "--changefeed",
        str(work / "cf"),
        "--flush-interval",
        "0.2",
        "--log-level",
        "debug",
        *extra,
    ]
    with open(work / "service.log", "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def wait_log(work: Path, text: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in (work / "service.log").read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((work / "service.log").read_text(errors="replace"))
        time.sleep(0.02)


def wait_rows(work: Path, n: int, proc: subprocess.Popen, timeout: float = 1800, clock=time.monotonic) -> float:
    deadline = time.monotonic() + timeout
    while rows_published(work / "cf") < n:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((work / "service.log").read_text(errors="replace"))
        time.sleep(0.05)
    return clock()


def log_times(work: Path, rows: int) -> tuple[float | None, float]:
    """From the service's JSON log: when the reader appended the commit of the ``rows``-row
    transaction (None: not logged, as for one under the reader's ``LARGE_TRANSACTION_ROWS``),
    and when the changefeed file that holds its last row was published."""
    from datetime import datetime

    def ts(doc: dict) -> float:
        return datetime.fromisoformat(doc["ts"].replace("Z", "+00:00")).timestamp()

    in_queue: float | None = None
    published = 0.0
    total = 0
    for line in (work / "service.log").read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        if "committed at" in doc.get("msg", "") and doc.get("rows") == rows:
            in_queue = ts(doc)
        elif doc.get("msg", "").startswith("published ") and "file" in doc and total < rows:  # a file's line (DEBUG)
            total += doc["rows"]
            published = ts(doc)
    return in_queue, published


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)


def throughput(cluster, work: Path, rows: int, tx_rows: int) -> dict:
    new_db(cluster, "bench_tp")
    for slot in ("recv", "olr_buffer"):
        sql(cluster, "bench_tp", "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    insert_in_transactions(cluster, "bench_tp", 1, rows, tx_rows)
    (end,) = sql(cluster, "bench_tp", "SELECT pg_current_wal_lsn()::text")[0]
    t0 = time.monotonic()
    recv = subprocess.Popen(
        [
            *cluster.as_user,
            str(cluster.bin / "pg_recvlogical"),
            "-d",
            "bench_tp",
            "-h",
            str(cluster.sock),
            "-U",
            "postgres",
            "--slot",
            "recv",
            "--start",
            "--endpos",
            end,
            "-f",
            "/dev/null",
            "-o",
            "proto_version=1",
            "-o",
            "publication_names=olr_buffer",
            "--no-loop",
        ]
    )
    recv_cpu = 0.0
    while recv.poll() is None:  # the walsender's CPU, as of its last look before it ends
        pids = sql(cluster, "bench_tp", "SELECT pid FROM pg_stat_replication WHERE application_name = 'pg_recvlogical'")
        recv_cpu = max([recv_cpu, *(cpu_seconds(pid) for (pid,) in pids)])
        time.sleep(0.02)
    server = time.monotonic() - t0
    if recv.returncode != 0:
        raise RuntimeError(f"pg_recvlogical failed ({recv.returncode})")
    proc = start_service(cluster, "bench_tp", work, "--no-initial-copy")
    try:
        wait_log(work, "streaming slot", proc)
        t1 = time.monotonic()
        pids = [proc.pid, *spawned_children(proc.pid)]
        ((ws,),) = sql(
            cluster, "bench_tp", "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'olr_buffer'"
        )
        cpu0 = [cpu_seconds(pid) for pid in pids], cpu_seconds(ws)
        done = wait_rows(work, rows, proc)
        cpu1 = [cpu_seconds(pid) for pid in pids], cpu_seconds(ws)
    finally:
        stop(proc)
        for slot in ("recv", "olr_buffer"):
            sql(cluster, "bench_tp", "SELECT pg_drop_replication_slot(%s)", (slot,))
    ours = done - t1
    us = [round((b - a) / rows * 1e6, 2) for a, b in zip(cpu0[0], cpu1[0])]
    return {
        "rows": rows,
        "tx_rows": tx_rows,
        "server_rows_per_s": round(rows / server),
        "olr_buffer_rows_per_s": round(rows / ours),
        "ratio": round(server / ours, 3),
        "target": 0.5,
        # CPU microseconds a row (user + system), steadier than rows/s on a shared machine
        "cpu_us_per_row": {
            "pg_recvlogical_walsender": round(recv_cpu / rows * 1e6, 2),
            "olr_buffer_walsender": round((cpu1[1] - cpu0[1]) / rows * 1e6, 2),
            "service": us[0],
            "reader_process": sum(us[1:]),
        },
    }


def server_latency(cluster, rows: int) -> dict:
    """The server alone: ``pg_recvlogical`` (pgoutput, protocol 2, streaming) follows a slot
    to /dev/null while one ``rows``-row INSERT commits; seconds from COMMIT returning to the
    walsender having sent WAL up to the commit (``pg_stat_replication.sent_lsn``)."""
    db = "bench_lat_server"
    new_db(cluster, db)
    sql(cluster, db, "SELECT pg_create_logical_replication_slot('recv', 'pgoutput')")
    recv = subprocess.Popen(
        [
            *cluster.as_user,
            str(cluster.bin / "pg_recvlogical"),
            "-d",
            db,
            "-h",
            str(cluster.sock),
            "-U",
            "postgres",
            "--slot",
            "recv",
            "--start",
            "-f",
            "/dev/null",
            "-o",
            "proto_version=2",
            "-o",
            "streaming=on",
            "-o",
            "publication_names=olr_buffer",
            "--no-loop",
        ]
    )
    try:
        deadline = time.monotonic() + 60
        while not sql(cluster, db, "SELECT 1 FROM pg_stat_replication WHERE application_name = 'pg_recvlogical'"):
            if time.monotonic() > deadline or recv.poll() is not None:
                raise RuntimeError("pg_recvlogical did not start")
            time.sleep(0.05)
        t0 = time.time()
        sql(cluster, db, "INSERT INTO big SELECT g, g %% 1000, 'row ' || g FROM generate_series(1, %s) g", (rows,))
        committed = time.time()
        (end,) = sql(cluster, db, "SELECT pg_current_wal_lsn()::text")[0]
        while not sql(
            cluster,
            db,
            "SELECT 1 FROM pg_stat_replication WHERE application_name = 'pg_recvlogical' AND sent_lsn >= %s::pg_lsn",
            (end,),
        ):
            time.sleep(0.01)
        sent = time.time()
    finally:
        recv.terminate()
        recv.wait(60)
    sql(cluster, db, "SELECT pg_drop_replication_slot('recv')")
    return {"insert_s": round(committed - t0, 3), "commit_to_sent_s": round(sent - committed, 3)}


def latency(cluster, work: Path, rows: int) -> dict:
    out = {"server_streaming": server_latency(cluster, rows)}
    for label, extra in (("streaming", ()), ("no_streaming", ("--no-streaming",))):
        db = f"bench_lat_{label}"
        new_db(cluster, db)
        w = work / label
        w.mkdir()
        proc = start_service(cluster, db, w, "--no-initial-copy", "--log-format", "json", *extra)
        try:
            wait_log(w, "streaming slot", proc)
            t0 = time.time()
            sql(cluster, db, "INSERT INTO big SELECT g, g %% 1000, 'row ' || g FROM generate_series(1, %s) g", (rows,))
            committed = time.time()
            visible = wait_rows(w, rows, proc, clock=time.time)
        finally:
            stop(proc)
        spill, stream = sql(
            cluster,
            db,
            "SELECT spill_bytes, stream_bytes FROM pg_stat_replication_slots WHERE slot_name = 'olr_buffer'",
        )[0]
        sql(cluster, db, "SELECT pg_drop_replication_slot('olr_buffer')")
        in_queue, published = log_times(w, rows)
        out[label] = {
            "insert_s": round(committed - t0, 3),
            "commit_to_visible_s": round(visible - committed, 3),
            # from the service's log (millisecond timestamps): the reader appended the commit,
            # then the dispatcher and the changefeed writer read the rows back and published them
            # (None: the reader logs the commit of a transaction of 100,000 rows or more only)
            "commit_to_in_queue_s": round(in_queue - committed, 3) if in_queue is not None else None,
            "in_queue_to_published_s": round(published - in_queue, 3) if in_queue is not None else None,
            "read_back_rows_per_s": (
                round(rows / (published - in_queue)) if in_queue is not None and published > in_queue else None
            ),
            "spill_bytes": spill,
            "stream_bytes": stream,
        }
    out["targets"] = {"streaming_commit_to_visible_s": 2.0, "streaming_spill_bytes": 0}
    return {"rows": rows, **out}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM")


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return out


def spawned_children(pid: int) -> list[int]:
    """The service's child processes started by multiprocessing (the PostgreSQL reader):
    forked by the forkserver, itself a child of the service."""
    out = []
    for c in _children(pid):
        try:
            cmdline = Path(f"/proc/{c}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"forkserver" in cmdline:
            out += _children(c)
        elif b"spawn_main" in cmdline:
            out.append(c)
    return out


def memory(cluster, work: Path, rows: int, base_rows: int) -> dict:
    out = {}
    for label, large in (("base", 0), ("large", rows)):
        db = f"bench_mem_{label}"
        new_db(cluster, db)
        w = work / label
        w.mkdir()
        proc = start_service(cluster, db, w, "--no-initial-copy")
        try:
            wait_log(w, "streaming slot", proc)
            insert_in_transactions(cluster, db, 10_000_000, base_rows, 200)
            if large:
                sql(cluster, db, "INSERT INTO big SELECT g, g %% 1000, 'large' FROM generate_series(1, %s) g", (large,))
            wait_rows(w, base_rows + large, proc)
            service = peak_rss_kib(proc.pid)
            reader = sum(peak_rss_kib(c) for c in spawned_children(proc.pid))
            out[f"{label}_service_peak_rss_mib"] = round(service / 1024, 1)
            out[f"{label}_reader_peak_rss_mib"] = round(reader / 1024, 1)
            out[f"{label}_peak_rss_mib"] = round((service + reader) / 1024, 1)
        finally:
            stop(proc)
        sql(cluster, db, "SELECT pg_drop_replication_slot('olr_buffer')")
    out["ratio"] = round(out["large_peak_rss_mib"] / out["base_peak_rss_mib"], 3)
    return {"rows": rows, "base_rows": base_rows, **out, "target": 1.5}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["throughput", "latency", "memory", "all"])
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--tx-rows", type=int, default=100)
    ap.add_argument("--base-rows", type=int, default=400_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cluster = create_cluster()
    work = Path(tempfile.mkdtemp(prefix="olr-pg-bench-"))
    results = {}
    try:
        if args.what in ("throughput", "all"):
            (work / "tp").mkdir()
            results["throughput"] = throughput(cluster, work / "tp", args.rows or 1_000_000, args.tx_rows)
        if args.what in ("latency", "all"):
            (work / "lat").mkdir()
            results["latency"] = latency(cluster, work / "lat", args.rows or 1_000_000)
        if args.what in ("memory", "all"):
            (work / "mem").mkdir()
            results["memory"] = memory(cluster, work / "mem", args.rows or 2_000_000, args.base_rows)
    finally:
        cluster.remove()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=None if args.json else 2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
